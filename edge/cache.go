package edge

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/edge/cachecontrol"
	"github.com/switchyard/switchyard/edge/store"
	"github.com/switchyard/switchyard/internal/compress"
)

// serveCacheable answers a GET or HEAD: from the store when a stored response may be used, or
// through a collapsed upstream fetch.
func (e *Edge) serveCacheable(w http.ResponseWriter, r *http.Request) {
	reqCC := cachecontrol.RequestDirectives(r.Header)
	onlyIfCached := reqCC.Has("only-if-cached")
	primary := e.primaryKey(r.Host, r.URL.RequestURI())
	if _, pass := e.pass.GetIfPresent(primary); pass && !onlyIfCached {
		e.passThrough(w, r)
		return
	}
	key := e.lookupKey(primary, r.Header)
	if cd := e.coding(r.Header); cd != compress.Identity && e.serveCoded(w, r, reqCC, key, cd) {
		return
	}
	ent, ok, err := e.store.Get(key)
	if err != nil {
		e.unavailable(w, key, err)
		return
	}
	if !ok {
		if sc := e.sliceRoute(r, primary); sc != nil {
			if e.servePartial(w, r, primary, key, sc, reqCC, onlyIfCached) { // edge/partial.go
				return
			}
			e.serveSliced(w, r, primary, key, sc, onlyIfCached) // edge/slice.go
			return
		}
	}
	if ok {
		m := ent.Meta
		age := m.Age(e.now())
		// serveEntry fails only when a disk body vanished (evicted or purged) since the lookup;
		// then the request is served as a miss.
		switch cachecontrol.Decide(reqCC, m.Directives, age, lifetime(m), time.Duration(e.cfg.Grace)) {
		case cachecontrol.Fresh:
			if e.serveEntry(w, r, ent, Hit, age) {
				return
			}
			ent = nil
		case cachecontrol.StaleOK:
			if e.serveEntry(w, r, ent, Stale, age) {
				return
			}
			ent = nil
		case cachecontrol.StaleWhileRevalidate:
			e.revalidateInBackground(r, primary, key, ent)
			if e.serveEntry(w, r, ent, Stale, age) {
				return
			}
			ent = nil // the fetch below joins the revalidation just started
		}
	}
	if onlyIfCached {
		// RFC 9111 5.2.1.7: a cache that cannot answer from storage answers 504.
		writeError(w, http.StatusGatewayTimeout, Miss, "not in cache (request has only-if-cached)")
		e.stats.count(Miss)
		return
	}
	e.fetch(w, r, primary, key, ent)
}

// unavailable answers 503 when a stored body cannot be read for a local reason (descriptors,
// memory, a disk error): the entry is kept, and the origin is not asked for an object the
// cache holds; a miss here would refetch and rewrite what is already stored.
func (e *Edge) unavailable(w http.ResponseWriter, key string, err error) {
	e.stats.Unavailable.Add(1)
	e.warn("stored body unreadable, answering 503", "key", key, "err", err)
	h := w.Header()
	clear(h)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Retry-After", "1")
	setCacheHeaders(h, Miss, 0)
	w.WriteHeader(http.StatusServiceUnavailable)
	io.WriteString(w, msgUnavailable+"\n")
}

// lifetime is the freshness lifetime to apply: zero for a soft-purged entry.
func lifetime(m *store.Meta) time.Duration {
	if m.Invalid {
		return 0
	}
	return m.Lifetime
}

// setCacheHeaders sets X-Cache and Age, which every response carries. The values come from
// shared read-only slices where possible: net/http only reads them, and a hit then allocates less.
func setCacheHeaders(h http.Header, label string, age time.Duration) {
	if v, ok := labelValues[label]; ok {
		h["X-Cache"] = v
	} else {
		h["X-Cache"] = []string{label}
	}
	// Cache-Status (RFC 9211): the caches nearer the origin come first, this one last.
	if member, ok := cacheStatus[label]; ok {
		if up := h["Cache-Status"]; len(up) > 0 {
			h["Cache-Status"] = []string{strings.Join(up, ", ") + ", " + member[0]}
		} else {
			h["Cache-Status"] = member
		}
	}
	secs := min(int64(age/time.Second), 1<<31) // delta-seconds never exceed 2^31 (RFC 9111 1.2.2)
	if secs >= 0 && secs < int64(len(ageValues)) {
		h["Age"] = ageValues[secs]
	} else {
		h["Age"] = []string{strconv.FormatInt(secs, 10)}
	}
}

