package edge

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/edge/cachecontrol"
	"github.com/switchyard/switchyard/edge/store"
)

// Partial entries, on a sliced origin (RFC 9111 3.3 storing incomplete responses, 3.4 combining):
// a client's range of an object the edge does not know yet, no longer than one slice, is asked of
// the origin as the client sent it, and the 206 is stored as the object's partial entry (the bytes
// that came, keyed beside the slices). Later ranges within those bytes are answered from it. A
// request for more of an object shorter than min_object asks the origin only for the part the
// entry lacks (If-Range on its strong validator) and, when the answer is that part with the same
// strong validator and length, stores the combined bytes as the whole object's 200. Longer objects
// are read from slices as before.

// partialKeyOf is the store key of the partial entry of the object stored under key.
func partialKeyOf(key string) string { return key + "\x00partial" }

// servePartial answers a request on a sliced origin from, or towards, the object's partial entry.
// It returns false, having written nothing, when the request is for the slices (serveSliced).
func (e *Edge) servePartial(w http.ResponseWriter, r *http.Request, primary, key string, cfg *SliceConfig,
	reqCC cachecontrol.Directives, onlyIfCached bool) bool {
	ent, label := e.partialEntry(key, reqCC)
	if ent == nil {
		if onlyIfCached || !e.forwardRange(r, key, cfg) {
			return false
		}
		e.fetchPartial(w, r, primary, key, r.Header.Get("Range"), nil)
		return true
	}
	first, last, total, _ := parseContentRange(ent.Meta.Header.Get("Content-Range"))
	a, b, ok := resolveRange(r.Header.Get("Range"), total)
	switch {
	case ok && a >= first && b <= last && r.Header.Get("If-Range") == "":
		return e.serveHeld(w, r, ent, label, first, total)
	case total >= int64(cfg.MinObject) || onlyIfCached:
		return false
	case first == 0:
		e.fetchPartial(w, r, primary, key, "bytes="+strconv.FormatInt(last+1, 10)+"-", ent)
	case last == total-1:
		e.fetchPartial(w, r, primary, key, "bytes=0-"+strconv.FormatInt(first-1, 10), ent)
	default:
		e.fetch(w, r, primary, key, nil) // bytes missing on both sides: the object whole
	}
	return true
}

// partialEntry returns the object's partial entry when it may answer the request (fresh, or stale
// as allowed), with its X-Cache label; nil otherwise.
func (e *Edge) partialEntry(key string, reqCC cachecontrol.Directives) (*store.Entry, string) {
	ent, ok, err := e.store.Get(partialKeyOf(key))
	if err != nil || !ok || ent.Meta.Status != http.StatusPartialContent {
		return nil, ""
	}
	if _, _, _, ok := parseContentRange(ent.Meta.Header.Get("Content-Range")); !ok {
		return nil, ""
	}
	m := ent.Meta
	switch cachecontrol.Decide(reqCC, m.Directives, m.Age(e.now()), lifetime(m), time.Duration(e.cfg.Grace)) {
	case cachecontrol.Fresh:
		return ent, Hit
	case cachecontrol.StaleOK:
		return ent, Stale
	}
	return nil, ""
}

// forwardRange reports whether a request's range goes to the origin as the client sent it: a
// suffix (bytes=-N, N no more than one slice) of an object none of whose slices is stored. The
// edge cannot name the slice holding a suffix before it knows the length; asked as is, it costs
// one request instead of two (the first slice, then the last). Any other range is sliced, so
// that ranges within one slice share its fetch.
func (e *Edge) forwardRange(r *http.Request, key string, cfg *SliceConfig) bool {
	spec, ok := strings.CutPrefix(r.Header.Get("Range"), "bytes=")
	if !ok || r.Header.Get("If-Range") != "" {
		return false
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(spec), "-"), 10, 64)
	if !strings.HasPrefix(strings.TrimSpace(spec), "-") || err != nil || n <= 0 || n > int64(cfg.Size) {
		return false
	}
	_, known := e.store.Peek(sliceKeyOf(key, 0))
	return !known
}

