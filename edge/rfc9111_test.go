package edge

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

func TestMissThenHitWithAge(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Age", "5")
		fmt.Fprint(w, "hello")
	})
	e := newEdge(t, o.URL, nil)
	r := get(t, e.URL()+"/a")
	expect(t, r, 200, Miss, "hello")
	if r.h.Get("Via") != "1.1 switchyard-edge" || o.last().Header.Get("Via") != "1.1 switchyard-edge" {
		t.Fatalf("Via on the response %q and the forwarded request %q", r.h.Get("Via"), o.last().Header.Get("Via"))
	}
	r = get(t, e.URL()+"/a")
	expect(t, r, 200, Hit, "hello")
	if len(r.h.Values("Via")) != 1 {
		t.Fatalf("hit Via %v, want the edge's once", r.h.Values("Via"))
	}
	if r.h.Get("Age") < "5" {
		t.Fatalf("Age %q should include the origin's Age 5", r.h.Get("Age"))
	}
	if o.hits("/a") != 1 {
		t.Fatalf("origin saw %d requests, want 1", o.hits("/a"))
	}
}

// TestFreshnessSources checks s-maxage over max-age, Expires, the Last-Modified heuristic, and
// an Age header that makes a response stale on arrival.
func TestFreshnessSources(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Date", now.Format(http.TimeFormat))
		switch r.URL.Path {
		case "/smaxage": // s-maxage wins for a shared cache even though max-age is 0
			h.Set("Cache-Control", "max-age=0, s-maxage=60")
		case "/expires":
			h.Set("Expires", now.Add(time.Hour).Format(http.TimeFormat))
		case "/expired":
			h.Set("Expires", now.Add(-time.Hour).Format(http.TimeFormat))
			h.Set("Etag", `"e"`)
		case "/heuristic": // modified 10 days ago: 10% gives a day of freshness
			h.Set("Last-Modified", now.Add(-240*time.Hour).Format(http.TimeFormat))
		case "/aged": // already older than its max-age
			h.Set("Cache-Control", "max-age=10")
			h.Set("Age", "20")
			h.Set("Etag", `"e"`)
		}
		fmt.Fprint(w, r.URL.Path)
	})
	e := newEdge(t, o.URL, nil)
	for _, c := range []struct {
		path   string
		second string
	}{{"/smaxage", Hit}, {"/expires", Hit}, {"/heuristic", Hit}, {"/expired", Miss}, {"/aged", Miss}} {
		t.Run(c.path, func(t *testing.T) {
			expect(t, get(t, e.URL()+c.path), 200, Miss, c.path)
			r := get(t, e.URL()+c.path)
			// A stale response with a validator is revalidated; the origin answers 200 again, so MISS.
			expect(t, r, 200, c.second, c.path)
		})
	}
}

func TestUncacheableResponsesAreNotStored(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/nostore":
			w.Header().Set("Cache-Control", "no-store, max-age=60")
		case "/private":
			w.Header().Set("Cache-Control", "private, max-age=60")
		case "/varystar":
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Vary", "*")
		case "/mu-unknown": // must-understand with a status the cache does not implement
			w.Header().Set("Cache-Control", "must-understand, no-store, max-age=60")
			w.WriteHeader(299)
		case "/mu-known": // must-understand with 200 overrides no-store
			w.Header().Set("Cache-Control", "must-understand, no-store, max-age=60")
		}
		fmt.Fprint(w, "x")
	})
	e := newEdge(t, o.URL, nil)
	for _, p := range []string{"/nostore", "/private", "/varystar", "/mu-unknown"} {
		r := get(t, e.URL()+p)
		if r.cache() != Miss {
			t.Fatalf("%s: first X-Cache %s, want MISS", p, r.cache())
		}
		// Remembered as uncacheable: goes straight to the origin (hit-for-miss).
		if r := get(t, e.URL()+p); r.cache() != Bypass {
			t.Fatalf("%s: second X-Cache %s, want BYPASS", p, r.cache())
		}
		if o.hits(p) != 2 {
			t.Fatalf("%s: origin saw %d, want 2", p, o.hits(p))
		}
	}
	get(t, e.URL()+"/mu-known")
	expect(t, get(t, e.URL()+"/mu-known"), 200, Hit, "x")
}

