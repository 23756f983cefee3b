package adminauth

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestLoopbackAndCheck(t *testing.T) {
	for in, want := range map[string]string{":9901": "127.0.0.1:9901", "0.0.0.0:1": "0.0.0.0:1", "[::1]:2": "[::1]:2", "": ""} {
		if got := Loopback(in); got != want {
			t.Errorf("Loopback(%q) = %q, want %q", in, got, want)
		}
	}
	for addr, ok := range map[string]bool{"127.0.0.1:1": true, "127.9.9.9:1": true, "[::1]:1": true, "localhost:1": true, "0.0.0.0:1": false, "[::]:1": false, "10.0.0.1:1": false} {
		if err := Check(addr, ""); (err == nil) != ok {
			t.Errorf("Check(%q, no token) = %v", addr, err)
		}
		if err := Check(addr, "t"); err != nil {
			t.Errorf("Check(%q, token) = %v", addr, err)
		}
	}
}

func TestRequire(t *testing.T) {
	h := Require(func() string { return "tok" }, "x", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) })
	for auth, want := range map[string]int{"": 401, "Bearer tok": 204, "Bearer to": 401, "Bearer tokk": 401, "tok": 401,
		// RFC 9110 11.1: the scheme is case-insensitive; one or more spaces follow it.
		"bearer tok": 204, "BEARER tok": 204, "Bearer  tok": 204, "Bearertok": 401, "Bearer ": 401, "Basic tok": 401} {
		req := httptest.NewRequest("POST", "/", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h(rec, req)
		if rec.Code != want {
			t.Errorf("%q: %d, want %d", auth, rec.Code, want)
		}
	}
	rec := httptest.NewRecorder()
	Require(func() string { return "" }, "x", func(http.ResponseWriter, *http.Request) { t.Error("ran without a token") })(rec, httptest.NewRequest("POST", "/", nil))
	if rec.Code != 403 {
		t.Errorf("no token configured: %d, want 403", rec.Code)
	}
}

// TokenEqual's time does not tell whether a guess has the token's length: a guess of one byte
// costs about as much as one of the right length (a plain subtle.ConstantTimeCompare returns at
// once on a length mismatch). The token is long so that the work, not the timer, is measured;
// the fastest of many runs is taken so that a loaded machine does not decide.
func TestTokenEqualHidesLength(t *testing.T) {
	want := string(bytes.Repeat([]byte("s"), 1<<20))
	sameLen := string(bytes.Repeat([]byte("x"), 1<<20))
	fastest := func(got string) time.Duration {
		best := time.Hour
		for range 30 {
			start := time.Now()
			if TokenEqual(got, want) {
				t.Fatal("a wrong token compared equal")
			}
			best = min(best, time.Since(start))
		}
		return best
	}
	short, full := fastest("x"), fastest(sameLen)
	if short*5 < full {
		t.Errorf("a 1-byte guess takes %v, one of the token's length %v: the time tells the length", short, full)
	}
	if !TokenEqual(want, want) || TokenEqual("", want) {
		t.Error("TokenEqual: equal tokens differ, or an empty guess matches")
	}
}
