package l7

import (
	"context"
	"net/http"
	"sync"

	"github.com/switchyard/switchyard/l7/balance"
)

// h2Upstreams is the core's pool of HTTP/2 connections of one h2 or h2c pool: per backend, the
// connections open, each multiplexing as many streams as the backend allows. get hands out a
// connection with a stream reserved, dialing another only when every open one is full.
//
// net/http's ClientConn does the HTTP/2 framing, flow control and HPACK (a client as complete
// and as hardened as Go's is not worth writing twice); the pool, the choice of connection, the
// descriptor budget (the transport dials through it) and the exchange around it (goConn.
// forwardH2: admission, retries, timeouts, gRPC answers, passive health) are the core's, the
// same as for HTTP/1.1 pools.
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