func TestRequestNoStoreAndAuthorization(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/public" {
			w.Header().Set("Cache-Control", "public, max-age=60")
		} else {
			w.Header().Set("Cache-Control", "max-age=60")
		}
		fmt.Fprint(w, "x")
	})
	e := newEdge(t, o.URL, nil)
	get(t, e.URL()+"/a", "Cache-Control", "no-store")
	expect(t, get(t, e.URL()+"/a"), 200, Miss, "x") // not stored, and not remembered as pass
	get(t, e.URL()+"/auth", "Authorization", "Bearer x")
	expect(t, get(t, e.URL()+"/auth"), 200, Miss, "x")
	get(t, e.URL()+"/public", "Authorization", "Bearer x")
	expect(t, get(t, e.URL()+"/public"), 200, Hit, "x")
}

func TestRevalidation304UpdatesHeaders(t *testing.T) {
	t.Parallel()
	var version atomic.Int32
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Etag", `"v1"`)
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("X-Version", fmt.Sprint(version.Add(1)))
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		fmt.Fprint(w, "body")
	})
	e := newEdge(t, o.URL, nil)
	get(t, e.URL()+"/r")
	r := get(t, e.URL()+"/r", "Cache-Control", "no-cache")
	expect(t, r, 200, Revalidated, "body")
	if r.h.Get("X-Version") != "2" {
		t.Fatalf("304 did not update stored headers: X-Version %q", r.h.Get("X-Version"))
	}
	r = get(t, e.URL()+"/r")
	expect(t, r, 200, Hit, "body")
	if r.h.Get("X-Version") != "2" {
		t.Fatalf("updated header not kept: %q", r.h.Get("X-Version"))
	}
	if o.last().Header.Get("If-None-Match") != `"v1"` {
		t.Fatal("revalidation did not send If-None-Match")
	}
	// Client validators are answered by the edge itself.
	expect(t, get(t, e.URL()+"/r", "If-None-Match", `"v1"`), 304, Hit, "")
	if e.Stats().NotModified.Load() != 1 {
		t.Fatalf("not_modified = %d", e.Stats().NotModified.Load())
	}
}

func TestIfModifiedSinceRevalidation(t *testing.T) {
	t.Parallel()
	lm := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Last-Modified", lm)
		w.Header().Set("Cache-Control", "no-cache")
		if r.Header.Get("If-Modified-Since") == lm {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		fmt.Fprint(w, "lm")
	})
	e := newEdge(t, o.URL, nil)
	expect(t, get(t, e.URL()+"/x"), 200, Miss, "lm")
	expect(t, get(t, e.URL()+"/x"), 200, Revalidated, "lm") // no-cache: validate every time
}

func TestRequestDirectives(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=100")
		w.Header().Set("Age", "50")
		fmt.Fprint(w, "d")
	})
	e := newEdge(t, o.URL, nil)
	expect(t, get(t, e.URL()+"/d", "Cache-Control", "only-if-cached"), 504, Miss, "")
	get(t, e.URL()+"/d")
	expect(t, get(t, e.URL()+"/d", "Cache-Control", "only-if-cached"), 200, Hit, "d")
	expect(t, get(t, e.URL()+"/d", "Cache-Control", "max-age=80"), 200, Hit, "d")
	expect(t, get(t, e.URL()+"/d", "Cache-Control", "max-age=10"), 200, Miss, "d")   // age 50 > 10
	expect(t, get(t, e.URL()+"/d", "Cache-Control", "min-fresh=90"), 200, Miss, "d") // 50 left < 90
	expect(t, get(t, e.URL()+"/d", "Cache-Control", "min-fresh=10"), 200, Hit, "d")
	expect(t, get(t, e.URL()+"/d", "Pragma", "no-cache"), 200, Miss, "d")
}

func TestMaxStale(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=10")
		w.Header().Set("Age", "30") // 20 s stale on arrival
		if r.URL.Path == "/mr" {
			w.Header().Set("Cache-Control", "max-age=10, must-revalidate")
		}
		fmt.Fprint(w, "s")
	})
	e := newEdge(t, o.URL, nil)
	get(t, e.URL()+"/s")
	expect(t, get(t, e.URL()+"/s", "Cache-Control", "max-stale=60"), 200, Stale, "s")
	expect(t, get(t, e.URL()+"/s", "Cache-Control", "max-stale"), 200, Stale, "s")
	expect(t, get(t, e.URL()+"/s", "Cache-Control", "max-stale=5"), 200, Miss, "s")
	get(t, e.URL()+"/mr")
	expect(t, get(t, e.URL()+"/mr", "Cache-Control", "max-stale"), 200, Miss, "s") // must-revalidate wins
}

