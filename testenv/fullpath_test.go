package testenv

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/app"
	"github.com/switchyard/switchyard/lab/topo"
)

// TestFullPath: every stop in one request path, as `lab up` runs it: static.lab.test resolved by
// `switchyard dns run` to `switchyard edge run`, whose misses go to the L7 VIP (XDP forwarder
// under `switchyard lb run`), then `switchyard l7 run` on two L7 hosts, then the app servers; a
// second request for a cacheable path is an edge hit. app.lab.test, the L7 VIP, answers over
// TLS with the certificate the L7 tier ordered from the lab's Pebble, and over HTTP/3 through the
// balancer's QUIC VIP to a client that moves its connection to new UDP ports: every answer comes
// through the same L7 instance, routed by the server ID in its connection IDs.
func TestFullPath(t *testing.T) {
	testutil.RequireLab(t)
	bin := switchyardBin(t)
	s := lab.Spec{Prefix: uniquePrefix(), Clients: 1, Balancers: 1, Backends: 2, L7: 2, DNS: true, Edge: true}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range []string{"lb1", "l7a", "edge", "dns"} {
				b, _ := os.ReadFile(filepath.Join(lab.StateDir(s.Prefix), n+".log"))
				t.Logf("%s log:\n%s", n, b)
			}
		}
		lab.Destroy(s.Prefix)
	})
	st, err := lab.Up(lab.UpOptions{Spec: s, Exe: bin, Balancer: lab.ModeDaemon,
		Stops: map[string]bool{"dns": true, "edge": true, "l7": true}})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]string{"l7a": "l7", "l7b": "l7", "edge": "edge", "dns": "dns", "be1": "app"} {
		if st.Running[host] != want {
			t.Fatalf("%s runs %q, want %q", host, st.Running[host], want)
		}
	}
	dns, _ := st.Topo.Node("dns")
	c := st.Lab().Client(1)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: lab.DialViaDNS(c, dns.Addr4), DisableKeepAlives: true}}
	var resp *http.Response
	// The processes start in the background: retry until the whole path answers.
	testutil.Eventually(t, 30*time.Second, func() bool {
		r, err := hc.Get("http://" + lab.StaticName + "/static/logo.png")
		if err != nil {
			return false
		}
		r.Body.Close()
		resp = r
		return r.StatusCode == 200
	}, "static.lab.test not answering through every stop")
	if resp.Header.Get(app.Header) == "" || resp.Header.Get("Via") == "" {
		t.Errorf("answer lacks the app's X-Backend or the edge's Via: %v", resp.Header)
	}
	r, err := hc.Get("http://" + lab.StaticName + "/static/logo.png")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.Header.Get("X-Cache") != "HIT" {
		t.Errorf("second request for a cacheable path: X-Cache %q, want HIT from the edge", r.Header.Get("X-Cache"))
	}
	// Uncacheable paths go through to the app servers every time, both of them in turn.
	seen := map[string]bool{}
	for i := 0; i < 20; i++ {
		r, err := hc.Get("http://" + lab.StaticName + "/api/items")
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		seen[r.Header.Get(app.Header)] = true
	}
	if !seen["be1"] || !seen["be2"] {
		t.Errorf("uncacheable requests reached %v, want both app servers", seen)
	}

	// www.lab.test, the app's name, goes to the L7 VIP: no edge on the way.
	r, err = hc.Get("http://" + lab.WWWName + "/api/items")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 200 || r.Header.Get(app.Header) == "" || r.Header.Get("X-Cache") != "" {
		t.Errorf("www.lab.test: status %d, headers %v; want 200 from an app server without the edge's X-Cache", r.StatusCode, r.Header)
	}

	// Straight to the L7 VIP (XDP, then one of two L7 proxies): reads land in the reads pool
	// (be1), writes in the writes pool (be2), and both L7 instances carry requests.
	vip := "http://" + lab.L7VIP.String()
	direct := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: lab.DialViaDNS(c, dns.Addr4), DisableKeepAlives: true}}
	l7a, _ := st.Topo.Node("l7a")
	l7b, _ := st.Topo.Node("l7b")
	peers := map[string]bool{}
	for i := 0; i < 30; i++ {
		r, err := direct.Get(vip + "/tracking?i=" + strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if got := r.Header.Get(app.Header); r.StatusCode != 200 || got != "be1" {
			t.Fatalf("GET /tracking: status %d from %q, want 200 from the reads pool (be1)", r.StatusCode, got)
		}
		peers[r.Header.Get(app.PeerHeader)] = true
		r, err = direct.Post(vip+"/event", "application/json", strings.NewReader(`{"n":1}`))
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if got := r.Header.Get(app.Header); r.StatusCode != 200 || got != "be2" {
			t.Fatalf("POST /event: status %d from %q, want 200 from the writes pool (be2)", r.StatusCode, got)
		}
		peers[r.Header.Get(app.PeerHeader)] = true
	}
	if !peers[l7a.Addr4.String()] || !peers[l7b.Addr4.String()] {
		t.Errorf("requests came through L7 hosts %v, want both %s and %s", peers, l7a.Addr4, l7b.Addr4)
	}
	l7FrontDoor(t, st, c)
}

// l7FrontDoor: app.lab.test over TLS (the L7 VIP's TCP 443) and over HTTP/3 with connection
// migration (its QUIC VIP).
func l7FrontDoor(t *testing.T, st *lab.State, c topo.Node) {
	dns, _ := st.Topo.Node("dns")
	tc, err := st.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: lab.DialViaDNS(c, dns.Addr4), TLSClientConfig: tc, DisableKeepAlives: true}}
	r, err := hc.Get("https://" + lab.AppName + "/tracking")
	if err != nil {
		t.Fatalf("https://%s: %v", lab.AppName, err)
	}
	r.Body.Close()
	if r.StatusCode != 200 || r.TLS == nil || r.Header.Get(app.Header) != "be1" {
		t.Errorf("https://%s/tracking: status %d, tls %v, from %q; want 200 over TLS from the reads pool (be1)", lab.AppName, r.StatusCode, r.TLS != nil, r.Header.Get(app.Header))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := lab.H3Migration(ctx, st, c, 3)
	if err != nil {
		t.Fatalf("HTTP/3 through the balancer with connection migration: %v (so far: %+v)", err, rep.Steps)
	}
	t.Logf("http/3: %s", rep)
	locals := map[string]bool{}
	for _, s := range rep.Steps {
		locals[s.Local] = true
	}
	if len(rep.Steps) != 4 || len(locals) != 4 || !rep.SameL7() {
		t.Errorf("HTTP/3 steps %+v: want 4 requests from 4 local ports through one L7 instance", rep.Steps)
	}
	if rep.Routed <= 0 {
		t.Errorf("the balancer routed %d packets by connection ID, want the moved client's (> 0)", rep.Routed)
	}
}
