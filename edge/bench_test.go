package edge

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkHit measures the handler's cost of a cache hit, without the network.
func BenchmarkHit(b *testing.B) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		fmt.Fprint(w, strings.Repeat("s", 480))
	}))
	defer o.Close()
	e, err := New(Config{Listen: "127.0.0.1:0", Origin: o.URL})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	req := httptest.NewRequest(http.MethodGet, "/small", nil)
	e.ServeHTTP(httptest.NewRecorder(), req)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w := httptest.NewRecorder()
			e.ServeHTTP(w, req)
			if w.Header().Get("X-Cache") != Hit {
				b.Fatal("not a hit")
			}
		}
	})
}
