package edge

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sliceFile makes a sparse file of size bytes with a pattern written at the start of every
// 64 KiB block (so misplaced bytes show) and returns its path.
func sliceFile(t *testing.T, size int64, seed byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "object")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for off := int64(0); off < size; off += 64 << 10 {
		if _, err := f.WriteAt([]byte(fmt.Sprintf("%c block at %d ", 'a'+seed, off)), off); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// rangeOrigin serves the file at *path with http.ServeContent (Range honoured), the strong
// ETag in *etag, max-age=3600, after delay; ignoreRange answers every request 200 whole.
type rangeOrigin struct {
	*testOrigin
	mu          sync.Mutex
	path, etag  string
	delay       time.Duration
	ignoreRange bool
}

func newRangeOrigin(t *testing.T, path string) *rangeOrigin {
	o := &rangeOrigin{path: path, etag: `"v1"`}
	o.testOrigin = newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		path, etag, delay, ignore := o.path, o.etag, o.delay, o.ignoreRange
		o.mu.Unlock()
		time.Sleep(delay)
		f, err := os.Open(path)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer f.Close()
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Etag", etag)
		w.Header().Set("Content-Type", "application/octet-stream")
		if ignore {
			st, _ := f.Stat()
			w.Header().Set("Content-Length", fmt.Sprint(st.Size()))
			io.Copy(w, f)
			return
		}
		http.ServeContent(w, r, "", time.Time{}, f)
	})
	return o
}

func (o *rangeOrigin) set(path, etag string) {
	o.mu.Lock()
	o.path, o.etag = path, etag
	o.mu.Unlock()
}

// ranges returns the Range header of every request the origin received.
func (o *rangeOrigin) ranges() []string {
	o.testOrigin.mu.Lock()
	defer o.testOrigin.mu.Unlock()
	var out []string
	for _, r := range o.requests {
		out = append(out, r.Header.Get("Range"))
	}
	return out
}

func sliceEdge(t *testing.T, origin string, mutate func(*Config)) *Edge {
	return newEdge(t, origin, func(c *Config) {
		c.Slice = &SliceConfig{Size: 1 << 20, MinObject: 8 << 20}
		if mutate != nil {
			mutate(c)
		}
	})
}

