// Package webui is switchyard's live web view of the request path: one collector scrapes the
// stops' own Prometheus endpoints (DNS, edge, the L4 daemon's --metrics, L7, the lab's app
// servers) once per interval, turns the counters into per-second rates (frame.go), and serves a
// page (static/, charts with the vendored uPlot in vendor/) that receives each frame over
// server-sent events. `switchyard lab demo`, `lab up` and every stop's `--ui ADDR` serve it.
// Nothing is fetched at run time: the page and uPlot are embedded in the binary.
package webui

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Stop kinds of a target: the panel its metrics feed.
const (
	StopDNS  = "dns"
	StopEdge = "edge"
	StopL4   = "l4"
	StopL7   = "l7"
	StopApp  = "app"
)

// Target is one Prometheus endpoint to scrape.
type Target struct {
	// Stop is the kind of stop (StopDNS...), Name the instance (a host name such as lb1).
	Stop, Name string
	// URL is the endpoint, e.g. http://127.0.0.1:9153/metrics.
	URL string
	// Client fetches URL (nil: a client with a 2 s timeout); the lab's dials into the stop's
	// network namespace.
	Client *http.Client
}

// Options tune a collector.
type Options struct {
	// Interval between two scrapes (default 1 s).
	Interval time.Duration
	// Names maps addresses (the L4 daemon's backend label) to host names shown beside them.
	Names map[string]string
	// Title heads the page.
	Title string
}

// Collector scrapes its targets every interval and hands every frame to the page's
// subscribers.
type Collector struct {
	targets []Target
	opt     Options
	agg     *aggregator

	mu     sync.Mutex
	last   *Frame
	subs   map[chan []byte]struct{}
	frames uint64
}

// NewCollector makes a collector over targets.
func NewCollector(targets []Target, o Options) *Collector {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Title == "" {
		o.Title = "switchyard"
	}
	return &Collector{targets: targets, opt: o, agg: newAggregator(o.Names), subs: map[chan []byte]struct{}{}}
}

// Targets are the collector's targets.
func (c *Collector) Targets() []Target { return c.targets }

// Run scrapes until ctx ends.
func (c *Collector) Run(ctx context.Context) {
	tk := time.NewTicker(c.opt.Interval)
	defer tk.Stop()
	for {
		c.Tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// Tick scrapes every target once (in parallel), computes a frame and publishes it.
func (c *Collector) Tick(ctx context.Context) *Frame {
	res := make([]scrapeResult, len(c.targets))
	var wg sync.WaitGroup
	for i, t := range c.targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = scrapeTarget(ctx, t)
		}()
	}
	wg.Wait()
	f := c.agg.frame(time.Now(), res)
	c.publish(f)
	return f
}

type scrapeResult struct {
	target   Target
	families map[string]*dto.MetricFamily
	err      error
}

func scrapeTarget(ctx context.Context, t Target) scrapeResult {
	r := scrapeResult{target: t}
	body, err := Fetch(ctx, t)
	if err != nil {
		r.err = err
		return r
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	r.families, r.err = p.TextToMetricFamilies(strings.NewReader(string(body)))
	if r.err != nil {
		r.err = fmt.Errorf("parse metrics of %s %s: %w", t.Stop, t.Name, r.err)
	}
	return r
}

// Fetch reads a target's metrics text (the lab's relay for Prometheus uses it too).
func Fetch(ctx context.Context, t Target) ([]byte, error) {
	hc := t.Client
	if hc == nil {
		hc = &http.Client{Timeout: 2 * time.Second}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s %s: %w", t.Stop, t.Name, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s %s at %s: %w", t.Stop, t.Name, t.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s %s at %s: status %d", t.Stop, t.Name, t.URL, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("scrape %s %s at %s: %w", t.Stop, t.Name, t.URL, err)
	}
	return b, nil
}

// Last is the latest frame (nil before the first scrape).
func (c *Collector) Last() *Frame {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

func (c *Collector) publish(f *Frame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frames++
	f.Seq = c.frames
	b := f.encode()
	c.last = f
	for ch := range c.subs {
		select {
		case ch <- b:
		default: // a slow page misses a frame rather than stalling the collector
		}
	}
}

func (c *Collector) subscribe() (chan []byte, func()) {
	ch := make(chan []byte, 4)
	c.mu.Lock()
	c.subs[ch] = struct{}{}
	c.mu.Unlock()
	return ch, func() {
		c.mu.Lock()
		delete(c.subs, ch)
		c.mu.Unlock()
	}
}

func sortedKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}
