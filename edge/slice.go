package edge

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/edge/cachecontrol"
	"github.com/switchyard/switchyard/edge/store"
)

// Range slicing: an origin's large objects are fetched and stored in fixed slices, each one
// Range request to the origin and one store entry (a stored 206, RFC 9111 3.4), so a range
// request costs the slices it covers, not the whole object. A slice is filled through the
// collapsing fills (cache.go), keyed by (object key, slice index), so concurrent requests for
// one slice make one fetch, and it is registered with the URL's variants, so purging the URL
// finds it. Responses are combined from slices only while every slice carries the same strong
// validator and length; a change invalidates the object.

// SliceConfig is an origin's `slice:` block.
type SliceConfig struct {
	// Size is the length of one slice, one Range request to the origin (default 1MiB).
	Size ByteSize `yaml:"size"`
	// MinObject is the shortest object stored in slices (default 8 slices); shorter ones are
	// fetched and stored whole.
	MinObject ByteSize `yaml:"min_object"`
}

const (
	// minSliceSize bounds the slice size from below: every slice is a request to the origin.
	minSliceSize = 64 << 10
	// sliceReadAhead is how many slices past the one being sent are fetched ahead.
	sliceReadAhead = 2
)

// applyDefaults fills the size and min_object.
func (c *SliceConfig) applyDefaults() {
	if c == nil {
		return
	}
	if c.Size == 0 {
		c.Size = 1 << 20
	}
	if c.MinObject == 0 {
		c.MinObject = 8 * c.Size
	}
}

// validate checks a slice block at field path at; a slice has to fit the memory tier.
func (c *SliceConfig) validate(at string, maxObject int64) error {
	switch {
	case c == nil:
		return nil
	case c.Size < minSliceSize:
		return &fieldError{at + ".size", fmt.Sprintf("%d bytes is below 64KiB; every slice is one origin request, write it like 1MiB", c.Size)}
	case int64(c.Size) > maxObject:
		return &fieldError{at + ".size", fmt.Sprintf("%d bytes is above memory.max_object_bytes (%d); a slice must fit in memory: lower size or raise memory.max_object_bytes", c.Size, maxObject)}
	case c.MinObject < c.Size:
		return &fieldError{at + ".min_object", "is below slice size; set it to at least the slice size (objects within one slice are stored whole)"}
	}
	return nil
}

// sliceSpan is the byte range one slice fill asks for.
type sliceSpan struct {
	idx, first, last int64 // last as asked: the object may end before it
	total            int64 // the object's length, from the answer's Content-Range
	minObject        int64
	// raw is the Range of a partial fill, sent as is: a client's own range, or the part of an
	// object its stored partial entry lacks (held, combined with the answer; edge/partial.go).
	raw  string
	held *store.Entry
}

func (s *sliceSpan) rangeValue() string {
	if s.raw != "" {
		return s.raw
	}
	return "bytes=" + strconv.FormatInt(s.first, 10) + "-" + strconv.FormatInt(s.last, 10)
}

// sliceKey is the store key of slice s of the object stored under key (key itself for nil). NUL
// never occurs in a request's key, so no URI names a slice.
func sliceKey(key string, s *sliceSpan) string {
	switch {
	case s == nil:
		return key
	case s.raw != "":
		return partialKeyOf(key)
	}
	return sliceKeyOf(key, s.idx)
}

func sliceKeyOf(key string, idx int64) string { return key + "\x00slice " + strconv.FormatInt(idx, 10) }

// parseContentRange reads "bytes FIRST-LAST/TOTAL" (RFC 9110 14.4); an unknown total is not ok.
func parseContentRange(v string) (first, last, total int64, ok bool) {
	rest, found := strings.CutPrefix(v, "bytes ")
	span, tot, found2 := strings.Cut(rest, "/")
	a, b, found3 := strings.Cut(span, "-")
	if !found || !found2 || !found3 {
		return 0, 0, 0, false
	}
	var errs [3]error
	first, errs[0] = strconv.ParseInt(a, 10, 64)
	last, errs[1] = strconv.ParseInt(b, 10, 64)
	total, errs[2] = strconv.ParseInt(tot, 10, 64)
	if errors.Join(errs[:]...) != nil || first < 0 || last < first || total <= last {
		return 0, 0, 0, false
	}
	return first, last, total, true
}

