package l7

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/internal/handover"
	"github.com/switchyard/switchyard/l7/balance"
	"github.com/switchyard/switchyard/l7/core"
	"github.com/switchyard/switchyard/l7/guard"
	"github.com/switchyard/switchyard/l7/route"
)

// The engine-neutral half of the request core: routing, admission, release and observation run
// on the configuration state (state.go) the same way for every engine; the wire rules they use
// (parse, rewrite, framing, reuse, retry) are in package core. An engine owns the sockets and
// calls these in order: route, admit, (forward with core's heads and body framing), release,
// observe.

// clientConn is the per-connection request state every HTTP/1.1 engine shares: the event loops
// (loopConn) and the goroutine engine (goConn) each wrap one.
type clientConn struct {
	s        *Server
	w        io.Writer // where proxy-made answers go: the connection, or the loop's send buffer
	raddr    net.Addr
	in       connReader
	scheme   string
	remote   string
	clientIP string
	fallback *handover.Listener // net/http for what the core does not serve
	// clientClose: the client asked to close after this response (Connection: close).
	clientClose bool

	head     guard.Head
	rhead    guard.Head
	req      http.Request // reused for matching and balancing
	url      url.URL
	lastHost []byte
	tokens   [][]byte          // Connection header tokens of the message being copied
	reqBuf   []byte            // the upstream request: head and buffered body (replayed on a retry)
	out      []byte            // the response head and other client-bound bytes
	body     core.ResponseBody // the response body being forwarded

	// the last requests_total series used, so steady traffic does no label lookup
	mRoute *routeRT
	mBack  *balance.Backend
	mCode  int
	mCount prometheus.Counter
}

// newClientConn makes the per-connection state for a client at raddr.
func newClientConn(s *Server, w io.Writer, raddr net.Addr, scheme string, fb *handover.Listener) *clientConn {
	cc := &clientConn{s: s, w: w, raddr: raddr, scheme: scheme, fallback: fb, remote: raddr.String()}
	cc.req.RemoteAddr = cc.remote
	cc.clientIP = balance.ClientIP(&cc.req)
	return cc
}

// errHeadTooLong refuses a request head over limits.max_header_bytes.
var errHeadTooLong = &guard.Rejection{Status: 431, Reason: "request header fields too large"}

// refuse answers a refused head the way the guard does, and counts it.
func (cc *clientConn) refuse(r *guard.Rejection) {
	cc.s.onReject(cc.raddr, r)
	_ = guard.WriteRejection(cc.w, r)
}

// routed is a request the core serves itself, as its head describes it.
type routed struct {
	rt      *routeRT
	method  string
	target  []byte // the request target sent upstream (the cleaned path and the query)
	clean   string // the cleaned path
	ri      core.ReqInfo
	start   time.Time
	hasBody bool
	retry   *core.RetryPolicy // nil when the route does not retry this method
}

// route reads the request line and fields, cleans the path and matches a route. ok is false
// when net/http must take the request (the list in docs/l7.md).
func (cc *clientConn) route(st *state, start time.Time) (rq routed, ok bool) {
	rq.start = start
	method, target, ok := core.ParseRequestLine(cc.head.Line)
	if !ok {
		return rq, false
	}
	rq.method = method
	rq.ri = core.Inspect(&cc.head, cc.tokens)
	cc.tokens = rq.ri.Tokens
	ri := &rq.ri
	if ri.Unsafe {
		return rq, false
	}
	cc.clientClose = ri.Close
	pathPart, query := target, []byte(nil)
	if q := bytes.IndexByte(target, '?'); q >= 0 {
		pathPart, query = target[:q], target[q+1:]
	}
	// Paths with escapes or characters that need them take the url package's exact decoding;
	// plain ones (nearly all) are used as they are.
	rq.target = target
	if core.PlainPath(pathPart) && core.PlainQuery(query) {
		p := string(pathPart)
		c, err := route.NormalizePath(p, p)
		if err != nil {
			return rq, false
		}
		rq.clean = c
		if c != p {
			rq.target = core.AppendTarget(nil, c, query)
		}
	} else {
		u, err := url.ParseRequestURI(string(target))
		if err != nil {
			return rq, false
		}
		c, err := route.NormalizePath(u.Path, u.EscapedPath())
		if err != nil {
			return rq, false
		}
		rq.clean = c
		rq.target = []byte((&url.URL{Path: c, RawQuery: u.RawQuery}).RequestURI())
	}
	cc.matchRequest(st, method, rq.clean, ri.Host, query)
	m := st.table.Match(&cc.req, rq.clean)
	if m == nil {
		return rq, false
	}
	rq.rt = st.routes[m.Index]
	p := rq.rt.pool
	if p.up == nil || p.sticky != nil {
		return rq, false
	}
	if rq.rt.retry.Covers(method) {
		rq.retry = rq.rt.retry
	}
	rq.hasBody = cc.head.Chunked || cc.head.ContentLength > 0
	return rq, true
}

