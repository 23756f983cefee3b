package l7

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// A route's header filters hold on every engine: request fields set (replacing the client's),
// added and removed on the way up, response fields set, added and removed on the way down.
func TestRouteHeaderFilters(t *testing.T) {
	b := startBackend(t, "b", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, name := range []string{"X-Env", "X-Tag", "X-Drop", "User-Agent"} {
			w.Header()["Echo-"+name] = r.Header.Values(name)
		}
		w.Header().Set("X-Internal", "secret")
		w.Header().Set("X-Version", "old")
		io.WriteString(w, "ok")
	}))
	forEachEngineAndH2(t, func(t *testing.T, e engine) {
		p := e.start(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes:
  - name: r
    pool: p
    filters:
      request_headers: {set: [{name: X-Env, value: prod}], add: [{name: X-Tag, value: a}], remove: [X-Drop]}
      response_headers: {set: [{name: X-Version, value: "2"}], add: [{name: X-Served-By, value: l7}], remove: [X-Internal]}
pools: [{name: p, backends: [{address: %q}]}]
`, e.backend(b.addr)))
		client := testClient
		if e.h2 {
			client = h2Client(p.base())
		}
		req, _ := http.NewRequest("GET", p.base()+"/x", nil)
		req.Header.Set("X-Env", "dev")
		req.Header.Set("X-Tag", "client")
		req.Header.Set("X-Drop", "1")
		req.Header.Set("User-Agent", "ua")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		h := resp.Header
		for name, want := range map[string]string{"Echo-X-Env": "prod", "Echo-X-Tag": "client,a", "Echo-X-Drop": "",
			"Echo-User-Agent": "ua", "X-Version": "2", "X-Served-By": "l7", "X-Internal": ""} {
			if got := strings.Join(h.Values(name), ","); got != want {
				t.Errorf("%s = %q, want %q", name, got, want)
			}
		}
	})
}

// A redirect route answers with the request's URL, the parts it sets replaced and the query
// kept, on every engine; a redirect that changes nothing (a loop) and fields the proxy manages
// are refused, naming the field.
func TestRouteRedirect(t *testing.T) {
	for _, e := range withH2 {
		t.Run(e.name, func(t *testing.T) {
			p := e.start(t, `
listeners: [{address: "127.0.0.1:0"}]
routes:
  - {name: secure, match: {path: {prefix: /old}}, filters: {redirect: {scheme: https, hostname: www.example.com, path: /new, status_code: 301}}}
  - {name: r, pool: p}
pools: [{name: p, backends: [{address: "127.0.0.1:1"}]}]
`)
			client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			client.Transport = testClient.Transport
			if e.h2 {
				client.Transport = h2Client(p.base()).Transport
			}
			resp, err := client.Get(p.base() + "/old/page?x=1")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 301 || resp.Header.Get("Location") != "https://www.example.com/new?x=1" {
				t.Fatalf("%s Location %q, want 301 to https://www.example.com/new?x=1", resp.Status, resp.Header.Get("Location"))
			}
		})
	}
	for _, c := range []struct{ filters, want string }{
		{"{redirect: {status_code: 301}}", "routes[0].filters.redirect: changes nothing"},
		{"{redirect: {path: /x, status_code: 200}}", "routes[0].filters.redirect.status_code: 200 is not a redirect status"},
		{"{request_headers: {set: [{name: Host, value: x}]}}", "routes[0].filters.request_headers.set[0].name: \"Host\" is a field the proxy manages"},
		{"{response_headers: {add: [{name: X-A, value: \"a\\nb\"}]}}", "routes[0].filters.response_headers.add[0].value: holds CR, LF or NUL"},
		{"{request_headers: {remove: [\"bad name\"]}}", "routes[0].filters.request_headers.remove[0]: \"bad name\" is not a header field name"},
	} {
		_, err := ParseConfig([]byte("listeners: [{address: \"127.0.0.1:0\"}]\nroutes: [{name: r, pool: p, filters: " + c.filters + "}]\npools: [{name: p, backends: [{address: \"127.0.0.1:1\"}]}]\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.filters, err, c.want)
		}
	}
}

// A route's URL rewrite gives the backend another path (the matched prefix replaced, the query
// kept) and Host on every engine, while X-Forwarded-Host keeps the client's.
func TestRouteURLRewrite(t *testing.T) {
	b := startBackend(t, "b", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Echo-URI", r.RequestURI)
		w.Header().Set("Echo-Host", r.Host)
		w.Header().Set("Echo-XFH", r.Header.Get("X-Forwarded-Host"))
	}))
	forEachEngineAndH2(t, func(t *testing.T, e engine) {
		p := e.start(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes:
  - name: api
    match: {path: {prefix: /api}}
    pool: p
    filters: {url_rewrite: {hostname: internal.svc, path: {replace_prefix_match: /v2}}}
  - name: one
    match: {path: {exact: /old}}
    pool: p
    filters: {url_rewrite: {path: {replace_full_path: /new}}}
pools: [{name: p, backends: [{address: %q}]}]
`, e.backend(b.addr)))
		client := testClient
		if e.h2 {
			client = h2Client(p.base())
		}
		for _, c := range []struct{ path, uri, host string }{
			{"/api/items?q=1", "/v2/items?q=1", "internal.svc"},
			{"/api", "/v2", "internal.svc"},
			{"/old?x", "/new?x", ""},
		} {
			req, _ := http.NewRequest("GET", p.base()+c.path, nil)
			req.Host = "shop.example"
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			host := c.host
			if host == "" {
				host = "shop.example"
			}
			if h := resp.Header; h.Get("Echo-URI") != c.uri || h.Get("Echo-Host") != host || h.Get("Echo-XFH") != "shop.example" {
				t.Errorf("%s: backend got %s Host %s X-Forwarded-Host %s; want %s Host %s X-Forwarded-Host shop.example",
					c.path, h.Get("Echo-URI"), h.Get("Echo-Host"), h.Get("Echo-XFH"), c.uri, host)
			}
		}
	})
	_, err := ParseConfig([]byte("listeners: [{address: \"127.0.0.1:0\"}]\nroutes: [{name: r, pool: p, filters: {url_rewrite: {path: {replace_prefix_match: /v2}}}}]\npools: [{name: p, backends: [{address: \"127.0.0.1:1\"}]}]\n"))
	if err == nil || !strings.Contains(err.Error(), "routes[0].filters.url_rewrite.path.replace_prefix_match: needs a route that matches by path prefix") {
		t.Errorf("replace_prefix_match without a prefix match: %v", err)
	}
}