// labelValues and ageValues are the shared header values setCacheHeaders uses.
var (
	labelValues = map[string][]string{Hit: {Hit}, Miss: {Miss}, Stale: {Stale}, Revalidated: {Revalidated}, Bypass: {Bypass}}
	// cacheStatus is each label's Cache-Status member (RFC 9211 2): a fresh hit; forwarded on a
	// miss; a stale response served (forwarded because stale, or not at all); a stale one
	// confirmed by a 304; the cache bypassed.
	cacheStatus = map[string][]string{Hit: {"switchyard-edge; hit"}, Miss: {"switchyard-edge; fwd=miss"},
		Stale: {"switchyard-edge; hit; fwd=stale"}, Revalidated: {"switchyard-edge; fwd=stale; fwd-status=304"},
		Bypass: {"switchyard-edge; fwd=bypass"}}
	ageValues = func() [][]string {
		v := make([][]string, 3600)
		for i := range v {
			v[i] = []string{strconv.Itoa(i)}
		}
		return v
	}()
)

// parseAge reads an Age header (0 when absent or invalid; the first member of a list; capped at
// 2147483648 seconds, RFC 9111 1.2.2 and 5.1).
func parseAge(h http.Header) time.Duration {
	age, _ := cachecontrol.AgeValue(h)
	return age
}

// conditionalOrRange reports whether a request needs precondition or range processing.
func conditionalOrRange(h http.Header) bool {
	for _, k := range []string{"Range", "If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since"} {
		if _, ok := h[k]; ok {
			return true
		}
	}
	return false
}

// bodyless reports whether a status code never carries a body.
func bodyless(status int) bool {
	return status == http.StatusNoContent || status == http.StatusNotModified || status < 200
}

// serveEntry answers from a stored response, with ranges and client preconditions for 200s
// (RFC 9110 13, 14) and HEAD answered from the stored GET. It returns false, having written
// nothing, when the body lives on disk and its file is gone (evicted or purged since the lookup).
func (e *Edge) serveEntry(w http.ResponseWriter, r *http.Request, ent *store.Entry, label string, age time.Duration) bool {
	m := ent.Meta
	// Open a disk body before writing anything: once open, the file survives its removal.
	var rs io.ReadSeeker
	if ent.Body == nil && m.Size > 0 {
		f, done, err := e.store.Reader(ent)
		if errors.Is(err, store.ErrUnavailable) {
			e.unavailable(w, m.Key, err) // the entry stays; answered, so true
			return true
		}
		if err != nil {
			return false
		}
		defer done()
		rs = f
	}
	h := w.Header()
	for k, vv := range m.Header {
		h[k] = vv
	}
	setCacheHeaders(h, label, age)
	e.stats.count(label)
	if m.Status == http.StatusOK && conditionalOrRange(r.Header) {
		if _, ok := h["Content-Type"]; !ok {
			h["Content-Type"] = nil // keep ServeContent from sniffing a type the origin never sent
		}
		if rs == nil {
			rs = bytes.NewReader(ent.Body)
		}
		lm, _ := http.ParseTime(m.Header.Get("Last-Modified"))
		http.ServeContent(w, r, "", lm, rs)
		return true
	}
	if !bodyless(m.Status) && len(m.Header["Content-Length"]) != 1 {
		h["Content-Length"] = []string{strconv.FormatInt(m.Size, 10)} // committed entries carry it already
	}
	w.WriteHeader(m.Status)
	if r.Method == http.MethodHead || bodyless(m.Status) {
		return true
	}
	if rs == nil {
		w.Write(ent.Body)
		return true
	}
	copyBody(w, rs)
	return true
}

