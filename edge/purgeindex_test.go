package edge

import (
	"fmt"
	"net/http"
	"testing"
)

// TestPurgeVisitsOnlyWhatItRemoves: among many stored entries, a URL purge examines the URL's
// variants only and a tag purge the entries carrying the tag, counted (not timed); a prefix
// purge is the one that scans. Each removes exactly its entries.
func TestPurgeVisitsOnlyWhatItRemoves(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Vary", "Accept-Language")
		w.Header().Set("Surrogate-Key", "varied")
		fmt.Fprint(w, "lang "+r.Header.Get("Accept-Language"))
	})
	e := newEdge(t, o.URL, nil)
	const n = 2000
	for i := 0; i < n; i++ {
		h := http.Header{"Cache-Control": {"max-age=600"}}
		if i%100 == 0 {
			h.Set("Cache-Tag", "hundreds, all-tagged")
		}
		if err := e.StoreObject(fmt.Sprintf("http://www.example.com/o/%d", i), 200, h, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for _, lang := range []string{"en", "fr", "de"} {
		get(t, e.URL()+"/varied", "Host", "www.example.com", "Accept-Language", lang)
	}
	settle(t, e)
	if got := e.store.Len(); got != n+3 {
		t.Fatalf("stored %d entries, want %d", got, n+3)
	}
	purge := func(p PurgeRequest, purged, maxExamined int) {
		t.Helper()
		res, err := e.Purge(p)
		if err != nil || res.Purged != purged || res.Examined > maxExamined {
			t.Fatalf("purge %+v: %+v %v; want %d purged, at most %d examined", p, res, err, purged, maxExamined)
		}
	}
	purge(PurgeRequest{URLs: []string{"http://www.example.com/o/7"}}, 1, 1)
	purge(PurgeRequest{URLs: []string{"http://www.example.com/o/7"}}, 0, 0) // gone: nothing to look at
	purge(PurgeRequest{URLs: []string{"http://www.example.com/varied"}, Soft: true}, 3, 3)
	purge(PurgeRequest{Tags: []string{"varied"}}, 3, 3)
	purge(PurgeRequest{URLs: []string{"http://www.example.com/varied"}}, 0, 0)
	purge(PurgeRequest{Tags: []string{"hundreds"}, Soft: true}, n/100, n/100)
	purge(PurgeRequest{Tags: []string{"all-tagged"}}, n/100, n/100)
	purge(PurgeRequest{Tags: []string{"hundreds"}}, 0, 0) // the index forgot the removed entries
	if got := e.store.Len(); got != n-1-n/100 {
		t.Fatalf("%d entries left, want %d", got, n-1-n/100)
	}
	res, err := e.Purge(PurgeRequest{Prefixes: []string{"http://www.example.com/o/1"}})
	if err != nil || res.Examined != n-1-n/100 {
		t.Fatalf("prefix purge: %+v %v; it scans every entry", res, err)
	}
}

// TestTagIndexFollowsReplacement: a replaced entry is purged by its new tags only.
func TestTagIndexFollowsReplacement(t *testing.T) {
	e := newEdge(t, "http://127.0.0.1:1", nil)
	store := func(path, tag string) {
		t.Helper()
		if err := e.StoreObject("http://h"+path, 200, http.Header{"Cache-Control": {"max-age=60"}, "Cache-Tag": {tag}}, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	store("/a", "old")
	store("/a", "new")
	if res, _ := e.Purge(PurgeRequest{Tags: []string{"old"}}); res.Purged != 0 || res.Examined != 0 {
		t.Fatalf("purge of the replaced tag: %+v", res)
	}
	if res, _ := e.Purge(PurgeRequest{Tags: []string{"new"}}); res.Purged != 1 {
		t.Fatalf("purge of the current tag: %+v", res)
	}
}