// resolveRange returns the first and last byte a request asks of an object total bytes long: all
// of it without Range; ok is false for several ranges or an unsatisfiable or invalid one.
func resolveRange(v string, total int64) (first, last int64, ok bool) {
	if v == "" {
		return 0, total - 1, true
	}
	spec, found := strings.CutPrefix(v, "bytes=")
	if !found || strings.Contains(spec, ",") {
		return 0, 0, false
	}
	a, b, _ := strings.Cut(strings.TrimSpace(spec), "-")
	if a == "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 {
			return 0, 0, false
		}
		return max(total-n, 0), total - 1, true
	}
	first, err := strconv.ParseInt(a, 10, 64)
	if err != nil || first < 0 || first >= total {
		return 0, 0, false
	}
	last = total - 1
	if b != "" {
		if last, err = strconv.ParseInt(b, 10, 64); err != nil || last < first {
			return 0, 0, false
		}
	}
	return first, min(last, total-1), true
}

// fetchPartial answers a request through a collapsed fill asking the origin for rng: the client's
// own range (held nil), or the part the stored partial entry held lacks.
func (e *Edge) fetchPartial(w http.ResponseWriter, r *http.Request, primary, key, rng string, held *store.Entry) {
	fkey := partialKeyOf(key) + " " + rng // one fill per range; a completion never joins a client's range
	if held != nil {
		fkey = partialKeyOf(key) + " complete " + rng
	}
	f, leader := e.getFill(fkey)
	defer f.leave()
	if leader {
		s := &sliceSpan{raw: rng, held: held}
		if held != nil {
			_, _, s.total, _ = parseContentRange(held.Meta.Header.Get("Content-Range"))
			s.first, s.last, _ = resolveRange(rng, s.total)
		}
		f.slice = s
		f.interim = interimForwarder(w, r)
		e.stats.PartialFetches.Add(1)
		go e.runFill(f, detach(r), primary, fkey, nil, true)
	} else {
		e.stats.Collapsed.Add(1)
	}
	<-f.ready
	if f.noSlice {
		e.fetch(w, r, primary, key, nil) // the answer cannot be combined: the object whole
		return
	}
	e.serveFill(w, r, f, leader, primary, nil)
}

// partialAnswer sorts the origin's answer to a partial fill, as sliceAnswer does for slices. Any
// status but 206 is the object's own answer (a 200 is stored whole). A 206 to a client's range
// is stored as the partial entry, or as the object's 200 when it holds all of it. A 206 to a
// completion is combined with the held bytes into the object's 200 when it is exactly the part
// asked for, of the same length and strong validator; otherwise it is dropped and f.noSlice makes
// the waiters fetch the object whole (true: the fill is over).
func (e *Edge) partialAnswer(f *fill, resp *http.Response) bool {
	s := f.slice
	if resp.StatusCode != http.StatusPartialContent {
		f.slice = nil
		return false
	}
	first, last, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
	switch {
	case !ok || len(varyNames(resp.Header)) > 0 || resp.ContentLength < 0 || resp.ContentLength > last-first+1:
	case s.held == nil && first == 0 && last == total-1 && resp.ContentLength == total:
		asWhole(resp, total)
		f.slice = nil
		return false
	case s.held == nil:
		s.first, s.last, s.total = first, last, total
		return false
	case first == s.first && last == s.last && total == s.total && resp.ContentLength == last-first+1 &&
		sameStrongValidator(s.held.Meta.Header, resp.Header):
		if err := e.combine(s, resp); err == nil {
			f.slice = nil
			return false
		}
	}
	resp.Body.Close()
	f.noSlice = true
	f.markReady()
	return true
}

// asWhole turns a 206 that holds all of an object into the object's 200.
func asWhole(resp *http.Response, total int64) {
	resp.StatusCode, resp.Status, resp.ContentLength = http.StatusOK, "200 OK", total
	resp.Header.Del("Content-Range")
	resp.Header.Set("Content-Length", strconv.FormatInt(total, 10))
}

