package l7

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/internal/compress"
	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/internal/h2"
	"github.com/switchyard/switchyard/internal/tlsconf"
	"github.com/switchyard/switchyard/l7/balance"
	"github.com/switchyard/switchyard/l7/core"
)

// The request core as package l7 uses it: package core parses, matches, admits, rewrites,
// frames and decides reuse and retries; this file ties that to the configuration state
// (state.go: which route and pool an index means, the answers and metrics of a refusal) and
// observes (metrics, access log), the same way for every engine. An engine owns the sockets and
// runs the exchange (exchange.go): route, begin (admit), the steps with the core's heads and
// body framing (their decisions tries.go's), finish (release, observe).

// clientConn is the per-connection request state every HTTP/1.1 engine shares: the event loops
// (loopConn) and the goroutine engine (goConn) each wrap one.
type clientConn struct {
	s        *Server
	w        io.Writer // where proxy-made answers go: the connection, or the loop's send buffer
	raddr    net.Addr
	in       h1.Reader
	scheme   string
	remote   string
	clientIP string
	fallback *h1.Handover // net/http for what the core does not serve
	// clientClose: the client asked to close after this response (Connection: close).
	clientClose bool
	born        time.Time    // accepted at
	requests    atomic.Int64 // routed so far (mayCloseIdle)
	proto       string       // for the access log: "" is HTTP/1.1
	// failover is the route's failover header line once the request was retried on another
	// backend (l7/failover.go), nil otherwise; reset for every request.
	failover []byte
	// altSvc is the Alt-Svc header line that advertises HTTP/3 on a TLS listener with http3,
	// nil elsewhere.
	altSvc []byte
	// certHeader is the field a mutual-TLS listener passes the verified client subject
	// (certSubject, "" when the client gave no certificate) upstream in; nil elsewhere.
	certHeader, certSubject []byte
	// stream is the HTTP/2 stream the request came on (engine_h2.go), nil on HTTP/1.1: the
	// response then goes out as HEADERS, DATA and trailers, never as HTTP/1.1 text.
	stream *h2.Stream
	block  []byte // the HTTP/2 header block being built
	// grpc: the request is a gRPC call (on an HTTP/2 stream): the proxy's own answers take
	// gRPC's trailers-only form (h2Error).
	grpc bool
	// grpcWeb: the request is a gRPC-Web call to an HTTP/2 pool, which the proxy translates to
	// gRPC and back (grpcweb.go); its own answers are gRPC-Web's (grpcWebError).
	grpcWeb bool
	// responseHeaders is the request's route's response header filter (nil: none).
	responseHeaders *core.HeaderFilter
	// coding is the content coding the request's route compresses its response with, as the
	// client asked (compress.go); Identity: none.
	coding   compress.Coding
	compress *compress.Policy // the route's compression (nil: none)

	head   h1.Head
	rhead  h1.Head
	m      *core.Matcher     // routes the connection's requests (its http.Request is reused)
	tokens [][]byte          // Connection header tokens of the message being copied
	reqBuf []byte            // the upstream request: head and buffered body (replayed on a retry)
	out    []byte            // the response head and other client-bound bytes
	body   core.ResponseBody // the response body being forwarded

	obs observer // records the connection's requests (finish)
}

// newClientConn makes the per-connection state for a client at raddr.
func newClientConn(s *Server, w io.Writer, raddr net.Addr, scheme string, fb *h1.Handover) *clientConn {
	cc := &clientConn{s: s, w: w, raddr: raddr, scheme: scheme, fallback: fb, remote: raddr.String(), born: time.Now(),
		altSvc: s.altSvcOf(fb), certHeader: s.certHeaderOf(fb)}
	cc.m = core.NewMatcher(cc.remote)
	cc.clientIP = balance.ClientIP(&cc.m.Req)
	return cc
}

// newConnGrace is how long Shutdown lets a connection that has not sent its first request take
// to send it (net/http waits 5 s too): the request may be on its way, and no client retries a
// request on a fresh connection that was reset. Idle connections that have served a request are
// closed at once; their clients retry on a new connection (to the process that took over).
const newConnGrace = 5 * time.Second

// mayCloseIdle reports whether Shutdown may close this connection while it waits for a request.
func (cc *clientConn) mayCloseIdle(now time.Time) bool {
	return cc.requests.Load() > 0 || now.Sub(cc.born) >= newConnGrace
}

// errHeadTooLong refuses a request head over limits.max_header_bytes.
var errHeadTooLong = &h1.Rejection{Status: 431, Reason: "request header fields too large"}

// refuse answers a refused head the way the guard does, and counts it.
func (cc *clientConn) refuse(r *h1.Rejection) {
	cc.s.onReject(cc.raddr, r)
	if cc.stream != nil {
		_ = cc.h2Error(r.Status, r.Reason, nil)
		return
	}
	_ = h1.WriteRejection(cc.w, r)
}

// routed is a request the core serves itself: what the core read from its head, and the route.
type routed struct {
	core.Routed
	rt    *routeRT
	start time.Time
	retry *core.RetryPolicy // nil when the route does not retry this method
}

