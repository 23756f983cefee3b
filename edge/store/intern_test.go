package store

import (
	"net/http"
	"testing"
	"time"

	"github.com/switchyard/switchyard/edge/cachecontrol"
)

// TestInternSharesRepeatedParts: two entries with the same Cache-Control share its value slice
// and parsed directives; their unique fields stay their own, and an append to a shared field
// never writes into the other entry's header.
func TestInternSharesRepeatedParts(t *testing.T) {
	s, err := Open(Config{MemoryBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	commit := func(key, etag string) *Meta {
		w, _ := s.NewWriter()
		w.Write([]byte("b"))
		h := http.Header{"Cache-Control": {"max-age=60"}, "Etag": {etag}}
		m := &Meta{Key: key, Primary: key, Status: 200, Header: h, ResponseTime: time.Now(), Lifetime: time.Minute,
			Directives: cachecontrol.Parse(h)}
		if _, err := w.Commit(m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, b := commit("a", `"1"`), commit("b", `"2"`)
	if &a.Header["Cache-Control"][0] != &b.Header["Cache-Control"][0] {
		t.Fatal("the same Cache-Control is not shared")
	}
	a.Directives["probe"] = "x" // test only: metadata is never modified after commit
	if b.Directives["probe"] != "x" {
		t.Fatal("the same directives are not shared")
	}
	delete(a.Directives, "probe")
	if &a.Header["Etag"][0] == &b.Header["Etag"][0] || b.Header.Get("Etag") != `"2"` {
		t.Fatal("unique fields must stay the entry's own")
	}
	a.Header["Cache-Control"] = append(a.Header["Cache-Control"], "public")
	if len(b.Header["Cache-Control"]) != 1 {
		t.Fatal("an append to a shared field reached the other entry")
	}
}
