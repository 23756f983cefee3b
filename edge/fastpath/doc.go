// Package fastpath is the edge's HTTP/1.1 fast path for cache hits. net/http's server costs a
// background read goroutine per connection, a header map and a request object per message, and a bufio copy of every
// response; on the edge's hottest path (a fresh hit of a small object) that was most of the CPU
// and left the edge behind Varnish. The fast path owns each accepted connection instead: one
// goroutine parses every request head once (internal/h1's parser, so heads are read by the same
// code as the proxy's), and answers a fresh memory hit with the entry's pre-rendered head, the
// per-request Age (and Date or Connection: close when needed) and the body in one write from a
// reused buffer.
//
// Every other request it can read exactly (GET or HEAD, HTTP/1.1, no body: misses,
// revalidations, stale entries, ranges, conditional requests, request Cache-Control or Pragma,
// disk-only bodies, Vary mismatches, the RTT endpoint) is answered on the same connection through
// Cache.ServeHTTP with the fast path's own response writer (fastmiss.go). A few odd shapes
// without a body are lent to the unchanged net/http path (http.Server + Cache.ServeHTTP) one
// request at a time, and the connection comes back after the response (lend.go); methods
// other than GET and HEAD, HTTP/1.0, request bodies, Expect, and every head the fast path would
// not read exactly as net/http does are handed over, at a request boundary and with the bytes
// already read, for the rest of the connection. A hit is byte for byte what the net/http path
// writes for the same request (edge/fast_test.go); any other answer has net/http's head byte for
// byte and the same body, only a streamed body's chunk boundaries may differ
// (edge/fastmiss_test.go).
//
// HTTP/2 hits (TLS and h2c) are answered here too (h2hit.go): internal/h2 hands each stream to
// ServeH2 (or, on the connection's reader, TryH2) before the full path, and a stream that is a
// plain fresh hit by the same rules gets the same hit head, pre-encoded in HPACK.
//
// It is a package of its own because it is the edge's connection handling, not its cache: it
// sees the cache only through Cache (a fresh memory hit, the full path, the counters) and the
// listener's limits through Config, and hands connections to the edge's net/http server through
// Server.Fallback.
package fastpath