func fileBytes(t *testing.T, path string, first, last int64) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, last-first+1)
	if _, err := f.ReadAt(b, first); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func fileDigest(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// getStream GETs url and returns the status, header, the body's digest and length, and the
// read error (a cut response).
func getStream(t *testing.T, url string, hdr ...string) (int, http.Header, [32]byte, int64, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	return resp.StatusCode, resp.Header, [32]byte(h.Sum(nil)), n, err
}

const mib = 1 << 20

func TestSliceRangeAtHighOffsetFetchesOnlyItsSlice(t *testing.T) {
	t.Parallel()
	path := sliceFile(t, 64*mib, 0)
	o := newRangeOrigin(t, path)
	e := sliceEdge(t, o.URL, nil)
	first, last := int64(916<<16), int64(916<<16+99) // in slice 57, on a written block
	r := get(t, e.URL()+"/big", "Range", fmt.Sprintf("bytes=%d-%d", first, last))
	expect(t, r, http.StatusPartialContent, Miss, fileBytes(t, path, first, last))
	if got := r.h.Get("Content-Range"); got != fmt.Sprintf("bytes %d-%d/%d", first, last, 64*mib) {
		t.Fatalf("Content-Range %q", got)
	}
	if got := o.ranges(); len(got) != 1 || got[0] != fmt.Sprintf("bytes=%d-%d", 57*mib, 58*mib-1) {
		t.Fatalf("origin was asked for %q, want only slice 57", got)
	}
	settle(t, e) // the client had its bytes before the rest of the slice arrived
	// The same range, and another inside the slice, come from storage.
	expect(t, get(t, e.URL()+"/big", "Range", fmt.Sprintf("bytes=%d-%d", first, last)), http.StatusPartialContent, Hit, fileBytes(t, path, first, last))
	expect(t, get(t, e.URL()+"/big", "Range", "bytes=59768832-59768900"), http.StatusPartialContent, Hit, fileBytes(t, path, 59768832, 59768900))
	// A range across a slice boundary fetches only the slice it lacks.
	expect(t, get(t, e.URL()+"/big", "Range", fmt.Sprintf("bytes=%d-%d", 58*mib-10, 58*mib+9)), http.StatusPartialContent, Hit, fileBytes(t, path, 58*mib-10, 58*mib+9))
	settle(t, e)
	if got := o.ranges(); len(got) != 2 || got[1] != fmt.Sprintf("bytes=%d-%d", 58*mib, 59*mib-1) {
		t.Fatalf("origin was asked for %q, want slices 57 then 58", got)
	}
	if e.Stats().SliceFetches.Load() != 2 {
		t.Fatalf("slice fetches = %d, want 2", e.Stats().SliceFetches.Load())
	}
}

func TestSliceConcurrentRequestsMakeOneFetch(t *testing.T) {
	t.Parallel()
	path := sliceFile(t, 64*mib, 0)
	o := newRangeOrigin(t, path)
	o.delay = 200 * time.Millisecond // every client joins while the slice is in flight
	e := sliceEdge(t, o.URL, nil)
	const n = 8
	var wg sync.WaitGroup
	var bad atomic.Int32
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := int64(20*mib + i*1000)
			r := get(t, e.URL()+"/big", "Range", fmt.Sprintf("bytes=%d-%d", first, first+99))
			if r.status != http.StatusPartialContent || r.body != fileBytes(t, path, first, first+99) {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d of %d clients got a wrong answer", bad.Load(), n)
	}
	if got := o.ranges(); len(got) != 1 || got[0] != fmt.Sprintf("bytes=%d-%d", 20*mib, 21*mib-1) {
		t.Fatalf("origin was asked for %q for %d concurrent requests into slice 20, want it once", got, n)
	}
}

func TestSliceFullGetAssemblesTheObject(t *testing.T) {
	t.Parallel()
	path := sliceFile(t, 64*mib+12345, 0) // the last slice is short
	o := newRangeOrigin(t, path)
	e := sliceEdge(t, o.URL, nil)
	want := fileDigest(t, path)
	for _, label := range []string{Miss, Hit} {
		status, h, sum, n, err := getStream(t, e.URL()+"/big")
		if err != nil || status != 200 || n != 64*mib+12345 || sum != want || h.Get("X-Cache") != label {
			t.Fatalf("full GET: %d %s, %d bytes, digest match %v, err %v", status, h.Get("X-Cache"), n, sum == want, err)
		}
		if h.Get("Etag") != `"v1"` || h.Get("Content-Range") != "" {
			t.Fatalf("full GET header %v", h)
		}
	}
	got := o.ranges()
	if len(got) != 65 {
		t.Fatalf("origin saw %d requests, want 65 slices once each", len(got))
	}
	seen := map[string]bool{}
	for _, rg := range got {
		seen[rg] = true
	}
	for i := int64(0); i < 65; i++ {
		if rg := fmt.Sprintf("bytes=%d-%d", i*mib, (i+1)*mib-1); !seen[rg] {
			t.Fatalf("slice %d (%s) never asked for; asked %q", i, rg, got)
		}
	}
	// HEAD and a suffix range come from the stored slices.
	if r := do(t, http.MethodHead, e.URL()+"/big"); r.status != 200 || r.h.Get("Content-Length") != fmt.Sprint(64*mib+12345) {
		t.Fatalf("HEAD: %d %v", r.status, r.h)
	}
	expect(t, get(t, e.URL()+"/big", "Range", "bytes=-100"), http.StatusPartialContent, Hit, fileBytes(t, path, 64*mib+12245, 64*mib+12344))
	if len(o.ranges()) != 65 {
		t.Fatalf("HEAD or suffix range went to the origin: %q", o.ranges()[65:])
	}
}

func TestSliceValidatorChangeInvalidatesTheObject(t *testing.T) {
	t.Parallel()
	v1 := sliceFile(t, 16*mib, 0)
	v2 := sliceFile(t, 16*mib, 1)
	o := newRangeOrigin(t, v1)
	e := sliceEdge(t, o.URL, nil)
	expect(t, get(t, e.URL()+"/obj", "Range", "bytes=0-99"), http.StatusPartialContent, Miss, fileBytes(t, v1, 0, 99))
	o.set(v2, `"v2"`)
	// A full GET starts from the stored slice 0 (v1); slice 1 comes back as v2: the response is
	// cut rather than mixed, and the object is gone.
	status, _, _, n, err := getStream(t, e.URL()+"/obj")
	if err == nil || status != 200 || n >= 16*mib {
		t.Fatalf("mixed-version GET: %d, %d bytes, err %v; want a cut response", status, n, err)
	}
	if e.Stats().SliceChanged.Load() != 1 {
		t.Fatalf("slice_changed = %d, want 1", e.Stats().SliceChanged.Load())
	}
	settle(t, e)
	status, h, sum, n, err := getStream(t, e.URL()+"/obj")
	if err != nil || status != 200 || n != 16*mib || sum != fileDigest(t, v2) || h.Get("Etag") != `"v2"` {
		t.Fatalf("GET after the change: %d %v, %d bytes, v2 digest %v, err %v", status, h.Get("Etag"), n, sum == fileDigest(t, v2), err)
	}
}

func TestSliceOriginIgnoringRangeIsCachedWhole(t *testing.T) {
	t.Parallel()
	path := sliceFile(t, 16*mib, 0)
	o := newRangeOrigin(t, path)
	o.ignoreRange = true
	e := sliceEdge(t, o.URL, func(c *Config) { c.Memory.MaxObjectBytes = 32 * mib })
	first := int64(15 * mib)
	expect(t, get(t, e.URL()+"/whole", "Range", fmt.Sprintf("bytes=%d-%d", first, first+9)), http.StatusPartialContent, Miss, fileBytes(t, path, first, first+9))
	settle(t, e)
	expect(t, get(t, e.URL()+"/whole", "Range", "bytes=10-19"), http.StatusPartialContent, Hit, fileBytes(t, path, 10, 19))
	status, _, sum, _, err := getStream(t, e.URL()+"/whole")
	if err != nil || status != 200 || sum != fileDigest(t, path) {
		t.Fatalf("full GET: %d, digest match %v, err %v", status, sum == fileDigest(t, path), err)
	}
	if got := o.hits("/whole"); got != 1 {
		t.Fatalf("origin saw %d requests, want 1 (stored whole)", got)
	}
}

func TestSliceSmallObjectsAreStoredWhole(t *testing.T) {
	t.Parallel()
	tiny := sliceFile(t, 100_000, 0) // within one slice: its slice is the whole object
	mid := sliceFile(t, 3*mib+7, 0)  // over a slice, under min_object: fetched again whole
	o := newRangeOrigin(t, tiny)
	e := sliceEdge(t, o.URL, nil)
	expect(t, get(t, e.URL()+"/tiny"), 200, Miss, fileBytes(t, tiny, 0, 99_999))
	settle(t, e)
	expect(t, get(t, e.URL()+"/tiny", "Range", "bytes=5-9"), http.StatusPartialContent, Hit, fileBytes(t, tiny, 5, 9))
	if got := o.hits("/tiny"); got != 1 {
		t.Fatalf("tiny object: %d origin requests, want 1", got)
	}
	o.set(mid, `"m"`)
	expect(t, get(t, e.URL()+"/mid", "Range", "bytes=2097152-2097161"), http.StatusPartialContent, Miss, fileBytes(t, mid, 2097152, 2097161))
	settle(t, e)
	expect(t, get(t, e.URL()+"/mid"), 200, Hit, "")
	if got := o.ranges()[1:]; len(got) != 2 || got[0] != "bytes=2097152-3145727" || got[1] != "" {
		t.Fatalf("mid object: origin asked %q, want its slice then the whole object", got)
	}
}

func TestSliceUncacheableObjectCostsOneFetch(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Etag", `"n"`)
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(strings.Repeat("n", 1000)))
	})
	e := sliceEdge(t, o.URL, nil)
	for i := 1; i <= 2; i++ {
		r := get(t, e.URL()+"/nostore")
		if r.status != 200 || r.body != strings.Repeat("n", 1000) {
			t.Fatalf("request %d: %d, %d bytes", i, r.status, len(r.body))
		}
		if got := o.hits("/nostore"); got != i {
			t.Fatalf("after %d requests the origin saw %d: an uncacheable object was asked for twice", i, got)
		}
	}
}

