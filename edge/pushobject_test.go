package edge

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func newAdminEdge(t *testing.T, origin string) *Edge {
	t.Helper()
	return newEdge(t, origin, func(c *Config) { c.Admin = AdminConfig{Listen: "127.0.0.1:0", Token: "s3cret"} })
}

// TestPushObjectStoresWithoutOrigin: an object pushed with its headers and body is served as a
// hit, the origin never asked; it replaces a copy fetched earlier.
func TestPushObjectStoresWithoutOrigin(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		fmt.Fprint(w, "from origin")
	})
	e := newAdminEdge(t, o.URL)
	cl := AdminClient{Base: e.AdminAddr(), Token: "s3cret"}
	h := http.Header{"Cache-Control": {"max-age=600"}, "Content-Type": {"text/css"}, "Surrogate-Key": {"css"}}
	res, err := cl.PushObject(context.Background(), "http://www.example.com/style.css", 200, h, []byte("body{}"))
	if err != nil || res.Cache != "PUSHED" {
		t.Fatalf("push object: %+v %v", res, err)
	}
	r := get(t, e.URL()+"/style.css", "Host", "www.example.com")
	expect(t, r, 200, Hit, "body{}")
	if r.h.Get("Content-Type") != "text/css" || o.hits("/style.css") != 0 {
		t.Fatalf("pushed object served with %v; origin asked %d times", r.h, o.hits("/style.css"))
	}
	// A fetched copy is replaced by a push.
	expect(t, get(t, e.URL()+"/app.js", "Host", "www.example.com"), 200, Miss, "from origin")
	if _, err := cl.PushObject(context.Background(), "http://www.example.com/app.js", 200, http.Header{"Cache-Control": {"max-age=60"}}, []byte("v2")); err != nil {
		t.Fatal(err)
	}
	expect(t, get(t, e.URL()+"/app.js", "Host", "www.example.com"), 200, Hit, "v2")
	if e.Stats().Pushed.Load() != 2 {
		t.Fatalf("pushed = %d, want 2", e.Stats().Pushed.Load())
	}
	// Tags from the pushed header purge it like a fetched one.
	if res, err := cl.Purge(context.Background(), PurgeRequest{Tags: []string{"css"}}); err != nil || res.Purged != 1 {
		t.Fatalf("purge pushed object by tag: %+v %v", res, err)
	}
}

// TestPushObjectRefused: no token, a wrong token (also one of the same length), an unstorable or
// varying object, and a body that is not a response message are refused, and nothing is stored.
func TestPushObjectRefused(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "o") })
	e := newAdminEdge(t, o.URL)
	good := http.Header{"Cache-Control": {"max-age=60"}}
	for _, tok := range []string{"", "wrong", "s3creT"} {
		_, err := AdminClient{Base: e.AdminAddr(), Token: tok}.PushObject(context.Background(), "http://h/x", 200, good, []byte("x"))
		if err == nil || !strings.Contains(err.Error(), "unauthorized") {
			t.Fatalf("token %q: %v, want unauthorized", tok, err)
		}
	}
	cl := AdminClient{Base: e.AdminAddr(), Token: "s3cret"}
	for _, c := range []struct {
		url  string
		h    http.Header
		want string
	}{
		{"http://h/x", http.Header{"Cache-Control": {"no-store"}}, "not storable"},
		{"http://h/x", http.Header{"Cache-Control": {"max-age=60"}, "Vary": {"Accept"}}, "Vary"},
		{"/relative", good, "not an absolute URL"},
	} {
		t.Run(c.url, func(t *testing.T) {
			if _, err := cl.PushObject(context.Background(), c.url, 200, c.h, []byte("x")); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("push %s %v: %v, want %q", c.url, c.h, err, c.want)
			}
		})
	}
	req, _ := http.NewRequest(http.MethodPut, "http://"+e.AdminAddr()+"/object?url=http://h/x", strings.NewReader("not a response"))
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("garbage body: %d, want 400", resp.StatusCode)
	}
	if e.store.Len() != 0 || e.Stats().Pushed.Load() != 0 {
		t.Fatalf("refused pushes stored %d objects", e.store.Len())
	}
}
