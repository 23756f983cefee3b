package l7

import (
	"context"
	"crypto/sha1" //nolint:gosec // RFC 6455's accept hash
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"golang.org/x/net/http2"

	"github.com/switchyard/switchyard/l7/balance"
)

// h2Upstreams is the core's pool of HTTP/2 connections of one h2 or h2c pool: per backend, the
// connections open, each multiplexing as many streams as the backend allows. get hands out a
// connection with a stream reserved, dialing another only when every open one is full.
//
// net/http's ClientConn does the HTTP/2 framing, flow control and HPACK (a client as complete
// and as hardened as Go's is not worth writing twice), over connections that gather its
// per-frame writes (batchConn); the pool, the choice of connection, the
// descriptor budget (the transport dials through it) and the exchange around it (h2Leg under
// goConn.forward: admission, retries, timeouts, gRPC answers, passive health) are the core's,
// the same as for HTTP/1.1 pools.
type h2Upstreams struct {
	tr     *http.Transport // Protocols HTTP/2 or unencrypted HTTP/2; dials through the budget
	scheme string          // "https" (h2) or "http" (h2c)

	mu     sync.Mutex
	conns  map[*balance.Backend][]*http.ClientConn
	closed bool
}

func newH2Upstreams(tr *http.Transport, scheme string) *h2Upstreams {
	return &h2Upstreams{tr: tr, scheme: scheme, conns: map[*balance.Backend][]*http.ClientConn{}}
}

// get returns a connection to b with one stream reserved for the caller's RoundTrip (or its
// Release). Connections that failed are dropped from the pool as they are met.
func (u *h2Upstreams) get(ctx context.Context, b *balance.Backend) (*http.ClientConn, error) {
	u.mu.Lock()
	list := u.conns[b]
	for i := 0; i < len(list); {
		cc := list[i]
		if cc.Err() != nil {
			list = append(list[:i], list[i+1:]...)
			continue
		}
		if cc.Reserve() == nil {
			u.conns[b] = list
			u.mu.Unlock()
			return cc, nil
		}
		i++
	}
	u.conns[b] = list
	u.mu.Unlock()
	cc, err := u.tr.NewClientConn(ctx, u.scheme, b.Address)
	if err != nil {
		return nil, err
	}
	if err := cc.Reserve(); err != nil {
		cc.Close()
		return nil, err
	}
	u.mu.Lock()
	if u.closed {
		// The pool was retired while this one dialed: it serves this request and closes.
		cc.SetStateHook(closeConnWhenIdle)
	} else {
		u.conns[b] = append(u.conns[b], cc)
	}
	u.mu.Unlock()
	return cc, nil
}

// closeIdle closes the connections without a stream in flight and, with final (the pool is
// retired), the others as soon as their last stream ends.
func (u *h2Upstreams) closeIdle(final bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = u.closed || final
	for b, list := range u.conns {
		kept := list[:0]
		for _, cc := range list {
			switch {
			case cc.InFlight() == 0:
				cc.Close()
			case final:
				cc.SetStateHook(closeConnWhenIdle)
			default:
				kept = append(kept, cc)
			}
		}
		if final || len(kept) == 0 {
			delete(u.conns, b)
		} else {
			u.conns[b] = kept
		}
	}
}

// closeConnWhenIdle closes a retired connection once its last stream has ended.
func closeConnWhenIdle(cc *http.ClientConn) {
	if cc.InFlight() == 0 {
		cc.Close()
	}
}