// copyBody copies with a pooled buffer.
func copyBody(w io.Writer, r io.Reader) (int64, error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	return io.CopyBuffer(w, r, *bp)
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// fill is one upstream fetch that any number of requests wait on (request collapsing). Its
// outcome is decided before ready is closed; the body then grows until done.
type fill struct {
	ready chan struct{}

	// Outcome, set before ready closes.
	label     string        // X-Cache for responses served from this fill
	status    int           // upstream status for a streamed response
	header    http.Header   // end-to-end upstream header for a streamed response
	age       time.Duration // Age to report for a streamed response
	entry     *store.Entry  // a revalidated or stale entry to serve instead of a stream
	shared    bool          // false: only the request that started the fill may use the response
	pass      *http.Response
	release   context.CancelFunc // ends the fetch's context; called by whoever consumes pass
	reqHeader http.Header        // the starting request's header, to check Vary for waiters
	primary   string             // the URL's primary key, for purges of fills in flight
	tags      []string           // the response's purge tags, once known
	purged    atomic.Int32       // set by a purge while in flight: purgeSoft or purgeHard
	errStatus int
	errMsg    string
	interim   func(int, textproto.MIMEHeader) error // forwards 1xx to the leader's client; may be nil
	// slice is the byte range a slice fill asks the origin for (edge/slice.go), set by the
	// leader before the fetch; left set only when the origin answered it with that 206.
	slice *sliceSpan
	// noSlice is set when the answer to a slice fill cannot be stored as a slice (a small
	// object, a 206 without a strong validator): the request fetches the object whole.
	noSlice bool

	mu     sync.Mutex
	cond   *sync.Cond
	body   []byte   // the body received so far, or its first part once spilled
	size   int64    // bytes received so far
	spill  *os.File // the store's temporary file, read from past len(body) for large bodies
	users  int      // requests holding the fill (see getFill); the last one out closes spill
	done   bool
	broken bool // the body ended before it was complete
}

// readAt copies body bytes from off into p, from memory or from the spill file, and returns how
// many; ok is false when the spill file cannot supply them (a failed disk write).
func (f *fill) readAt(p []byte, off int64) (int, bool) {
	// pump appends to body (moving it when it grows) and sets spill under mu; the bytes below a
	// snapshot's length never change, so they are copied outside the lock.
	f.mu.Lock()
	body, spill := f.body, f.spill
	f.mu.Unlock()
	if off < int64(len(body)) {
		return copy(p, body[off:]), true
	}
	n, err := spill.ReadAt(p, off)
	return n, n > 0 || err == nil
}

// leave ends a request's hold on the fill taken by getFill; the spill file is closed once the
// fetch is done and no request holds the fill.
func (f *fill) leave() {
	f.mu.Lock()
	f.users--
	closeIt := f.done && f.users == 0 && f.spill != nil
	f.mu.Unlock()
	if closeIt {
		f.spill.Close()
	}
}

// getFill returns the fill in flight for key, or a new one; leader is true for a new one. The
// caller holds the fill until it calls leave. A fill leaves the map before it finishes, so every
// holder joined before the end and the spill file is closed only after the last one leaves.
func (e *Edge) getFill(key string) (f *fill, leader bool) {
	e.fillsMu.Lock()
	defer e.fillsMu.Unlock()
	if f = e.fills[key]; f == nil {
		f = &fill{ready: make(chan struct{})}
		f.cond = sync.NewCond(&f.mu)
		e.fills[key] = f
		leader = true
	}
	f.mu.Lock()
	f.users++
	f.mu.Unlock()
	return f, leader
}

func (e *Edge) dropFill(key string, f *fill) {
	e.fillsMu.Lock()
	if e.fills[key] == f {
		delete(e.fills, key)
	}
	e.fillsMu.Unlock()
}

// detach copies what a fetch needs from a client request, so the fetch can outlive the client.
func detach(r *http.Request) *http.Request {
	c := r.Clone(context.Background())
	c.Body = http.NoBody
	return c
}

// revalidateInBackground starts one revalidation of a stale entry (RFC 5861 3), unless one is
// already in flight for the key.
func (e *Edge) revalidateInBackground(r *http.Request, primary, key string, stored *store.Entry) {
	f, leader := e.getFill(key)
	if leader {
		go e.runFill(f, detach(r), primary, key, stored, false)
	}
	f.leave() // nobody here reads the body
}

// fetch answers a request through a collapsed upstream fetch: the first request for a key starts
// it, later ones wait on it and read the same streamed body.
func (e *Edge) fetch(w http.ResponseWriter, r *http.Request, primary, key string, stored *store.Entry) {
	f, leader := e.getFill(key)
	defer f.leave()
	if leader {
		// Only the leader sees interim responses; this handler waits on f.ready meanwhile.
		f.interim = interimForwarder(w, r)
		go e.runFill(f, detach(r), primary, key, stored, true)
	} else {
		e.stats.Collapsed.Add(1)
	}
	<-f.ready
	e.serveFill(w, r, f, leader, primary, stored)
}

// serveFill answers a request from a fill's outcome: an error, a stored entry, the leader's
// uncacheable response, or the body as it streams.
func (e *Edge) serveFill(w http.ResponseWriter, r *http.Request, f *fill, leader bool, primary string, stored *store.Entry) {
	switch {
	case f.errStatus != 0:
		e.stats.count(Miss)
		writeError(w, f.errStatus, Miss, f.errMsg)
	case f.entry != nil:
		if !e.serveEntry(w, r, f.entry, f.label, f.entry.Meta.Age(e.now())) {
			e.passThrough(w, r) // its disk body was purged meanwhile
		}
	case !f.shared && leader:
		e.servePass(w, r, f)
	case !f.shared:
		e.passThrough(w, r) // the response was for the leader alone; fetch our own
	case !leader && !e.sameVariant(f, r.Header):
		e.fetch(w, r, primary, variantKey(primary, e.varyOf(f.header), r.Header), nil)
	case conditionalOrRange(r.Header) && f.status == http.StatusOK:
		e.serveCompleted(w, r, f)
	case e.holdForStale(r, f, stored):
		e.serveWholeOrStale(w, r, f, stored)
	default:
		e.streamFill(w, r, f)
	}
}

// staleHoldMax bounds the responses held whole before they are sent (holdForStale): a client
// waits for the whole body of these instead of getting its first bytes at once.
const staleHoldMax = 1 << 20

// holdForStale reports whether the fill's response replaces a stored entry that may be served
// stale if the fetch fails (stale-if-error or grace), with a declared length of at most
// staleHoldMax. Such a response is sent only once it has arrived whole, so that an origin that
// fails after its response head (a reset or close mid-body) gets the stale copy served, as a
// failure before the head does, rather than a truncated response. Longer or unbounded bodies
// are streamed as they come (the first bytes of a large object matter more).
func (e *Edge) holdForStale(r *http.Request, f *fill, stored *store.Entry) bool {
	if stored == nil || r.Method == http.MethodHead || bodyless(f.status) {
		return false
	}
	n, err := strconv.ParseInt(f.header.Get("Content-Length"), 10, 64)
	if err != nil || n < 0 || n > staleHoldMax {
		return false
	}
	return e.staleUsable(cachecontrol.RequestDirectives(r.Header), stored, e.now())
}

// serveWholeOrStale waits for the fill's whole body, then sends it; when the body broke off it
// serves the stored entry stale instead (see holdForStale).
func (e *Edge) serveWholeOrStale(w http.ResponseWriter, r *http.Request, f *fill, stored *store.Entry) {
	f.mu.Lock()
	for !f.done {
		f.cond.Wait()
	}
	broken := f.broken
	f.mu.Unlock()
	if !broken {
		e.streamFill(w, r, f) // complete: one copy, no waiting
		return
	}
	e.stats.StaleMidBody.Add(1)
	if !e.serveEntry(w, r, stored, Stale, stored.Meta.Age(e.now())) {
		e.stats.count(Miss) // the stored body vanished meanwhile (evicted or purged)
		writeError(w, http.StatusBadGateway, Miss, msgBadGateway)
	}
}

// sameVariant reports whether a waiting request selects the same variant as the request that
// started the fill, under the Vary of the fill's response.
func (e *Edge) sameVariant(f *fill, h http.Header) bool {
	for _, n := range e.varyOf(f.header) {
		if varyValue(h, n) != varyValue(f.reqHeader, n) {
			return false
		}
	}
	return true
}

// servePass copies an uncacheable response to the request that fetched it.
func (e *Edge) servePass(w http.ResponseWriter, r *http.Request, f *fill) {
	defer f.release()
	resp := f.pass
	defer resp.Body.Close()
	copyHeader(w.Header(), resp.Header)
	addVia(w.Header())
	setCacheHeaders(w.Header(), f.label, parseAge(resp.Header))
	e.stats.count(f.label)
	w.WriteHeader(resp.StatusCode)
	if r.Method != http.MethodHead {
		n, _ := copyBody(w, resp.Body)
		e.stats.OriginBytes.Add(n)
	}
}

// streamFill writes the fill's response as its body arrives.
func (e *Edge) streamFill(w http.ResponseWriter, r *http.Request, f *fill) {
	h := w.Header()
	for k, vv := range f.header {
		h[k] = vv
	}
	setCacheHeaders(h, f.label, f.age)
	e.stats.count(f.label)
	w.WriteHeader(f.status)
	if r.Method == http.MethodHead || bodyless(f.status) {
		return
	}
	flusher, _ := w.(http.Flusher)
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	var off int64
	for {
		f.mu.Lock()
		for off == f.size && !f.done {
			f.cond.Wait()
		}
		avail, done, broken := f.size-off, f.done, f.broken
		f.mu.Unlock()
		if avail > 0 {
			chunk := (*bp)[:min(avail, int64(len(*bp)))]
			n, ok := f.readAt(chunk, off)
			if !ok {
				panic(http.ErrAbortHandler) // the spilled copy is incomplete: abort, never truncate silently
			}
			if _, err := w.Write(chunk[:n]); err != nil {
				return // the client left; the fetch goes on for the others
			}
			off += int64(n)
			if !done && flusher != nil {
				flusher.Flush()
			}
			continue
		}
		if broken {
			// Abort the response so the client sees a truncated body, not a complete one.
			panic(http.ErrAbortHandler)
		}
		if done {
			return
		}
	}
}

// serveCompleted waits for the whole body, then answers a range or conditional request from it.
func (e *Edge) serveCompleted(w http.ResponseWriter, r *http.Request, f *fill) {
	f.mu.Lock()
	for !f.done {
		f.cond.Wait()
	}
	body, size, spill, broken := f.body, f.size, f.spill, f.broken
	f.mu.Unlock()
	if broken {
		e.stats.count(Miss)
		writeError(w, http.StatusBadGateway, Miss, msgBadGateway)
		return
	}
	h := w.Header()
	for k, vv := range f.header {
		h[k] = vv
	}
	setCacheHeaders(h, f.label, f.age)
	e.stats.count(f.label)
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = nil // keep ServeContent from sniffing a type the origin never sent
	}
	var rs io.ReadSeeker = bytes.NewReader(body)
	if spill != nil {
		rs = io.NewSectionReader(spill, 0, size)
	}
	lm, _ := http.ParseTime(f.header.Get("Last-Modified"))
	http.ServeContent(w, r, "", lm, rs)
}

