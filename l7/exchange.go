package l7

import (
	"errors"
	"net/http"
	"time"

	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/l7/balance"
	"github.com/switchyard/switchyard/l7/core"
)

// The exchange: one request's lifecycle, the same on every engine.
//
//	read the head, route (the engine's: clientConn.route, or ServeHTTP's match of net/http's request)
//	→ begin: admit, pick the first backend, start the attempts (a refusal goes to finish)
//	  → connect → send → await the head            (xConnect, xSend, xAwait)
//	      ├ failed before any response byte: replay once on a new connection (a pooled one the
//	      │   backend had closed), retry on another backend (both back to xConnect), or answer
//	      │   the failure (xAnswer)
//	      ├ a head the route retries on: drop it, on to another backend (xRetry → xConnect)
//	      └ relay the head, the body and its trailers (xRelay)
//	  → finish: release, observe (metrics, access log), forget the attempts
//
// Every request an engine takes ends in finish once, admitted or not, so what admission took
// is given back and the request recorded in one place. The order of the steps is tries.after,
// once; every decision between them is tries' (which failures the backend is blamed for, when a
// request may go out again and to which backend) and what the client is told of a failure is
// answerFailure's (net/http's proxyError gives the same status, upstreamCode). The engines run
// the steps and only move bytes and frames: the event loops run a step when its socket is ready
// and go on in evLoop.stepped (engine_loop_exchange_linux.go); the goroutine engine runs them
// with blocking calls over an HTTP/1.1 or HTTP/2 upstream leg in goConn.forward
// (engine_goroutine.go, forward_h2.go); net/http's path runs them in Server.RoundTrip, its
// transport connecting and sending within the await step.

// xstep is a step of a request's exchange with its pool's backends.
type xstep uint8

const (
	xConnect xstep = iota // a connection to t.backend(): an idle one, or a new one when t.fresh
	xSend                 // the request head and the body held
	xAwait                // the final response head (interim heads go to the client as they come)
	xRetry                // the response is dropped unread (its connection closed): another backend
	xRelay                // the response head, body and trailers to the client
	xAnswer               // the client is told of the failure (answerFailure)
	xDone                 // the exchange is over
)

// outcome is how an exchange step ended.
type outcome struct {
	// err: the step failed, before any response byte reached the client. reused and gotBytes
	// describe the failed attempt's connection (a pooled one; a response byte read from it),
	// false both where the engine has none of its own.
	err              error
	reused, gotBytes bool
	// code is the final response's status after xAwait, grpcStatus a gRPC trailers-only
	// answer's grpc-status ("" when none).
	code       int
	grpcStatus string
}

// after is the exchange's sequence: the step that follows step s, which ended as o. A failure
// of connect, send or await goes to tries.failed (replay, retry or answer); a final head to
// tries.answered (retry, or relay). Relaying ends the exchange whatever happened: a response
// under way is never retried.
func (t *tries) after(s xstep, o outcome, now time.Time) xstep {
	if o.err != nil && s < xRetry {
		switch t.failed(o.err, o.reused, o.gotBytes, now) {
		case replay:
			t.fresh = true
			return xConnect
		case retry:
			t.fresh = false
			return xConnect
		}
		return xAnswer
	}
	switch s {
	case xConnect:
		return xSend
	case xSend:
		return xAwait
	case xAwait:
		if t.answered(o.code, o.grpcStatus, now) {
			return xRetry
		}
		return xRelay
	case xRetry:
		t.fresh = false
		return xConnect
	}
	return xDone
}

// answerFailure tells the client of an exchange that failed with err before any response byte
// reached it, and returns the status to record and whether the client connection stays usable.
// whole says that the request's body was all read: the unread rest of one would be taken for
// the next request, so the connection closes after the answer. A client that went away gets
// nothing (499), a malformed body of its own 400 (refuseBody); any other failure gets the
// status every engine gives it (upstreamCode).
func (cc *clientConn) answerFailure(err error, whole bool) (code int, keep bool) {
	var rej *h1.Rejection
	switch {
	case errors.As(err, &rej):
		return cc.refuseBody(rej), false
	case clientCaused(err):
		return 499, false
	}
	code, msg, extra := upstreamCode(err)
	cc.s.log.Debug("upstream error", "client", cc.remote, "error", err)
	if cc.writeError(code, msg, extra, !whole || cc.clientClose) != nil {
		return 499, false
	}
	return code, whole
}

// refuseBody answers a request whose body framing was malformed (the client's fault: the
// backend is not blamed) with 400 and a close, and returns the status.
func (cc *clientConn) refuseBody(rej *h1.Rejection) int {
	cc.s.onReject(cc.raddr, rej)
	_ = cc.writeError(rej.Status, rej.Reason, nil, true)
	return rej.Status
}

// routeTo ends the route step of every engine, once the engine has matched route idx of st for
// req: the route's runtime (a split route picks its pool here) and the retry policy that covers
// req's method (nil: the route does not retry it).
func (st *state) routeTo(idx int, req *http.Request) (*routeRT, *core.RetryPolicy) {
	rt := st.routes[idx].pick(req)
	if !rt.retry.Covers(req.Method) {
		return rt, nil
	}
	return rt, rt.retry
}

// begin is the head side of the exchange on every engine, once the engine has read the request
// and routed it to rt: admission takes it in (the proxy's and the pool's gates, the route's rate
// limit) and picks its first backend, where t's attempts start under policy (nil: the route does
// not retry it); req is what admission and the pool's picker read. A refused request is counted
// and its answer returned for the engine to write in its client's framing; it ends through finish
// like any other.
func (s *Server) begin(t *tries, rt *routeRT, policy *core.RetryPolicy, req *http.Request) (refusal, bool) {
	b, v := rt.admission.Admit(req)
	if v != core.Admitted {
		return s.refusal(rt, v), false
	}
	s.metrics.inFlight.Inc() // until finish
	s.decisions.Add(1)
	t.start(s, rt, policy, req, b)
	return refusal{}, true
}

// finish ends a request on every engine, whatever became of it (relayed, failed, refused, or
// never admitted): it gives back what begin took when it was admitted (t started; t.backend()
// is the last backend tried), records the request q, with code and n body bytes sent, once
// (metrics, access log: observe), and forgets its attempts.
func (s *Server) finish(o *observer, t *tries, q logged, code int, n int64) {
	var b *balance.Backend
	attempts := t.attempts()
	if attempts > 0 {
		b = t.backend()
		s.release(t.rt, b)
	}
	s.observe(o, &q, b, code, n, attempts)
	t.end()
}