// upgrade carries an upgrade request (an HTTP/1.1 client's Upgrade, or an HTTP/2 client's
// extended CONNECT, which package h2 turns into one) to b as an extended CONNECT stream
// (RFC 8441), and answers as an HTTP/1.1 backend would, for ReverseProxy's upgrade path: 101
// (with the Sec-WebSocket-Accept the client's key asks for) and a body that reads and writes
// the stream. A backend's refusal (any status but 2xx) is returned as it is.
//
// The tunnel has a connection of its own, on x/net's HTTP/2 client: net/http's ClientConn
// (Go 1.26) refuses the :protocol field extended CONNECT needs. A WebSocket holds it for its
// life, as it would hold an HTTP/1.1 connection; it is dialed through the descriptor budget.
func (u *h2Upstreams) upgrade(req *http.Request, b *balance.Backend) (*http.Response, error) {
	ctx := req.Context()
	conn, err := u.dialTunnel(ctx, b)
	if err != nil {
		return nil, err
	}
	cc, err := (&http2.Transport{}).NewClientConn(conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("start http/2 tunnel connection: %w", err)
	}
	protocol := strings.ToLower(req.Header.Get("Upgrade"))
	pr, pw := io.Pipe()
	out := &http.Request{Method: http.MethodConnect, Proto: "HTTP/2.0", ProtoMajor: 2,
		URL:  &url.URL{Scheme: u.scheme, Host: b.Address, Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery},
		Host: req.Host, Header: req.Header.Clone(), Body: pr, ContentLength: -1}
	key := out.Header.Get("Sec-Websocket-Key")
	for _, name := range []string{"Connection", "Upgrade", "Sec-Websocket-Key"} {
		out.Header.Del(name) // HTTP/1.1's handshake; RFC 8441 5 has none of it
	}
	out.Header.Set(":protocol", protocol)
	resp, err := cc.RoundTrip(out.WithContext(ctx))
	if err != nil || resp.StatusCode/100 != 2 {
		pw.Close()
		if err != nil {
			cc.Close()
			return nil, err
		}
		resp.Body = &closeWith{ReadCloser: resp.Body, also: cc.Close}
		return resp, nil
	}
	resp.StatusCode, resp.Status = http.StatusSwitchingProtocols, "101 Switching Protocols"
	resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
	resp.Header.Set("Connection", "Upgrade")
	resp.Header.Set("Upgrade", protocol)
	if key != "" {
		resp.Header.Set("Sec-Websocket-Accept", websocketAccept(key))
	}
	resp.ContentLength = 0 // a 101 has no body of its own: the bytes after it are the tunnel's
	resp.Body = &streamTunnel{closeWith: closeWith{ReadCloser: resp.Body, also: cc.Close}, w: pw}
	return resp, nil
}

// dialTunnel dials b for a tunnel's own HTTP/2 connection, as the pool's transport dials
// (through the descriptor budget; TLS with ALPN h2 for h2 pools).
func (u *h2Upstreams) dialTunnel(ctx context.Context, b *balance.Backend) (net.Conn, error) {
	conn, err := u.tr.DialContext(ctx, "tcp", b.Address)
	if err != nil || u.scheme != "https" {
		return conn, err
	}
	cfg := u.tr.TLSClientConfig.Clone()
	if cfg == nil {
		cfg = &tls.Config{}
	}
	cfg.NextProtos = []string{http2.NextProtoTLS}
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(b.Address)
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("tls handshake with %s: %w", b.Address, err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != http2.NextProtoTLS {
		tc.Close()
		return nil, fmt.Errorf("tls with %s: negotiated %q, not h2: the backend does not speak HTTP/2 over TLS (use protocol: http1)", b.Address, p)
	}
	return tc, nil
}

// closeWith is a body whose Close also ends what carried it.
type closeWith struct {
	io.ReadCloser
	also func() error
}

func (c *closeWith) Close() error {
	err := c.ReadCloser.Close()
	c.also()
	return err
}

// websocketAccept is the Sec-WebSocket-Accept answering key (RFC 6455 4.2.2).
func websocketAccept(key string) string {
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11")) //nolint:gosec // the protocol's hash
	return base64.StdEncoding.EncodeToString(sum[:])
}

// streamTunnel is an extended CONNECT stream to a backend as ReverseProxy's upgraded
// connection: reads take the backend's DATA, writes send DATA, Close ends both ways and the
// tunnel's connection.
type streamTunnel struct {
	closeWith
	w *io.PipeWriter
}

func (t *streamTunnel) Write(p []byte) (int, error) { return t.w.Write(p) }

func (t *streamTunnel) Close() error {
	t.w.Close()
	return t.closeWith.Close()
}