func TestStaleWhileRevalidate(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		v := n.Add(1)
		w.Header().Set("Cache-Control", "max-age=1, stale-while-revalidate=60")
		if v == 1 {
			w.Header().Set("Age", "5") // stale on arrival, inside the swr window
		} else {
			w.Header().Set("Cache-Control", "max-age=60") // the refreshed copy stays fresh
			time.Sleep(300 * time.Millisecond)            // a slow refresh: stale requests must not wait for it
		}
		fmt.Fprintf(w, "v%d", v)
	})
	e := newEdge(t, o.URL, nil)
	expect(t, get(t, e.URL()+"/w"), 200, Miss, "v1")
	// Several stale requests: every one is served stale at once; one background refresh.
	for i := 0; i < 5; i++ {
		expect(t, get(t, e.URL()+"/w"), 200, Stale, "v1")
	}
	var r result
	testutil.Eventually(t, 3*time.Second, func() bool { r = get(t, e.URL()+"/w"); return r.cache() == Hit },
		"background revalidation never stored v2: %v", func() any { return r.cache() + " " + r.body })
	expect(t, r, 200, Hit, "v2")
	if got := o.hits("/w"); got != 2 {
		t.Fatalf("origin saw %d requests, want 2 (one background refresh)", got)
	}
}

func TestStaleIfError(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Age", "20")
		switch r.URL.Path {
		case "/sie":
			w.Header().Set("Cache-Control", "max-age=10, stale-if-error=60")
		case "/mr":
			w.Header().Set("Cache-Control", "max-age=10, stale-if-error=60, must-revalidate")
		case "/grace":
			w.Header().Set("Cache-Control", "max-age=10")
			w.Header().Set("Etag", `"g"`)
		}
		fmt.Fprint(w, "ok")
	})
	e := newEdge(t, o.URL, func(c *Config) { c.Grace = Duration(30 * time.Second) })
	for _, p := range []string{"/sie", "/mr", "/grace"} {
		get(t, e.URL()+p)
	}
	fail.Store(true)
	expect(t, get(t, e.URL()+"/sie"), 200, Stale, "ok")
	expect(t, get(t, e.URL()+"/grace"), 200, Stale, "ok") // operator grace as the default
	if r := get(t, e.URL()+"/mr"); r.status != 503 {
		t.Fatalf("must-revalidate entry served stale on error: %d %s", r.status, r.cache())
	}
	// Origin down entirely: connection refused.
	o.Close()
	expect(t, get(t, e.URL()+"/sie"), 200, Stale, "ok")
	if r := get(t, e.URL()+"/mr"); r.status != 504 {
		t.Fatalf("must-revalidate with the origin down: %d, want 504", r.status)
	}
	if r := get(t, e.URL()+"/none"); r.status != 502 {
		t.Fatalf("miss with the origin down: %d, want 502", r.status)
	}
}

func TestVaryVariants(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "Accept-Language")
		fmt.Fprintf(w, "lang=%s", r.Header.Get("Accept-Language"))
	})
	e := newEdge(t, o.URL, nil)
	expect(t, get(t, e.URL()+"/v", "Accept-Language", "en"), 200, Miss, "lang=en")
	expect(t, get(t, e.URL()+"/v", "Accept-Language", "tr"), 200, Miss, "lang=tr")
	expect(t, get(t, e.URL()+"/v", "Accept-Language", "en"), 200, Hit, "lang=en")
	expect(t, get(t, e.URL()+"/v", "Accept-Language", "EN"), 200, Hit, "lang=en") // normalised
	expect(t, get(t, e.URL()+"/v", "Accept-Language", "tr"), 200, Hit, "lang=tr")
	expect(t, get(t, e.URL()+"/v"), 200, Miss, "lang=")
	if o.hits("/v") != 3 {
		t.Fatalf("origin saw %d, want 3 variants", o.hits("/v"))
	}
}

