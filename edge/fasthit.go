package edge

import (
	"bytes"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/switchyard/switchyard/edge/cachecontrol"
	"github.com/switchyard/switchyard/edge/fastpath"
	"github.com/switchyard/switchyard/edge/store"
	"github.com/switchyard/switchyard/internal/compress"
)

// Limits and timeouts of client connections, on the fast path and on the net/http, HTTP/2 and
// HTTP/3 servers alike.
const (
	clientMaxHead    = 64 << 10 // a longer head is handed over by the fast path; net/http applies its own limit
	clientIdle       = 2 * time.Minute
	clientReadHeader = 10 * time.Second
)

// fastCache is the edge as its HTTP/1.1 fast path (edge/fastpath) sees it.
type fastCache struct {
	e *Edge
	h http.Handler // the full path: the edge, with the listener's own fields (Alt-Svc on TLS)
}

var _ fastpath.Cache = fastCache{}

// ServeHTTP answers through the full path.
func (c fastCache) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.h.ServeHTTP(w, r) }

// FreshHit looks a plain GET or HEAD up as Edge.serveCacheable does: the same key, the same
// pass-through and freshness checks, a memory body only.
func (c fastCache) FreshHit(now time.Time, host, target []byte, req fastpath.Fields) (*store.Entry, time.Duration, bool) {
	e := c.e
	primary := e.fastPrimaryKey(host, target)
	if path, _, _ := bytes.Cut(target, []byte("?")); string(path) == rttPath {
		return nil, 0, false
	}
	if _, pass := e.pass.GetIfPresent(primary); pass {
		return nil, 0, false
	}
	key := primary
	e.variantsMu.RLock()
	vs := e.variants[primary]
	e.variantsMu.RUnlock()
	if vs != nil {
		key = variantKey(primary, vs.names, req.Fields(vs.names))
	} else if keyed := e.cfg.RequestHeaders.Key; len(keyed) > 0 {
		key = variantKey(primary, keyed, req.Fields(keyed))
	}
	if e.compress != nil {
		if cd := e.coding(req.Fields(acceptEncodingField)); cd != compress.Identity {
			key = codedKey(key, cd) // not stored yet: the full path makes it (serveCoded)
		}
	}
	ent, found, err := e.store.Get(key)
	if err != nil || !found || (ent.Body == nil && ent.Meta.Size > 0) {
		return nil, 0, false // a miss, a body that lives on disk only, or unreadable (net/http answers 503)
	}
	m := ent.Meta
	cacheNow := now // the cache's clock (WithClock), the wall clock by default: one clock read
	if e.clock != nil {
		cacheNow = e.clock() // now stays the wall clock for Date and deadlines
	}
	age := m.Age(cacheNow)
	if cachecontrol.Decide(nil, m.Directives, age, lifetime(m), time.Duration(e.cfg.Grace)) != cachecontrol.Fresh {
		return nil, 0, false
	}
	return ent, age, true
}

// fastPrimaryKey is primaryKey of a fast path's plain host and target (h1.PlainHost: ASCII), in
// one allocation where no cache_key rule rewrites the URI (the two conversions and the
// concatenation were three).
func (e *Edge) fastPrimaryKey(host, target []byte) string {
	if e.cfg.CacheKey != nil {
		return e.primaryKey(string(host), string(target))
	}
	var b strings.Builder
	b.Grow(len(host) + len(target))
	for _, ch := range host {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		b.WriteByte(ch)
	}
	b.Write(target)
	return b.String()
}

// newFastPath returns the fast path on the client listener ln; srv is to serve its Fallback.
func (e *Edge) newFastPath(ln net.Listener) *fastpath.Server {
	cfg := e.fastConfig()
	var fs *fastpath.Server
	cfg.H2C = func(c net.Conn) { e.serveH2(c, nil, e, fs) } // its hits on the fast path too
	fs = fastpath.New(fastCache{e, e}, ln, cfg)
	return fs
}

// newTLSFastPath returns the fast path of the TLS listener ln: its HTTP/1.1 connections, once
// handshaken, are given to its ServeConn; h is the listener's full path, altSvc its HTTP/3
// advertisement ("" for none).
func (e *Edge) newTLSFastPath(ln net.Listener, h http.Handler, altSvc string) *fastpath.Server {
	cfg := e.fastConfig()
	cfg.AltSvc = altSvc
	return fastpath.New(fastCache{e, h}, ln, cfg)
}

// fastConfig is what the fast paths of every listener share.
func (e *Edge) fastConfig() fastpath.Config {
	return fastpath.Config{
		MaxHead: clientMaxHead, Idle: clientIdle, ReadHeader: clientReadHeader,
		ClientTimeout: time.Duration(e.cfg.ClientTimeout), TierHeader: TierHeader,
		Raw: rawConn, Cut: cutSlow, Warn: e.warn, Log: e.log,
	}
}

// LabelHit sets a hit's X-Cache and Via.
func (c fastCache) LabelHit(h http.Header) { setCacheHeaders(h, Hit, 0) }

// TierAuthentic checks a lower tier's TierHeader; never with tiers.client_ca_file, which the
// plain connections of the fast path cannot satisfy (edge/tiermtls.go).
func (c fastCache) TierAuthentic(v []byte) bool { return c.e.tierCAs == nil && c.e.tierAuthentic(v) }

// ServedHit counts a fast-path hit in the stats and its origin's analytics.
func (c fastCache) ServedHit(host []byte, fromTier, head bool, size int64) {
	c.e.stats.count(Hit)
	c.e.stats.FastPath.Add(1)
	c.e.servedFast(host, fromTier, head, size)
}

// ServedOwn counts a request the fast path answered through ServeHTTP.
func (c fastCache) ServedOwn() { c.e.stats.FastMiss.Add(1) }

// Lent counts a request the fast path had net/http answer.
func (c fastCache) Lent() { c.e.stats.Lent.Add(1) }
