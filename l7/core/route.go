package core

import (
	"bytes"
	"net/http"
	"net/url"
	"time"

	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/internal/httppath"
	"github.com/switchyard/switchyard/l7/balance"
	"github.com/switchyard/switchyard/l7/route"
)

// Routed is a request the core serves itself, as its head describes it.
type Routed struct {
	Index   int // of the matched route in the table
	Method  string
	Target  []byte // the request target sent upstream (the cleaned path and the query)
	Clean   string // the cleaned path
	RI      ReqInfo
	HasBody bool
}

// Matcher routes the requests of one client connection; it reuses one http.Request (the form
// the route table and the balancers read) across them.
type Matcher struct {
	Req      http.Request
	url      url.URL
	lastHost []byte
	tokens   [][]byte
}

// NewMatcher makes the matcher of a client at remote (host:port).
func NewMatcher(remote string) *Matcher {
	m := &Matcher{}
	m.Req.RemoteAddr = remote
	return m
}

// Route reads the request line and fields of h, cleans the path and matches a route in table.
// ok is false when the request is not for the core (net/http takes it: other protocol
// versions and target forms, Expect, Upgrade, odd Host or values, paths that fail
// normalisation, no route). needHeaders builds the header map for routes, rate limits and hash
// keys that read headers.
func (m *Matcher) Route(table *route.Table, h *h1.Head, needHeaders bool) (rq Routed, ok bool) {
	method, target, ok := ParseRequestLine(h.Line)
	if !ok {
		return rq, false
	}
	rq.Method = method
	rq.RI = Inspect(h, m.tokens)
	m.tokens = rq.RI.Tokens
	if rq.RI.Unsafe {
		return rq, false
	}
	pathPart, query := target, []byte(nil)
	if q := bytes.IndexByte(target, '?'); q >= 0 {
		pathPart, query = target[:q], target[q+1:]
	}
	// Paths with escapes or characters that need them take the url package's exact decoding;
	// plain ones (nearly all) are used as they are.
	rq.Target = target
	if h1.PlainPath(pathPart) && h1.PlainQuery(query) {
		p := string(pathPart)
		c, err := httppath.Normalize(p, p)
		if err != nil {
			return rq, false
		}
		rq.Clean = c
		if c != p {
			rq.Target = AppendTarget(nil, c, query)
		}
	} else {
		u, err := url.ParseRequestURI(string(target))
		if err != nil {
			return rq, false
		}
		c, err := httppath.Normalize(u.Path, u.EscapedPath())
		if err != nil {
			return rq, false
		}
		rq.Clean = c
		rq.Target = []byte((&url.URL{Path: c, RawQuery: u.RawQuery}).RequestURI())
	}
	m.fill(h, method, rq.Clean, rq.RI.Host, query, needHeaders)
	r := table.Match(&m.Req, rq.Clean)
	if r == nil {
		return rq, false
	}
	rq.Index = r.Index
	rq.HasBody = h.Chunked || h.ContentLength > 0
	return rq, true
}

// fill sets the reused http.Request to the request at hand.
func (m *Matcher) fill(h *h1.Head, method, clean string, host, query []byte, needHeaders bool) {
	m.Req.Method = method
	if !bytes.Equal(host, m.lastHost) || m.Req.Host == "" {
		m.Req.Host = string(host)
		m.lastHost = append(m.lastHost[:0], host...)
	}
	m.url.Path = clean
	m.url.RawQuery = ""
	if len(query) > 0 {
		m.url.RawQuery = string(query)
	}
	m.Req.URL = &m.url
	if !needHeaders {
		m.Req.Header = nil
		return
	}
	m.Req.Header = make(http.Header, len(h.Fields))
	for _, f := range h.Fields {
		m.Req.Header.Add(string(f.Name), string(f.Value))
	}
}

// Gate is an in-flight limit (limit.Gate).
type Gate interface {
	TryAcquire() bool
	Release()
}

// RateLimiter is a token bucket per key (limit.Buckets).
type RateLimiter interface {
	Allow(key string) bool
	RetryAfter() time.Duration
}

// Budget counts requests for a retry budget and lets retries spend it (limit.RetryBudget).
type Budget interface {
	Request()
	TryRetry() bool
}

// Admission is what admitting a routed request takes: the global gate, the route's rate limit
// (nil: none) and its key, the pool's gate, retry budget and balancer.
type Admission struct {
	Global, Pool Gate
	Limiter      RateLimiter
	KeyOf        func(*http.Request) string
	Budget       Budget
	Picker       balance.Picker
}

// Verdict is the outcome of admission.
type Verdict int

// The admission outcomes, in the order they are checked.
const (
	Admitted    Verdict = iota
	ShedGlobal          // the global in-flight limit: 503, shed
	RateLimited         // the route's rate limit: 429 with Retry-After
	ShedPool            // the pool's in-flight limit: 503, shed
	NoBackend           // nothing available in the pool: 503
)

// Admit takes the in-flight slots and the rate-limit token of a request and picks its backend,
// counting it in flight there. On any refusal it gives back what it took and returns the
// verdict (b nil).
func (a *Admission) Admit(r *http.Request) (b *balance.Backend, v Verdict) {
	if !a.Global.TryAcquire() {
		return nil, ShedGlobal
	}
	if a.Limiter != nil && !a.Limiter.Allow(a.KeyOf(r)) {
		a.Global.Release()
		return nil, RateLimited
	}
	if !a.Pool.TryAcquire() {
		a.Global.Release()
		return nil, ShedPool
	}
	a.Budget.Request()
	if b = a.Picker.Pick(r, nil); b == nil {
		a.Pool.Release()
		a.Global.Release()
		return nil, NoBackend
	}
	b.Acquire()
	return b, Admitted
}

// Release gives back what Admit took for a request that ended on backend b.
func (a *Admission) Release(b *balance.Backend) {
	b.Release()
	a.Pool.Release()
	a.Global.Release()
}

// Retry moves an admitted request from backend b to another one when the budget allows; tried
// lists the backends used so far, usable (when set) restricts the pick to backends the engine
// can reach. spend is told whether the budget allowed the retry (for metrics). It returns nil,
// and b keeps the request, when no retry happens.
func (a *Admission) Retry(r *http.Request, b *balance.Backend, tried []*balance.Backend, usable func(*balance.Backend) bool, spend func(ok bool)) *balance.Backend {
	ok := a.Budget.TryRetry()
	spend(ok)
	if !ok {
		return nil
	}
	nb := a.Picker.Pick(r, func(x *balance.Backend) bool {
		if usable != nil && !usable(x) {
			return true
		}
		for _, t := range tried {
			if t == x {
				return true
			}
		}
		return false
	})
	if nb == nil {
		return nil
	}
	b.Release()
	nb.Acquire()
	return nb
}
