package testenv

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard/switchyard/testenv/app"
	"github.com/switchyard/switchyard/testenv/lab"
)

// TestFullPath: every stop in one request path, as `lab up` runs it: www.lab.test resolved by
// `switchyard dns run` to `switchyard edge run`, whose misses go to the L7 VIP (XDP forwarder
// under `switchyard lb run`), then `switchyard l7 run` on two L7 hosts, then the app servers; a
// second request for a cacheable path is an edge hit.
func TestFullPath(t *testing.T) {
	requireRoot(t)
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
	eventually(t, 30*time.Second, "www.lab.test answering through every stop", func() bool {
		r, err := hc.Get("http://" + lab.WWWName + "/static/logo.png")
		if err != nil {
			return false
		}
		r.Body.Close()
		resp = r
		return r.StatusCode == 200
	})
	if resp.Header.Get(app.Header) == "" || resp.Header.Get("Via") == "" {
		t.Errorf("answer lacks the app's X-Backend or the edge's Via: %v", resp.Header)
	}
	r, err := hc.Get("http://" + lab.WWWName + "/static/logo.png")
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
		r, err := hc.Get("http://" + lab.WWWName + "/tracking")
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		seen[r.Header.Get(app.Header)] = true
	}
	if !seen["be1"] || !seen["be2"] {
		t.Errorf("uncacheable requests reached %v, want both app servers", seen)
	}
}
