// Package cdn holds the Mini-CDN's parts (seed 004), described once: the router's and the edges'
// configuration files and the origin's files and handler. `switchyard lab up --cdn` runs them as
// real `l7 run`, `edge run` and `lab origin` processes; the mini-cdn experiment
// (lab/experiment/edge/minicdn) runs the same parts in one process.
package cdn

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// routerConfig is the router: the seed's ROUTER_STRATEGY, HASH_VNODES (l7's ring has 100 points
// per unit of weight), /healthz probes, one GET/HEAD retry with X-Edge-Failover, MAX_INFLIGHT.
const routerConfig = `listeners: [{address: %q}]
limits: {max_in_flight: %d}
routes: [{name: cdn, pool: edges, retry: {attempts: 1, failover_header: X-Edge-Failover}}]
pools:
  - name: edges
    balance: %s
    %s
    backends: [%s]
    health: {path: /healthz, interval: %s, timeout: %s, rise: 1, fall: 2}
    retry_budget: {percent: 100, min_per_second: 10000}
`

// RouterConfig is the router's `l7 run` configuration: listen on listen, balance hash (by path,
// locality first) or round_robin over the edges (host:port), shed above budget requests in
// flight, probe each edge's /healthz every interval (two failures take it out).
func RouterConfig(listen string, edges []string, balance string, budget int, interval time.Duration) string {
	hash := ""
	if balance == "hash" {
		hash = "hash: {key: path, load_factor: 100}" // locality first, as the seed's plain ring
	}
	var bs []string
	for _, e := range edges {
		bs = append(bs, fmt.Sprintf("{address: %q}", e))
	}
	return fmt.Sprintf(routerConfig, listen, budget, balance, hash, strings.Join(bs, ", "), interval, interval/2)
}

// EdgeConfig is an edge's `edge run` configuration: the disk tier in dir, a memory tier of
// memoryObjects objects with LRU eviction, the TTL the origin's Cache-Control gives.
func EdgeConfig(listen, origin, dir string, memoryObjects int) string {
	return fmt.Sprintf(`listen: %q
origin: %q
memory: {max_objects: %d, eviction: lru}
disk: {dir: %q, max_bytes: 256MiB}
`, listen, origin, memoryObjects, dir)
}

// WriteFiles writes the origin's files into dir: f0.bin .. f<n-1>.bin of size bytes each.
func WriteFiles(dir string, n, size int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("make origin dir: %w", err)
	}
	for i := 0; i < n; i++ {
		body := []byte(strings.Repeat(strconv.Itoa(i%10), size))
		if err := os.WriteFile(filepath.Join(dir, fileName(i)), body, 0o644); err != nil {
			return fmt.Errorf("write origin file: %w", err)
		}
	}
	return nil
}

// FilePath is the URL path of file i.
func FilePath(i int) string { return "/files/" + fileName(i) }

// fileName is the name of file i in the origin's directory.
func fileName(i int) string { return "f" + strconv.Itoa(i) + ".bin" }

// OriginStatsPath answers the origin's request counter as text.
const OriginStatsPath = "/origin/requests"

// OriginHandler serves dir's files under /files/ (TTL 600 s) after delay, /slow/... uncacheable
// after slow, takes POSTs, and counts every fetch (not /healthz, POSTs or its counter) in
// requests.
func OriginHandler(dir string, delay, slow time.Duration, requests *atomic.Int64) http.Handler {
	files := http.StripPrefix("/files/", http.FileServer(http.Dir(dir)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz":
			w.Header().Set("Cache-Control", "no-store")
			io.WriteString(w, "ok")
			return
		case r.URL.Path == OriginStatsPath:
			w.Header().Set("Cache-Control", "no-store")
			fmt.Fprintf(w, "%d\n", requests.Load())
			return
		case r.Method == http.MethodPost: // not counted: the origin requests are fetches
			io.Copy(io.Discard, r.Body)
			io.WriteString(w, "stored")
			return
		case strings.HasPrefix(r.URL.Path, "/slow/"):
			requests.Add(1)
			time.Sleep(slow)
			w.Header().Set("Cache-Control", "no-store")
			io.WriteString(w, "slow")
			return
		}
		requests.Add(1)
		time.Sleep(delay)
		w.Header().Set("Cache-Control", "max-age=600") // the edges' TTL
		files.ServeHTTP(w, r)
	})
}