// Purge marks for fills in flight.
const (
	purgeSoft = 1
	purgeHard = 2
)

// markPurged applies a purge to the fills in flight that match: a hard purge keeps the body
// from being stored, a soft one stores it already stale. Without this, a response arriving
// while its URL is purged would be stored after the purge.
func (e *Edge) markPurged(match func(primary string, tags []string) bool, soft bool) {
	mark := int32(purgeHard)
	if soft {
		mark = purgeSoft
	}
	e.fillsMu.Lock()
	defer e.fillsMu.Unlock()
	for _, f := range e.fills {
		f.mu.Lock()
		hit := f.primary != "" && match(f.primary, f.tags)
		f.mu.Unlock()
		if hit && f.purged.Load() < mark {
			f.purged.Store(mark)
		}
	}
}

// markReady publishes the fill's outcome to its waiters.
func (f *fill) markReady() { close(f.ready) }

// finish publishes the body's final size, marks it complete (or broken) and wakes the readers;
// with no reader left it closes the spill file.
func (f *fill) finish(size int64, broken bool) {
	f.mu.Lock()
	if !broken {
		f.size = size
	}
	f.done, f.broken = true, broken
	closeIt := f.users == 0 && f.spill != nil
	f.mu.Unlock()
	f.cond.Broadcast()
	if closeIt {
		f.spill.Close()
	}
}

