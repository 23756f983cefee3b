// Package app is the lab's application server: a small HTTP server that says its own name,
// serves /health, can be told to fail or slow down, and counts requests by path and
// connections; plus a UDP echo. It runs as `switchyard lab app` inside a backend namespace, or
// in-process on a listener opened in a namespace (tests).
package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Header is the response header that carries the server's name.
const Header = "X-Backend"

// PeerHeader is the response header that carries the address the request came from.
const PeerHeader = "X-Peer"

// AdminPrefix starts the control paths; requests to them are not counted.
const AdminPrefix = "/admin/"

// Counters is what /admin/counters reports.
type Counters struct {
	Name     string         `json:"name"`
	Requests int64          `json:"requests"`
	Paths    map[string]int `json:"paths"`
	// Conns counts accepted connections; Open those open now (over HTTP: besides the one
	// asking).
	Conns int64 `json:"connections"`
	Open  int64 `json:"open"`
	// Failing and DelayMS are the current fault settings.
	Failing bool  `json:"failing"`
	DelayMS int64 `json:"delay_ms"`
	UDP     int64 `json:"udp_datagrams"`
}

// Server is one application server.
type Server struct {
	name    string
	mu      sync.Mutex
	paths   map[string]int
	reqs    atomic.Int64
	conns   atomic.Int64
	open    atomic.Int64
	udp     atomic.Int64
	failing atomic.Bool
	delay   atomic.Int64 // nanoseconds
}

// New makes a server that reports name.
func New(name string) *Server { return &Server{name: name, paths: map[string]int{}} }

// Name is the server's name.
func (s *Server) Name() string { return s.name }

// SetFailing makes /health (and, so that a balancer without health checks sees it, every
// other path) answer 503 while on.
func (s *Server) SetFailing(on bool) { s.failing.Store(on) }

// SetDelay makes every counted request wait d before it is answered.
func (s *Server) SetDelay(d time.Duration) { s.delay.Store(int64(d)) }

// Counters returns a snapshot of the counters.
func (s *Server) Counters() Counters {
	s.mu.Lock()
	paths := make(map[string]int, len(s.paths))
	for k, v := range s.paths {
		paths[k] = v
	}
	s.mu.Unlock()
	return Counters{
		Name: s.name, Requests: s.reqs.Load(), Paths: paths, Conns: s.conns.Load(), Open: s.open.Load(),
		Failing: s.failing.Load(), DelayMS: s.delay.Load() / int64(time.Millisecond), UDP: s.udp.Load(),
	}
}

// Reset zeroes the request and connection counters.
func (s *Server) Reset() {
	s.mu.Lock()
	s.paths = map[string]int{}
	s.mu.Unlock()
	s.reqs.Store(0)
	s.conns.Store(0)
	s.udp.Store(0)
}

