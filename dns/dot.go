package dns

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/dnstap"
	"github.com/switchyard/switchyard/dns/xfr"
	"github.com/switchyard/switchyard/internal/tlsconf"
)

// dotListener is the DNS over TLS listener (RFC 7858) of a running server; it serves zone
// transfers over TLS too (XoT, RFC 9103). Its configuration is read at start.
type dotListener struct {
	ln         net.Listener
	tc         *tls.Config
	idle       time.Duration
	sem        chan struct{}
	handshakes *tlsconf.Handshakes
	conns      prometheus.Gauge
	padded     prometheus.Counter
}

// dotInFlight bounds the queries of one connection answered at once (pipelining, RFC 7766
// 6.2.1.1): more wait for their turn to be read, so one client cannot take every core.
const dotInFlight = 16

// dotHandshake bounds a client's TLS handshake.
const dotHandshake = 5 * time.Second

// bindDoT binds the tls listener of cfg (nothing without one); Start serves it. The caller
// holds s.mu.
func (s *Server) bindDoT(cfg *config.Config) error {
	if cfg.TLS == nil {
		return nil
	}
	tc, err := tlsconf.Load(cfg.TLSConfig(), "dot") // RFC 7858 ALPN; RFC 9103 requires it for XoT
	if err != nil {
		return fmt.Errorf("start dns tls listener: %w", err)
	}
	tc.MinVersion = tls.VersionTLS13 // RFC 9103 requires 1.3 for XoT; DoT clients have it
	var ln net.Listener
	if s.opt.Sockets != nil {
		ln, err = s.opt.Sockets.Listen("tcp", cfg.TLS.Listen)
	} else {
		ln, err = net.Listen("tcp", cfg.TLS.Listen)
	}
	if err != nil {
		return fmt.Errorf("start dns tls listener: listen on %s: %w (is the port taken?)", cfg.TLS.Listen, err)
	}
	if s.dot == nil { // metrics of a server register once
		s.dot = &dotListener{handshakes: tlsconf.NewHandshakes(s.opt.Registry, s.log),
			conns: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_dns_tls_connections",
				Help: "Open DNS over TLS connections."}),
			padded: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_dns_tls_padded_total",
				Help: "DNS over TLS responses padded (RFC 7830, 468-byte blocks: the query was padded)."})}
		if err := s.opt.Registry.Register(s.dot.conns); err != nil {
			ln.Close()
			return fmt.Errorf("register dns tls metrics: %w", err)
		}
		if err := s.opt.Registry.Register(s.dot.padded); err != nil {
			ln.Close()
			return fmt.Errorf("register dns tls metrics: %w", err)
		}
	}
	s.dot.ln, s.dot.tc, s.dot.idle = ln, tc, cfg.TLS.Idle()
	s.dot.sem = make(chan struct{}, cfg.TLS.Conns())
	return nil
}

// TLSAddr is the bound address of the DNS over TLS listener; invalid without one.
func (s *Server) TLSAddr() netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dot == nil || s.dot.ln == nil {
		return netip.AddrPort{}
	}
	return addrPort(s.dot.ln.Addr())
}

// serveDoT accepts the DoT listener's connections, at most max_connections at once.
func (s *Server) serveDoT(d *dotListener) {
	defer s.wg.Done()
	s.acceptLoop(d.ln, d.sem, nil, func(c net.Conn) {
		tc := tls.Server(c, d.tc)
		if err := d.handshakes.Run(tc, dotHandshake); err != nil {
			return
		}
		d.conns.Inc()
		defer d.conns.Dec()
		s.serveDoTConn(d, tc)
	})
}

// dotConn is one DoT connection: queries are read in order and answered concurrently, each
// answer written whole under the write lock as soon as it is ready (out of order, RFC 7858
// 3.3), so a slow answer does not hold up the ones behind it.
type dotConn struct {
	c     net.Conn
	wmu   sync.Mutex
	wg    sync.WaitGroup
	slots chan struct{}
	src   netip.AddrPort
	local netip.AddrPort
}

func (s *Server) serveDoTConn(d *dotListener, c net.Conn) {
	dc := &dotConn{c: c, slots: make(chan struct{}, dotInFlight), src: addrPort(c.RemoteAddr()), local: addrPort(c.LocalAddr())}
	defer dc.wg.Wait() // every answer is written (or fails) before the connection closes
	var lenBuf [2]byte
	for served := 0; ; served++ {
		if s.draining.Load() && served > 0 {
			return
		}
		c.SetReadDeadline(time.Now().Add(d.idle))
		if _, err := io.ReadFull(c, lenBuf[:]); err != nil {
			return
		}
		buf := make([]byte, int(lenBuf[0])<<8|int(lenBuf[1]))
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		qt := s.tapTime()
		if xfr.IsQuery(buf) {
			// A transfer is a stream of messages: it waits for the answers in flight and holds the
			// connection's writes until it is done (XoT, RFC 9103).
			dc.wg.Wait()
			s.logTap(dnstap.DoT, dc.src, dc.local, qt, buf, nil)
			dc.wmu.Lock()
			err := s.transfers.ServeTCP(c, buf, dc.src.Addr(), s.state.Load().xfr)
			dc.wmu.Unlock()
			if err != nil {
				return
			}
			continue
		}
		dc.slots <- struct{}{}
		dc.wg.Add(1)
		go func() {
			defer func() { <-dc.slots; dc.wg.Done() }()
			out := s.Respond(buf, dc.src.Addr(), true)
			if out != nil {
				out = s.padDoT(d, buf, out)
			}
			s.logTap(dnstap.DoT, dc.src, dc.local, qt, buf, out)
			if out == nil {
				return
			}
			dc.write(out)
		}()
	}
}

// write sends one framed answer; a failed write closes the connection, which ends the reader.
func (dc *dotConn) write(out []byte) {
	frame := make([]byte, 2+len(out))
	frame[0], frame[1] = byte(len(out)>>8), byte(len(out))
	copy(frame[2:], out)
	dc.wmu.Lock()
	defer dc.wmu.Unlock()
	dc.c.SetWriteDeadline(time.Now().Add(tcpIdle))
	if _, err := dc.c.Write(frame); err != nil {
		dc.c.Close()
	}
}

// dotPadBlock is the response block size RFC 8467 4.1 recommends.
const dotPadBlock = 468

// padDoT pads the response to a multiple of 468 bytes when the query carried a Padding option
// (RFC 7830; RFC 8467: pad responses only to padded queries). A response signed with TSIG is
// left as it is (the padding would have to precede the signature).
func (s *Server) padDoT(d *dotListener, query, out []byte) []byte {
	q := new(mdns.Msg)
	if q.Unpack(query) != nil || !hasPadding(q) {
		return out
	}
	r := new(mdns.Msg)
	if r.Unpack(out) != nil || r.IsTsig() != nil {
		return out
	}
	opt := r.IsEdns0()
	if opt == nil {
		return out
	}
	r.Compress = true
	pad := &mdns.EDNS0_PADDING{}
	opt.Option = append(opt.Option, pad)
	n := r.Len() // what r packs to with the empty option (its 4-byte header counted)
	pad.Padding = make([]byte, (dotPadBlock-n%dotPadBlock)%dotPadBlock)
	b, err := r.Pack()
	if err != nil || len(b) > 65535 {
		return out
	}
	d.padded.Inc()
	return b
}

func hasPadding(m *mdns.Msg) bool {
	if opt := m.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if o.Option() == mdns.EDNS0PADDING {
				return true
			}
		}
	}
	return false
}
