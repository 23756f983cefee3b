// Package dns is the switchyard DNS stop: an authoritative server over UDP and TCP for the zones
// of a YAML configuration, whose dynamic service names are answered by routing policies
// (geolocation, latency, weighted, failover) over health-checked sites. It is embeddable:
// NewServer, Start, Addr, Reload, Close; the CLI `switchyard dns run` and the lab use this API.
package dns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/dnssec"
	"github.com/switchyard/switchyard/dns/dnstap"
	"github.com/switchyard/switchyard/dns/health"
	"github.com/switchyard/switchyard/dns/internal/wire"
	"github.com/switchyard/switchyard/dns/keystore"
	"github.com/switchyard/switchyard/dns/policy"
	"github.com/switchyard/switchyard/dns/secondary"
	"github.com/switchyard/switchyard/dns/udpio"
	"github.com/switchyard/switchyard/dns/update"
	"github.com/switchyard/switchyard/dns/xfr"
	"github.com/switchyard/switchyard/dns/zone"
	"github.com/switchyard/switchyard/internal/handover"
)

// Options tune an embedded server.
type Options struct {
	// Logger receives server logs and, with query_log, one line per query; nil discards.
	Logger *slog.Logger
	// Registry receives the switchyard_dns_* metrics; nil creates a private registry (see
	// Server.Registry), so several servers can live in one process.
	Registry *prometheus.Registry
	// ManualHealth disables the periodic health probes: the caller drives them with
	// Health().Round, to probe on a clock of its own (the dns-failover experiment, docs/lab.md).
	ManualHealth bool
	// Sockets, when set, is where Start takes the sockets inherited from the process this one
	// replaces and keeps its own to pass on (internal/handover).
	Sockets *handover.Sockets
	// UDPWait is how a UDP worker waits for datagrams (udpio.WaitNetpoll, WaitThread,
	// WaitSpin); empty takes SWITCHYARD_DNS_UDP_WAIT from the environment, else netpoll.
	UDPWait udpio.Wait
	// KeyStore tunes the etcd store of the policies' keys (the configuration's store:); the
	// zero value is what production runs.
	KeyStore keystore.Options
}

// state is everything a reload replaces at once; queries load it once and use it throughout.
type state struct {
	cfg    *config.Config
	store  *zone.Store
	names  map[string]*policy.Name
	groups *policy.Groups
	health *health.Checker
	rrl    *limiter
	cache  *answerCache
	// xfr is the transfer data of the zones with a transfer block and the TSIG keys.
	xfr *xfr.Set
	// signers are the online DNSSEC signers of the signed zones, by origin.
	signers map[string]*dnssec.Signer
	// xdpGen is the XDP answer path's generation of this state (0: it packs nothing; xdp.go).
	xdpGen uint32
	// zoneSeries is set while the zones are few enough to count queries per zone
	// (query_metrics_zones; metrics.go).
	zoneSeries bool
	// secondaries are the secondary zones by origin (secondaries.go); down are those of them
	// without a copy to serve (none yet, or expired): their queries get SERVFAIL.
	secondaries map[string]*secondary.Zone
	// base is the configuration as loaded, before its catalogs were expanded into zones (cfg;
	// catalog.go).
	base *config.Config
	down map[string]bool
	// keysAt is the clock when the signers were built: a policy's key transition after it calls
	// for a rebuild (keys.go).
	keysAt time.Time
}

