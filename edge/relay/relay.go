// Package relay is a TCP relay that delays every byte by a fixed one-way latency in each
// direction. Tests and lab experiments put it between an edge and its origin (or upper tier) to
// emulate WAN distance in user space where netem is not available.
package relay

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// Relay forwards connections from its listener to a target with added latency.
type Relay struct {
	ln     net.Listener
	target string
	delay  time.Duration
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// Start listens on listen (e.g. "127.0.0.1:0") and relays to target, adding delay one way in each
// direction, so a request round trip gains 2*delay.
func Start(listen, target string, delay time.Duration) (*Relay, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("start relay: listen on %s: %w", listen, err)
	}
	r := &Relay{ln: ln, target: target, delay: delay, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr returns the relay's listening address.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Close stops the relay and closes every relayed connection.
func (r *Relay) Close() error {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	err := r.ln.Close()
	r.wg.Wait()
	return err
}

func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.Close()
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.serve(c)
		}()
	}
}

func (r *Relay) serve(c net.Conn) {
	if !r.track(c) {
		return
	}
	up, err := net.DialTimeout("tcp", r.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	if !r.track(up) {
		c.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.pipe(up, c) }()
	go func() { defer wg.Done(); r.pipe(c, up) }()
	wg.Wait()
	c.Close()
	up.Close()
	r.mu.Lock()
	delete(r.conns, c)
	delete(r.conns, up)
	r.mu.Unlock()
}

// chunk is data read at a time, due for writing delay later.
type chunk struct {
	due  time.Time
	data []byte
}

// pipe copies src to dst, holding every chunk until delay after it was read. Reading and writing
// run apart so that the link stays pipelined, like a long wire, instead of stop-and-wait.
func (r *Relay) pipe(dst, src net.Conn) {
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{due: time.Now().Add(r.delay), data: buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range q {
		time.Sleep(time.Until(ch.due))
		if _, err := dst.Write(ch.data); err != nil {
			src.Close() // unblock the reader; this connection is over
			break
		}
	}
	for range q { // drain so the reader is never stuck on a full queue
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		tc.CloseWrite() // pass the half-close on, so the far side sees EOF
	} else {
		dst.Close()
	}
}