// strongValidator reports whether a response carries a validator slices may be combined under:
// a strong ETag, or else Last-Modified (RFC 9111 3.4 combines only strongly validated parts).
func strongValidator(h http.Header) bool {
	if etag := h.Get("Etag"); etag != "" {
		return !strings.HasPrefix(etag, "W/")
	}
	return h.Get("Last-Modified") != ""
}

// sliceAnswer sorts the origin's answer to a slice fill. A 206 for the slice asked, of an object
// at least min_object long with a strong validator, goes on to be stored as the slice (false). A
// 206 that is the whole of a small object becomes that object's 200, and any other status is
// the object's own (a 200 from an origin that ignores Range, a 404, a 416): f.slice is cleared
// and the object is handled whole (false). Any other 206 is dropped and f.noSlice tells the
// waiters to fetch the object whole (true: the fill is over).
func (e *Edge) sliceAnswer(f *fill, primary string, resp *http.Response) bool {
	s := f.slice
	if s.raw != "" {
		return e.partialAnswer(f, resp) // edge/partial.go
	}
	if resp.StatusCode != http.StatusPartialContent {
		f.slice = nil
		if resp.StatusCode == http.StatusOK {
			e.unsliced.Set(primary, struct{}{}) // the origin ignores Range: cache it whole
		}
		return false
	}
	first, last, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
	reason := ""
	switch {
	case !ok || first != s.first || last != min(s.last, total-1):
		reason = "its Content-Range is not the slice asked for"
	case total < s.minObject && first == 0 && last == total-1:
		resp.StatusCode, resp.Status, resp.ContentLength = http.StatusOK, "200 OK", total
		resp.Header.Del("Content-Range")
		resp.Header.Set("Content-Length", strconv.FormatInt(total, 10))
		f.slice = nil // the slice holds the whole (small) object: store it as its 200
		return false
	case total < s.minObject:
	case !strongValidator(resp.Header):
		reason = "it has no strong validator (ETag or Last-Modified) to combine slices under"
	case len(varyNames(resp.Header)) > 0:
		reason = "it has Vary"
	default:
		s.total = total
		return false
	}
	if reason != "" {
		e.warn("origin's range answer cannot be stored as a slice, caching the object whole", "url", primary, "reason", reason)
	}
	resp.Body.Close()
	e.unsliced.Set(primary, struct{}{})
	f.noSlice = true
	f.markReady()
	return true
}

// sliceRoute returns the slicing of a request's origin, nil when the object is cached whole.
func (e *Edge) sliceRoute(r *http.Request, primary string) *SliceConfig {
	rt := e.upstream.routeFor(r.Host)
	if rt == nil || rt.slice == nil {
		return nil
	}
	if _, whole := e.unsliced.GetIfPresent(primary); whole {
		return nil
	}
	return rt.slice
}

// Why a slice could not be read.
var (
	errSliceNotCached = errors.New("slice not stored and the request has only-if-cached")
	errSliceChanged   = errors.New("slice's validator or length differs from the object's other slices")
)

// notSlice is the outcome of a slice fill that brought no slice; the caller holds f, which it
// started when leader is set.
type notSlice struct {
	f      *fill
	leader bool
}

func (n *notSlice) Error() string { return "origin did not answer with the slice" }