// runFill performs one upstream fetch for a fill. owned is true when a client request started
// it (that request may receive an uncacheable response); false for background revalidations
// and pushes.
func (e *Edge) runFill(f *fill, r *http.Request, primary, key string, stored *store.Entry, owned bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(e.cfg.FetchTimeout))
	ctx = withInterim(ctx, f.interim)
	f.release = cancel
	f.reqHeader = r.Header
	f.mu.Lock()
	f.primary = primary
	f.mu.Unlock()
	defer func() {
		if f.pass == nil {
			cancel()
		}
	}()
	// A fill with a body leaves the map before finish (below), so no request joins it after its
	// spill file may have been closed; outcomes without a body leave here, on return.
	defer e.dropFill(key, f)

	req := e.fillRequest(ctx, r, stored, f.slice)
	reqCC := cachecontrol.RequestDirectives(r.Header)
	reqTime := e.now()
	e.stats.OriginRequests.Add(1)
	resp, err := e.fetchUpstream(req) // edge/tier.go
	respTime := e.now()

	if (err != nil || resp.StatusCode >= 500) && e.fillFailed(f, r, stored, reqCC, resp, err, respTime) {
		return
	}
	if resp.StatusCode == http.StatusNotModified && stored != nil {
		resp.Body.Close()
		e.stats.NotModified.Add(1)
		m := e.refreshed(stored.Meta, resp.Header, reqTime, respTime)
		if err := e.store.Update(m); err != nil {
			e.warn("store 304 refresh failed", "key", key, "err", err)
		}
		f.entry, f.label = &store.Entry{Meta: m, Body: stored.Body}, Revalidated
		f.markReady()
		return
	}

	if f.slice != nil && e.sliceAnswer(f, primary, resp) {
		return // edge/slice.go: not a slice; the request fetches the object whole
	}
	// The rules apply to the targeted field (CDN-Cache-Control) when the response has one. A
	// slice is judged as the 200 it is part of (RFC 9111 3.4).
	policy := cachecontrol.Effective(resp.Header, e.cfg.TargetedCacheControl)
	respCC := cachecontrol.Parse(policy)
	status := resp.StatusCode
	if f.slice != nil {
		status = http.StatusOK
	}
	reason := cachecontrol.Storable(r, reqCC, status, policy, respCC)
	life, _ := cachecontrol.Lifetime(status, policy, respCC, e.heuristic)
	if reason == "" && life == 0 && resp.Header.Get("Etag") == "" && resp.Header.Get("Last-Modified") == "" &&
		!respCC.Has("stale-while-revalidate") && !respCC.Has("stale-if-error") && e.cfg.Grace == 0 {
		reason = "no freshness and no validator" // storing it could never save a fetch
	}
	if reason != "" && resp.StatusCode < 500 {
		if responseReason(reason) {
			e.pass.Set(primary, struct{}{}) // later requests skip the queue (hit-for-miss)
		}
		if owned {
			f.pass, f.label = resp, Miss
		} else {
			resp.Body.Close()
		}
		f.markReady()
		return
	}

	header := make(http.Header, len(resp.Header))
	copyHeader(header, resp.Header)
	header.Del("Age")
	header.Del("X-Cache")
	addVia(header) // stored with it, so a hit sends it without work
	if e.compress.Applies(compress.ResponseOf(resp.StatusCode, resp.ContentLength, header)) {
		compress.AddVary(header) // its coded variants are served by Accept-Encoding (compress.go)
	}
	for _, fld := range append(respCC.Fields("no-cache"), respCC.Fields("private")...) {
		header.Del(fld) // qualified no-cache/private: store the rest without these fields
	}
	initialAge := cachecontrol.InitialAge(resp.Header, reqTime, respTime)
	f.mu.Lock()
	f.tags = tagsOf(resp.Header)
	f.mu.Unlock()
	f.status, f.header, f.age, f.shared, f.label = resp.StatusCode, header, initialAge, true, Miss
	f.markReady()

	n, complete := e.fillStore(f, r, primary, key, resp, header, reason, initialAge, life, respTime)
	e.dropFill(key, f)
	f.finish(n, !complete)
}