func TestUnsafeMethodInvalidates(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost:
			w.Header().Set("Location", "/other")
			w.Header().Set("Content-Location", "http://elsewhere.example/third")
			w.WriteHeader(http.StatusCreated)
		case http.MethodDelete:
			w.WriteHeader(http.StatusInternalServerError) // an error does not invalidate
		default:
			w.Header().Set("Cache-Control", "max-age=60")
			fmt.Fprint(w, r.URL.Path)
		}
	})
	e := newEdge(t, o.URL, nil)
	for _, p := range []string{"/target", "/other", "/third"} {
		get(t, e.URL()+p)
	}
	r := do(t, http.MethodDelete, e.URL()+"/target")
	if r.status != 500 || r.cache() != Bypass {
		t.Fatalf("DELETE: %d %s", r.status, r.cache())
	}
	expect(t, get(t, e.URL()+"/target"), 200, Hit, "/target")
	do(t, http.MethodPost, e.URL()+"/target")
	expect(t, get(t, e.URL()+"/target"), 200, Miss, "/target")
	expect(t, get(t, e.URL()+"/other"), 200, Miss, "/other") // same-origin Location invalidated
	expect(t, get(t, e.URL()+"/third"), 200, Hit, "/third")  // another origin's URI is left alone
}

func TestHeadFromStoredGet(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, "0123456789")
	})
	e := newEdge(t, o.URL, nil)
	// A HEAD miss fetches (and stores) the GET, so the next GET is a hit.
	r := do(t, http.MethodHead, e.URL()+"/h")
	if r.status != 200 || r.cache() != Miss || r.body != "" {
		t.Fatalf("HEAD miss: %d %s %q", r.status, r.cache(), r.body)
	}
	if o.last().Method != http.MethodGet {
		t.Fatalf("origin saw %s, want GET", o.last().Method)
	}
	settle(t, e)
	r = do(t, http.MethodHead, e.URL()+"/h")
	if r.status != 200 || r.cache() != Hit || r.h.Get("Content-Length") != "10" {
		t.Fatalf("HEAD hit: %d %s %v", r.status, r.cache(), r.h)
	}
	expect(t, get(t, e.URL()+"/h"), 200, Hit, "0123456789")
	if o.hits("/h") != 1 {
		t.Fatalf("origin saw %d", o.hits("/h"))
	}
}

func TestRangeFromStoredObject(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("abcdefghij", 100)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" {
			t.Errorf("edge forwarded Range %q; it must fetch the whole object", r.Header.Get("Range"))
		}
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, body)
	})
	e := newEdge(t, o.URL, nil)
	r := get(t, e.URL()+"/big", "Range", "bytes=10-19") // a range on a miss
	if r.status != 206 || r.body != body[10:20] || r.cache() != Miss {
		t.Fatalf("range miss: %d %s %q", r.status, r.cache(), r.body)
	}
	r = get(t, e.URL()+"/big", "Range", "bytes=-5")
	if r.status != 206 || r.body != body[995:] || r.cache() != Hit || r.h.Get("Content-Range") != "bytes 995-999/1000" {
		t.Fatalf("range hit: %d %s %q %v", r.status, r.cache(), r.body, r.h)
	}
	if r := get(t, e.URL()+"/big", "Range", "bytes=5000-"); r.status != 416 {
		t.Fatalf("unsatisfiable range: %d", r.status)
	}
	if o.hits("/big") != 1 {
		t.Fatalf("origin saw %d", o.hits("/big"))
	}
}

func TestQualifiedNoCacheStripsField(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", `max-age=60, no-cache="Set-Cookie"`)
		w.Header().Set("Set-Cookie", "session=secret")
		fmt.Fprint(w, "q")
	})
	e := newEdge(t, o.URL, nil)
	get(t, e.URL()+"/q")
	r := get(t, e.URL()+"/q")
	expect(t, r, 200, Hit, "q")
	if r.h.Get("Set-Cookie") != "" {
		t.Fatal("stored response kept a field named by no-cache")
	}
}

func TestTooLargeForMemoryIsPassed(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, strings.Repeat("L", 4096))
	})
	e := newEdge(t, o.URL, func(c *Config) { c.Memory.MaxObjectBytes = 1024 })
	if r := get(t, e.URL()+"/large"); r.cache() != Miss || len(r.body) != 4096 {
		t.Fatalf("first: %s %d", r.cache(), len(r.body))
	}
	settle(t, e) // the commit runs after the client has the last byte
	if r := get(t, e.URL()+"/large"); r.cache() != Bypass || len(r.body) != 4096 {
		t.Fatalf("second: %s %d, want BYPASS (memory only, over max_object_bytes)", r.cache(), len(r.body))
	}
}