// serveSliced answers a GET or HEAD for an object not stored whole on a sliced origin: it reads
// the slice holding the first byte asked for (stored, or fetched and collapsed), then lets
// http.ServeContent answer the request (ranges, If-Range, conditionals, HEAD) from a reader
// over the slices, which fetches missing slices in order with a bounded read-ahead.
func (e *Edge) serveSliced(w http.ResponseWriter, r *http.Request, primary, key string, cfg *SliceConfig, onlyIfCached bool) {
	o := &slicedObject{e: e, r: r, reqCC: cachecontrol.RequestDirectives(r.Header), primary: primary, key: key,
		size: int64(cfg.Size), minObject: int64(cfg.MinObject), onlyIfCached: onlyIfCached,
		interim: interimForwarder(w, r)}
	defer o.close()
	start, end := firstRange(r.Header.Get("Range"))
	src, err := o.open(start/o.size, true)
	var ns *notSlice
	switch {
	case errors.As(err, &ns):
		defer ns.f.leave()
		switch f := ns.f; {
		case f.noSlice:
			e.fetch(w, r, primary, key, nil)
		case ns.leader && f.pass != nil && f.pass.StatusCode == http.StatusPartialContent:
			// An uncacheable slice answers the edge's range, not the client's: ask again.
			f.pass.Body.Close()
			f.release()
			e.passThrough(w, r)
		default:
			e.serveFill(w, r, f, ns.leader, primary, nil) // the object's own answer: a 200, 404, 416...
		}
		return
	case errors.Is(err, errSliceNotCached):
		writeError(w, http.StatusGatewayTimeout, Miss, "not in cache (request has only-if-cached)")
		e.stats.count(Miss)
		return
	case errors.Is(err, store.ErrUnavailable):
		e.unavailable(w, key, err)
		return
	case err != nil:
		e.warn("slice fetch failed", "key", key, "err", err)
		writeError(w, http.StatusBadGateway, Miss, msgBadGateway)
		e.stats.count(Miss)
		return
	}
	o.anchor(src, end)
	h := w.Header()
	for k, vv := range src.header {
		if k != "Content-Range" && k != "Content-Length" {
			h[k] = vv
		}
	}
	setCacheHeaders(h, src.label, src.age)
	e.stats.count(src.label)
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = nil // keep ServeContent from sniffing a type the origin never sent
	}
	lm, _ := http.ParseTime(src.header.Get("Last-Modified"))
	http.ServeContent(w, r, "", lm, o)
	if o.failed() {
		// A later slice failed or changed: cut the response rather than end it short or mixed.
		panic(http.ErrAbortHandler)
	}
}

// firstRange returns the first byte of a single "bytes=A-" or "bytes=A-B" range and its last
// byte (-1: to the end); 0, -1 for anything else (no range, a suffix, several ranges).
func firstRange(v string) (start, end int64) {
	spec, ok := strings.CutPrefix(v, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, -1
	}
	a, b, _ := strings.Cut(strings.TrimSpace(spec), "-")
	start, err := strconv.ParseInt(a, 10, 64)
	if err != nil || start < 0 {
		return 0, -1
	}
	if end, err = strconv.ParseInt(b, 10, 64); err != nil || end < start {
		end = -1
	}
	return start, end
}

// sliceSrc is one slice being read: from its store entry, or from the fill bringing it.
type sliceSrc struct {
	idx, first, last int64 // the object's bytes it holds
	header           http.Header
	label            string // Hit or Stale from the store, Miss from a fill
	age              time.Duration
	at               io.ReaderAt // a stored body
	f                *fill       // or the fill, held until close
	done             func()
}

// readAt reads slice bytes from off (relative to the slice), waiting for a fill's bytes.
func (s *sliceSrc) readAt(p []byte, off int64) (int, error) {
	if s.f == nil {
		n, err := s.at.ReadAt(p, off)
		if n > 0 {
			return n, nil
		}
		return 0, err
	}
	f := s.f
	f.mu.Lock()
	for off >= f.size && !f.done {
		f.cond.Wait()
	}
	avail, broken := f.size-off, f.broken
	f.mu.Unlock()
	if avail <= 0 {
		if broken {
			return 0, errors.New("slice body broke off")
		}
		return 0, io.ErrUnexpectedEOF
	}
	n, ok := f.readAt(p[:min(int64(len(p)), avail)], off)
	if !ok {
		return n, errors.New("slice spill file unreadable")
	}
	return n, nil
}

