package edge

import (
	"net/http"
	"slices"
	"testing"
)

// TestPartialSuffixStoredAndCompleted: a suffix range of an unknown object on a sliced origin is
// asked as the client sent it and stored as a partial entry; a range within it is a hit; a full
// GET asks only for the missing part (If-Range on the ETag) and the combined object is stored
// whole (RFC 9111 3.3, 3.4).
func TestPartialSuffixStoredAndCompleted(t *testing.T) {
	t.Parallel()
	path := sliceFile(t, 100_000, 0)
	whole := fileBytes(t, path, 0, 99_999)
	o := newRangeOrigin(t, path)
	e := sliceEdge(t, o.URL, nil)
	expect(t, get(t, e.URL()+"/p", "Range", "bytes=-5"), http.StatusPartialContent, Miss, whole[99_995:])
	settle(t, e)
	r := get(t, e.URL()+"/p", "Range", "bytes=-3")
	expect(t, r, http.StatusPartialContent, Hit, whole[99_997:])
	if cr := r.h.Get("Content-Range"); cr != "bytes 99997-99999/100000" {
		t.Fatalf("range within the partial entry: Content-Range %q", cr)
	}
	expect(t, get(t, e.URL()+"/p"), 200, Miss, whole)
	settle(t, e)
	expect(t, get(t, e.URL()+"/p"), 200, Hit, whole)
	expect(t, get(t, e.URL()+"/p", "Range", "bytes=10-19"), http.StatusPartialContent, Hit, whole[10:20])
	if got := o.ranges(); !slices.Equal(got, []string{"bytes=-5", "bytes=0-99994"}) {
		t.Fatalf("origin asked %q, want the suffix, then only the missing part", got)
	}
	o.testOrigin.mu.Lock()
	ifRange := o.requests[1].Header.Get("If-Range")
	o.testOrigin.mu.Unlock()
	if ifRange != `"v1"` {
		t.Fatalf("completion sent If-Range %q, want the stored ETag", ifRange)
	}
}

// TestPartialChangedObjectIsNotCombined: when the object changed after its partial entry was
// stored, the completion's If-Range fails, the origin answers the new object whole and that is
// what is served and stored, never old and new bytes mixed.
func TestPartialChangedObjectIsNotCombined(t *testing.T) {
	t.Parallel()
	oldPath, newPath := sliceFile(t, 100_000, 0), sliceFile(t, 100_000, 1)
	o := newRangeOrigin(t, oldPath)
	e := sliceEdge(t, o.URL, nil)
	expect(t, get(t, e.URL()+"/c", "Range", "bytes=-5"), http.StatusPartialContent, Miss, "")
	settle(t, e)
	o.set(newPath, `"v2"`)
	expect(t, get(t, e.URL()+"/c"), 200, Miss, fileBytes(t, newPath, 0, 99_999))
	settle(t, e)
	expect(t, get(t, e.URL()+"/c"), 200, Hit, fileBytes(t, newPath, 0, 99_999))
}

// TestPartialLongRangeIsSliced: a range that names its slice, or a suffix of an object whose
// first slice is stored, goes to the slices, not to the origin as sent.
func TestPartialLongRangeIsSliced(t *testing.T) {
	t.Parallel()
	path := sliceFile(t, 9*mib, 0)
	o := newRangeOrigin(t, path)
	e := sliceEdge(t, o.URL, nil)
	expect(t, get(t, e.URL()+"/l", "Range", "bytes=0-9"), http.StatusPartialContent, Miss, fileBytes(t, path, 0, 9))
	settle(t, e)
	if r := get(t, e.URL()+"/l", "Range", "bytes=-5"); r.status != http.StatusPartialContent || r.body != fileBytes(t, path, 9*mib-5, 9*mib-1) {
		t.Fatalf("suffix of a known object: %d %q", r.status, r.body)
	}
	// (The sliced suffix also reads ahead past the first slice: serveSliced's prefetch.)
	if got := o.ranges(); got[0] != "bytes=0-1048575" || !slices.Contains(got, "bytes=8388608-9437183") || slices.Contains(got, "bytes=-5") {
		t.Fatalf("origin asked %q, want the first and last slices, never the suffix as sent", got)
	}
}
