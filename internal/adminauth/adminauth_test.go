package adminauth

import (
	"net/http"
	"net/http/httptest"
	"testing"
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
	for auth, want := range map[string]int{"": 401, "Bearer tok": 204, "Bearer to": 401, "Bearer tokk": 401, "tok": 401} {
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
