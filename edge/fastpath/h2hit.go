package fastpath

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/internal/h2"
)

// HTTP/2 hits. Through internal/h2.ServeHandler an HTTP/2 cache hit cost an *http.Request (a
// parsed URL, a header map of canonicalised keys), a context and a goroutine watching for a
// reset, a copy of the entry's header map, and HPACK encoding of every field: most of the edge's
// CPU for a small hit. A stream that asks for no more than a plain hit is decided here by the
// HTTP/1.1 fast path's rules (Cache.FreshHit, the same hit head) and answered with the entry's
// head pre-encoded in HPACK, only Age (and Date, Content-Type, Alt-Svc where the HTTP/1.1 hit
// has them) encoded per response: the same fields as the HTTP/1.1 hit, in the same order.

// ServeH2 answers an HTTP/2 stream when it is a fresh memory hit, as the HTTP/1.1 fast path
// answers a request: a GET or HEAD without a body of a plain target and authority, without
// ranges, preconditions or request cache directives. It reports false, with nothing written,
// when the full path must answer the stream (internal/h2.ServeHandler). It runs as the
// stream's handler: it may wait for the client to open its flow-control windows.
func (fs *Server) ServeH2(st *h2.Stream) bool { return fs.serveH2(st, false) }

// TryH2 is ServeH2 for internal/h2's Config.Inline, on the connection's reader: it never waits,
// and also reports false (nothing written) when the hit cannot go at once (a body past the
// flow-control windows or one frame): ServeH2 answers it then, on the stream's goroutine.
func (fs *Server) TryH2(st *h2.Stream) bool { return fs.serveH2(st, true) }

// serveH2 is ServeH2, or TryH2 when inline: the decision is the same, only the send differs, and
// a hit is counted once it is sent.
func (fs *Server) serveH2(st *h2.Stream, inline bool) bool {
	hr, ok := fs.inspectH2(st)
	if !ok {
		return false
	}
	if n, whole := st.Received(); n > 0 || !whole {
		return false // a body follows the head: the full path reads it
	}
	now := time.Now()
	ent, age, ok := fs.cache.FreshHit(now, hr.host, hr.target, streamFields{st})
	if !ok {
		return false
	}
	hh := fs.hitHeadOf(ent)
	if hh == nil {
		return false
	}
	hb := hh.h2Head()
	var buf [512]byte
	var ageText [20]byte
	block := append(buf[:0], hb.pre...)
	block = h2.AppendField(block, []byte("age"), strconv.AppendInt(ageText[:0], min(int64(age/time.Second), 1<<31), 10))
	block = append(block, hb.post...)
	if hh.date {
		var d [len(http.TimeFormat)]byte
		block = h2.AppendField(block, []byte("date"), now.UTC().AppendFormat(d[:0], http.TimeFormat))
	}
	if hh.sniffed != "" && !hr.head {
		block = h2.AppendField(block, []byte("content-type"), []byte(hh.sniffed))
	}
	if alt := fs.cfg.AltSvc; alt != "" {
		block = h2.AppendField(block, []byte("alt-svc"), []byte(alt))
	}
	body := ent.Body
	if hr.head {
		body = nil
	}
	if inline {
		if !st.TryRespond(block, body) {
			return false
		}
	} else {
		_ = st.Respond(block, body, true) // a reset or a dead connection: nothing more to tell anyone
	}
	fs.cache.ServedHit(hr.host, hr.fromTier, hr.head, int64(len(ent.Body)))
	return true
}

// inspectH2 reads a stream's request as inspect reads an HTTP/1.1 head: GET or HEAD, a plain
// target, a plain authority (or one plain host field), no body, and no field that asks for
// more than a plain hit. The request fields internal/h2 took are valid HTTP/2 already.
func (fs *Server) inspectH2(st *h2.Stream) (hitRequest, bool) {
	var hr hitRequest
	switch {
	case st.TooLarge || st.Protocol != "" || st.ContentLength > 0:
		return hr, false
	case st.Method == http.MethodGet:
	case st.Method == http.MethodHead:
		hr.head = true
	default:
		return hr, false
	}
	hr.target = readOnly(st.Path)
	if !h1.PlainTarget(hr.target) {
		return hr, false
	}
	hosts := 0
	for _, f := range st.Fields {
		n := f.Name
		switch {
		case n == "host":
			hosts++
			if st.Authority == "" { // as ServeHandler: :authority wins, else the host field
				hr.host = readOnly(f.Value)
			}
		case strings.EqualFold(n, fs.cfg.TierHeader):
			hr.fromTier = fs.cache.TierAuthentic(readOnly(f.Value))
		case strings.HasPrefix(n, "if-"), n == "range", n == "cache-control", n == "pragma", n == "expect":
			return hr, false
		}
	}
	if st.Authority != "" {
		hr.host = readOnly(st.Authority)
	} else if hosts != 1 {
		return hr, false
	}
	return hr, h1.PlainHost(hr.host)
}

// readOnly returns s's bytes without a copy (two allocations a stream): what hitRequest holds
// and Cache is given is only read.
func readOnly(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// streamFields reads a stream's request fields for Cache.FreshHit (one pointer: passing it as
// Fields allocates nothing).
type streamFields struct{ st *h2.Stream }

// Fields returns the fields named (canonical names) as the header ServeHandler's request has.
func (sf streamFields) Fields(names []string) http.Header {
	h := http.Header{}
	for _, f := range sf.st.Fields {
		for _, n := range names {
			if strings.EqualFold(f.Name, n) {
				h[n] = append(h[n], f.Value)
			}
		}
	}
	return h
}

// h2HitHead is a hit head in HPACK: :status and the fields before Age, and those after it.
type h2HitHead struct{ pre, post []byte }

// h2Cache is where a hitHead keeps its HPACK form, made on first use: cold entries' heads are
// decoded from the store's arena (hithead.go) for HTTP/1.1 hits, which need no HPACK form.
type h2Cache struct{ p atomic.Pointer[h2HitHead] }

// h2Head returns the head's HPACK form, encoding it on first use.
func (hh *hitHead) h2Head() *h2HitHead {
	if hb := hh.h2.p.Load(); hb != nil {
		return hb
	}
	hb := &h2HitHead{pre: h2Fields(nil, hh.pre), post: h2Fields(nil, hh.post)}
	hh.h2.p.Store(hb) // racing callers store equal forms
	return hb
}

// h2Fields appends the HPACK form of HTTP/1.1 head text (http.Header.Write's "Name: value"
// lines, a status line first in pre): the fields HTTP/2 carries, as internal/h2.ServeHandler
// encodes them, so that an HTTP/2 hit carries exactly the HTTP/1.1 hit's fields.
func h2Fields(dst, text []byte) []byte {
	for len(text) > 0 {
		line, rest, _ := bytes.Cut(text, []byte("\r\n"))
		text = rest
		if bytes.HasPrefix(line, []byte("HTTP/1.1 ")) && len(line) >= len("HTTP/1.1 200") {
			code, _ := strconv.Atoi(string(line[len("HTTP/1.1 ") : len("HTTP/1.1 ")+3]))
			dst = h2.AppendStatus(dst, code)
			continue
		}
		name, value, ok := bytes.Cut(line, []byte(": "))
		if !ok || !h2.ResponseField(name) || string(name) == "Trailer" {
			continue
		}
		dst = h2.AppendField(dst, name, value)
	}
	return dst
}
