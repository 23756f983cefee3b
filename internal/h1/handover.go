// Package handover lets a fast HTTP/1.1 path that owns a connection pass it, at a request
// boundary, to a net/http server: Listener feeds the server the connections handed over, and
// PrefixConn replays the bytes the fast path already read. The L7 proxy and the edge cache both
// use it for everything their fast paths do not handle.
package h1

import (
	"net"
	"sync"
)

// Handover is a net.Listener whose connections come from Deliver.
type Handover struct {
	addr   net.Addr
	ch     chan net.Conn
	done   chan struct{}
	closed sync.Once
}

// NewHandover returns a Handover that reports addr as its address.
func NewHandover(addr net.Addr) *Handover {
	return &Handover{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// Deliver passes c to the server; false once the listener is closed (the caller then closes c).
func (l *Handover) Deliver(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

// Accept implements net.Listener.
func (l *Handover) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *Handover) Close() error {
	l.closed.Do(func() { close(l.done) })
	return nil
}

// Addr implements net.Listener.
func (l *Handover) Addr() net.Addr { return l.addr }

// PrefixConn replays Pre before reading from the connection.
type PrefixConn struct {
	net.Conn
	Pre []byte
}

// NetConn is the connection after the prefix.
func (p *PrefixConn) NetConn() net.Conn { return p.Conn }

// Read implements net.Conn.
func (p *PrefixConn) Read(b []byte) (int, error) {
	if len(p.Pre) > 0 {
		n := copy(b, p.Pre)
		p.Pre = p.Pre[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}
