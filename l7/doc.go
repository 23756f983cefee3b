// Package l7 is switchyard's layer-7 proxy tier: it terminates HTTP/1.1, HTTP/2 (TLS and h2c),
// HTTP/3 and upgrades, routes every request by host, path, method, header and query to an
// application pool, balances it over the pool's backends, and guards the pools with health
// checks, outlier ejection, retry budgets, in-flight limits and per-client rate limits.
//
// Embed it with NewServer(cfg) and Serve(listener); run it as a process with ListenAndServe.
//
// The rules live in l7/core (no I/O) and request.go (the core on the configuration: routes,
// admission answers, observation). The engines move bytes and call them:
//
//   - engine_loop*_linux.go: the epoll event loops (plain HTTP/1.1, and TLS after the first
//     request);
//   - engine_goroutine.go: a goroutine per connection (TLS handshakes and first requests,
//     streamed uploads, host-name pools, h2c and h2 pools through forward_h2.go);
//   - engine_h2.go and h2fallback.go: HTTP/2 streams from internal/h2, through the goroutine
//     engine's request path, or the net/http engine for what the core does not take;
//   - engine_nethttp.go: the net/http engine (ReverseProxy) for upgrades, extended CONNECT,
//     sticky pools, HTTP/3 (http3.go) and the odd shapes docs/l7.md lists.
//
// server.go starts the listeners and picks the engine for each; state.go builds a
// configuration's runtime (pools, transports, health checks) and retire.go frees replaced ones.
package l7