// route lets the core read and match the request head. ok is false when net/http must take the
// request (the list in docs/l7.md), including routes to pools only net/http serves (sticky).
func (cc *clientConn) route(st *state, start time.Time) (rq routed, ok bool) {
	rq.start = start
	cc.requests.Add(1)
	cc.failover, cc.grpc, cc.grpcWeb, cc.responseHeaders, cc.coding = nil, false, false, nil, compress.Identity
	rq.Routed, ok = cc.m.Route(st.table, &cc.head, st.needHeaders)
	if !ok {
		return rq, false
	}
	cc.tokens = rq.RI.Tokens
	cc.clientClose = rq.RI.Close
	if len(cc.s.acme) > 0 && strings.HasPrefix(rq.Clean, tlsconf.HTTPChallengePath) {
		return rq, false // ServeHTTP answers the CA's HTTP-01 request (answerACME)
	}
	rq.rt, rq.retry = st.routeTo(rq.Index, &cc.m.Req)
	if rq.rt.redirect != nil {
		return rq, false // a redirect is net/http's to answer (filters.go)
	}
	if p := rq.rt.pool; (p.up == nil && p.h2up == nil) || p.sticky != nil {
		return rq, false
	}
	if rq.rt.rewrite != nil {
		rq.rt.rewrite.apply(&rq)
	}
	cc.grpc = rq.RI.GRPC && cc.stream != nil
	cc.grpcWeb = rq.RI.GRPCWeb && rq.rt.pool.h2up != nil
	cc.responseHeaders = rq.rt.responseHeaders
	cc.compress, cc.coding = rq.rt.compress, negotiateCoding(rq.rt.compress, &cc.head)
	return rq, true
}

// admit is begin on the core's engines: a refused request is answered here, in the client's
// framing, and ended (finish); keep then says whether the connection can serve another request.
func (cc *clientConn) admit(rq *routed, t *tries) (ok, keep bool) {
	ref, ok := cc.s.begin(t, rq.rt, rq.retry, &cc.m.Req)
	if ok {
		return true, true
	}
	closeConn := rq.HasBody || rq.RI.Close
	cc.writeError(ref.code, ref.msg, ref.extra, closeConn)
	cc.finish(ref.route, rq, t, ref.code, 0)
	return false, !closeConn
}

// finish is finish on the core's engines: rq, recorded on route rt (nil: the proxy shed it
// before any route), ended with code and n body bytes relayed.
func (cc *clientConn) finish(rt *routeRT, rq *routed, t *tries, code int, n int64) {
	cc.s.finish(&cc.obs, t, logged{rt: rt, start: rq.start, client: cc.remote, method: cc.m.Req.Method,
		host: cc.m.Req.Host, path: rq.Clean, proto: cc.protoName()}, code, n)
}

// refusal is the answer to a request admission refused: the status, the message, extra
// header lines (each ending in CRLF), and whether it was deliberate (shed or rate-limited).
type refusal struct {
	code  int
	msg   string
	extra []byte
	shed  bool
	route *routeRT // what the request is recorded on: nil when the proxy shed it before any route
}

// refusal counts admission's verdict v on route rt and returns the answer every engine gives.
func (s *Server) refusal(rt *routeRT, v core.Verdict) refusal {
	switch v {
	case core.ShedGlobal:
		s.metrics.shedGlobal.Inc()
		return refusal{http.StatusServiceUnavailable, "overloaded (proxy in-flight limit); retry later", core.ShedHeaders, true, nil}
	case core.RateLimited:
		rt.limitedCount.Inc()
		wait := int64(rt.limiter.RetryAfter().Seconds() + 0.999)
		extra := strconv.AppendInt([]byte("Retry-After: "), wait, 10)
		return refusal{http.StatusTooManyRequests, "rate limit exceeded; slow down", append(extra, "\r\n"...), true, rt}
	case core.ShedPool:
		rt.pool.shedCount.Inc()
		return refusal{http.StatusServiceUnavailable, "overloaded (pool " + rt.pool.name + " in-flight limit); retry later", core.ShedHeaders, true, rt}
	}
	return refusal{http.StatusServiceUnavailable, "no available backend", []byte("Retry-After: 1\r\n"), false, rt}
}

// setHeaders sets the extra header lines on h (an http.ResponseWriter's).
func (r refusal) setHeaders(h http.Header) {
	core.EachLine(r.extra, func(name, value []byte) { h.Set(string(name), string(value)) })
}

// release gives back what begin took for a request that ended on backend b.
func (s *Server) release(rt *routeRT, b *balance.Backend) {
	rt.admission.Release(b)
	s.metrics.inFlight.Dec()
}

// upstreamHead builds the request head for the backend into cc.reqBuf.
func (cc *clientConn) upstreamHead(rq *routed) []byte {
	return core.UpstreamHead(cc.reqBuf[:0], &cc.head, &rq.RI, rq.Method, rq.Target, cc.client(), rq.rt.requestHeaders)
}