// fillRequest is the upstream request of a fill: a whole-object GET (or one slice of it),
// conditional on the stored copy's validators when there is one.
func (e *Edge) fillRequest(ctx context.Context, r *http.Request, stored *store.Entry, slice *sliceSpan) *http.Request {
	req := e.upstreamRequest(ctx, r, http.MethodGet, nil)
	for _, k := range []string{"Range", "If-Range", "If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since"} {
		req.Header.Del(k) // the edge fetches whole objects (or its own slices) and validates its own copy
	}
	if slice != nil {
		req.Header.Set("Range", slice.rangeValue())
		if v := slice.ifRange(); v != "" {
			req.Header.Set("If-Range", v) // a changed object answers whole, never a part to combine
		}
	}
	if e.compress != nil {
		req.Header.Set("Accept-Encoding", "identity") // stored as it is; codings are made here (compress.go)
	}
	if stored != nil {
		if v := stored.Meta.Header.Get("Etag"); v != "" {
			req.Header.Set("If-None-Match", v)
		}
		if v := stored.Meta.Header.Get("Last-Modified"); v != "" {
			req.Header.Set("If-Modified-Since", v)
		}
		if req.Header.Get("If-None-Match") != "" || req.Header.Get("If-Modified-Since") != "" {
			e.stats.Revalidations.Add(1)
		}
	}
	return req
}

