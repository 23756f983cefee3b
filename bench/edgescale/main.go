// Command edgescale is the edge's scale benchmark (bench/edgescale.sh): it runs an edge in this
// process, stores N objects of 1 KB in its memory tier (through StoreObject, the true-push path,
// so loading a million takes seconds, not an origin's hours), and reports for each N:
//   - RSS per object and RSS against the configured memory budget and the tier's weighted size
//     (after a forced GC, the process's RSS before loading subtracted);
//   - the time of a forced full GC (the mark work the live entries cost), and the live heap
//     objects and scannable heap bytes it found;
//   - hits/s and p99 of wrk against random stored keys, with one full GC started a third into
//     the load (as a long run would have), and the GC cycles during that load;
//   - the time and examined entries of a URL purge and of a tag purge (N/1000 entries).
//
// A first phase fills a small budget past its capacity and reports RSS against it (the budget
// must hold). It prints one JSON object on stdout; the script checks it and writes it.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/edge"
)

func main() {
	sizes := flag.String("objects", "10000,1000000", "object counts to measure, comma-separated")
	perObject := flag.Int64("budget-per-object", 3<<10, "memory budget per object for the counts (bytes)")
	fillBudget := flag.Int64("fill-budget", 64<<20, "budget of the overfill phase (bytes)")
	listen := flag.String("listen", "127.0.0.1:18186", "edge address for wrk")
	seconds := flag.Int("seconds", 4, "seconds of wrk load per count")
	flag.Parse()
	out := map[string]any{}
	base := rss()
	var counts []int
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1000 {
			log.Fatalf("edgescale: -objects %q: give counts of at least 1000, like 10000,1000000", *sizes)
		}
		counts = append(counts, n)
	}
	// The overfill phase first: after a million entries the runtime keeps some of the freed
	// heap's pages and metadata, which would count against the small budget.
	fill, err := overfill(*fillBudget, base)
	if err != nil {
		log.Fatalf("edgescale: overfill: %v", err)
	}
	for k, v := range fill {
		out["fill_"+k] = v
	}
	freeAll()
	for _, n := range counts {
		r, err := measure(n, int64(n)*(*perObject), *listen, *seconds, base)
		if err != nil {
			log.Fatalf("edgescale: %d objects: %v", n, err)
		}
		for k, v := range r {
			out[fmt.Sprintf("n%d_%s", n, k)] = v
		}
		freeAll()
	}
	if len(counts) >= 2 {
		lo, hi := counts[0], counts[len(counts)-1]
		out["p99_ratio_large_vs_small"] = out[fmt.Sprintf("n%d_p99_ms", hi)].(float64) / out[fmt.Sprintf("n%d_p99_ms", lo)].(float64)
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	fmt.Println(string(b))
}