func TestSlicePurgeRemovesEverySlice(t *testing.T) {
	t.Parallel()
	path := sliceFile(t, 12*mib, 0)
	o := newRangeOrigin(t, path)
	e := sliceEdge(t, o.URL, nil)
	if status, _, _, n, err := getStream(t, e.URL()+"/p"); status != 200 || n != 12*mib || err != nil {
		t.Fatalf("full GET: %d, %d bytes, %v", status, n, err)
	}
	settle(t, e)
	key := e.primaryKey(strings.TrimPrefix(e.URL(), "http://"), "/p")
	for i := int64(0); i < 12; i++ {
		if _, ok := e.store.Peek(sliceKeyOf(key, i)); !ok {
			t.Fatalf("slice %d not stored", i)
		}
	}
	res, err := e.Purge(PurgeRequest{URLs: []string{e.URL() + "/p"}})
	if err != nil || res.Purged != 12 {
		t.Fatalf("purge: %+v, %v; want 12 slices purged", res, err)
	}
	for i := int64(0); i < 12; i++ {
		if _, ok := e.store.Peek(sliceKeyOf(key, i)); ok {
			t.Fatalf("slice %d survived the purge", i)
		}
	}
	before := o.hits("/p")
	expect(t, get(t, e.URL()+"/p", "Range", "bytes=0-9"), http.StatusPartialContent, Miss, fileBytes(t, path, 0, 9))
	if o.hits("/p") != before+1 {
		t.Fatal("range after purge did not go to the origin")
	}
}

func TestSliceConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"origin: http://127.0.0.1:1\nslice: {size: 4KiB}\n", "line 2: field slice.size: 4096 bytes is below 64KiB"},
		{"origin: http://127.0.0.1:1\nslice:\n  size: 1MiB\n  min_object: 512KiB\n", "line 4: field slice.min_object"},
		{"origin: http://127.0.0.1:1\nslice: {size: 16MiB}\n", "above memory.max_object_bytes"},
		{"origins:\n  - hosts: [a.example]\n    url: http://127.0.0.1:1\n    slice: {size: 1KiB}\n", "field origins.1.slice.size"},
	} {
		_, err := ParseConfig([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.yaml, err, tc.want)
		}
	}
	cfg, err := ParseConfig([]byte("origin: http://127.0.0.1:1\nslice: {size: 2MiB}\n"))
	if err != nil || cfg.Slice.Size != 2*mib || cfg.Slice.MinObject != 16*mib {
		t.Fatalf("defaults: %+v, %v; want min_object 8 slices", cfg.Slice, err)
	}
}