// fillFailed answers a fill whose fetch failed (err) or returned a server error: with the
// stored copy when it may be served stale, a 502 (504 for must-revalidate) when the fetch
// failed. It returns false when the 5xx response is to be handled as any other response.
func (e *Edge) fillFailed(f *fill, r *http.Request, stored *store.Entry, reqCC cachecontrol.Directives,
	resp *http.Response, err error, respTime time.Time) bool {
	if stored != nil && (e.staleUsable(reqCC, stored, respTime) || (err != nil && e.staleUnreachable(stored, respTime))) {
		if resp != nil {
			resp.Body.Close()
		}
		f.entry, f.label = stored, Stale
		f.markReady()
		return true
	}
	if err != nil {
		e.warn("fetch from upstream failed", "url", r.URL.String(), "err", err)
		f.errStatus, f.errMsg = http.StatusBadGateway, msgBadGateway
		if stored != nil && cachecontrol.NoStale(stored.Meta.Directives) {
			f.errStatus = http.StatusGatewayTimeout // RFC 9111 5.2.2.2: must-revalidate failure
		}
		f.markReady()
		return true
	}
	return false
}

// fillStore pumps the response body to the fill's readers and, when it is storable (reason
// empty), into the store, then commits the entry unless the body was cut short or purged
// meanwhile. It returns the bytes read and whether the body came whole.
func (e *Edge) fillStore(f *fill, r *http.Request, primary, key string, resp *http.Response, header http.Header,
	reason string, initialAge, life time.Duration, respTime time.Time) (int64, bool) {
	var err error
	var w *store.Writer
	if reason == "" {
		if w, err = e.store.NewWriter(); err != nil {
			e.warn("cannot store response", "key", key, "err", err)
		}
	}
	n, readErr := e.pump(f, resp.Body, w, resp.ContentLength)
	resp.Body.Close()
	e.stats.OriginBytes.Add(n)
	complete := readErr == nil && (resp.ContentLength < 0 || resp.ContentLength == n)
	purged := f.purged.Load()
	if w != nil {
		if !complete || purged == purgeHard {
			w.Abort() // incomplete, or purged while it was arriving
		} else {
			vary := e.varyOf(resp.Header)
			// A copy: waiters may still be reading f.header. The stored one states the exact
			// length, so a hit does not have to format it.
			stored := header.Clone()
			if !bodyless(resp.StatusCode) {
				stored["Content-Length"] = []string{strconv.FormatInt(n, 10)}
			}
			if f.slice != nil && f.slice.raw != "" {
				stored["Content-Range"] = []string{f.slice.heldRange(n)} // the bytes that came (edge/partial.go)
			}
			m := &store.Meta{
				Key: sliceKey(variantKey(primary, vary, r.Header), f.slice), Primary: primary,
				Status: resp.StatusCode, Header: stored, Vary: vary, Tags: tagsOf(resp.Header),
				ResponseTime: respTime, InitialAge: initialAge, Lifetime: life,
				Directives: e.directives(stored),
				Invalid:    purged == purgeSoft,
			}
			if _, err := w.Commit(m); errors.Is(err, store.ErrTooLarge) && f.slice == nil {
				e.pass.Set(primary, struct{}{}) // it will not fit next time either: skip the queue
			} else if err != nil {
				e.warn("store response failed", "key", m.Key, "err", err)
			} else if len(vary) > 0 || f.slice != nil {
				e.rememberVariant(m) // a slice too, so purging the URL finds it
			}
		}
	}
	return n, complete
}

