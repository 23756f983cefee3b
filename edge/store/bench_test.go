package store

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// benchStore holds n entries of 1 KB with the header fields of a typical object.
func benchStore(b *testing.B, n int) *Store {
	s, err := Open(Config{MemoryBytes: int64(n) * 4096})
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 1024)
	for i := 0; i < n; i++ {
		k := "http://scale.test/o/" + strconv.Itoa(i)
		w, _ := s.NewWriter()
		w.Write(body)
		m := &Meta{Key: k, Primary: k, Status: 200, ResponseTime: time.Now(), Lifetime: time.Hour,
			Tags: []string{"t" + strconv.Itoa(i%1000)},
			Header: http.Header{"Cache-Control": {"public, max-age=36000"}, "Content-Type": {"application/octet-stream"},
				"Etag": {`"` + strconv.Itoa(i) + `"`}, "Last-Modified": {"Tue, 01 Dec 2026 10:00:00 GMT"},
				"Content-Length": {"1024"}, "Via": {"1.1 switchyard"}, "Surrogate-Key": {"t" + strconv.Itoa(i%1000)}}}
		if _, err := w.Commit(m); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

// BenchmarkGetHot is a hit on one entry, over and over.
func BenchmarkGetHot(b *testing.B) {
	s := benchStore(b, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok, _ := s.Get("http://scale.test/o/7"); !ok {
			b.Fatal("miss")
		}
	}
}

// BenchmarkGetCold is a hit on one of 100,000 entries in turn (the memory tier's table of
// recent views does not hold them).
func BenchmarkGetCold(b *testing.B) {
	const n = 100_000
	s := benchStore(b, n)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "http://scale.test/o/" + strconv.Itoa((i*7919)%n)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok, _ := s.Get(keys[i%n]); !ok {
			b.Fatal("miss")
		}
	}
}
