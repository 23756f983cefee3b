// Package h1 is switchyard's one HTTP/1.1 wire package, shared by the L7 proxy (l7/) and the
// edge cache (edge/): every byte of HTTP/1.1 framing either of them reads goes through it, so
// both refuse exactly the same shapes and forward exactly the same framing.
//
// It holds:
//   - the head parser (HeadEnd, ParseHead, ParseRequestLine) with the request-smuggling screen:
//     Content-Length with Transfer-Encoding, duplicate or invalid Content-Length, a
//     Transfer-Encoding other than a token list ending in one chunked, obsolete line folding,
//     invalid field names, control characters (NUL, bare CR, ...) and lines not ending in CRLF
//     are refused with a Rejection, answered by WriteRejection (400 or 431, then close);
//   - the strict chunked decoder (Chunked, ChunkedReader): RFC 9112 section 7.1 read exactly,
//     every chunk re-serialised canonically, anything else refused;
//   - Guard, a net.Conn that screens a connection for Go's net/http server with the same parser
//     and decoder;
//   - the plain shapes a fast path may serve itself (PlainTarget, PlainPath, PlainQuery,
//     PlainHost, HasCTL) and the two readings of a token list (AppendElements, ReverseProxy's;
//     HasToken, net/http's server's), one copy for l7/core and the edge;
//   - Reader, the growable connection read buffer the fast paths parse heads in;
//   - Handover and PrefixConn, which pass a connection a fast path owns to a net/http server at a
//     request boundary, with the bytes already read.
//
// The parser and decoder allocate nothing per message: they work on the caller's buffers, and
// the decoder is an incremental state machine that takes its input in pieces of any size, so
// the epoll event loops and blocking readers use the same code.
package h1