// ServeHTTP answers:
//
//	/health                      200 "ok" (503 while failing); not counted
//	/admin/counters              the Counters as JSON
//	/admin/metrics               the Counters as Prometheus text (switchyard_lab_app_*)
//	/admin/reset                 zero the counters
//	/admin/fail?on=1|0           start or stop failing
//	/admin/slow?ms=N             delay every counted request by N ms
//	/bytes?n=N                   N bytes of body (at most 64 MiB)
//	POST anything                reads the body and answers with its length
//	/static/...                  "NAME PATH\n", cacheable for 10 s
//	/asset/NAME                  the static-split page's assets (assets.go), cacheable for a day
//	/tracking/NUM                the lesson's 480-byte tracking answer
//	anything else                "NAME PATH\n"
//
// Every answer carries the X-Backend header with the server's name, and X-Peer with the address
// the request came from (the L7 host, when an L7 proxy sits in front).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(Header, s.name)
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		w.Header().Set(PeerHeader, host)
	}
	path := r.URL.Path
	switch {
	case path == "/health":
		if s.failing.Load() {
			http.Error(w, "failing", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
		return
	case strings.HasPrefix(path, AdminPrefix):
		s.admin(w, r)
		return
	}
	s.reqs.Add(1)
	s.mu.Lock()
	s.paths[path]++
	s.mu.Unlock()
	if d := time.Duration(s.delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	if s.failing.Load() {
		http.Error(w, s.name+" failing", http.StatusServiceUnavailable)
		return
	}
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%s received %d\n", s.name, n)
		return
	}
	if path == "/bytes" {
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 0 || n > 64<<20 {
			http.Error(w, "bad n: use /bytes?n=N with 0 <= N <= 67108864", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
		buf := make([]byte, 32<<10)
		for i := range buf {
			buf[i] = 'x'
		}
		for n > 0 {
			k := min(n, len(buf))
			if _, err := w.Write(buf[:k]); err != nil {
				return
			}
			n -= k
		}
		return
	}
	if serveAsset(w, path) || serveTracking(w, path) { // assets.go
		return
	}
	if strings.HasPrefix(path, "/static/") {
		// Cacheable, so that an edge cache in front keeps it: the lab's demo shows its hits.
		w.Header().Set("Cache-Control", "public, max-age=10")
	}
	fmt.Fprintf(w, "%s %s\n", s.name, path)
}

func (s *Server) admin(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case AdminPrefix + "counters":
		c := s.Counters()
		c.Open-- // not the connection asking
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(c)
	case AdminPrefix + "metrics":
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		s.writeMetrics(w)
	case AdminPrefix + "reset":
		s.Reset()
		io.WriteString(w, "reset\n")
	case AdminPrefix + "fail":
		on, err := strconv.ParseBool(r.URL.Query().Get("on"))
		if err != nil {
			http.Error(w, "bad on: use /admin/fail?on=1 or on=0", http.StatusBadRequest)
			return
		}
		s.SetFailing(on)
		fmt.Fprintf(w, "failing=%v\n", on)
	case AdminPrefix + "slow":
		ms, err := strconv.Atoi(r.URL.Query().Get("ms"))
		if err != nil || ms < 0 {
			http.Error(w, "bad ms: use /admin/slow?ms=N with N >= 0", http.StatusBadRequest)
			return
		}
		s.SetDelay(time.Duration(ms) * time.Millisecond)
		fmt.Fprintf(w, "delay=%dms\n", ms)
	default:
		http.Error(w, "unknown admin path: use counters, metrics, reset, fail?on=, slow?ms=", http.StatusNotFound)
	}
}

// HTTPServer wraps the handler in an http.Server that counts connections.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				s.conns.Add(1)
				s.open.Add(1)
			case http.StateClosed, http.StateHijacked:
				s.open.Add(-1)
			}
		},
	}
}

// ServeUDP echoes every datagram back prefixed with "NAME ", until the connection is closed.
func (s *Server) ServeUDP(c net.PacketConn) error {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("read udp: %w", err)
		}
		s.udp.Add(1)
		out := append([]byte(s.name+" "), buf[:n]...)
		if _, err := c.WriteTo(out, from); err != nil && !errors.Is(err, net.ErrClosed) {
			return fmt.Errorf("write udp: %w", err)
		}
	}
}

// Run serves HTTP on l and UDP echo on every conn of udp until ctx ends.
//
// UDP sockets should be bound to the addresses clients send to (the VIPs): a socket bound to
// the wildcard address answers from the host's primary address, and a client behind a VIP
// would drop that answer, since it comes from an address it never sent to.
func (s *Server) Run(ctx context.Context, l net.Listener, udp ...net.PacketConn) error {
	hs := s.HTTPServer()
	errc := make(chan error, 1+len(udp))
	go func() { errc <- hs.Serve(l) }()
	for _, u := range udp {
		go func() { errc <- s.ServeUDP(u) }()
	}
	closeUDP := func() {
		for _, u := range udp {
			u.Close()
		}
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			hs.Close()
			closeUDP()
			return err
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	hs.Shutdown(sctx)
	closeUDP()
	return nil
}

// SortedPaths renders a path histogram as "a=1 b=2" in path order (the lesson's column).
func SortedPaths(p map[string]int) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", strings.TrimPrefix(k, "/"), p[k])
	}
	return b.String()
}
