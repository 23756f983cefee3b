package edge

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestAgeParsing: an Age of 2^31 or more is capped at 2147483648 (RFC 9111 1.2.2), not dropped,
// and a list-based Age uses its first member (RFC 9111 5.1); either makes the response stale.
func TestAgeParsing(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		switch r.URL.Path {
		case "/huge":
			w.Header().Set("Age", "2147483649")
		case "/max":
			w.Header().Set("Age", "2147483648")
		case "/list":
			w.Header().Set("Age", "7200, 0")
		case "/lines":
			w.Header().Add("Age", "7200")
			w.Header().Add("Age", "0")
		}
		fmt.Fprint(w, r.URL.Path)
	})
	e := newEdge(t, o.URL, nil)
	for _, p := range []string{"/huge", "/max", "/list", "/lines"} {
		r := get(t, e.URL()+p)
		expect(t, r, 200, Miss, p)
		if p == "/huge" || p == "/max" {
			if got := r.h.Get("Age"); got != "2147483648" {
				t.Errorf("%s: Age %q, want 2147483648", p, got)
			}
		}
		settle(t, e)
		if r := get(t, e.URL()+p); r.cache() == Hit {
			t.Errorf("%s: second request was a HIT (Age %s); the Age makes it stale", p, r.h.Get("Age"))
		}
		if n := o.hits(p); n != 2 {
			t.Errorf("%s: origin saw %d requests, want 2", p, n)
		}
	}
}

// TestInvalidExpiresIsExpired: an Expires that is not a strict HTTP-date (a one-digit hour, runs
// of spaces) or that appears twice means already expired (RFC 9111 5.3).
func TestInvalidExpiresIsExpired(t *testing.T) {
	t.Parallel()
	later := time.Now().UTC().Add(2 * time.Hour)
	// A one-digit hour needs an hour before 10; the date is in the future either way.
	oneDigit := time.Date(later.Year()+1, later.Month(), 1, 3, 4, 5, 0, time.UTC).Format("Mon, 02 Jan 2006 3:04:05 GMT")
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
		h.Set("Last-Modified", time.Now().UTC().Add(-240*time.Hour).Format(http.TimeFormat)) // heuristic must not apply
		switch r.URL.Path {
		case "/valid":
			h.Set("Expires", later.Format(http.TimeFormat))
		case "/one-digit-hour":
			h.Set("Expires", oneDigit)
		case "/spaces":
			h.Set("Expires", later.Format("Mon,  02 Jan 2006  15:04:05 GMT"))
		case "/two-lines":
			h.Add("Expires", later.Format(http.TimeFormat))
			h.Add("Expires", later.Format(http.TimeFormat))
		}
		fmt.Fprint(w, r.URL.Path)
	})
	e := newEdge(t, o.URL, nil)
	for _, c := range []struct {
		path, second string
	}{{"/valid", Hit}, {"/one-digit-hour", Miss}, {"/spaces", Miss}, {"/two-lines", Miss}} {
		expect(t, get(t, e.URL()+c.path), 200, Miss, c.path)
		settle(t, e)
		if r := get(t, e.URL()+c.path); r.cache() != c.second {
			t.Errorf("%s: second request %s, want %s", c.path, r.cache(), c.second)
		}
	}
}
