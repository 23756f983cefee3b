package dns

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/handover"
	"github.com/switchyard/switchyard/loader/dnsxdp"
)

// xdpPath is the server's XDP answer path (udp.xdp, docs/dns.md "XDP answer path"): the program
// attached to the listener's interface answers the static answers the socket path packed, from
// the generation of the state that packed them. Every reload moves the generation before the new
// state serves, so no answer of the old zones is sent after a reload.
type xdpPath struct {
	prog   *dnsxdp.Program
	log    *slog.Logger
	listen netip.AddrPort
	gen    uint32 // the generation last written (under Server.mu)

	mu       sync.Mutex // guards the slots and the last counts
	slots    map[xdpSlotKey]uint32
	slotOf   []xdpSlotKey
	last     []uint64
	lastPass map[string]uint64
	answers  *prometheus.CounterVec
	passed   *prometheus.CounterVec
	putErrs  atomic.Uint64
	stop     chan struct{}
	done     chan struct{}
	purging  sync.Mutex
}

// xdpSlotKey is what an answer counter slot counts for: the queries_total series of the answer
// and its rcode.
type xdpSlotKey struct {
	queries prometheus.Counter
	rcode   uint8
}

// xdpSync is how often the program's counters are added to the metrics.
const xdpSync = time.Second

// openXDP loads and attaches the program for cfg's listener at addr (taking over the link of
// the process this one replaces, when it passed one), or detaches an inherited link when
// udp.xdp is off. On error nothing stays attached.
func (s *Server) openXDP(cfg *config.Config, addr netip.AddrPort) (*xdpPath, error) {
	sk := s.opt.Sockets
	ifname, ierr := xdpInterface(addr.Addr())
	name := handover.Name("xdp", cfg.Listen+" "+ifname)
	if !cfg.UDP.XDPEnabled() {
		for _, f := range sk.Take(name) { // replaced a server with XDP: its answers stop now
			dnsxdp.DetachFile(f)
		}
		return nil, nil
	}
	if ierr != nil {
		return nil, fmt.Errorf("start dns xdp (udp.xdp: %s): %w", cfg.UDP.XDP, ierr)
	}
	prog, err := dnsxdp.Load()
	if err != nil {
		return nil, fmt.Errorf("start dns xdp (udp.xdp: %s; set udp.xdp: off to serve from the socket only): %w", cfg.UDP.XDP, err)
	}
	if err := prog.SetListener(addr, 0); err != nil {
		prog.Close()
		return nil, err
	}
	if fs := sk.Take(name); len(fs) > 0 {
		err = prog.AdoptFile(ifname, fs[0])
		for _, f := range fs[1:] {
			f.Close()
		}
	} else {
		err = prog.Attach(ifname, dnsxdp.Mode(cfg.UDP.XDP))
	}
	if err != nil {
		prog.Close()
		return nil, fmt.Errorf("start dns xdp (udp.xdp: %s; set udp.xdp: off to serve from the socket only): %w", cfg.UDP.XDP, err)
	}
	for _, l := range prog.Links() {
		if fd, ok := l.Link.(interface{ FD() int }); ok {
			if err := sk.Keep(name, linkFD(fd.FD())); err != nil {
				prog.Close()
				return nil, err
			}
		}
	}
	x := &xdpPath{prog: prog, log: s.log, listen: addr, slots: map[xdpSlotKey]uint32{},
		lastPass: map[string]uint64{}, stop: make(chan struct{}), done: make(chan struct{})}
	if err := x.register(s.opt.Registry); err != nil {
		prog.Close()
		return nil, err
	}
	for _, l := range prog.Links() {
		s.log.Info("dns xdp answer path attached", "interface", l.Ifname, "mode", l.Mode, "listen", addr.String())
	}
	go x.run()
	return x, nil
}

// xdpInterface finds the interface that holds a: the one with that address, else lo for a
// loopback address.
func xdpInterface(a netip.Addr) (string, error) {
	a = a.Unmap()
	if a.IsUnspecified() {
		return "", fmt.Errorf("listen address %s is on every interface: udp.xdp needs the address of one interface (e.g. 127.0.0.1:53 or 192.0.2.53:53)", a)
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", fmt.Errorf("list interfaces: %w", err)
	}
	loop := ""
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagLoopback != 0 && loop == "" {
			loop = ifc.Name
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, ad := range addrs {
			if ipn, ok := ad.(*net.IPNet); ok {
				if ia, ok := netip.AddrFromSlice(ipn.IP); ok && ia.Unmap() == a {
					return ifc.Name, nil
				}
			}
		}
	}
	if a.IsLoopback() && loop != "" {
		return loop, nil
	}
	return "", fmt.Errorf("no interface holds the listen address %s: udp.xdp attaches to the interface of the listener", a)
}

