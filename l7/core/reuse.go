package core

import (
	"time"
)

// The upstream pool's reuse rules, the same on every engine (an engine that handed out a pooled
// connection with an unsolicited response waiting on it gave clients each other's answers):
//
//  1. A response is only ever read for the request just written: an engine reads an upstream
//     connection only between writing a request and the end of its response.
//  2. An idle upstream that becomes readable or half-closed is discarded: bytes that arrive on
//     an idle upstream are a protocol error (nobody asked for them), a FIN means the backend is
//     gone. Engines that learn of it by events (epoll) drop the connection at once; engines
//     that cannot watch idle sockets check before handing one out (IdleReadable).
//  3. Never pool a connection whose response was not fully read, which had bytes beyond the
//     response, whose backend said it closes or shut its side, or whose body was delimited by
//     the close (Reusable).

// ResponseEnd is what an engine knows about an upstream connection once a response's last byte
// was read from it.
type ResponseEnd struct {
	Framing  Framing
	Complete bool // the whole response was read
	// UpstreamClose: the backend said it closes (Connection: close, HTTP/1.0).
	UpstreamClose bool
	Leftover      int  // bytes read beyond the response
	MaybeMore     bool // the socket may hold more unread bytes (the last read filled the buffer)
	PeerShut      bool // the backend shut its side (FIN, RST, error seen on the socket)
	Err           error
}

// Reusable reports whether the connection may go back to the pool (rule 3).
func Reusable(e ResponseEnd) bool {
	return e.Complete && e.Err == nil && !e.UpstreamClose && e.Framing != CloseBody &&
		e.Leftover == 0 && !e.MaybeMore && !e.PeerShut
}

// IdleProbe is the result of looking at an idle connection without reading it.
type IdleProbe int

// The outcomes of a probe of an idle connection.
const (
	IdleQuiet    IdleProbe = iota // nothing waiting: usable
	IdleReadable                  // bytes nobody asked for: a protocol error, discard
	IdleShut                      // the backend closed or reset it: discard
)

// Idle is the pool of idle upstream connections of one engine instance, per backend key: a
// LIFO stack, so the most recently used (warmest, least likely closed by the backend) goes out
// first. It holds no lock: the event loops each own one, the goroutine engine guards its own.
type Idle[K comparable, C any] struct {
	idle map[K][]idleEntry[C]
}

type idleEntry[C any] struct {
	c     C
	since time.Time
}

// NewIdle makes an empty pool.
func NewIdle[K comparable, C any]() *Idle[K, C] {
	return &Idle[K, C]{idle: map[K][]idleEntry[C]{}}
}

// Put keeps c for key unless maxIdle connections are already idle there; it reports whether c
// was kept (the caller closes it otherwise).
func (p *Idle[K, C]) Put(key K, c C, now time.Time, maxIdle int) bool {
	if len(p.idle[key]) >= maxIdle {
		return false
	}
	p.idle[key] = append(p.idle[key], idleEntry[C]{c, now})
	return true
}

// Get takes the warmest connection idle for key for less than its idleFor; older ones are
// passed to drop. ok is false when none is left.
func (p *Idle[K, C]) Get(key K, now time.Time, idleFor func(C) time.Duration, drop func(C)) (c C, ok bool) {
	for list := p.idle[key]; len(list) > 0; list = p.idle[key] {
		e := list[len(list)-1]
		list[len(list)-1] = idleEntry[C]{} // the stack must not keep a connection alive
		p.idle[key] = list[:len(list)-1]
		if now.Sub(e.since) < idleFor(e.c) {
			return e.c, true
		}
		drop(e.c)
	}
	return c, false
}

// Remove takes c out of key's list (it spoke or closed while idle, rule 2).
func (p *Idle[K, C]) Remove(key K, match func(C) bool) {
	list := p.idle[key]
	for i := range list {
		if match(list[i].c) {
			copy(list[i:], list[i+1:])
			list[len(list)-1] = idleEntry[C]{}
			p.idle[key] = list[:len(list)-1]
			return
		}
	}
}

// Expire passes every connection idle for idleFor(key) or longer to drop.
func (p *Idle[K, C]) Expire(now time.Time, idleFor func(C) time.Duration, drop func(C)) {
	for key, list := range p.idle {
		keep := list[:0]
		for _, e := range list {
			if now.Sub(e.since) >= idleFor(e.c) {
				drop(e.c)
			} else {
				keep = append(keep, e)
			}
		}
		clear(list[len(keep):])
		if len(keep) == 0 {
			delete(p.idle, key)
		} else {
			p.idle[key] = keep
		}
	}
}

// Drain removes every idle connection, passing each to drop.
func (p *Idle[K, C]) Drain(drop func(C)) {
	for _, list := range p.idle {
		for _, e := range list {
			drop(e.c)
		}
	}
	clear(p.idle)
}

// Len is the number of idle connections (all keys).
func (p *Idle[K, C]) Len() int {
	n := 0
	for _, list := range p.idle {
		n += len(list)
	}
	return n
}
