package l7

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/internal/h1"
)

// Mirroring: a route copies a share of its requests to a shadow pool, fire and forget. The copy
// is the HTTP/1.1 request the core built for the real backend (head and whole body), written to
// a shadow backend on a connection of its own on another goroutine; its answer is read and
// dropped. It never delays or fails the real request: past maxMirrorsInFlight copies at once,
// or for a body not held whole or over max_body, the copy is skipped and counted.

// Mirror is a route's `mirror:` block.
type Mirror struct {
	// Pool is the shadow pool (HTTP/1.1), which receives the copies.
	Pool string `yaml:"pool"`
	// Percent of the route's requests copied (1-100; default 100).
	Percent int `yaml:"percent"`
	// MaxBody is the largest request body copied (default 64 KiB); larger ones are skipped.
	MaxBody int64 `yaml:"max_body"`
}

// maxMirrorsInFlight bounds the copies under way; past it copies are skipped.
const maxMirrorsInFlight = 256

// mirrorRT is a route's mirror at run time.
type mirrorRT struct {
	pool     *pool
	percent  uint64
	maxBody  int64
	n        atomic.Uint64 // requests seen, for the share
	inFlight atomic.Int64
	sent     prometheus.Counter
	skipped  prometheus.Counter
	failed   prometheus.Counter
	timeout  time.Duration
}

// copy sends a copy of req (an HTTP/1.1 request, head and body of bodyLen bytes, all of it) to
// the shadow pool when this request falls in the share; it returns at once.
func (m *mirrorRT) copy(req []byte, bodyLen int64, whole bool) {
	if m == nil {
		return
	}
	// The share spread evenly: request n is copied when n*percent/100 steps up.
	if n := m.n.Add(1); n*m.percent/100 == (n-1)*m.percent/100 {
		return
	}
	if !whole || bodyLen > m.maxBody || m.inFlight.Add(1) > maxMirrorsInFlight {
		if whole && bodyLen <= m.maxBody {
			m.inFlight.Add(-1)
		}
		m.skipped.Inc()
		return
	}
	b := m.pool.picker.Pick(&http.Request{Header: http.Header{}, URL: &url.URL{}}, nil)
	if b == nil {
		m.inFlight.Add(-1)
		m.skipped.Inc()
		return
	}
	buf := append([]byte(nil), req...) // the caller's buffer is reused at once
	go func() {
		defer m.inFlight.Add(-1)
		if err := m.send(b.Address, buf); err != nil {
			m.failed.Inc()
			return
		}
		m.sent.Inc()
	}()
}

// send writes req to addr and reads the answer's head (and drops the connection).
func (m *mirrorRT) send(addr string, req []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	c.SetDeadline(deadline)
	if _, err := c.Write(req); err != nil {
		return err
	}
	r := h1.Reader{Conn: c, Buf: make([]byte, 4<<10)}
	if _, err := r.ReadHead(64 << 10); err != nil {
		return fmt.Errorf("mirror to %s: %w", addr, err)
	}
	return nil
}

// newMirror makes route's mirror to p.
func (s *Server) newMirror(route string, m *Mirror, p *pool, timeout time.Duration) *mirrorRT {
	mr := &mirrorRT{pool: p, percent: 100, maxBody: 64 << 10, timeout: timeout,
		sent:    s.metrics.mirrored.WithLabelValues(route, "sent"),
		skipped: s.metrics.mirrored.WithLabelValues(route, "skipped"),
		failed:  s.metrics.mirrored.WithLabelValues(route, "failed")}
	if m.Percent > 0 {
		mr.percent = uint64(m.Percent)
	}
	if m.MaxBody > 0 {
		mr.maxBody = m.MaxBody
	}
	return mr
}
