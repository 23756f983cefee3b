package l7

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

func TestStickyAndHashThroughProxy(t *testing.T) {
	a, b, c := startBackend(t, "a", nil), startBackend(t, "b", nil), startBackend(t, "c", nil)
	_, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes:
  - {name: cart, match: {path: {prefix: /cart}}, pool: sessions}
  - {name: user, pool: users}
pools:
  - {name: sessions, balance: sticky, sticky: {cookie: sy, ttl: 1h}, backends: [{address: %q}, {address: %q}, {address: %q}]}
  - {name: users, balance: hash, hash: {key: "header:X-User"}, backends: [{address: %q}, {address: %q}, {address: %q}]}
`, a.addr, b.addr, c.addr, a.addr, b.addr, c.addr))
	resp, _ := get(t, http.DefaultClient, "GET", base+"/cart", nil)
	first := resp.Header.Get("X-Backend")
	cookie := resp.Header.Get("Set-Cookie")
	if !strings.HasPrefix(cookie, "sy=") || !strings.Contains(cookie, "Max-Age=3600") || !strings.Contains(cookie, "HttpOnly") {
		t.Fatalf("sticky Set-Cookie = %q", cookie)
	}
	value := strings.TrimPrefix(strings.SplitN(cookie, ";", 2)[0], "sy=")
	for i := 0; i < 6; i++ {
		resp, _ := get(t, http.DefaultClient, "GET", base+"/cart", nil, "Cookie", "sy="+value)
		if resp.Header.Get("X-Backend") != first {
			t.Fatalf("sticky session moved from %s to %s", first, resp.Header.Get("X-Backend"))
		}
		if resp.Header.Get("Set-Cookie") != "" {
			t.Errorf("cookie re-set although it names the chosen backend")
		}
	}
	seen := map[string]string{}
	spread := map[string]bool{}
	for i := 0; i < 60; i++ {
		user := fmt.Sprint("u", i%20)
		resp, _ := get(t, http.DefaultClient, "GET", base+"/profile", nil, "X-User", user)
		be := resp.Header.Get("X-Backend")
		if prev, ok := seen[user]; ok && prev != be {
			t.Fatalf("user %s moved from %s to %s", user, prev, be)
		}
		seen[user] = be
		spread[be] = true
	}
	if len(spread) != 3 {
		t.Errorf("20 users hashed onto %d backends, want all 3", len(spread))
	}
}

func TestGlobalSheddingAndMetrics(t *testing.T) {
	slow := startBackend(t, "slow", nil)
	s, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
limits: {max_in_flight: 1}
routes: [{name: all, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, slow.addr))
	slow.delay.Store(int64(300e6))
	done := make(chan struct{})
	go func() {
		resp, err := http.Get(base + "/slow")
		if err == nil {
			resp.Body.Close()
		}
		close(done)
	}()
	testutil.Eventually(t, 5*time.Second, func() bool { return backendInfo(s, slow.addr).InFlight == 1 }, "the first request never reached the slow backend")
	resp, _ := get(t, http.DefaultClient, "GET", base+"/x", nil)
	if resp.StatusCode != 503 || resp.Header.Get("X-Load-Shed") != "1" {
		t.Errorf("second request = %d %v, want 503 shed by the global limit", resp.StatusCode, resp.Header)
	}
	<-done
	rec := httptest.NewRecorder()
	s.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`switchyard_l7_requests_total{backend="` + slow.addr + `",code="200",pool="p",route="all"} 1`,
		`switchyard_l7_shed_total{scope="global"} 1`,
		`switchyard_l7_request_duration_seconds_bucket{pool="p",route="all"`,
		`switchyard_l7_backend_healthy{backend="` + slow.addr + `",pool="p"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	rec = httptest.NewRecorder()
	s.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/backends", nil))
	if !strings.Contains(rec.Body.String(), `"address": "`+slow.addr+`"`) {
		t.Errorf("/backends = %s", rec.Body.String())
	}
}