func TestVaryValueNormalised(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "accept-encoding")
		fmt.Fprint(w, "enc")
	})
	e := newEdge(t, o.URL, nil)
	get(t, e.URL()+"/n", "Accept-Encoding", "gzip, br")
	expect(t, get(t, e.URL()+"/n", "Accept-Encoding", "GZIP,br"), 200, Hit, "enc")
	expect(t, get(t, e.URL()+"/n", "Accept-Encoding", "br"), 200, Miss, "enc")
}

// Every answer carries Cache-Status (RFC 9211) beside X-Cache: this edge's member last, after
// those of the caches nearer the origin, on the fast path and off it.
func TestCacheStatus(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		if r.URL.Path == "/behind" {
			w.Header().Set("Cache-Status", "origin-cache; hit")
		}
		io.WriteString(w, "x")
	})
	for _, fast := range []bool{true, false} {
		e := newEdge(t, o.URL, func(c *Config) { c.DisableFastPath = !fast })
		for _, c := range []struct{ path, want string }{
			{"/a", "switchyard-edge; fwd=miss"},
			{"/a", "switchyard-edge; hit"},
			{"/behind", "origin-cache; hit, switchyard-edge; fwd=miss"},
			{"/behind", "origin-cache; hit, switchyard-edge; hit"},
		} {
			resp, err := http.Get(e.URL() + c.path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := strings.Join(resp.Header.Values("Cache-Status"), ", "); got != c.want {
				t.Errorf("fast path %v, %s: Cache-Status %q, want %q", fast, c.path, got, c.want)
			}
		}
		req, _ := http.NewRequest("DELETE", e.URL()+"/a", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Cache-Status"); got != "switchyard-edge; fwd=bypass" {
			t.Errorf("fast path %v, DELETE: Cache-Status %q, want a bypass", fast, got)
		}
	}
}

// Cache-key rules: tracking parameters left out, the rest sorted, the path's case ignored make
// one object of URIs that differ only so, fetched once and a HIT for the others (fast path and
// not); the origin still gets the client's URI; a purge by any of them removes it.
func TestCacheKeyRules(t *testing.T) {
	var asked []string
	var mu sync.Mutex
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.RequestURI())
		mu.Unlock()
		w.Header().Set("Cache-Control", "max-age=300")
		io.WriteString(w, "x")
	})
	for _, fast := range []bool{true, false} {
		mu.Lock()
		asked = nil
		mu.Unlock()
		e := newEdge(t, o.URL, func(c *Config) {
			c.DisableFastPath = !fast
			c.CacheKey = &CacheKey{IgnoreCase: true}
			c.CacheKey.Query.Exclude = []string{"utm_*", "fbclid"}
			c.CacheKey.Query.Sort = true
		})
		for i, uri := range []string{"/Shop/item?b=2&a=1&utm_source=x", "/shop/item?a=1&b=2", "/SHOP/item?fbclid=z&b=2&a=1&utm_medium=y"} {
			resp, err := http.Get(e.URL() + uri)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := "HIT"
			if i == 0 {
				want = "MISS"
			}
			if got := resp.Header.Get("X-Cache"); !strings.HasPrefix(got, want) {
				t.Errorf("fast path %v, %s: X-Cache %q, want %s", fast, uri, got, want)
			}
		}
		mu.Lock()
		if len(asked) != 1 || asked[0] != "/Shop/item?b=2&a=1&utm_source=x" {
			t.Errorf("fast path %v: the origin was asked %q, want the first client URI once", fast, asked)
		}
		mu.Unlock()
		if _, err := e.Purge(PurgeRequest{URLs: []string{"http://" + e.Addr() + "/shop/ITEM?utm_campaign=q&a=1&b=2"}}); err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get(e.URL() + "/shop/item?a=1&b=2")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Cache"); !strings.HasPrefix(got, "MISS") {
			t.Errorf("fast path %v: after a purge by another URI of the object: X-Cache %q, want a MISS", fast, got)
		}
	}
	bad := &CacheKey{}
	bad.Query.Include, bad.Query.Exclude = []string{"id"}, []string{"utm_*"}
	if _, err := New(Config{Listen: "127.0.0.1:0", Origin: o.URL, CacheKey: bad}); err == nil || !strings.Contains(err.Error(), "cache_key.query: sets both include and exclude") {
		t.Errorf("include and exclude together: %v", err)
	}
}
