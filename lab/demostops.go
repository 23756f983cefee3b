package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/internal/namednetns"
)

// The demo's view of the stops besides the app servers: what each stop itself counts, read
// once per interval from its own interface (the balancer daemons' control sockets, the L7
// proxies' and the DNS server's Prometheus metrics, the edge's /stats), each inside its own
// namespace on loopback, where the lab put its admin listener.

// Lab admin addresses (inside each stop's namespace) and the edge's token (stops.go).
const (
	l7AdminAddr   = "127.0.0.1:9901"
	edgeAdminAddr = "127.0.0.1:9091"
	dnsMetrics    = "127.0.0.1:9153"
	labToken      = "lab-only-token"
)

// stopTotals are the stops' own counters at one moment; missing marks what did not answer.
type stopTotals struct {
	lbPackets  map[string]float64 // XDP packets per VIP, over every balancer
	lbFlows    float64            // connection-table entries, over every balancer
	l7Requests map[string]float64 // L7 requests per pool, over every L7 proxy
	edgeHits   float64
	edgeMisses float64
	dnsQueries float64
	missing    []string
}

// sampleStops reads every stop of the lab that runs.
func sampleStops(st *State) stopTotals {
	t := stopTotals{lbPackets: map[string]float64{}, l7Requests: map[string]float64{}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for ns, sock := range st.Sockets {
		var s api.Stats
		if err := api.NewClient(sock).Call(ctx, api.OpStats, api.Empty{}, &s); err != nil {
			t.missing = append(t.missing, "balancer "+ns)
			continue
		}
		for _, v := range s.VIPs {
			t.lbPackets[v.Name] += float64(v.Packets)
		}
		t.lbFlows += float64(s.Flows)
	}
	for _, n := range st.Topo.Nodes {
		switch st.Running[n.Name] {
		case "l7":
			err := scrape(ctx, n.NS, "http://"+l7AdminAddr+"/metrics", func(name string, labels map[string]string, v float64) {
				if name == "switchyard_l7_requests_total" {
					t.l7Requests[labels["pool"]] += v
				}
			})
			if err != nil {
				t.missing = append(t.missing, n.Name)
			}
		case "edge":
			var r struct {
				Counters map[string]float64 `json:"counters"`
			}
			if err := getJSON(ctx, n.NS, "http://"+edgeAdminAddr+"/stats", &r); err != nil {
				t.missing = append(t.missing, n.Name)
				continue
			}
			t.edgeHits += r.Counters["hits"]
			t.edgeMisses += r.Counters["misses"]
		case "dns":
			err := scrape(ctx, n.NS, "http://"+dnsMetrics+"/metrics", func(name string, _ map[string]string, v float64) {
				if name == "switchyard_dns_queries_total" {
					t.dnsQueries += v
				}
			})
			if err != nil {
				t.missing = append(t.missing, n.Name)
			}
		}
	}
	sort.Strings(t.missing)
	return t
}

func nsClient(ns string) *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: namednetns.Dialer(ns, &net.Dialer{Timeout: time.Second}), DisableKeepAlives: true}}
}

func getJSON(ctx context.Context, ns, url string, out any) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+labToken)
	resp, err := nsClient(ns).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s in %s: status %d", url, ns, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

var promLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ([^ ]+)`)
var promLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// scrape reads Prometheus text metrics and calls f for every sample.
func scrape(ctx context.Context, ns, url string, f func(name string, labels map[string]string, v float64)) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := nsClient(ns).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s in %s: status %d", url, ns, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := promLine.FindStringSubmatch(sc.Text())
		if m == nil || strings.HasPrefix(sc.Text(), "#") {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range promLabel.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = l[2]
		}
		f(m[1], labels, v)
	}
	return sc.Err()
}
