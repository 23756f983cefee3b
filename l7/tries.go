package l7

import (
	"context"
	"errors"
	"net/http"
	"os"
	"time"

	"github.com/switchyard/switchyard/l7/balance"
	"github.com/switchyard/switchyard/l7/core"
)

// tries makes every decision of the exchange between its steps, once for every engine (the
// steps and their order: exchange.go): which failures the backend is blamed for, when a
// request may go out again and to which backend.

// tries is one request's attempts at its pool's backends: the backends tried (the last one
// current) and the decisions about the next attempt.
type tries struct {
	s        *Server
	rt       *routeRT
	policy   *core.RetryPolicy // nil: the route does not retry this request
	req      *http.Request     // what the pool's picker hashes and matches on
	tried    []*balance.Backend
	max      int       // backends the request may go to in all
	deadline time.Time // the request's total time: no retry starts after it
	whole    bool      // the request's body is all held (it can be sent again)
	stale    bool      // a stale pooled connection was replaced once already
	fresh    bool      // the next attempt replays on a new connection (not an idle one)
	// usable, when set, restricts retries to backends the engine can reach itself.
	usable func(*balance.Backend) bool
	// failover, when set, is where the route's failover header line goes once the request
	// moves to another backend (failover.go).
	failover *[]byte
}

// start begins the attempts of a request admitted to backend b (begin); policy is nil when the
// route does not retry it. Until hold says what the engine holds of it, the request goes to b
// alone.
func (t *tries) start(s *Server, rt *routeRT, policy *core.RetryPolicy, req *http.Request, b *balance.Backend) {
	t.s, t.rt, t.policy, t.req, t.whole, t.stale, t.fresh = s, rt, policy, req, false, false, false
	t.usable, t.failover = nil, nil
	t.tried = append(t.tried[:0], b)
	t.max = 1
}

// hold says what the engine holds of the request once it has read what it reads before the
// first attempt: whole, that its body is all held (it can be sent again); replayable, that it may
// go to another backend (the route's policy allows it and the body fits); deadline, its total
// time (no retry starts after it).
func (t *tries) hold(whole, replayable bool, deadline time.Time) {
	t.whole, t.deadline = whole, deadline
	t.max = t.policy.MaxAttempts(replayable)
}

// backend is the backend of the current attempt.
func (t *tries) backend() *balance.Backend { return t.tried[len(t.tried)-1] }

// attempts is how many backends the request went to (0 between requests).
func (t *tries) attempts() int { return len(t.tried) }

// end forgets the request once it is over: an idle connection must not keep its route (and
// with it a configuration a reload replaced) alive.
func (t *tries) end() {
	clear(t.tried)
	*t = tries{tried: t.tried[:0]}
}

// verdict is what follows an attempt that failed before any response byte reached the client.
type verdict uint8

const (
	answer verdict = iota // the client is told of the failure (answerFailure)
	replay                // the same backend again, on a new connection
	retry                 // another backend, now t.backend()
)

// failed decides what follows an attempt that failed with err before any response byte reached
// the client. reused and gotBytes describe the attempt's connection (a pooled one; a response
// byte read from it), false both where the engine has none of its own. A pooled connection the
// backend had closed is replayed (replayStale) without blaming it; otherwise the backend is
// blamed (passive health) only for what it did, not for the client's abort nor the proxy's own
// shortage of descriptors, after which no retry is tried either (another backend would need one
// too).
func (t *tries) failed(err error, reused, gotBytes bool, now time.Time) verdict {
	switch {
	case clientCaused(err):
		return answer
	case t.replayStale(reused, gotBytes, err):
		return replay
	}
	t.s.passive(t.rt.pool, t.backend(), false, err)
	if !core.LocalResource(err) && t.next(now) {
		return retry
	}
	return answer
}

// answered decides about a response head the backend gave with status code (and, for a gRPC
// call, the grpc-status of a trailers-only answer, "" when none): it reports whether the request
// goes to another backend instead of relaying it (the route retries that status and may
// retry). The caller then drops the response unread.
func (t *tries) answered(code int, grpcStatus string, now time.Time) bool {
	if !t.policy.RetryStatus(code) && !t.policy.RetryGRPCStatus(grpcStatus) {
		return false
	}
	b := t.backend()
	if !t.next(now) {
		return false
	}
	t.s.passive(t.rt.pool, b, code < 500, nil)
	return true
}

// relayed reports how the current backend's response went, once relayed, to passive health:
// a 5xx counts against the backend, and so does a body it cut short (err, when not the
// client's doing).
func (t *tries) relayed(code int, err error) {
	if err != nil && !clientCaused(err) {
		t.s.passive(t.rt.pool, t.backend(), false, err)
		return
	}
	t.s.passive(t.rt.pool, t.backend(), code < 500, nil)
}

// next moves the request to another backend when the attempts so far, the request's total time
// and the pool's retry budget allow it.
func (t *tries) next(now time.Time) bool {
	if len(t.tried) >= t.max || !now.Before(t.deadline) {
		return false
	}
	b := t.backend()
	p := t.rt.pool
	nb := t.rt.admission.Retry(t.req, b, t.tried, t.usable, func(ok bool) { t.s.countRetry(p, ok) })
	if nb == nil {
		return false
	}
	t.s.decisions.Add(1)
	t.tried = append(t.tried, nb)
	t.stale = false // the new backend's pooled connections may be stale too
	if t.failover != nil {
		*t.failover = t.rt.failoverLine()
	}
	return true
}

// replayStale reports whether an attempt that failed with err on a pooled connection goes out
// once more, to the same backend, on a new connection: the backend closed the idle connection
// as the request went out (reused, nothing read from it: gotBytes false), the request is held
// whole, its time is not up, and sending it again is safe (an idempotent method, or the write
// itself failed, so the backend saw none of it). net/http's transport does the same. Once per
// backend.
func (t *tries) replayStale(reused, gotBytes bool, err error) bool {
	if t.stale || !reused || gotBytes || !t.whole || errors.Is(err, os.ErrDeadlineExceeded) ||
		!(core.Idempotent(t.req.Method) || isWriteErr(err)) {
		return false
	}
	t.stale = true
	return true
}

// clientCaused reports a failure of the client's making (it went away, or its body broke off),
// which says nothing about the backend.
func clientCaused(err error) bool {
	return errors.Is(err, errClientGone) || errors.Is(err, errClientBody) || errors.Is(err, context.Canceled)
}