func (s *sliceSrc) close() {
	if s.f != nil {
		s.f.leave()
	}
	if s.done != nil {
		s.done()
	}
}

// slicedObject reads one object's bytes from its slices, as an io.ReadSeeker for
// http.ServeContent (whose multi-range writer reads from a goroutine of its own, hence mu).
type slicedObject struct {
	e                 *Edge
	r                 *http.Request
	reqCC             cachecontrol.Directives
	primary, key      string
	size, minObject   int64
	onlyIfCached      bool
	interim           func(int, textproto.MIMEHeader) error // 1xx to the client, for owned fills
	etag, lastMod     string                                // the first slice's validators, which every other must carry
	total, limit, off int64                                 // limit: the end of what the request asks for, for read-ahead

	mu  sync.Mutex
	cur *sliceSrc
	err error
}

// anchor makes the first slice read the object's reference and current slice.
func (o *slicedObject) anchor(src *sliceSrc, end int64) {
	_, _, o.total, _ = parseContentRange(src.header.Get("Content-Range"))
	o.etag, o.lastMod = src.header.Get("Etag"), src.header.Get("Last-Modified")
	o.limit = o.total
	if end >= 0 && end < o.total {
		o.limit = end + 1
	}
	o.cur = src
	o.prefetch(src.idx)
}

// agrees reports whether a slice's header has the object's validators and length (always before
// the first slice is read).
func (o *slicedObject) agrees(h http.Header) bool {
	if o.total == 0 {
		return true
	}
	_, _, total, _ := parseContentRange(h.Get("Content-Range"))
	return total == o.total && h.Get("Etag") == o.etag && h.Get("Last-Modified") == o.lastMod
}

// usable reports whether a stored slice may answer the request: fresh, or stale as allowed.
func (o *slicedObject) usable(m *store.Meta) (string, bool) {
	if m.Status != http.StatusPartialContent || !o.agrees(m.Header) {
		return "", false
	}
	switch cachecontrol.Decide(o.reqCC, m.Directives, m.Age(o.e.now()), lifetime(m), time.Duration(o.e.cfg.Grace)) {
	case cachecontrol.Fresh:
		return Hit, true
	case cachecontrol.StaleOK:
		return Stale, true
	}
	return "", false
}

// open returns slice idx: stored and usable, or fetched (collapsed with any fetch of it in
// flight). A fill that brought no slice is returned as a *notSlice error holding the fill; owned
// fills hand an uncacheable answer to the request that started them (runFill).
func (o *slicedObject) open(idx int64, owned bool) (*sliceSrc, error) {
	skey := sliceKeyOf(o.key, idx)
	ent, ok, err := o.e.store.Get(skey)
	if err != nil {
		return nil, err
	}
	if ok {
		if label, use := o.usable(ent.Meta); use {
			if src, err := o.stored(idx, ent, label); err == nil {
				return src, nil
			}
		}
	}
	if o.onlyIfCached {
		return nil, errSliceNotCached
	}
	f, leader := o.startFill(idx, skey, owned)
	<-f.ready
	if f.slice == nil || f.noSlice || f.errStatus != 0 || !f.shared || f.status != http.StatusPartialContent {
		return nil, &notSlice{f, leader}
	}
	src := &sliceSrc{idx: idx, first: f.slice.first, last: min(f.slice.last, f.slice.total-1),
		header: f.header, label: Miss, age: f.age, f: f}
	if !o.agrees(src.header) {
		src.close()
		o.e.stats.SliceChanged.Add(1)
		o.e.invalidate(o.primary) // the object changed under its slices: every one goes
		return nil, errSliceChanged
	}
	return src, nil
}

