// Package core is the L7 proxy's HTTP/1.1 request core: the rules every serving engine (the epoll
// event loops, the goroutine-per-connection engine, TLS listeners) applies to a request, written
// once and with no I/O model in them. An engine reads bytes, calls the core to judge them, and
// writes what the core built:
//
//   - route.go: reading and matching a request head (Matcher.Route), admission through the
//     gates, rate limit, retry budget and balancer (Admission.Admit, Retry, Release);
//   - wire.go: the request line, the fields a proxy looks at (ReqInfo), the target's
//     normalisation check, and the rewritten heads (UpstreamHead, ResponseHead);
//   - framing.go: how a response body is framed (ResponseFraming) and the one place each
//     direction's body bytes are delimited (RequestBody, ResponseBody);
//   - reuse.go: the upstream pool (Idle) and its reuse rules (Reusable, IdleReadable);
//   - retry.go: which requests may be retried and on what (RetryPolicy, Attempts);
//   - resource.go: local resource failures, never counted against a backend (LocalResource);
//   - grpc.go: what a gRPC client reads instead of an HTTP status (IsGRPC, GRPCStatus,
//     GRPCMessage) and its deadline (GRPCTimeout).
//
// Package l7 (request.go) ties these to its configuration state: which route and pool a
// matched index means, the answers and metrics of a refused admission, and observation
// (metrics, access log); the engines call only that and this package.
package core
