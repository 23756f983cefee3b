package h2

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"github.com/switchyard/switchyard/internal/h1"
)

// Extended CONNECT (RFC 8441) is served as what an HTTP/1.1 upstream understands: the stream's
// request becomes a GET with Upgrade (and, for WebSocket, a Sec-WebSocket-Key of the proxy's
// own, RFC 8441 5), so a handler that proxies upgrades (net/http's ReverseProxy) forwards it
// unchanged; when the upstream switches protocols (101), the handler takes the stream over
// with Hijack, and the tunnel answers the client 200 and carries the bytes both ways as DATA.

// upgradeRequest turns the extended CONNECT r for protocol into an HTTP/1.1 upgrade request.
func upgradeRequest(r *http.Request, protocol string) {
	r.Method = http.MethodGet
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Upgrade", protocol)
	if strings.EqualFold(protocol, "websocket") && r.Header.Get("Sec-WebSocket-Key") == "" {
		var key [16]byte
		_, _ = rand.Read(key[:])
		r.Header.Set("Sec-WebSocket-Key", base64.StdEncoding.EncodeToString(key[:]))
	}
	r.Body, r.ContentLength = http.NoBody, 0 // the tunnel's bytes flow after the switch
}

// Hijack hands an extended CONNECT's stream to the handler as a connection; the first thing
// written to it must be the upstream's HTTP/1.1 101 head (as ReverseProxy writes it).
func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if !w.tunnel || w.sent || w.hijacked {
		return nil, nil, errors.New("hijack http/2 stream: only an extended CONNECT, before its response, can be taken over")
	}
	w.hijacked = true
	t := &tunnel{st: w.st, raddr: w.raddr}
	return t, bufio.NewReadWriter(bufio.NewReader(t), bufio.NewWriter(t)), nil
}

// tunnel is an extended CONNECT stream taken over by the handler.
type tunnel struct {
	st    *Stream
	raddr string
	head  []byte // the upstream's response head, until whole
	open  bool   // the client was answered 200: bytes flow
	once  sync.Once
}

// Read reads what the client sends on the stream.
func (t *tunnel) Read(p []byte) (int, error) { return t.st.Read(p) }

// Write takes the upstream's 101 head first (answered to the client as 200 with the fields of
// the protocol's negotiation), then the upstream's bytes, sent as DATA.
func (t *tunnel) Write(p []byte) (int, error) {
	if t.open {
		if err := t.st.Data(p, false); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	t.head = append(t.head, p...)
	end := h1.HeadEnd(t.head, 0)
	if end < 0 {
		if len(t.head) > 64<<10 {
			return 0, errors.New("tunnel: upgrade response head too large")
		}
		return len(p), nil
	}
	var rh h1.Head
	if rej := h1.ParseHead(t.head[:end], &rh); rej != nil || len(rh.Line) < 12 {
		return 0, errors.New("tunnel: unreadable upgrade response head")
	}
	if code, _ := strconv.Atoi(string(rh.Line[9:12])); code != http.StatusSwitchingProtocols {
		return 0, errors.New("tunnel: the upstream did not switch protocols")
	}
	block := AppendStatus(nil, http.StatusOK)
	for _, f := range rh.Fields {
		if n := strings.ToLower(string(f.Name)); strings.HasPrefix(n, "sec-websocket-") && n != "sec-websocket-accept" {
			block = AppendField(block, f.Name, f.Value) // the negotiated subprotocol and extensions
		}
	}
	if err := t.st.Respond(block, t.head[end:], false); err != nil {
		return 0, err
	}
	t.open, t.head = true, nil
	return len(p), nil
}

// Close ends the stream: END_STREAM once the tunnel was open, a reset otherwise.
func (t *tunnel) Close() error {
	t.once.Do(func() {
		if t.open {
			_ = t.st.Data(nil, true)
			return
		}
		t.st.Reset(http2.ErrCodeConnect)
	})
	return nil
}

// CloseWrite ends the client-bound direction (the upstream closed its side).
func (t *tunnel) CloseWrite() error { return t.Close() }

// LocalAddr implements net.Conn.
func (t *tunnel) LocalAddr() net.Addr { return tunnelAddr(t.raddr) }

// RemoteAddr implements net.Conn.
func (t *tunnel) RemoteAddr() net.Addr { return tunnelAddr(t.raddr) }

// SetDeadline bounds the stream's waits.
func (t *tunnel) SetDeadline(d time.Time) error { t.st.SetDeadline(d); return nil }

// SetReadDeadline is SetDeadline (a stream has one deadline).
func (t *tunnel) SetReadDeadline(d time.Time) error { t.st.SetDeadline(d); return nil }

// SetWriteDeadline is SetDeadline (a stream has one deadline).
func (t *tunnel) SetWriteDeadline(d time.Time) error { t.st.SetDeadline(d); return nil }

// tunnelAddr is the client's address as the handler was told it.
type tunnelAddr string

func (a tunnelAddr) Network() string { return "tcp" }
func (a tunnelAddr) String() string  { return string(a) }
