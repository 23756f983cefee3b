package edge

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestTargetedCacheControl: a CDN-Cache-Control (RFC 9213) or a configured targeted field
// overrides Cache-Control and Expires for the edge in both directions, the first configured field
// present winning; clients still get every field.
func TestTargetedCacheControl(t *testing.T) {
	t.Parallel()
	far := time.Now().UTC().Add(24 * time.Hour).Format(http.TimeFormat)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		switch r.URL.Path {
		case "/nostore":
			h.Set("Cache-Control", "max-age=60")
			h.Set("CDN-Cache-Control", "no-store")
		case "/private":
			h.Set("Cache-Control", "public, max-age=60")
			h.Set("CDN-Cache-Control", "private")
		case "/nocache":
			h.Set("Cache-Control", "max-age=60")
			h.Set("CDN-Cache-Control", "no-cache")
			h.Set("Etag", `"v1"`)
			if r.Header.Get("If-None-Match") == `"v1"` {
				w.WriteHeader(http.StatusNotModified)
				return
			}
		case "/maxage":
			h.Set("Cache-Control", "no-store")
			h.Set("CDN-Cache-Control", "max-age=60")
		case "/expires": // the targeted field's max-age=0 holds against Expires and max-age
			h.Set("Cache-Control", "max-age=60")
			h.Set("Expires", far)
			h.Set("CDN-Cache-Control", "max-age=0")
		case "/order": // the first configured field present wins
			h.Set("Cache-Control", "no-store")
			h.Set("CDN-Cache-Control", "no-store")
			h.Set("Switchyard-Cache-Control", "max-age=60")
		case "/invalid-sf": // not a Structured Field Dictionary: ignored, Cache-Control applies
			h.Set("Cache-Control", "no-store")
			h.Set("CDN-Cache-Control", "max-age=10000, &&&&&")
		case "/wrong-type": // max-age must be an Integer: the field is ignored
			h.Set("Cache-Control", "no-store")
			h.Set("CDN-Cache-Control", `max-age="10000"`)
		case "/invalid": // an empty targeted field is ignored: Cache-Control applies
			h.Set("Cache-Control", "max-age=60")
			h.Set("CDN-Cache-Control", "")
		}
		fmt.Fprint(w, r.URL.Path)
	})
	e := newEdge(t, o.URL, func(c *Config) {
		c.TargetedCacheControl = []string{"Switchyard-Cache-Control", "CDN-Cache-Control"}
	})
	for _, c := range []struct{ path, second string }{
		{"/nostore", Bypass}, {"/private", Bypass}, {"/nocache", Revalidated}, {"/maxage", Hit},
		{"/expires", Bypass}, {"/order", Hit}, {"/invalid", Hit}, {"/invalid-sf", Bypass}, {"/wrong-type", Bypass},
	} {
		t.Run(c.path, func(t *testing.T) {
			first := get(t, e.URL()+c.path)
			expect(t, first, 200, Miss, c.path)
			settle(t, e)
			if r := get(t, e.URL()+c.path); r.cache() != c.second || r.body != c.path {
				t.Errorf("%s: second request %s %q, want %s", c.path, r.cache(), r.body, c.second)
			}
		})
	}
	if r := get(t, e.URL()+"/maxage"); r.h.Get("Cache-Control") != "no-store" || r.h.Get("Cdn-Cache-Control") != "max-age=60" {
		t.Errorf("hit header Cache-Control %q CDN-Cache-Control %q: both go on to clients", r.h.Get("Cache-Control"), r.h.Get("Cdn-Cache-Control"))
	}
}

// TestTargetedCacheControlSurvivesRestart: the rule is applied again when the disk index is
// rebuilt, so a targeted no-cache entry is still revalidated after a restart.
func TestTargetedCacheControlSurvivesRestart(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("CDN-Cache-Control", "no-cache")
		w.Header().Set("Etag", `"v1"`)
		fmt.Fprint(w, "body")
	})
	dir := t.TempDir()
	cfg := func(c *Config) { c.Disk.Dir = dir }
	e := newEdge(t, o.URL, cfg)
	expect(t, get(t, e.URL()+"/r"), 200, Miss, "body")
	settle(t, e)
	e.Close()
	e2 := newEdge(t, o.URL, cfg)
	if r := get(t, e2.URL()+"/r"); r.cache() == Hit {
		t.Fatalf("after restart a targeted no-cache entry was served as a HIT")
	}
}