// Server is an authoritative DNS server.
type Server struct {
	opt     Options
	log     *slog.Logger
	state   atomic.Pointer[state]
	metrics *metrics
	ops     *opsMetrics
	// transfers answers transfer queries and sends NOTIFY.
	transfers *xfr.Server
	// healthGen counts site health transitions; cached dynamic answers are valid only in the
	// generation they were decided in.
	healthGen atomic.Uint64
	// localWarn rate-limits the log of health probes that failed for a local reason.
	localWarn rateLog
	// sigStats counts the online signers' work across reloads.
	sigStats dnssec.Stats
	// skew moves the clock of signatures and signed cache entries (nanoseconds; tests only).
	skew atomic.Int64
	// coarse is the wall clock in Unix seconds, refreshed by runClock while serving (unixNow).
	coarse atomic.Int64
	// udpWait is the checked Options.UDPWait; batches counts each UDP worker's recvmmsg fill.
	udpWait udpio.Wait
	batches []udpio.BatchStats
	// xdp is the XDP answer path (udp.xdp), nil when off; set in Start before any worker runs.
	xdp *xdpPath
	// journals are the zones' update journals by path, kept across reloads; guarded by mu,
	// which serialises updates with each other and with reloads.
	journals map[string]*update.Journal
	// running are the refresh loops of the secondary zones by origin; guarded by mu.
	running map[string]*runningSecondary
	// geo are the geolocation databases (geo.go); guarded by mu.
	geo *geoDBs
	// tap is the dnstap output (nil: none), from the configuration at NewServer (tap.go).
	tap *dnstap.Tap
	// dot is the DNS over TLS listener (dot.go), nil without one; set in Start.
	dot *dotListener
	// udpLocal is the UDP listener's address, the response address of dnstap's UDP messages.
	udpLocal netip.AddrPort
	// keys is the key policies' loop (keys.go).
	keys keyLoop
	// updates is where dynamic updates are applied (dynupdate.go).
	updates updateThread

	mu          sync.Mutex     // guards the fields below
	udp         *net.UDPConn   // the first UDP socket; Addr reports it
	udpConns    []*net.UDPConn // one SO_REUSEPORT socket per worker
	tcp         *net.TCPListener
	healthStop  context.CancelFunc
	wg          sync.WaitGroup
	closed      bool
	draining    atomic.Bool  // Shutdown: stop reading, answer what is in flight
	udpLive     atomic.Int32 // UDP workers still running
	tcpConns    map[net.Conn]struct{}
	serveCtx    context.Context
	serveCancel context.CancelFunc
	// catalogListed are the members each consumed catalog lists, catalogOwner the catalog
	// each member is served from, catalogMembers the members served from each catalog;
	// catalogRecords and catalogSerial the produced catalog's list and serial (catalog.go).
	catalogListed  map[string][]config.CatalogMember
	catalogOwner   map[string]string
	catalogMembers map[string][]config.CatalogMember
	catalogRecords []string
	catalogSerial  uint32
}

// NewServer validates cfg and prepares a server; nothing is bound until Start.
func NewServer(cfg *config.Config, opt Options) (*Server, error) {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opt.Registry == nil {
		opt.Registry = prometheus.NewRegistry()
	}
	s := &Server{opt: opt, log: opt.Logger, tcpConns: map[net.Conn]struct{}{}, journals: map[string]*update.Journal{},
		running: map[string]*runningSecondary{}, catalogListed: map[string][]config.CatalogMember{},
		catalogMembers: map[string][]config.CatalogMember{}}
	s.localWarn = rateLog{log: s.log, interval: 10 * time.Second}
	m, err := newMetrics(opt.Registry)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	if s.ops, err = newOpsMetrics(opt.Registry, s); err != nil {
		return nil, err
	}
	s.transfers = &xfr.Server{Log: s.log, Transfers: s.ops.transfers, Notifies: s.ops.notifies, WriteTimeout: tcpIdle}
	if s.geo, err = newGeoDBs(opt.Registry); err != nil {
		return nil, err
	}
	if err := registerSignMetrics(opt.Registry, &s.sigStats); err != nil {
		return nil, err
	}
	if s.udpWait, err = udpio.ParseWait(opt.UDPWait); err != nil {
		return nil, fmt.Errorf("new dns server: %w", err)
	}
	s.batches = make([]udpio.BatchStats, udpio.Workers())
	if err := udpio.RegisterBatchStats(opt.Registry, s.batches); err != nil {
		return nil, err
	}
	st, err := s.build(cfg, nil)
	if err != nil {
		s.closeKeyStore()
		return nil, err
	}
	s.catalogOwner = s.loadCatalogOwners(st.base) // followed from Start (followCatalogs)
	if s.tap, err = s.newTap(st.cfg); err != nil {
		s.closeKeyStore()
		return nil, err
	}
	s.state.Store(st)
	return s, nil
}