// sameStrongValidator reports whether two responses carry the same strong validator (RFC 9111
// 3.4): the same strong ETag, or, with no ETag, the same Last-Modified.
func sameStrongValidator(a, b http.Header) bool {
	if !strongValidator(a) || !strongValidator(b) {
		return false
	}
	return a.Get("Etag") == b.Get("Etag") && a.Get("Last-Modified") == b.Get("Last-Modified")
}

// combine makes the origin's part and the held bytes the body of the object's 200, in order; the
// header is the new response's (RFC 9111 3.4).
func (e *Edge) combine(s *sliceSpan, resp *http.Response) error {
	rs, done, err := e.store.Reader(s.held)
	if err != nil {
		return fmt.Errorf("read stored partial entry: %w", err)
	}
	part := resp.Body
	body := io.MultiReader(rs, part)
	if s.first == 0 {
		body = io.MultiReader(part, rs)
	}
	resp.Body = &combined{Reader: body, close: func() error { done(); return part.Close() }}
	asWhole(resp, s.total)
	return nil
}

// combined is the body of a response made from a stored partial entry and the origin's part.
type combined struct {
	io.Reader
	close func() error
}

func (c *combined) Close() error { return c.close() }

// ifRange is the If-Range of a completion: the held entry's strong validator, if it has one.
func (s *sliceSpan) ifRange() string {
	if s.held == nil || !strongValidator(s.held.Meta.Header) {
		return ""
	}
	if v := s.held.Meta.Header.Get("Etag"); v != "" {
		return v
	}
	return s.held.Meta.Header.Get("Last-Modified")
}

// heldRange is the Content-Range of a stored partial entry holding the n bytes that came: what
// the origin sent, whatever its Content-Range declared (RFC 9111 3.3).
func (s *sliceSpan) heldRange(n int64) string {
	return fmt.Sprintf("bytes %d-%d/%d", s.first, s.first+n-1, s.total)
}

// serveHeld answers a request whose range lies within a partial entry's bytes.
func (e *Edge) serveHeld(w http.ResponseWriter, r *http.Request, ent *store.Entry, label string, first, total int64) bool {
	rs, done, err := e.store.Reader(ent)
	if err != nil {
		return false // its disk body is gone: the request goes on to the slices
	}
	defer done()
	at, ok := rs.(io.ReaderAt)
	if !ok {
		return false
	}
	h := w.Header()
	for k, vv := range ent.Meta.Header {
		if k != "Content-Range" && k != "Content-Length" {
			h[k] = vv
		}
	}
	setCacheHeaders(h, label, ent.Meta.Age(e.now()))
	e.stats.count(label)
	e.stats.PartialHits.Add(1)
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = nil // keep ServeContent from sniffing a type the origin never sent
	}
	lm, _ := http.ParseTime(ent.Meta.Header.Get("Last-Modified"))
	http.ServeContent(w, r, "", lm, &heldObject{at: at, first: first, size: ent.Meta.Size, total: total})
	return true
}

// heldObject reads an object's bytes from a partial entry holding [first, first+size), as an
// io.ReadSeeker over the whole object for http.ServeContent; bytes outside are an error, which
// serveHeld rules out by serving only ranges within.
type heldObject struct {
	at                      io.ReaderAt
	first, size, total, off int64
}

var errNotHeld = errors.New("byte not held by the partial entry")

func (o *heldObject) Read(p []byte) (int, error) {
	if o.off >= o.total {
		return 0, io.EOF
	}
	rel := o.off - o.first
	if rel < 0 || rel >= o.size {
		return 0, errNotHeld
	}
	n, err := o.at.ReadAt(p[:min(int64(len(p)), o.size-rel)], rel)
	o.off += int64(n)
	if n > 0 {
		return n, nil
	}
	return 0, err
}

func (o *heldObject) Seek(offset int64, whence int) (int64, error) {
	return seekObject(&o.off, o.total, offset, whence)
}
