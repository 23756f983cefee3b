package edge

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/edge/cachecontrol"
	"github.com/switchyard/switchyard/edge/store"
	"github.com/switchyard/switchyard/internal/compress"
)

// Compression at the edge (`compress:`, a compress.Rule, shared with the L7 stop): the origin
// is asked for identity and that is what is stored; each coding a client asks for is stored
// once, as a variant of its own (the identity's key plus the coding), made from the stored
// identity the first time a client asks for it, so a hit never compresses. The request that
// fills the cache (a miss) gets identity, marked Vary: Accept-Encoding like every response
// the rule covers. Range requests are answered from the identity representation.

var acceptEncodingField = []string{"Accept-Encoding"}

// codingSep joins a key and its coding: a newline never occurs in a request's key parts.
const codingSep = "\ncoding:"

func codedKey(key string, cd compress.Coding) string { return key + codingSep + cd.String() }

// withCoded adds the keys of every coding to keys (what a purge of a URL must remove).
func (e *Edge) withCoded(keys []string) []string {
	if e.compress == nil {
		return keys
	}
	for _, k := range keys[:len(keys):len(keys)] {
		for _, cd := range e.compress.Offered {
			keys = append(keys, codedKey(k, cd))
		}
	}
	return keys
}

// coding is the coding a request asks for: identity without a rule, and for a range (of the
// identity representation).
func (e *Edge) coding(h http.Header) compress.Coding {
	if e.compress == nil || h.Get("Range") != "" {
		return compress.Identity
	}
	return e.compress.Negotiate([]byte(strings.Join(h.Values("Accept-Encoding"), ",")))
}

// compressible reports whether a stored identity response is one the rule compresses.
func (e *Edge) compressible(m *store.Meta) bool {
	return e.compress.Applies(compress.ResponseOf(m.Status, m.Size, m.Header))
}

// serveCoded answers a request for coding cd from storage: with its stored variant when that
// is fresh, else with one made now from the fresh stored identity (stored for the requests
// after it). It returns false, having written nothing, when neither can be: the request then
// goes the identity way (a miss fills the identity).
func (e *Edge) serveCoded(w http.ResponseWriter, r *http.Request, reqCC cachecontrol.Directives, key string, cd compress.Coding) bool {
	ck := codedKey(key, cd)
	if ent, ok, err := e.store.Get(ck); err == nil && ok && e.fresh(reqCC, ent) {
		if e.serveEntry(w, r, ent, Hit, ent.Meta.Age(e.now())) {
			return true
		}
	}
	ent, ok, err := e.store.Get(key)
	if err != nil || !ok || !e.fresh(reqCC, ent) || !e.compressible(ent.Meta) {
		return false
	}
	coded, err := e.encodeStored(ent, ck, cd)
	if err != nil {
		e.warn("compress stored response failed", "key", ck, "err", err)
		return false
	}
	return e.serveEntry(w, r, coded, Hit, coded.Meta.Age(e.now()))
}

// fresh reports whether a stored entry may answer the request as a fresh hit.
func (e *Edge) fresh(reqCC cachecontrol.Directives, ent *store.Entry) bool {
	m := ent.Meta
	return cachecontrol.Decide(reqCC, m.Directives, m.Age(e.now()), lifetime(m), time.Duration(e.cfg.Grace)) == cachecontrol.Fresh
}

// encoding collapses concurrent first requests for one coded variant into one compression.
type encoding struct {
	mu       sync.Mutex
	inFlight map[string]*encodeCall
}

type encodeCall struct {
	done chan struct{}
	ent  *store.Entry
	err  error
}

// encodeStored compresses the stored identity ent with cd into a new entry under key ck (its
// head rewritten by compress.EncodeHeader, the same freshness and tags), once for concurrent
// callers.
func (e *Edge) encodeStored(ent *store.Entry, ck string, cd compress.Coding) (*store.Entry, error) {
	e.encoding.mu.Lock()
	if c := e.encoding.inFlight[ck]; c != nil {
		e.encoding.mu.Unlock()
		<-c.done
		return c.ent, c.err
	}
	c := &encodeCall{done: make(chan struct{})}
	if e.encoding.inFlight == nil {
		e.encoding.inFlight = map[string]*encodeCall{}
	}
	e.encoding.inFlight[ck] = c
	e.encoding.mu.Unlock()
	c.ent, c.err = e.encodeOnce(ent, ck, cd)
	e.encoding.mu.Lock()
	delete(e.encoding.inFlight, ck)
	e.encoding.mu.Unlock()
	close(c.done)
	return c.ent, c.err
}

func (e *Edge) encodeOnce(ent *store.Entry, ck string, cd compress.Coding) (*store.Entry, error) {
	src := io.Reader(bytes.NewReader(ent.Body))
	if ent.Body == nil && ent.Meta.Size > 0 {
		f, done, err := e.store.Reader(ent)
		if err != nil {
			return nil, err
		}
		defer done()
		src = f
	}
	w, err := e.store.NewWriter()
	if err != nil {
		return nil, err
	}
	enc := e.compress.Enc.Get(cd, w)
	_, err = io.Copy(enc, src)
	if cerr := enc.Close(); err == nil {
		err = cerr
	}
	e.compress.Enc.Put(cd, enc)
	if err != nil || w.Failed() {
		w.Abort()
		return nil, errors.Join(errors.New("compress stored body"), err)
	}
	old := ent.Meta
	h := old.Header.Clone()
	compress.EncodeHeader(h, cd)
	h["Content-Length"] = []string{strconv.FormatInt(w.Len(), 10)}
	m := &store.Meta{Key: ck, Primary: old.Primary, Status: old.Status, Header: h, Vary: old.Vary,
		Tags: old.Tags, ResponseTime: old.ResponseTime, InitialAge: old.InitialAge,
		Lifetime: old.Lifetime, Invalid: old.Invalid, Directives: e.directives(h)}
	e.stats.Compressed.Add(1)
	return w.Commit(m)
}