func (x *xdpPath) register(r *prometheus.Registry) error {
	x.answers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_dns_xdp_answers_total",
		Help: "Queries answered by the XDP answer path (also counted in switchyard_dns_queries_total), by rcode.",
	}, []string{"rcode"})
	x.passed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_dns_xdp_passed_total",
		Help: "Packets the XDP answer path passed to the socket, by reason (miss: not packed yet; edns, class, shape, name: queries it never answers; not_listener, not_ip: other traffic).",
	}, []string{"reason"})
	for _, c := range []prometheus.Collector{x.answers, x.passed} {
		if err := r.Register(c); err != nil {
			return fmt.Errorf("register dns xdp metrics: %w", err)
		}
	}
	return nil
}

// advance moves the generation for st (called under Server.mu before st serves): answers of
// older states stop at once. With RRL configured the program answers nothing (generation 0), so
// every query is accounted by the limiter on the socket path.
func (x *xdpPath) advance(st *state) {
	x.gen++
	if x.gen == 0 {
		x.gen = 1
	}
	st.xdpGen = x.gen
	if st.rrl != nil {
		st.xdpGen = 0
	}
	if err := x.prog.SetListener(x.listen, st.xdpGen); err != nil {
		// The old generation stays in the map: answer nothing rather than risk it.
		x.log.Error("dns xdp: set the generation failed; the XDP path is off", "err", err)
		st.xdpGen = 0
		x.prog.SetListener(x.listen, 0)
	}
	x.prog.Reclaim()
	go x.purge(st.xdpGen)
}

// purge deletes the answers of other generations (they are never sent; this frees the room).
func (x *xdpPath) purge(gen uint32) {
	x.purging.Lock()
	defer x.purging.Unlock()
	if _, err := x.prog.Purge(gen); err != nil {
		x.log.Warn("dns xdp: purge stale answers", "err", err)
	}
}

// fill packs resp, the socket path's static answer to the UDP query raw, into the map.
func (x *xdpPath) fill(gen uint32, raw, resp []byte, queries prometheus.Counter) {
	if gen == 0 || queries == nil || len(resp) < 12 {
		return
	}
	k, nlen, ok := dnsxdp.QueryKey(raw)
	if !ok {
		return
	}
	slot, ok := x.slot(queries, resp[3]&0x0f)
	if !ok {
		return
	}
	a, ok := dnsxdp.Pack(resp, &k, nlen, gen, slot)
	if !ok {
		return
	}
	if err := x.prog.Put(&k, a); err != nil && x.putErrs.Add(1) == 1 {
		x.log.Warn("dns xdp: put answer failed; the socket path answers it", "err", err)
	}
}

// slot returns the answer counter slot of a series and rcode; false when all are taken (the
// answer then stays on the socket path, so that every answer is counted).
func (x *xdpPath) slot(queries prometheus.Counter, rcode uint8) (uint32, bool) {
	k := xdpSlotKey{queries, rcode}
	x.mu.Lock()
	defer x.mu.Unlock()
	if i, ok := x.slots[k]; ok {
		return i, true
	}
	if len(x.slotOf) >= dnsxdp.Counters {
		return 0, false
	}
	i := uint32(len(x.slotOf))
	x.slots[k] = i
	x.slotOf = append(x.slotOf, k)
	x.last = append(x.last, 0)
	return i, true
}

func (x *xdpPath) run() {
	defer close(x.done)
	t := time.NewTicker(xdpSync)
	defer t.Stop()
	for {
		select {
		case <-x.stop:
			return
		case <-t.C:
			x.sync()
		}
	}
}