// matchRequest fills the reused http.Request the route table and the balancers read.
func (cc *clientConn) matchRequest(st *state, method, clean string, host, query []byte) {
	cc.req.Method = method
	if !bytes.Equal(host, cc.lastHost) || cc.req.Host == "" {
		cc.req.Host = string(host)
		cc.lastHost = append(cc.lastHost[:0], host...)
	}
	cc.url.Path = clean
	cc.url.RawQuery = ""
	if len(query) > 0 {
		cc.url.RawQuery = string(query)
	}
	cc.req.URL = &cc.url
	if st.needHeaders {
		cc.req.Header = make(http.Header, len(cc.head.Fields))
		for _, f := range cc.head.Fields {
			cc.req.Header.Add(string(f.Name), string(f.Value))
		}
	} else {
		cc.req.Header = nil
	}
}

// admit takes the in-flight slots and the rate-limit token of a routed request and picks its
// backend. When one is refused it answers the client itself (503 or 429), releases what it took
// and returns nil; keep then says whether the connection can serve another request.
func (cc *clientConn) admit(st *state, rq *routed) (b *balance.Backend, keep bool) {
	s, rt, p := cc.s, rq.rt, rq.rt.pool
	closeConn := rq.hasBody || rq.ri.Close
	if !st.global.TryAcquire() {
		s.metrics.shedGlobal.Inc()
		cc.writeError(http.StatusServiceUnavailable, "overloaded (proxy in-flight limit); retry later", core.ShedHeaders, closeConn)
		cc.observe(nil, nil, http.StatusServiceUnavailable, 0, rq.start, 0, rq.clean)
		return nil, !closeConn
	}
	if rt.limiter != nil && !rt.limiter.Allow(rt.keyOf(&cc.req)) {
		st.global.Release()
		rt.limitedCount.Inc()
		cc.out = append(cc.out[:0], "Retry-After: "...)
		cc.out = strconv.AppendInt(cc.out, int64(rt.limiter.RetryAfter().Seconds()+0.999), 10)
		cc.out = append(cc.out, "\r\n"...)
		cc.writeError(http.StatusTooManyRequests, "rate limit exceeded; slow down", cc.out, closeConn)
		cc.observe(rt, nil, http.StatusTooManyRequests, 0, rq.start, 0, rq.clean)
		return nil, !closeConn
	}
	if !p.gate.TryAcquire() {
		st.global.Release()
		p.shedCount.Inc()
		cc.writeError(http.StatusServiceUnavailable, "overloaded (pool "+p.name+" in-flight limit); retry later", core.ShedHeaders, closeConn)
		cc.observe(rt, nil, http.StatusServiceUnavailable, 0, rq.start, 0, rq.clean)
		return nil, !closeConn
	}
	p.budget.Request()
	if b = p.picker.Pick(&cc.req, nil); b == nil {
		p.gate.Release()
		st.global.Release()
		cc.writeError(http.StatusServiceUnavailable, "no available backend", []byte("Retry-After: 1\r\n"), closeConn)
		cc.observe(rt, nil, http.StatusServiceUnavailable, 0, rq.start, 0, rq.clean)
		return nil, !closeConn
	}
	s.metrics.inFlight.Inc()
	s.decisions.Add(1)
	b.Acquire()
	return b, true
}

// release gives back what admit took for a request sent to b.
func (cc *clientConn) release(st *state, rq *routed, b *balance.Backend) {
	b.Release()
	rq.rt.pool.gate.Release()
	cc.s.metrics.inFlight.Dec()
	st.global.Release()
}

