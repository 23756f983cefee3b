package core

import (
	"net/http"
	"strconv"
)

// RetryPolicy is a route's retry rule: which requests may be sent again, to another backend,
// and on which answers. Every engine asks it the same questions.
type RetryPolicy struct {
	Attempts      int // retries after the first try
	OnStatus      map[int]bool
	OnGRPCStatus  map[int]bool // gRPC statuses retried, in a trailers-only answer (nothing streamed yet)
	NonIdempotent bool
	BufferBody    int64 // a body up to this size can be replayed
}

// Idempotent methods may be retried without the route opting in (RFC 9110 9.2.2).
func Idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// Covers reports whether the policy retries requests of this method at all.
func (p *RetryPolicy) Covers(method string) bool {
	return p != nil && p.Attempts > 0 && (Idempotent(method) || p.NonIdempotent)
}

// Replayable reports whether a request of this method and body may go out more than once: the
// policy covers the method and the body (of bodyLen bytes, all held by the engine when whole)
// fits in buffer_body.
func (p *RetryPolicy) Replayable(method string, bodyLen int64, whole bool) bool {
	if !p.Covers(method) {
		return false
	}
	return bodyLen == 0 || (whole && bodyLen <= p.BufferBody)
}

// MaxAttempts is how many backends a replayable request may be sent to in all.
func (p *RetryPolicy) MaxAttempts(replayable bool) int {
	if !replayable {
		return 1
	}
	return 1 + p.Attempts
}

// RetryStatus reports a response status the policy retries.
func (p *RetryPolicy) RetryStatus(code int) bool { return p != nil && p.OnStatus[code] }

// RetryGRPCStatus reports a gRPC status (a grpc-status value) the policy retries.
func (p *RetryPolicy) RetryGRPCStatus(v string) bool {
	if p == nil || v == "" {
		return false
	}
	code, err := strconv.Atoi(v)
	return err == nil && p.OnGRPCStatus[code]
}
