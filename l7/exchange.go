package l7

import (
	"errors"
	"time"

	"github.com/switchyard/switchyard/internal/h1"
)

// The exchange: one request's lifecycle, the same on every engine.
//
//	route → admit (picks the first backend)
//	  → connect → send → await the head            (xConnect, xSend, xAwait)
//	      ├ failed before any response byte: replay once on a new connection (a pooled one the
//	      │   backend had closed), retry on another backend (both back to xConnect), or answer
//	      │   the failure (xAnswer)
//	      ├ a head the route retries on: drop it, on to another backend (xRetry → xConnect)
//	      └ relay the head, the body and its trailers (xRelay)
//	  → release → observe                          (finish)
//
// The order of the steps is tries.after, once; every decision between them is tries' (which
// failures the backend is blamed for, when a request may go out again and to which backend)
// and what the client is told of a failure is answerFailure's. The engines run the steps and
// only move bytes and frames: the event loops run a step when its socket is ready and go on in
// evLoop.stepped (engine_loop_exchange_linux.go); the goroutine engine runs them with blocking
// calls over an HTTP/1.1 or HTTP/2 upstream leg in goConn.forward (engine_goroutine.go,
// forward_h2.go); net/http's path runs them in Server.RoundTrip, its transport connecting and
// sending within the await step.

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

// finish ends a request that went to t's backends and got code, with n body bytes relayed: it
// gives back what admit took, records it (metrics, access log) and forgets its attempts.
func (cc *clientConn) finish(rq *routed, t *tries, code int, n int64) {
	b := t.backend()
	cc.release(rq, b)
	cc.observe(rq.rt, b, code, n, rq.start, t.attempts(), rq.Clean)
	t.end()
}