// build compiles cfg into a state, carrying health state over from prev.
func (s *Server) build(cfg *config.Config, prev *state) (*state, error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base := cfg
	if cfg = s.expand(cfg); cfg != base {
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		base = base.SharingZones(cfg)
	}
	keysAt := s.now()
	var prevStore *zone.Store
	if prev != nil {
		prevStore = prev.store
	}
	// Zones whose source is unchanged come over from prev as they are (zone.Build); signed
	// zones' signers are made as their data's largest TTL is known.
	signers := map[string]*dnssec.Signer{}
	store, err := zone.Build(cfg, prevStore, s.signerKeys(cfg, keysAt, signers))
	if err != nil {
		return nil, err
	}
	if store, err = s.replayUpdates(cfg, store, prevStore); err != nil {
		return nil, err
	}
	if err := checkXoT(cfg); err != nil {
		return nil, err
	}
	store, secs, down := s.buildSecondaries(cfg, store, prev)
	groups, err := s.groups(cfg)
	if err != nil {
		return nil, err
	}
	var specs []policy.Spec
	for _, z := range cfg.Zones {
		for i := range z.Names {
			specs = append(specs, z.Names[i].Spec())
		}
	}
	names := policy.Compile(specs)
	targets := map[string]config.Check{}
	for _, z := range cfg.Zones {
		for _, n := range z.Names {
			for _, site := range n.Sites {
				if site.Check != nil {
					targets[n.Name+"/"+site.Name] = *site.Check
				}
			}
		}
	}
	var prevHealth *health.Checker
	if prev != nil {
		prevHealth = prev.health
	}
	hc := health.New(targets, prevHealth, s.healthChanged)
	hc.OnLocalError = s.healthLocalError
	for _, n := range names {
		for _, site := range n.Sites {
			s.metrics.siteUp.WithLabelValues(n.FQDN, site.Name).Set(boolFloat(hc.Up(site.Key)))
		}
	}
	var prevXfr *xfr.Set
	if prev != nil {
		prevXfr = prev.xfr
	}
	return &state{cfg: cfg, store: store, names: names, groups: groups, health: hc,
		rrl: newLimiter(cfg.RateLimit), cache: newAnswerCache(),
		xfr: xfr.Build(cfg, store, prevXfr, s.log), signers: signers, secondaries: secs, down: down, base: base,
		keysAt: keysAt, zoneSeries: len(cfg.Zones) <= cfg.QueryMetricsZones}, nil
}

func (s *Server) healthChanged(key string, up bool) {
	s.healthGen.Add(1)
	name, site := splitKey(key)
	s.metrics.siteUp.WithLabelValues(name, site).Set(boolFloat(up))
	s.metrics.transitions.WithLabelValues(name, site, map[bool]string{true: "up", false: "down"}[up]).Inc()
	s.log.Info("dns site health changed", "name", name, "site", site, "up", up)
}