// retryPick moves an admitted request from backend b to another one for a retry, when the
// route's policy, the attempts so far and the pool's retry budget allow it; it returns nil
// (and b keeps the request) otherwise. tried lists the backends used so far; usable, when set,
// restricts the pick to backends the engine can reach itself.
func (cc *clientConn) retryPick(rq *routed, b *balance.Backend, tried []*balance.Backend, replayable bool, usable func(*balance.Backend) bool) *balance.Backend {
	if rq.retry == nil || len(tried) >= rq.retry.MaxAttempts(replayable) || !cc.s.spendRetry(rq.rt.pool) {
		return nil
	}
	nb := rq.rt.pool.picker.Pick(&cc.req, func(x *balance.Backend) bool {
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
	cc.s.decisions.Add(1)
	return nb
}

// upstreamHead builds the request head for the backend into cc.reqBuf.
func (cc *clientConn) upstreamHead(rq *routed) []byte {
	return core.UpstreamHead(cc.reqBuf[:0], &cc.head, &rq.ri, rq.method, rq.target, core.Client{IP: cc.clientIP, Scheme: cc.scheme})
}

// responseHead builds the client's response head into cc.out (cc.tokens holds the response's
// Connection tokens). A server shutting down closes the connection after this response: say so.
func (cc *clientConn) responseHead(code int, fr core.Framing) []byte {
	return core.ResponseHead(cc.out[:0], &cc.rhead, cc.tokens, code, fr, cc.clientClose || cc.s.shutting.Load())
}

// responseTokens collects the response's Connection tokens and reports whether the backend
// closes after it.
func (cc *clientConn) responseTokens() bool {
	var upClose bool
	cc.tokens, upClose = core.ResponseTokens(&cc.rhead, cc.tokens)
	return upClose
}

// upstreamCode is the status and message for an upstream failure before any response byte:
// 504 on a timeout, 502 otherwise.
func upstreamCode(err error) (int, string) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return http.StatusGatewayTimeout, "upstream timeout"
	}
	return http.StatusBadGateway, "upstream error"
}

// observe records metrics and the access log line of a request, with pre-resolved series so
// steady traffic allocates nothing here.
func (cc *clientConn) observe(rt *routeRT, b *balance.Backend, code int, n int64, start time.Time, attempts int, path string) {
	s := cc.s
	elapsed := time.Since(start)
	if cc.mCount == nil || cc.mRoute != rt || cc.mBack != b || cc.mCode != code {
		routeName, poolName, backend := "", "", ""
		if rt != nil {
			routeName, poolName = rt.cfg.Name, rt.pool.name
		}
		if b != nil {
			backend = b.Address
		}
		cc.mRoute, cc.mBack, cc.mCode = rt, b, code
		cc.mCount = s.metrics.requests.WithLabelValues(routeName, poolName, backend, strconv.Itoa(code))
	}
	cc.mCount.Inc()
	if rt != nil {
		rt.durationObs.Observe(elapsed.Seconds())
	} else {
		s.metrics.duration.WithLabelValues("", "").Observe(elapsed.Seconds())
	}
	if s.access != nil {
		routeName, poolName, backend := "", "", ""
		if rt != nil {
			routeName, poolName = rt.cfg.Name, rt.pool.name
		}
		if b != nil {
			backend = b.Address
		}
		s.access.LogAttrs(context.Background(), slog.LevelInfo, "request",
			slog.String("client", cc.remote), slog.String("method", cc.req.Method), slog.String("host", cc.req.Host),
			slog.String("path", path), slog.String("proto", "HTTP/1.1"), slog.Int("status", code),
			slog.Int64("bytes", n), slog.Duration("duration", elapsed), slog.String("route", routeName),
			slog.String("pool", poolName), slog.String("backend", backend), slog.Int("attempts", attempts))
	}
}

// writeError writes what http.Error would: a plain-text body with the message.
func (cc *clientConn) writeError(code int, msg string, extra []byte, closeConn bool) error {
	_, err := cc.w.Write(core.ErrorResponse(make([]byte, 0, 256), code, msg, extra, closeConn))
	return err
}
