package cachecontrol

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestParse(t *testing.T) {
	d := Parse(hdr("Cache-Control", `max-age=60, no-cache="Set-Cookie, X-A"`, "Cache-Control", `Public, max-age=5`))
	if v, ok := d.Seconds("max-age"); !ok || v != 60*time.Second {
		t.Fatalf("max-age %v %v (first value wins)", v, ok)
	}
	if !d.Has("public") {
		t.Fatal("directive names are case-insensitive")
	}
	if f := d.Fields("no-cache"); len(f) != 2 || f[0] != "Set-Cookie" || f[1] != "X-A" {
		t.Fatalf("fields %v", f)
	}
	if _, ok := Parse(hdr("Cache-Control", "max-age=abc")).Seconds("max-age"); ok {
		t.Fatal("invalid delta-seconds accepted")
	}
	if v, _ := Parse(hdr("Cache-Control", "max-age=99999999999999999999")).Seconds("max-age"); v != time.Duration(1<<31)*time.Second {
		t.Fatalf("overflow should saturate: %v", v)
	}
}

func TestStorable(t *testing.T) {
	req, _ := http.NewRequest("GET", "http://x/", nil)
	auth, _ := http.NewRequest("GET", "http://x/", nil)
	auth.Header.Set("Authorization", "Basic x")
	for i, c := range []struct {
		req    *http.Request
		status int
		h      http.Header
		ok     bool
	}{
		{req, 200, hdr(), true},
		{req, 500, hdr(), false},
		{req, 500, hdr("Cache-Control", "max-age=5"), true},
		{req, 206, hdr("Cache-Control", "max-age=5"), false},
		{req, 200, hdr("Cache-Control", "no-store"), false},
		{req, 200, hdr("Cache-Control", "private"), false},
		{req, 200, hdr("Cache-Control", `private="Set-Cookie"`), true},
		{req, 200, hdr("Vary", "Accept, *"), false},
		{req, 200, hdr("Cache-Control", "must-understand, no-store"), true},
		{req, 299, hdr("Cache-Control", "must-understand, no-store"), false},
		{auth, 200, hdr("Cache-Control", "max-age=5"), false},
		{auth, 200, hdr("Cache-Control", "s-maxage=5"), true},
		{auth, 200, hdr("Cache-Control", "public"), true},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			got := Storable(c.req, Parse(c.req.Header), c.status, c.h, Parse(c.h)) == ""
			if got != c.ok {
				t.Errorf("%d %v auth=%v: storable %v, want %v", c.status, c.h, c.req == auth, got, c.ok)
			}
		})
	}
}

func TestLifetime(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	hc := Heuristic{Fraction: 0.1, Max: 24 * time.Hour}
	date := now.Format(http.TimeFormat)
	for i, c := range []struct {
		status    int
		h         http.Header
		want      time.Duration
		heuristic bool
	}{
		{200, hdr("Cache-Control", "max-age=10, s-maxage=20"), 20 * time.Second, false},
		{200, hdr("Cache-Control", "max-age=10", "Expires", now.Add(time.Hour).Format(http.TimeFormat)), 10 * time.Second, false},
		{200, hdr("Date", date, "Expires", now.Add(time.Hour).Format(http.TimeFormat)), time.Hour, false},
		{200, hdr("Date", date, "Expires", "0"), 0, false},
		{200, hdr("Date", date, "Last-Modified", now.Add(-10*time.Hour).Format(http.TimeFormat)), time.Hour, true},
		{200, hdr("Date", date, "Last-Modified", now.Add(-1000*time.Hour).Format(http.TimeFormat)), 24 * time.Hour, true},
		{302, hdr("Date", date, "Last-Modified", now.Add(-10*time.Hour).Format(http.TimeFormat)), 0, false},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			got, h := Lifetime(c.status, c.h, Parse(c.h), hc)
			if got != c.want || h != c.heuristic {
				t.Errorf("%d %v: lifetime %v heuristic %v, want %v %v", c.status, c.h, got, h, c.want, c.heuristic)
			}
		})
	}
}

func TestInitialAge(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	h := hdr("Date", now.Add(-30*time.Second).Format(http.TimeFormat), "Age", "10")
	// apparent age 30 s beats corrected Age 10 s + 2 s delay
	if got := InitialAge(h, now.Add(-2*time.Second), now); got != 30*time.Second {
		t.Fatalf("initial age %v, want 30s", got)
	}
	h = hdr("Date", now.Format(http.TimeFormat), "Age", "100")
	if got := InitialAge(h, now.Add(-2*time.Second), now); got != 102*time.Second {
		t.Fatalf("initial age %v, want 102s", got)
	}
}

func TestDecide(t *testing.T) {
	cc := func(s string) Directives { return Parse(hdr("Cache-Control", s)) }
	s := time.Second
	for _, c := range []struct {
		req, resp      string
		age, life, grc time.Duration
		want           Verdict
	}{
		{"", "max-age=60", 10 * s, 60 * s, 0, Fresh},
		{"", "max-age=60", 70 * s, 60 * s, 0, Revalidate},
		{"", "no-cache", 0, 60 * s, 0, Revalidate},
		{"", `no-cache="Set-Cookie"`, 0, 60 * s, 0, Fresh},
		{"no-cache", "", 0, 60 * s, 0, Revalidate},
		{"max-age=5", "", 10 * s, 60 * s, 0, Revalidate},
		{"min-fresh=55", "", 10 * s, 60 * s, 0, Revalidate},
		{"max-stale=20", "", 70 * s, 60 * s, 0, StaleOK},
		{"max-stale=5", "", 70 * s, 60 * s, 0, Revalidate},
		{"max-stale", "", 7000 * s, 60 * s, 0, StaleOK},
		{"max-stale", "must-revalidate", 70 * s, 60 * s, 0, Revalidate},
		{"max-stale", "proxy-revalidate", 70 * s, 60 * s, 0, Revalidate},
		{"max-stale", "s-maxage=60", 70 * s, 60 * s, 0, Revalidate},
		{"", "stale-while-revalidate=30", 70 * s, 60 * s, 0, StaleWhileRevalidate},
		{"", "stale-while-revalidate=5", 70 * s, 60 * s, 0, Revalidate},
		{"", "", 70 * s, 60 * s, 20 * s, StaleWhileRevalidate},
		{"", "must-revalidate", 70 * s, 60 * s, 20 * s, Revalidate},
	} {
		t.Run(c.req, func(t *testing.T) {
			if got := Decide(cc(c.req), cc(c.resp), c.age, c.life, c.grc); got != c.want {
				t.Errorf("req %q resp %q age %v life %v grace %v: %v, want %v", c.req, c.resp, c.age, c.life, c.grc, got, c.want)
			}
		})
	}
	if StaleIfError(cc(""), cc("stale-if-error=30"), 0) != 30*s || StaleIfError(cc(""), cc("must-revalidate, stale-if-error=30"), 0) != 0 ||
		StaleIfError(cc(""), cc(""), 9*s) != 9*s || StaleIfError(cc("stale-if-error=3"), cc("stale-if-error=30"), 0) != 3*s {
		t.Fatal("stale-if-error windows")
	}
	if !RequestDirectives(hdr("Pragma", "no-cache")).Has("no-cache") || RequestDirectives(hdr("Pragma", "no-cache", "Cache-Control", "max-age=5")).Has("no-cache") {
		t.Fatal("Pragma: no-cache applies only without Cache-Control")
	}
}