func splitKey(key string) (string, string) {
	for i := len(key) - 1; i >= 0; i-- {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return key, ""
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Registry returns the registry holding the server's metrics.
func (s *Server) Registry() *prometheus.Registry { return s.opt.Registry }

// Health returns the current health checker (it changes on reload).
func (s *Server) Health() *health.Checker { return s.state.Load().health }

// Config returns the configuration being served.
func (s *Server) Config() *config.Config { return s.state.Load().cfg }

// Start binds UDP and TCP on the configured address (the same port for both, also when the
// port is 0) and serves until ctx ends or Close is called.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.udp != nil {
		return errors.New("start dns server: already started")
	}
	listen := s.state.Load().cfg.Listen
	raiseNoFile(s.log)
	conns, tcp, err := bindKept(s.opt.Sockets, listen, len(s.batches))
	if err != nil {
		return err
	}
	if err := udpio.SteerFromEnv(conns); err != nil {
		for _, c := range conns {
			c.Close()
		}
		tcp.Close()
		return err
	}
	udp := conns[0]
	if err := s.bindDoT(s.state.Load().cfg); err != nil {
		for _, c := range conns {
			c.Close()
		}
		tcp.Close()
		return err
	}
	xp, err := s.openXDP(s.state.Load().cfg, udp.LocalAddr().(*net.UDPAddr).AddrPort())
	if err != nil {
		for _, c := range conns {
			c.Close()
		}
		tcp.Close()
		if s.dot != nil && s.dot.ln != nil {
			s.dot.ln.Close()
		}
		return err
	}
	if xp != nil {
		s.xdp = xp
		xp.advance(s.state.Load())
	}
	s.udp, s.udpConns, s.tcp = udp, conns, tcp
	s.udpLocal = addrPort(udp.LocalAddr())
	s.serveCtx, s.serveCancel = context.WithCancel(ctx)
	if s.tap != nil {
		s.tap.Start(s.serveCtx)
	}
	if s.dot != nil && s.dot.ln != nil {
		s.wg.Add(1)
		go s.serveDoT(s.dot)
		s.log.Info("dns tls listening", "listen", s.dot.ln.Addr().String())
	}
	for i, c := range conns {
		s.wg.Add(1)
		s.udpLive.Add(1)
		// An upgrade can inherit more sockets than this process has workers: they share counters.
		go s.serveUDP(c, &s.batches[i%len(s.batches)])
	}
	s.wg.Add(1)
	go s.serveTCP()
	s.coarse.Store(time.Now().Unix())
	s.wg.Add(1)
	go s.runClock()
	s.wg.Add(1)
	go s.runKeys()
	if s.keys.store != nil {
		s.wg.Add(1)
		go s.followKeys(s.keys.store)
	}
	s.startHealth(s.state.Load())
	s.watchGeo(s.state.Load().cfg)
	s.notifyAll(s.state.Load())
	s.runSecondaries(s.state.Load())
	s.followCatalogs(s.state.Load()) // members of the catalogs' saved copies
	go func() {
		<-s.serveCtx.Done()
		s.Close()
	}()
	s.log.Info("dns server listening", "udp", udp.LocalAddr().String(), "tcp", tcp.Addr().String())
	return nil
}

// notifyAll tells the secondaries of the zones whose serial changed in the reload that built st
// (xfr.Server.Notify), in the background until the server closes. The caller holds s.mu, so
// Close cannot be waiting for the workers while one is added.
func (s *Server) notifyAll(st *state) {
	if s.serveCtx == nil || s.closed {
		return // not started (Start notifies) or closed
	}
	s.transfers.Notify(s.serveCtx, &s.wg, st.xfr, func() *xfr.Set { return s.state.Load().xfr })
}

// TransferSummary describes, one line each, the zones served to secondaries and the fallback
// answers their dynamic names are transferred with (for `switchyard dns check`).
func (s *Server) TransferSummary() []string {
	st := s.state.Load()
	return st.xfr.Summary(st.cfg)
}

func (s *Server) startHealth(st *state) {
	if s.opt.ManualHealth || s.serveCtx == nil {
		return
	}
	if s.healthStop != nil {
		s.healthStop()
	}
	ctx, cancel := context.WithCancel(s.serveCtx)
	s.healthStop = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		st.health.Run(ctx)
	}()
}

// Addr returns the bound address (UDP and TCP share it); invalid before Start.
func (s *Server) Addr() netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.udp == nil {
		return netip.AddrPort{}
	}
	return s.udp.LocalAddr().(*net.UDPAddr).AddrPort()
}

// Reload replaces the zones and names with cfg. When cfg is invalid the error is returned and
// the old zones keep serving; queries in flight finish on the state they started with.
func (s *Server) Reload(cfg *config.Config) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadLocked(cfg)
}

// reloadLocked is Reload with s.mu held.
func (s *Server) reloadLocked(cfg *config.Config) error {
	old := s.state.Load()
	st, err := s.build(cfg, old)
	if err != nil {
		s.metrics.reloads.WithLabelValues("error").Inc()
		return fmt.Errorf("reload dns config (old zones kept): %w", err)
	}
	if cfg.Listen != old.cfg.Listen && s.udp != nil {
		s.log.Warn("dns reload: listen address changes need a restart; keeping the old one", "listen", old.cfg.Listen)
	}
	if startOnlyChanged(old.cfg, cfg) {
		s.log.Warn("dns reload: dnstap and tls changes need a restart; keeping the old ones")
	}
	if s.xdp != nil {
		s.xdp.advance(st) // before st serves: no answer of the old zones from here on
	}
	s.state.Store(st)
	releaseOld() // old is not used past this point, so its zones are garbage now
	s.startHealth(st)
	s.watchGeo(st.cfg)
	s.notifyAll(st)
	s.runSecondaries(st)
	s.metrics.reloads.WithLabelValues("ok").Inc()
	s.log.Info("dns zones reloaded", "zones", len(st.cfg.Zones))
	s.followCatalogs(st)
	return nil
}

