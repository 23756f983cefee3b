package app

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestServerCountsFailsAndReports(t *testing.T) {
	s := New("be1")
	ts := httptest.NewUnstartedServer(s)
	ts.Config = s.HTTPServer()
	ts.Start()
	defer ts.Close()
	get := func(path string) (int, string, http.Header) {
		t.Helper()
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	if code, body, h := get("/tracking"); code != 200 || body != "be1 /tracking\n" || h.Get(Header) != "be1" {
		t.Errorf("/tracking: %d %q %v", code, body, h)
	}
	get("/event")
	get("/tracking")
	if _, _, h := get("/static/a.js"); !strings.Contains(h.Get("Cache-Control"), "max-age") {
		t.Errorf("/static/ not cacheable: %v", h)
	}
	if code, body, _ := get("/bytes?n=100000"); code != 200 || len(body) != 100000 {
		t.Errorf("/bytes: %d, %d bytes", code, len(body))
	}
	if code, _, _ := get("/bytes?n=-1"); code != 400 {
		t.Errorf("/bytes?n=-1: %d, want 400", code)
	}
	if code, _, _ := get("/health"); code != 200 {
		t.Errorf("/health: %d", code)
	}
	get("/admin/fail?on=1")
	if code, _, _ := get("/health"); code != 503 {
		t.Errorf("/health while failing: %d", code)
	}
	if code, _, _ := get("/x"); code != 503 {
		t.Errorf("/x while failing: %d", code)
	}
	get("/admin/fail?on=0")
	if code, _, _ := get("/admin/fail?on=maybe"); code != 400 {
		t.Errorf("bad fail value: %d", code)
	}
	_, body, _ := get("/admin/counters")
	var c Counters
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		t.Fatal(err)
	}
	// /tracking x2, /event, /static/a.js, /bytes x2, /x: health and admin are not counted.
	if c.Requests != 7 || c.Paths["/tracking"] != 2 || c.Paths["/event"] != 1 || c.Name != "be1" {
		t.Errorf("counters %+v", c)
	}
	// The same count as Prometheus text, parsed by the parser Prometheus uses.
	_, body, _ = get("/admin/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/admin/metrics does not parse: %v\n%s", err, body)
	}
	if m := fams["switchyard_lab_app_requests_total"].GetMetric(); len(m) != 1 || m[0].GetCounter().GetValue() != 7 ||
		m[0].GetLabel()[0].GetValue() != "be1" {
		t.Errorf("/admin/metrics requests: %v\n%s", m, body)
	}
	if got := SortedPaths(map[string]int{"/tracking": 5, "/event": 4}); got != "event=4 tracking=5" {
		t.Errorf("SortedPaths = %q", got)
	}
	get("/admin/slow?ms=150")
	start := time.Now()
	get("/slow")
	if time.Since(start) < 150*time.Millisecond {
		t.Errorf("slow request took %s, want >= 150ms", time.Since(start))
	}
	get("/admin/reset")
	_, body, _ = get("/admin/counters")
	json.Unmarshal([]byte(body), &c)
	if c.Requests != 0 {
		t.Errorf("after reset: %+v", c)
	}
}

func TestUDPEcho(t *testing.T) {
	s := New("be2")
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeUDP(pc)
	defer pc.Close()
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	c.Write([]byte("ping"))
	buf := make([]byte, 100)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "be2 ping" {
		t.Fatalf("echo %q, %v", buf[:n], err)
	}
}