// stored returns a reader of a stored slice.
func (o *slicedObject) stored(idx int64, ent *store.Entry, label string) (*sliceSrc, error) {
	first, last, _, ok := parseContentRange(ent.Meta.Header.Get("Content-Range"))
	if !ok || first != idx*o.size || last-first+1 != ent.Meta.Size {
		return nil, errSliceChanged
	}
	rs, done, err := o.e.store.Reader(ent)
	if err != nil {
		return nil, err
	}
	at, ok := rs.(io.ReaderAt)
	if !ok {
		done()
		return nil, errors.New("stored slice body cannot be read at an offset")
	}
	o.e.stats.SliceHits.Add(1)
	return &sliceSrc{idx: idx, first: first, last: last, header: ent.Meta.Header, label: label,
		age: ent.Meta.Age(o.e.now()), at: at, done: done}, nil
}

// startFill starts (or joins) the fill of slice idx; the caller holds the fill until leave.
func (o *slicedObject) startFill(idx int64, skey string, owned bool) (*fill, bool) {
	f, leader := o.e.getFill(skey)
	if !leader {
		o.e.stats.Collapsed.Add(1)
		return f, false
	}
	f.slice = &sliceSpan{idx: idx, first: idx * o.size, last: (idx+1)*o.size - 1, minObject: o.minObject}
	if owned {
		f.interim = o.interim // only the request that started the fill sees interim responses
	}
	o.e.stats.SliceFetches.Add(1)
	go o.e.runFill(f, detach(o.r), o.primary, skey, nil, owned)
	return f, true
}

// prefetch starts the fills of the next sliceReadAhead slices the request will read that are
// not stored, so the origin's next slice is on its way while this one is sent.
func (o *slicedObject) prefetch(idx int64) {
	for i := idx + 1; i <= idx+sliceReadAhead && i*o.size < o.limit; i++ {
		skey := sliceKeyOf(o.key, i)
		if m, ok := o.e.store.Peek(skey); ok {
			if _, use := o.usable(m); use {
				continue
			}
		}
		f, _ := o.startFill(i, skey, false)
		f.leave()
	}
}

// Read reads the object's bytes at the current offset from the slice holding them.
func (o *slicedObject) Read(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return 0, o.err
	}
	if o.off >= o.total {
		return 0, io.EOF
	}
	idx := o.off / o.size
	if o.cur == nil || o.cur.idx != idx {
		if o.cur != nil {
			o.cur.close()
			o.cur = nil
		}
		src, err := o.open(idx, false)
		var ns *notSlice
		if errors.As(err, &ns) {
			ns.f.leave()
		}
		if err != nil {
			o.err = fmt.Errorf("read slice %d of %s: %w", idx, o.key, err)
			return 0, o.err
		}
		o.cur = src
		o.prefetch(idx)
	}
	n, err := o.cur.readAt(p[:min(int64(len(p)), o.cur.last+1-o.off)], o.off-o.cur.first)
	o.off += int64(n)
	if err != nil {
		o.err = fmt.Errorf("read slice %d of %s: %w", idx, o.key, err)
	}
	return n, o.err
}

// Seek moves the offset (ServeContent learns the length from SeekEnd).
func (o *slicedObject) Seek(offset int64, whence int) (int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return seekObject(&o.off, o.total, offset, whence)
}

// seekObject moves *off, the offset in an object total bytes long, as io.Seeker does.
func seekObject(off *int64, total, offset int64, whence int) (int64, error) {
	next := *off
	switch whence {
	case io.SeekStart:
		next = offset
	case io.SeekCurrent:
		next += offset
	case io.SeekEnd:
		next = total + offset
	}
	if next < 0 {
		return 0, errors.New("seek before the object's start")
	}
	*off = next
	return next, nil
}

func (o *slicedObject) failed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err != nil
}

func (o *slicedObject) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur != nil {
		o.cur.close()
		o.cur = nil
	}
	if o.err != nil {
		o.e.warn("sliced response cut", "key", o.key, "err", o.err)
	}
}