// startOnlyChanged reports whether the dnstap or tls block, read at start only, changed (their
// lines aside: an edit above them moves them).
func startOnlyChanged(a, b *config.Config) bool {
	tap := func(d *config.Dnstap) any {
		if d == nil {
			return nil
		}
		c := *d
		c.Line = 0
		return c
	}
	tlsb := func(t *config.TLS) any {
		if t == nil {
			return nil
		}
		c := *t
		c.Line = 0
		return c
	}
	return !reflect.DeepEqual(tap(a.Dnstap), tap(b.Dnstap)) || !reflect.DeepEqual(tlsb(a.TLS), tlsb(b.TLS))
}

// ReloadWith loads a configuration with load (typically config.Load of the file) and reloads it;
// a load error counts as a failed reload and keeps the old zones, like an invalid configuration.
func (s *Server) ReloadWith(load func() (*config.Config, error)) error {
	cfg, err := load()
	if err != nil {
		s.metrics.reloads.WithLabelValues("error").Inc()
		return fmt.Errorf("reload dns config (old zones kept): %w", err)
	}
	return s.Reload(cfg)
}

// Close stops serving and waits for the workers; it is safe to call twice.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed || s.udp == nil {
		started := s.udp != nil
		s.closed = true
		s.mu.Unlock()
		if !started { // else the first Close ends the key store once the key loop is done
			s.closeKeyStore()
			s.updates.stop()
		}
		return nil
	}
	s.closed = true
	s.serveCancel()
	for _, c := range s.udpConns {
		c.Close()
	}
	s.tcp.Close()
	if s.dot != nil && s.dot.ln != nil {
		s.dot.ln.Close()
	}
	for c := range s.tcpConns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.tap.Close()
	s.closeKeyStore()
	s.updates.stop()
	if s.xdp != nil {
		// Draining is an upgrade (Shutdown): the successor holds the attachment.
		if err := s.xdp.close(s.draining.Load() && s.opt.Sockets != nil); err != nil {
			s.log.Warn("dns xdp: close", "err", err)
		}
	}
	return nil
}

// serveUDP answers datagrams from one socket until it is closed, or, draining (Shutdown), until
// its batch in hand is sent. A cached answer is written into the batch's own storage (up to
// cacheWireMax bytes), so the hot path allocates nothing.
func (s *Server) serveUDP(conn *net.UDPConn, st *udpio.BatchStats) {
	defer s.wg.Done()
	defer s.udpLive.Add(-1)
	udpio.Serve(conn, s.udpWait, st, cacheWireMax, s.answerUDP, s.draining.Load)
}

// answerUDP answers and logs to dnstap (tap.go).
func (s *Server) answerUDP(dst, raw []byte, from netip.AddrPort) []byte {
	qt := s.tapTime()
	out := s.answerUDPLimited(dst, raw, from.Addr())
	s.logTap(dnstap.UDP, from, s.udpLocal, qt, raw, out)
	return out
}

// answerUDPLimited applies response-rate limiting, then answers.
func (s *Server) answerUDPLimited(dst, raw []byte, src netip.Addr) []byte {
	st := s.state.Load()
	if st.rrl != nil {
		switch st.rrl.allow(src) {
		case rrlDrop:
			s.metrics.rateLimited.WithLabelValues("drop").Inc()
			return nil
		case rrlSlip:
			s.metrics.rateLimited.WithLabelValues("slip").Inc()
			if len(raw) < 12 || raw[2]&0x80 != 0 {
				return nil
			}
			out := wire.HeaderOnly(raw, 0)
			out[2] |= 0x02 // TC: come back over TCP, which spoofed sources cannot do
			return out
		}
	}
	return s.respondTo(dst, raw, src, false)
}

