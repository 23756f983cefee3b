package l7

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard/switchyard/internal/testutil"
)

// Every engine begins and finishes a request the same way (exchange.go): the same requests, one
// retried on the route's status (the first backend answers 503) and relayed from the second, one
// refused by the route's rate limit, through the event loops, the goroutine engine, the HTTP/2
// engine and net/http give the same metric increments and access-log lines, each request
// recorded once and every admission given back. An engine that observed twice, skipped release,
// or routed, admitted or retried its own way would differ here.
func TestEveryEngineBeginsAndFinishesAlike(t *testing.T) {
	bad, b := startBackend(t, "x", nil), startBackend(t, "b", nil)
	bad.code.Store(http.StatusServiceUnavailable)
	cases := []struct {
		e      engine
		http10 bool // ask in HTTP/1.0, which the core hands to net/http
		served engineKind
	}{
		{e: engine{name: "loops"}, served: engineLoop},
		{e: engine{name: "goroutines", noLoops: true}, served: engineGoroutine},
		{e: engine{name: "h2c", h2: true}, served: engineH2},
		{e: engine{name: "nethttp"}, http10: true, served: engineNetHTTP},
	}
	// One line per request, the proxy's own answer's body size aside (the core records 0,
	// net/http what it wrote).
	want := []string{
		"GET a /ok 200 16 r p " + b.addr + " 2",
		"GET a /ok 429 - r p - 0",
	}
	slices.Sort(want)
	for _, c := range cases {
		t.Run(c.e.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "access.log")
			p := c.e.start(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
access_log: %q
access_log_format: '$request_method $host $request_uri $status $body_bytes_sent $route $pool $upstream_addr $attempts'
routes: [{name: r, pool: p, rate_limit: {key: client, rate: 0.01, burst: 1}, retry: {attempts: 1, on_status: [503]}}]
pools: [{name: p, backends: [{address: %q}, {address: %q}], retry_budget: {percent: 100, min_per_second: 100}}]
`, log, bad.addr, b.addr))
			p.viaNetHTTP = c.http10
			for _, code := range []int{200, 429} {
				conn, br := p.dial(t)
				minor := 1
				if c.http10 {
					minor = 0
				}
				fmt.Fprintf(conn, "GET /ok HTTP/1.%d\r\nHost: a\r\n\r\n", minor)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				conn.Close()
				if resp.StatusCode != code {
					t.Fatalf("status %d, want %d", resp.StatusCode, code)
				}
			}
			m := p.s.metrics
			var lines []string
			testutil.Eventually(t, 3*time.Second, func() bool {
				data, _ := os.ReadFile(log)
				lines = strings.Split(strings.TrimSpace(string(data)), "\n")
				return len(lines) >= 2 && counterSum(m.requests) >= 2
			}, "fewer than 2 requests recorded")
			time.Sleep(50 * time.Millisecond) // a second recording of either would be in by now
			data, _ := os.ReadFile(log)
			lines = strings.Split(strings.TrimSpace(string(data)), "\n")
			// An engine may record a request after its answer reached the client, so the second
			// request's line can come first: compared as a set.
			for i, l := range lines {
				if f := strings.Fields(l); len(f) == 9 && f[3] == "429" {
					f[4] = "-"
					lines[i] = strings.Join(f, " ")
				}
			}
			slices.Sort(lines)
			if !slices.Equal(lines, want) {
				t.Errorf("access log:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
			}
			for _, s := range []struct {
				labels []string
				want   float64
			}{{[]string{"r", "p", b.addr, "200"}, 1}, {[]string{"r", "p", "", "429"}, 1}, {[]string{"r", "p", bad.addr, "503"}, 0}} {
				if got := counterValue(m.requests.WithLabelValues(s.labels...)); got != s.want {
					t.Errorf("requests_total%q = %v, want %v", s.labels, got, s.want)
				}
			}
			if got := counterSum(m.requests); got != 2 {
				t.Errorf("requests_total sums to %v, want 2", got)
			}
			if got := histogramCount(m.duration.WithLabelValues("r", "p")); got != 2 {
				t.Errorf("request duration observed %d times, want 2", got)
			}
			if got := gaugeValue(m.inFlight); got != 0 {
				t.Errorf("%v requests still in flight: an admission was not given back", got)
			}
			if got := p.s.served.of(c.served); got != 2 {
				t.Errorf("engine %s served %d requests, want 2", engineNames[c.served], got)
			}
		})
	}
}

// counterValue reads a Prometheus counter.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

// counterSum adds up every series of a counter vector.
func counterSum(v *prometheus.CounterVec) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { v.Collect(ch); close(ch) }()
	sum := 0.0
	for mt := range ch {
		var m dto.Metric
		_ = mt.Write(&m)
		sum += m.GetCounter().GetValue()
	}
	return sum
}

// histogramCount reads how many observations a Prometheus histogram has.
func histogramCount(o prometheus.Observer) uint64 {
	var m dto.Metric
	_ = o.(prometheus.Metric).Write(&m)
	return m.GetHistogram().GetSampleCount()
}