// pump reads the upstream body into the fill (waking readers as it grows) and the store writer.
//
// When the length is known, the last bytes are published only by finish, after the commit: a
// client that has read the whole body can count on the next request finding the entry stored.
func (e *Edge) pump(f *fill, body io.Reader, w *store.Writer, length int64) (int64, error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var n int64
	limit := int64(e.cfg.Memory.MaxObjectBytes)
	for {
		k, err := body.Read(buf)
		if k > 0 {
			n += int64(k)
			if w != nil {
				w.Write(buf[:k]) // to the file first: spilled readers read it from there
			}
			f.mu.Lock()
			if f.spill == nil && w != nil && n > limit && !w.Failed() {
				// Too large for memory: waiters read the rest from the store's file, so a large
				// object in flight is not held whole in memory.
				if sp, err := w.Spool(); err == nil {
					f.spill = sp
				}
			}
			if f.spill == nil {
				f.body = append(f.body, buf[:k]...)
			}
			if n != length {
				f.size = n
			}
			f.mu.Unlock()
			f.cond.Broadcast()
		}
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// responseReason reports whether an uncacheability reason is a property of the response (and so
// of the URL for a while) rather than of one request.
func responseReason(reason string) bool {
	return !strings.HasPrefix(reason, "request")
}

// staleUsable reports whether a stored entry may be served because upstream failed
// (RFC 5861 4 stale-if-error, or the operator's grace).
func (e *Edge) staleUsable(reqCC cachecontrol.Directives, stored *store.Entry, now time.Time) bool {
	m := stored.Meta
	window := cachecontrol.StaleIfError(reqCC, m.Directives, time.Duration(e.cfg.Grace))
	staleness := m.Age(now) - lifetime(m)
	return window > 0 && staleness <= window
}

// staleUnreachable reports whether a stored entry may be served because the origin could not be
// reached at all: the cache is disconnected (RFC 9111 4.2.4), within stale_if_unreachable, unless
// the response forbids stale use (must-revalidate, proxy-revalidate, s-maxage, no-cache).
func (e *Edge) staleUnreachable(stored *store.Entry, now time.Time) bool {
	m := stored.Meta
	window := time.Duration(*e.cfg.StaleIfUnreachable)
	if window <= 0 || cachecontrol.NoStale(m.Directives) || (m.Directives.Has("no-cache") && m.Directives["no-cache"] == "") {
		return false
	}
	return m.Age(now)-lifetime(m) <= window
}

// refreshed returns the metadata of a stored response updated by a 304 (RFC 9111 4.3.4): the
// 304's header fields replace the stored ones, and age and lifetime start again.
func (e *Edge) refreshed(old *store.Meta, h http.Header, reqTime, respTime time.Time) *store.Meta {
	m := old.Clone()
	fresh := make(http.Header, len(h))
	copyHeader(fresh, h)
	for _, k := range []string{"Content-Length", "Age", "X-Cache", "Content-Encoding", "Content-Range"} {
		fresh.Del(k)
	}
	for k, vv := range fresh {
		m.Header[k] = vv
	}
	addVia(m.Header) // a Via in the 304 replaced the stored one
	m.Directives = e.directives(m.Header)
	m.Lifetime, _ = cachecontrol.Lifetime(m.Status, cachecontrol.Effective(m.Header, e.cfg.TargetedCacheControl), m.Directives, e.heuristic)
	m.ResponseTime = respTime
	m.InitialAge = cachecontrol.InitialAge(h, reqTime, respTime)
	m.Invalid = false
	m.Tags = tagsOf(m.Header)
	return m
}

// tagsOf collects purge tags from Surrogate-Key (space-separated) and Cache-Tag (comma-separated).
func tagsOf(h http.Header) []string {
	var tags []string
	for _, v := range h.Values("Surrogate-Key") {
		tags = append(tags, strings.Fields(v)...)
	}
	for _, v := range h.Values("Cache-Tag") {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				tags = append(tags, t)
			}
		}
	}
	return tags
}

// directives parses the cache directives this edge applies to a stored header: those of its
// targeted field (RFC 9213) when it has one, else Cache-Control.
func (e *Edge) directives(h http.Header) cachecontrol.Directives {
	return cachecontrol.Parse(cachecontrol.Effective(h, e.cfg.TargetedCacheControl))
}