// tcpIdle bounds how long an idle TCP client may hold a connection (RFC 7766 suggests seconds).
const tcpIdle = 10 * time.Second

// maxTCPConns bounds concurrent TCP clients so a flood of connections cannot exhaust memory.
const maxTCPConns = 512

func (s *Server) serveTCP() {
	defer s.wg.Done()
	warn := rateLog{log: s.log, interval: 10 * time.Second}
	s.acceptLoop(s.tcp, make(chan struct{}, maxTCPConns), func(err error, retry time.Duration) {
		warn.warn("dns tcp accept failed; backing off", "err", err, "retry_in", retry,
			"fix", "out of descriptors: raise LimitNOFILE / ulimit -n, or lower the TCP client count")
	}, s.serveTCPConn)
}

// acceptLoop accepts ln's connections until ln closes or the server stops, and serves each
// with serve on a goroutine of its own, tracked in tcpConns so that Close ends it; the loop
// closes the connection when serve returns. sem holds a slot per connection served: with none
// free a new connection is closed at once, so a flood of them cannot exhaust memory. failed (nil:
// none) reports a failed accept before the loop waits retry.
func (s *Server) acceptLoop(ln net.Listener, sem chan struct{}, failed func(err error, retry time.Duration), serve func(net.Conn)) {
	bo := backoff{min: acceptBackoffMin, max: acceptBackoffMax}
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors the kernel keeps the connection queued and accept fails again at
			// once: wait (exponential, capped) and count instead of spinning.
			d := bo.next()
			s.ops.acceptErrors.Inc()
			if failed != nil {
				failed(err, d)
			}
			select {
			case <-s.serveCtx.Done():
				return
			case <-time.After(d):
			}
			continue
		}
		bo.ok()
		select {
		case sem <- struct{}{}:
		default:
			c.Close() // over the limit
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.tcpConns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer func() {
				s.mu.Lock()
				delete(s.tcpConns, c)
				s.mu.Unlock()
				c.Close()
				<-sem
				s.wg.Done()
			}()
			serve(c)
		}()
	}
}

func (s *Server) serveTCPConn(c net.Conn) {
	src := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	var lenBuf [2]byte
	buf := make([]byte, 65535)
	for served := 0; ; served++ {
		idle := tcpIdle
		if s.draining.Load() {
			if served > 0 {
				return // between queries: the client reconnects to the process that took over
			}
			idle = tcpDrainIdle
		}
		c.SetReadDeadline(time.Now().Add(idle))
		if _, err := io.ReadFull(c, lenBuf[:]); err != nil {
			return
		}
		n := int(lenBuf[0])<<8 | int(lenBuf[1])
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return
		}
		qt := s.tapTime()
		if xfr.IsQuery(buf[:n]) {
			// A zone transfer answers with a stream of messages, not one: dnstap logs the query.
			s.logTap(dnstap.TCP, addrPort(c.RemoteAddr()), addrPort(c.LocalAddr()), qt, buf[:n], nil)
			if err := s.transfers.ServeTCP(c, buf[:n], src, s.state.Load().xfr); err != nil {
				return
			}
			continue
		}
		out := s.Respond(buf[:n], src, true)
		s.logTap(dnstap.TCP, addrPort(c.RemoteAddr()), addrPort(c.LocalAddr()), qt, buf[:n], out)
		if out == nil {
			return
		}
		frame := make([]byte, 2+len(out))
		frame[0], frame[1] = byte(len(out)>>8), byte(len(out))
		copy(frame[2:], out)
		c.SetWriteDeadline(time.Now().Add(tcpIdle))
		if _, err := c.Write(frame); err != nil {
			return
		}
	}
}

// Zones returns the zones being served, sorted by origin.
func (s *Server) Zones() []*zone.Zone { return s.state.Load().store.Zones() }

// Names returns the dynamic names being served.
func (s *Server) Names() []*policy.Name {
	st := s.state.Load()
	out := make([]*policy.Name, 0, len(st.names))
	for _, n := range st.names {
		out = append(out, n)
	}
	return out
}