// client is the downstream side the upstream head is rewritten for.
func (cc *clientConn) client() core.Client {
	return core.Client{IP: cc.clientIP, Scheme: cc.scheme, CertHeader: cc.certHeader, CertSubject: cc.certSubject}
}

// responseHead builds the client's response head into cc.out (cc.tokens holds the response's
// Connection tokens). A server shutting down closes the connection after this response: say so.
func (cc *clientConn) responseHead(code int, fr core.Framing) []byte {
	head := core.ResponseHead(cc.out[:0], &cc.rhead, cc.tokens, code, fr, cc.clientClose || cc.s.shutting.Load(), cc.responseHeaders)
	return withLine(withLine(head, cc.failover), cc.altSvc)
}

// responseTokens collects the response's Connection tokens and reports whether the backend
// closes after it.
func (cc *clientConn) responseTokens() bool {
	var upClose bool
	cc.tokens, upClose = core.ResponseTokens(&cc.rhead, cc.tokens)
	return upClose
}

// countRetry records a retry the budget allowed (sent) or refused (budget_exhausted).
func (s *Server) countRetry(p *pool, ok bool) {
	if !ok {
		s.metrics.retries.WithLabelValues(p.name, "budget_exhausted").Inc()
		return
	}
	s.metrics.retries.WithLabelValues(p.name, "sent").Inc()
}

// passive feeds outlier detection: connect errors and 5xx count as failures; err (when not
// ok) is why, and a local resource failure (core.LocalResource) counts neither way.
func (s *Server) passive(p *pool, b *balance.Backend, ok bool, err error) {
	if p.detector == nil || (!ok && err != nil && core.LocalResource(err)) {
		return
	}
	if ok {
		p.detector.Success(b)
	} else {
		p.detector.Failure(b)
	}
}

// upstreamCode is the status, message and extra header fields for an exchange that failed
// before any response byte, on every engine: 503 with Retry-After when the proxy itself ran out
// of descriptors (its budget or a real EMFILE: shed, not the backend's fault), 499 when the
// client went away (a status for the log only), 504 on a timeout, 502 otherwise.
func upstreamCode(err error) (int, string, []byte) {
	var ne net.Error
	switch {
	case core.LocalResource(err):
		return http.StatusServiceUnavailable, localShedMsg, core.ShedHeaders
	case errors.Is(err, context.Canceled):
		return 499, "client closed request", nil
	case errors.As(err, &ne) && ne.Timeout():
		return http.StatusGatewayTimeout, "upstream timeout", nil
	}
	return http.StatusBadGateway, "upstream error", nil
}

// observer records requests (metrics, access log) for finish: those of one client connection
// on the core's engines, of one request on net/http's. It keeps the last requests_total series
// used, so steady traffic does no label lookup and allocates nothing here.
type observer struct {
	rt    *routeRT
	b     *balance.Backend
	code  int
	count prometheus.Counter
}

// logged is a request as observation names it: its route (nil when it has none, or the proxy
// shed it before any), when it started, and the access log's fields of the request itself.
type logged struct {
	rt                                *routeRT
	start                             time.Time
	client, method, host, path, proto string
}

// observe records a request q that ended with code on backend b (nil: none), n body bytes
// sent, after attempts backends.
func (s *Server) observe(o *observer, q *logged, b *balance.Backend, code int, n int64, attempts int) {
	rt := q.rt
	elapsed := time.Since(q.start)
	routeName, poolName, backend := "", "", ""
	if rt != nil {
		routeName, poolName = rt.cfg.Name, rt.poolName()
	}
	if b != nil {
		backend = b.Address
	}
	if o.count == nil || o.rt != rt || o.b != b || o.code != code {
		o.rt, o.b, o.code = rt, b, code
		o.count = s.metrics.requests.WithLabelValues(routeName, poolName, backend, strconv.Itoa(code))
	}
	o.count.Inc()
	if rt != nil {
		rt.durationObs.Observe(elapsed.Seconds())
	} else {
		s.metrics.duration.WithLabelValues("", "").Observe(elapsed.Seconds())
	}
	if s.access != nil {
		s.access.log(&accessEntry{client: q.client, method: q.method, host: q.host, path: q.path,
			proto: q.proto, status: code, bytes: n, duration: elapsed, route: routeName, pool: poolName,
			backend: backend, attempts: attempts})
	}
}

// writeError writes what http.Error would: a plain-text body with the message.
func (cc *clientConn) writeError(code int, msg string, extra []byte, closeConn bool) error {
	if cc.grpcWeb {
		return cc.grpcWebError(code, msg, extra, closeConn)
	}
	if cc.stream != nil {
		return cc.h2Error(code, msg, extra)
	}
	_, err := cc.w.Write(core.ErrorResponse(make([]byte, 0, 256), code, msg, extra, closeConn))
	return err
}

// protoName is the client protocol for the access log.
func (cc *clientConn) protoName() string {
	if cc.proto != "" {
		return cc.proto
	}
	return "HTTP/1.1"
}