// newEdge starts an edge with a memory budget; misses would go nowhere (every key is pushed).
func newEdge(budget int64, listen string) (*edge.Edge, error) {
	e, err := edge.New(edge.Config{Listen: listen, Origin: "http://127.0.0.1:9",
		Memory: edge.MemoryConfig{MaxBytes: edge.ByteSize(budget)}}, edge.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	e.ApplyMemoryLimit() // as switchyard edge run does
	return e, e.Start()
}

// load pushes objects [from, to) of 1 KB, each with one of 1000 tags.
func load(e *edge.Edge, from, to int) error {
	body := []byte(strings.Repeat("o", 1024))
	mod := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	for i := from; i < to; i++ {
		h := http.Header{"Cache-Control": {"public, max-age=36000"}, "Content-Type": {"application/octet-stream"},
			"Last-Modified": {mod}, "Etag": {`"` + strconv.Itoa(i) + `"`}, "Surrogate-Key": {"t" + strconv.Itoa(i%1000)}}
		if err := e.StoreObject(objectURL(i), 200, h, body); err != nil {
			return err
		}
	}
	return nil
}

func objectURL(i int) string { return "http://scale.test/o/" + strconv.Itoa(i) }

// measure loads n objects under budget and measures memory, GC, hits and purges.
func measure(n int, budget int64, listen string, seconds int, base int64) (map[string]any, error) {
	e, err := newEdge(budget, listen)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	t0 := time.Now()
	if err := load(e, 0, n); err != nil {
		return nil, err
	}
	r := map[string]any{"load_s": time.Since(t0).Seconds(), "budget_bytes": budget}
	gcStart := time.Now()
	runtime.GC()
	r["forced_gc_ms"] = float64(time.Since(gcStart).Microseconds()) / 1000
	// The first collection also sweeps the load's garbage; a second one right after is what a
	// full cycle costs the live entries alone, and its mark CPU is the collector's own estimate.
	mark := gcMarkCPU()
	gcStart = time.Now()
	runtime.GC()
	r["second_gc_ms"] = float64(time.Since(gcStart).Microseconds()) / 1000
	r["second_gc_mark_cpu_ms"] = (gcMarkCPU() - mark) * 1000
	objects, scan := heapFigures()
	debug.FreeOSMemory()
	rep := e.Report()
	used := rss() - base
	r["heap_objects"], r["gc_scan_heap_bytes"] = objects, scan
	r["heap_objects_per_object"] = float64(objects) / float64(rep.Objects)
	r["rss_vs_budget"] = float64(used) / float64(budget)
	r["resident"] = rep.Objects
	r["weighted_bytes"] = rep.MemoryBytes
	r["rss_bytes"] = used
	r["rss_per_object"] = float64(used) / float64(rep.Objects)
	r["rss_vs_weighted"] = float64(used) / float64(rep.MemoryBytes)
	r["weight_per_object"] = float64(rep.MemoryBytes) / float64(rep.Objects)

	keys := residentKeys(e, n, 20000)
	if len(keys) < 100 {
		return nil, fmt.Errorf("only %d of the sampled keys are stored: raise -budget-per-object", len(keys))
	}
	rps, p99, cycles, err := hits(listen, keys, seconds)
	if err != nil {
		return nil, err
	}
	r["rps"], r["p99_ms"], r["gc_cycles_during_load"] = rps, p99, cycles

	t1 := time.Now()
	res, err := e.Purge(edge.PurgeRequest{URLs: []string{objectURL(keys[0])}})
	if err != nil {
		return nil, err
	}
	r["url_purge_us"] = float64(time.Since(t1).Nanoseconds()) / 1000
	r["url_purge_examined"] = res.Examined
	t2 := time.Now()
	res, err = e.Purge(edge.PurgeRequest{Tags: []string{"t7"}})
	if err != nil {
		return nil, err
	}
	r["tag_purge_us"] = float64(time.Since(t2).Nanoseconds()) / 1000
	r["tag_purge_examined"], r["tag_purge_purged"] = res.Examined, res.Purged
	return r, nil
}

// residentKeys samples up to want object numbers below n that the edge holds fresh.
func residentKeys(e *edge.Edge, n, want int) []int {
	var keys []int
	for i := 0; i < want*2 && len(keys) < want; i++ {
		k := rand.IntN(n)
		if e.Fresh(objectURL(k)) {
			keys = append(keys, k)
		}
	}
	return keys
}

// hits runs wrk against random stored keys and returns requests/s, p99 (ms) and the GC cycles
// the process ran meanwhile. Any non-2xx answer or socket error fails it.
func hits(listen string, keys []int, seconds int) (float64, float64, uint64, error) {
	dir, err := os.MkdirTemp("", "edgescale")
	if err != nil {
		return 0, 0, 0, err
	}
	defer os.RemoveAll(dir)
	var b strings.Builder
	b.WriteString("local keys = {")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(strconv.Itoa(k))
	}
	b.WriteString("}\nwrk.headers[\"Host\"] = \"scale.test\"\n")
	b.WriteString("local threads = 0\nfunction setup(thread) threads = threads + 1; thread:set(\"seed\", threads) end\n")
	b.WriteString("function init(args) math.randomseed(os.time() * 100 + seed) end\n")
	b.WriteString("function request() return wrk.format(nil, \"/o/\" .. keys[math.random(#keys)]) end\n")
	script := filepath.Join(dir, "keys.lua")
	if err := os.WriteFile(script, []byte(b.String()), 0o644); err != nil {
		return 0, 0, 0, err
	}
	// One full collection runs inside the measured window, as one would in a long run: its mark
	// work grows with the stored entries, and the p99 shows what it costs the hits.
	before := gcCycles()
	gcAt := time.AfterFunc(time.Duration(seconds)*time.Second/3, runtime.GC)
	defer gcAt.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds+30)*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "wrk", "-t2", "-c64", "-d"+strconv.Itoa(seconds)+"s", "--latency",
		"-s", script, "http://"+listen+"/").CombinedOutput()
	cycles := gcCycles() - before
	if err != nil {
		return 0, 0, 0, fmt.Errorf("wrk: %v: %s", err, out)
	}
	text := string(out)
	if strings.Contains(text, "Non-2xx") || strings.Contains(text, "Socket errors") {
		return 0, 0, 0, fmt.Errorf("wrk run failed its checks:\n%s", text)
	}
	rps := find(text, `Requests/sec:\s+([0-9.]+)`)
	p99 := latencyMS(text)
	if rps == 0 || p99 == 0 {
		return 0, 0, 0, fmt.Errorf("no figures in wrk output:\n%s", text)
	}
	return rps, p99, cycles, nil
}

// overfill loads 1.5x what a small budget holds and reports RSS against the budget.
func overfill(budget, base int64) (map[string]any, error) {
	e, err := newEdge(budget, "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer e.Close()
	n := int(budget / 1024 * 3 / 2)
	if err := load(e, 0, n); err != nil {
		return nil, err
	}
	runtime.GC()
	debug.FreeOSMemory()
	rep := e.Report()
	used := rss() - base
	return map[string]any{"budget_bytes": budget, "loaded": n, "resident": rep.Objects,
		"weighted_bytes": rep.MemoryBytes, "rss_bytes": used, "rss_vs_budget": float64(used) / float64(budget)}, nil
}

func find(text, expr string) float64 {
	m := regexp.MustCompile(expr).FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// latencyMS reads wrk's 99% latency line in milliseconds.
func latencyMS(text string) float64 {
	m := regexp.MustCompile(`(?m)^\s*99%\s+([0-9.]+)(us|ms|s)`).FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	switch m[2] {
	case "us":
		return v / 1000
	case "s":
		return v * 1000
	}
	return v
}

// rss returns the process's resident set in bytes (VmRSS).
func rss() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// heapFigures returns the live heap objects and the scannable heap bytes of the last GC cycle
// (what the collector has to mark and scan: arena chunks are marked but hold no pointers to scan).
func heapFigures() (objects, scan uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/objects:objects"}, {Name: "/gc/scan/heap:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// gcMarkCPU returns the CPU seconds the collector has spent marking (assists, dedicated and idle
// workers), as runtime/metrics estimates them at the end of each cycle.
func gcMarkCPU() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/mark/assist:cpu-seconds"},
		{Name: "/cpu/classes/gc/mark/dedicated:cpu-seconds"}, {Name: "/cpu/classes/gc/mark/idle:cpu-seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64() + s[1].Value.Float64() + s[2].Value.Float64()
}

func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// freeAll returns the memory of a finished count to the OS before the next.
func freeAll() {
	runtime.GC()
	debug.FreeOSMemory()
}
