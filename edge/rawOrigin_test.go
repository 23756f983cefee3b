package edge

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// rawOrigin is a real TCP origin on loopback that answers each request with bytes its handler
// chooses, so tests can send what net/http's server never would (unknown transfer codings,
// interim responses, resets). The handler gets the request head and the connection; it returns
// false to close the connection after its answer.
type rawOrigin struct {
	ln       net.Listener
	requests atomic.Int64
	conns    atomic.Int64
	mu       sync.Mutex
	heads    []*http.Request
	wg       sync.WaitGroup
}

func newRawOrigin(t *testing.T, h func(r *http.Request, c net.Conn) bool) *rawOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &rawOrigin{ln: ln}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			o.conns.Add(1)
			o.wg.Add(1)
			go func() {
				defer o.wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					r, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					o.requests.Add(1)
					o.mu.Lock()
					o.heads = append(o.heads, r)
					o.mu.Unlock()
					if !h(r, c) {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return o
}

func (o *rawOrigin) URL() string { return "http://" + o.ln.Addr().String() }

// reset closes c with an RST instead of a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// internalLeak reports whether an error body carries text from inside the edge or Go's transport.
func internalLeak(body string) bool {
	for _, s := range []string{"transport", "net/http", "127.0.0.1", "EOF", "bogus", "malformed",
		"connection", "dial", "read tcp", "unsupported", "reset by peer", "upstream failed:"} {
		if strings.Contains(strings.ToLower(body), strings.ToLower(s)) {
			return true
		}
	}
	return false
}