// sync adds what the program counted since the last sync to the metrics: each answer to its
// queries_total series and to xdp_answers_total by rcode, each pass by reason.
func (x *xdpPath) sync() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if n := len(x.slotOf); n > 0 {
		counts, err := x.prog.AnswerCounts(n)
		if err == nil {
			for i, c := range counts {
				if d := c - x.last[i]; d > 0 {
					k := x.slotOf[i]
					k.queries.Add(float64(d))
					x.answers.WithLabelValues(mdns.RcodeToString[int(k.rcode)]).Add(float64(d))
					x.last[i] = c
				}
			}
		}
	}
	if pass, err := x.prog.PassCounts(); err == nil {
		for reason, c := range pass {
			if d := c - x.lastPass[reason]; d > 0 {
				x.passed.WithLabelValues(reason).Add(float64(d))
				x.lastPass[reason] = c
			}
		}
	}
}

// close stops answering (generation 0 in this program's map: if the link lives on in a
// successor that has not swapped its program in yet, nothing stale is sent), counts the last
// answers and detaches, unless handing over: then the successor holds the attachment.
func (x *xdpPath) close(handingOver bool) error {
	close(x.stop)
	<-x.done
	x.prog.SetListener(x.listen, 0)
	x.sync()
	x.purging.Lock() // a purge still running needs the map
	defer x.purging.Unlock()
	if !handingOver {
		x.prog.Detach()
	}
	return x.prog.Close()
}

// xdpStatic reports whether an answer is static by construction: no policy, no health, no
// rotation, not signed, not truncated (the query's EDNS shape, which rules out ECS, other
// options and DO=1, is checked by dnsxdp.QueryKey).
func xdpStatic(oc *outcome) bool {
	return oc.cacheable && !oc.health && oc.rotate == nil && oc.expires == 0 && !oc.trunc && oc.reason == ""
}

// xdpStaticNX reports whether an NXDOMAIN is static by construction (zone data, not signed,
// not truncated). The socket path does not cache NXDOMAIN (random names would churn its
// cache), but the XDP path packs it: the map is an LRU that keeps the names asked often, and a
// name the LRU dropped is packed again at its next miss.
func xdpStaticNX(oc *outcome) bool {
	return oc.nxdomain && !oc.health && oc.rotate == nil && oc.expires == 0 && !oc.trunc && oc.reason == "" && oc.rcode == mdns.RcodeNameError
}

// linkFD passes an XDP link's descriptor to a successor (handover.Sockets.Keep).
type linkFD int

func (l linkFD) SyscallConn() (syscall.RawConn, error) { return linkRaw(l), nil }

type linkRaw int

func (l linkRaw) Control(f func(fd uintptr)) error  { f(uintptr(l)); return nil }
func (l linkRaw) Read(func(fd uintptr) bool) error  { return errors.ErrUnsupported }
func (l linkRaw) Write(func(fd uintptr) bool) error { return errors.ErrUnsupported }

// xdpRefill puts a cached static answer back in the program's map, at most once a second per
// entry: a query that reached the socket although its answer is cached was missed by the
// program (its entry evicted from the LRU map, or not packed in this generation yet).
func (s *Server) xdpRefill(st *state, e *cacheEntry, raw, out []byte) {
	now := s.unixNow()
	if st.xdpGen == 0 || e.xdpAt.Load() == now && e.xdpGen.Load() == st.xdpGen {
		return // once a second, and at once in a new generation (a kept entry after an update)
	}
	e.xdpAt.Store(now)
	e.xdpGen.Store(st.xdpGen)
	s.xdp.fill(st.xdpGen, raw, out, e.queries)
}

// XDPSummary describes the XDP answer path the configuration asks for (dns check), or nothing
// when udp.xdp is off.
func (s *Server) XDPSummary() []string {
	cfg := s.state.Load().cfg
	if !cfg.UDP.XDPEnabled() {
		return nil
	}
	where := "the interface of the listen address"
	if ap, err := netip.ParseAddrPort(cfg.Listen); err == nil {
		if ifname, err := xdpInterface(ap.Addr()); err == nil {
			where = ifname
		} else {
			return []string{fmt.Sprintf("udp.xdp %s: cannot attach here: %v", cfg.UDP.XDP, err)}
		}
	}
	line := fmt.Sprintf("udp.xdp %s on %s: static answers up to %d bytes sent by the XDP program", cfg.UDP.XDP, where, dnsxdp.WireMax)
	if cfg.RateLimit.ResponsesPerSecond > 0 {
		line += "; rate_limit is set, so the program answers nothing (every query goes through RRL)"
	}
	return []string{line}
}
