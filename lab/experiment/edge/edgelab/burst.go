// Package edgelab drives the edge stop's lab experiments on the real cache: the content-delivery
// lesson's burst trace (edge-burst) and the push/pull propagation comparison (propagation). Every
// request is a real HTTP request over loopback to real edges in front of a real origin; the
// experiment files in lab/experiment only call these and print the tables.
package edgelab

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/edge"
)

// Lesson constants of "Content Delivery Networks" (the trace and the caches).
const (
	// Queries is the computed daily queries per shipment (12,000,000 / 1,200,000).
	Queries = 10
	// Open is T8: tracking pages open at the same time.
	Open = 100
	// Capacity is T9: each cache holds 1,000 keys.
	Capacity = 1_000
	// BodyBytes is K01 V5: a tracking response body.
	BodyBytes = 480
)

// Trace generates the lesson's request trace: i%10 < burst requests belong to open bursts
// (a shipment's burst-long run of queries, spread round-robin over 100 open pages); the rest are
// keys seen once. It is a line-by-line port of edge/trace.mjs.
func Trace(burst, requests int) []string {
	type openBurst struct {
		id        string
		remaining int
	}
	out := make([]string, 0, requests)
	var open []*openBurst
	fresh, single, index := 1, 1, 0
	for i := 0; i < requests; i++ {
		if i%Queries >= burst {
			out = append(out, "D"+strconv.Itoa(single))
			single++
			continue
		}
		for len(open) < Open {
			open = append(open, &openBurst{id: "G" + strconv.Itoa(fresh), remaining: burst})
			fresh++
		}
		index = (index + 1) % len(open)
		o := open[index]
		out = append(out, o.id)
		o.remaining--
		if o.remaining == 0 {
			open = append(open[:index], open[index+1:]...)
		}
	}
	return out
}

// countingOrigin is the tracking application: a real HTTP server on loopback answering every
// /tracking/KEY with a 480-byte body, counting requests.
type countingOrigin struct {
	*httptest.Server
	requests   atomic.Int64
	prefetches atomic.Int64 // prewarm fetches (X-Switchyard-Prefetch) and objects pushed
	version    atomic.Int64
	maxAge     func(path string) int
}

func newCountingOrigin(maxAge func(path string) int) *countingOrigin {
	o := &countingOrigin{maxAge: maxAge}
	o.version.Store(1)
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(edge.PrefetchHeader) != "" {
			o.prefetches.Add(1)
		} else {
			o.requests.Add(1)
		}
		h, body := o.object(r.URL.Path)
		for k, v := range h {
			w.Header()[k] = v
		}
		// No Date: with one-second Date resolution the apparent age would shift expiry by up to
		// a second, more than the propagation experiment's whole TTL in quick mode.
		w.Header()["Date"] = nil
		w.Write(body)
	}))
	return o
}

// object is the origin's response for path, for a GET and for a push alike.
func (o *countingOrigin) object(path string) (http.Header, []byte) {
	h := http.Header{}
	h.Set("Cache-Control", "max-age="+strconv.Itoa(o.maxAge(path)))
	h.Set("Content-Type", "application/json")
	head := fmt.Sprintf(`{"tracking":%q,"version":%d,"state":"in-transit","zone":"b34"}`, path, o.version.Load())
	return h, []byte(head + strings.Repeat(" ", max(0, BodyBytes-len(head))))
}

// adminToken protects the admin API of the experiments' edges.
const adminToken = "edgelab"

// startEdge runs an edge in front of upstream, bounded to objects entries (0: the default byte
// budget), with its admin API on loopback.
func startEdge(upstream string, objects int) (*edge.Edge, error) {
	return startEdgeEviction(upstream, objects, "")
}

// startEdgeEviction is startEdge with a memory eviction policy ("" for the default).
func startEdgeEviction(upstream string, objects int, eviction string) (*edge.Edge, error) {
	e, err := edge.New(edge.Config{
		Listen: "127.0.0.1:0", Origin: upstream,
		Memory: edge.MemoryConfig{MaxObjects: objects, Eviction: eviction},
		Admin:  edge.AdminConfig{Listen: "127.0.0.1:0", Token: adminToken},
	}, edge.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	if err := e.Start(); err != nil {
		return nil, err
	}
	return e, nil
}

// BurstResult is one row of the edge-burst table.
type BurstResult struct {
	// Burst is the burst length (T7).
	Burst int
	// Requests is the trace length.
	Requests int
	// EdgeHitRate is the edge's hit ratio over the trace.
	EdgeHitRate float64
	// ReachingApp is how many requests the edge sent on (to the application tier's cache).
	ReachingApp int64
	// AppHitRate is the hit ratio of the cache in front of the store, behind the edge.
	AppHitRate float64
	// ReachingStore is how many requests reached the origin (the store).
	ReachingStore int64
	// Duration is the wall time of the run.
	Duration time.Duration
	// Eviction is the memory eviction policy of both caches ("" for the default).
	Eviction string `json:",omitempty"`
}

// RunBurst sends the trace for one burst length through two real caches in series: the edge,
// whose upstream is a second edge standing for the application cache, whose upstream is the
// origin. Requests go in trace order from `workers` keep-alive clients.
func RunBurst(ctx context.Context, burst, requests, workers int) (BurstResult, error) {
	return RunBurstEviction(ctx, burst, requests, workers, "")
}

// RunBurstEviction is RunBurst with both caches using the memory eviction policy eviction
// (store.EvictLRU for the lesson's caches; "" for the default W-TinyLFU).
func RunBurstEviction(ctx context.Context, burst, requests, workers int, eviction string) (BurstResult, error) {
	o := newCountingOrigin(func(string) int { return 3600 })
	defer o.Close()
	app, err := startEdgeEviction(o.URL, Capacity, eviction)
	if err != nil {
		return BurstResult{}, fmt.Errorf("run burst %d: %w", burst, err)
	}
	defer app.Close()
	front, err := startEdgeEviction(app.URL(), Capacity, eviction)
	if err != nil {
		return BurstResult{}, fmt.Errorf("run burst %d: %w", burst, err)
	}
	defer front.Close()

	trace := Trace(burst, requests)
	start := time.Now()
	if err := drive(ctx, front.URL(), trace, workers); err != nil {
		return BurstResult{}, fmt.Errorf("run burst %d: %w", burst, err)
	}
	fs, as := front.Stats(), app.Stats()
	return BurstResult{
		Burst: burst, Requests: requests,
		EdgeHitRate: fs.HitRatio(), ReachingApp: fs.OriginRequests.Load(),
		AppHitRate: as.HitRatio(), ReachingStore: o.requests.Load(),
		Duration: time.Since(start), Eviction: eviction,
	}, nil
}

// drive sends GET base/tracking/KEY for every key, in order, from workers clients.
func drive(ctx context.Context, base string, keys []string, workers int) error {
	tr := &http.Transport{MaxIdleConnsPerHost: workers, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	next := make(chan string, workers)
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				if err := getDiscard(ctx, client, base+"/tracking/"+k, nil); err != nil {
					once.Do(func() { firstErr = err })
				}
			}
		}()
	}
	for _, k := range keys {
		if ctx.Err() != nil || firstErr != nil {
			break
		}
		next <- k
	}
	close(next)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// getDiscard performs one GET, reads the body, and returns it when into is not nil.
func getDiscard(ctx context.Context, c *http.Client, url string, into *[]byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	if into != nil {
		*into, err = io.ReadAll(resp.Body)
	} else {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("get %s: %s", url, resp.Status)
	}
	return err
}
