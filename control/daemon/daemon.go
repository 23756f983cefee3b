// Package daemon is the L4 balancer's daemon: it loads and attaches the forwarder (or adopts the
// one pinned by an earlier run), reconciles the maps to the configuration, runs health checks,
// drains backends, follows the next hop, serves the control socket and the metrics, and reloads
// its configuration on SIGHUP. Stopping it leaves the program attached and the maps pinned, so
// traffic keeps flowing until the next daemon adopts them; `lb detach` removes everything.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/control/health"
	"github.com/switchyard/switchyard/control/metrics"
	"github.com/switchyard/switchyard/control/nexthop"
	"github.com/switchyard/switchyard/control/reconcile"
	"github.com/switchyard/switchyard/internal/adminauth"
	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/maps"
)

// Options configure a daemon.
type Options struct {
	// Config is the starting configuration, validated, with flag overrides and defaults applied.
	Config *config.Config
	// ConfigPath is the file it came from; reloads read it and CLI changes are written back to
	// it. Empty means changes persist only through `lb config save --path`.
	ConfigPath string
	// Override re-applies command-line overrides to a reloaded file (may be nil).
	Override func(*config.Config)
	// Logger receives structured logs; nil logs to stderr.
	Logger *slog.Logger
	// Version is reported by `lb status`.
	Version string
	// Ready, when set, is called once the daemon serves its socket.
	Ready func()
	// Store is the fleet store, etcd://HOST:PORT[,...]/PREFIX: the VIPs come from there and
	// CLI changes go there (see store.go); empty means the file's VIPs.
	Store string
}

// Daemon is a running balancer control plane.
type Daemon struct {
	opt     Options
	log     *slog.Logger
	started time.Time

	fwd     *loader.Forwarder
	set     *maps.Set
	quicIDs map[uint32]uint32 // the server ID map as last written (quic.go); nil: read it back
	// guardHave is the guard maps' state as last written (guard.go); nil: read it back.
	guardHave *maps.GuardState
	lnk       link.Link
	adopted   bool

	mu          sync.Mutex // guards everything below, and every reconcile
	cfg         *config.Config
	rec         *reconcile.Reconciler
	hm          *health.Manager
	drains      map[health.Key]*drain
	bgp         *announcer // nil without a bgp section (announce.go)
	nh          nexthop.Result
	nhOK        bool
	counts      counts
	sampler     sampler
	store       *storeLink                 // nil without --store
	digests     map[uint32]cachedDigest    // ring digests by VIP id (digest.go)
	warned      *config.Config             // the configuration whose warnings were logged
	saver       config.Saver               // persists CLI changes, encoding only the VIPs that changed
	desired     desiredCache               // Desired, kept per VIP (state.go)
	healthSpecs map[health.Key]health.Spec // the checks last synced
	tp          tunnelProbes               // health checks through the tunnel (tunnelhealth.go)
}

type drain struct {
	start   time.Time
	expired bool
}

// counts are the daemon's own event counters, exported as metrics.
type counts struct {
	rebuilds, slots, reloads, reloadErrors, applyErrors, healthChanges, drainsExpired uint64
}

// New checks the options; Run does the work.
func New(opt Options) (*Daemon, error) {
	if opt.Config == nil {
		return nil, errors.New("start daemon: no configuration")
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("start daemon: not root: loading XDP programs needs root (CAP_BPF, CAP_NET_ADMIN): run with sudo")
	}
	if err := opt.Config.Validate(); err != nil {
		return nil, fmt.Errorf("start daemon: %w", err)
	}
	if err := checkStoreOptions(opt); err != nil {
		return nil, fmt.Errorf("start daemon: %w", err)
	}
	log := opt.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return &Daemon{opt: opt, log: log.With("stop", "l4", "iface", opt.Config.Interface), cfg: opt.Config, drains: map[health.Key]*drain{}}, nil
}

// Run serves until ctx ends. It returns after releasing its handles; the program stays
// attached and the maps stay pinned. It loads (socket, BGP, forwarder, maps), attaches (map
// config, first apply, program), then serves (control socket, metrics, store, next hop, signals).
func (d *Daemon) Run(ctx context.Context) error {
	d.started = time.Now()
	cfg := d.cfg
	ln, sigs, release, err := d.load(cfg)
	if err != nil {
		return err
	}
	defer release()
	defer d.writeSnapshot()
	parent := ctx
	ctx, cancel := d.runContext(ctx)
	defer cancel()
	d.hm = health.NewManager(ctx)
	defer d.hm.Stop()
	if err := d.openStore(ctx); err != nil {
		return fmt.Errorf("start daemon: %w", err)
	}
	defer d.closeStore()
	if err := d.attach(cfg, sigs); err != nil {
		return err
	}
	defer d.lnk.Close()
	return d.serve(ctx, parent, cancel, cfg, ln)
}

// load opens what the daemon holds while it runs: the control socket, BGP, the forwarder's
// objects and maps, the ring signatures and the reconciler. release closes them in reverse
// order (on error load has already released what it opened).
func (d *Daemon) load(cfg *config.Config) (ln net.Listener, sigs *ebpf.Map, release func(), err error) {
	var undo []func()
	undoAll := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	defer func() {
		if err != nil {
			undoAll()
		}
	}()
	if _, err := loader.InterfaceIndex(cfg.Interface); err != nil {
		return nil, nil, nil, fmt.Errorf("start daemon: %w", err)
	}
	// The socket first: a second daemon for the same interface must fail before it touches the
	// maps or swaps the program. Calls wait in the backlog until Serve starts below.
	ln, err = api.Listen(cfg.Socket)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("start daemon: %w", err)
	}
	undo = append(undo, func() { os.Remove(cfg.Socket) }, func() { ln.Close() })
	if err := d.startBGP(); err != nil {
		return nil, nil, nil, fmt.Errorf("start daemon: %w", err)
	}
	undo = append(undo, d.stopBGP)
	undo = append(undo, d.detachIfDrained) // after every handle below is closed
	slots, err := ringSlots(cfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("start daemon: %w", err)
	}
	fwd, err := loader.LoadForwarder(loader.Options{PinDir: cfg.PinDir, MaxVIPs: cfg.MaxVIPs, RingSize: cfg.RingSize,
		RingSlots: slots, MaxBackends: cfg.MaxBackends, ConnTableSize: cfg.ConnTableSize})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("start daemon: %w", err)
	}
	d.fwd = fwd
	undo = append(undo, func() { fwd.Close() })
	undo = append(undo, d.closeProbes) // after the metrics server, which reads its counters, stopped
	if d.set, err = maps.New(&fwd.Objs.LBMaps, cfg.RingSize); err != nil {
		return nil, nil, nil, fmt.Errorf("start daemon: %w", err)
	}
	sigs, err = openRingSigs(fwd, d.set)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("start daemon: %w", err)
	}
	undo = append(undo, func() { sigs.Close() })
	if d.rec, err = reconcile.New(d.set); err != nil {
		return nil, nil, nil, fmt.Errorf("start daemon: %w", err)
	}
	d.rec.SetStableInputs(true) // desiredLocked gives an unchanged VIP the same input (state.go)
	return ln, sigs, undoAll, nil
}

// attach writes the map config, applies cfg, then attaches (or adopts) the program. On
// success d.lnk holds the link, which the caller closes.
func (d *Daemon) attach(cfg *config.Config, sigs *ebpf.Map) error {
	fwd := d.fwd
	// The frame config first (an adopted one is kept when the next hop is not resolved yet),
	// then the maps, then the program: a fresh program never runs on empty maps.
	d.mu.Lock()
	nh, nhErr := nexthop.Resolve(cfg.Interface, cfg.NextHopAddr(), 2*time.Second)
	if nhErr == nil {
		d.nh, d.nhOK = nh, true
	} else {
		d.log.Error("next hop not resolved; retrying in the background (encapsulated frames cannot leave until it is)", "err", nhErr)
	}
	if err := d.writeMapConfigLocked(cfg); err != nil {
		d.mu.Unlock()
		return fmt.Errorf("start daemon: %w", err)
	}
	if err := d.prepareProbesLocked(cfg); err != nil {
		d.mu.Unlock()
		return fmt.Errorf("start daemon: %w", err)
	}
	d.syncHealthLocked()
	res, err := d.applyLocked(cfg)
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("start daemon: %w", err)
	}
	d.lnk, d.adopted, err = fwd.Attach(cfg.Interface, loader.Mode(cfg.XDPMode))
	if err != nil {
		return fmt.Errorf("start daemon: %w", err)
	}
	if err := d.markAttached(); err != nil {
		return fmt.Errorf("start daemon: %w", err)
	}
	if d.opt.ConfigPath != "" {
		go func() { _, _ = d.saver.Marshal(cfg) }() // warm the per-VIP cache: the first change then encodes one VIP
	}
	if err := loader.StampRingSigs(sigs, fwd.Objs.XdpLb); err != nil {
		d.log.Warn("ring signatures not stamped: the next start rebuilds every ring", "err", err)
	}
	linkID, progID := d.ids()
	d.log.Info("forwarder running", "adopted", d.adopted, "link_id", linkID, "prog_id", progID, "xdp_mode", cfg.XDPMode,
		"pin_dir", cfg.PinDir, "vips", len(cfg.VIPs), "slots_written", res.SlotsWritten, "gateway", d.nh.Gateway, "next_hop_mac", d.nh.NextHopMAC.String())
	return nil
}

// serve runs the control socket, the metrics listener, the store and next-hop followers, and
// the event loop until parent ends (or a drain stops the daemon). cancel ends ctx, the
// goroutines' context; serve waits for them before it returns.
func (d *Daemon) serve(ctx, parent context.Context, cancel context.CancelFunc, cfg *config.Config, ln net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := api.Serve(ctx, ln, d.ops(), d.log); err != nil {
			d.log.Error("control socket stopped", "err", err)
		}
	}()
	if err := d.serveMetrics(ctx, cfg, &wg); err != nil {
		return err
	}
	d.followStore(ctx, &wg)
	wg.Add(1)
	go func() {
		defer wg.Done()
		nexthop.Follow(ctx, cfg.Interface, cfg.NextHopAddr(), 10*time.Second, d.onNextHop, func(err error) {
			d.log.Warn("next hop", "err", err)
		})
	}()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	d.log.Info("control socket ready", "socket", cfg.Socket)
	if d.opt.Ready != nil {
		d.opt.Ready()
	}
	d.loop(parent, hup)
	return nil
}

// serveMetrics serves /metrics on cfg.Metrics (when set) until ctx ends.
func (d *Daemon) serveMetrics(ctx context.Context, cfg *config.Config, wg *sync.WaitGroup) error {
	if cfg.Metrics == "" {
		return nil
	}
	mln, err := net.Listen("tcp", adminauth.Loopback(cfg.Metrics)) // ":9100" binds to loopback
	if err != nil {
		return fmt.Errorf("start daemon: listen for metrics on %s: %w (is the port in use?)", cfg.Metrics, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(d.snapshot))
	d.registerBGP(reg)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	wg.Add(2)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx) // waits for scrapes in flight, which read the maps
	}()
	go func() {
		defer wg.Done()
		_ = srv.Serve(mln)
	}()
	d.log.Info("metrics served", "addr", mln.Addr().String())
	return nil
}

// loop handles reloads (SIGHUP), health changes, store snapshots and the once-a-second work
// until the daemon is told to stop.
func (d *Daemon) loop(parent context.Context, hup <-chan os.Signal) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	stop := d.stopChan(parent)
	for {
		select {
		case <-stop:
			d.log.Info(d.stopMessage())
			return
		case <-hup:
			if _, err := d.Reload(); err != nil {
				d.log.Error("reload failed; the running configuration stays", "err", err)
			}
		case ch := <-d.hm.Changes():
			d.onHealth(ch)
		case sn := <-d.storeUpdates():
			d.onStoreSnapshot(sn)
		case now := <-tick.C:
			d.sampler.sample(d.set, d.idsSnapshot(), now)
			d.expireDrains(now)
			d.retirePrevious(now)
		}
	}
}

// ids returns the link and program ids (0 when unknown).
func (d *Daemon) ids() (linkID, progID uint32) {
	if d.lnk != nil {
		if info, err := d.lnk.Info(); err == nil {
			linkID = uint32(info.ID)
		}
	}
	if d.fwd != nil {
		if info, err := d.fwd.Objs.XdpLb.Info(); err == nil {
			if id, ok := info.ID(); ok {
				progID = uint32(id)
			}
		}
	}
	return
}

// parseAddr is an optional address of the bgp section, unmapped (the zero Addr when left out).
// The bgp section is read once a start or reload, so its addresses are not kept parsed in the
// configuration as the VIPs' and backends' are (config.VIP.Addr, config.Backend.Addr).
func parseAddr(s string) netip.Addr {
	a, _ := netip.ParseAddr(s)
	return a.Unmap()
}

// onNextHop writes a changed next hop into the map config.
func (d *Daemon) onNextHop(r nexthop.Result) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.nhOK && d.nh.Equal(r) {
		return
	}
	d.nh, d.nhOK = r, true
	if err := d.writeMapConfigLocked(d.cfg); err != nil {
		d.log.Error("write next hop", "err", err)
		return
	}
	d.log.Info("next hop", "gateway", r.Gateway, "mac", r.NextHopMAC.String(), "mtu", r.MTU)
}

// writeMapConfigLocked writes the forwarder config from cfg (the running configuration, or the
// one a reload is about to switch to) and the next hop.
func (d *Daemon) writeMapConfigLocked(cfg *config.Config) error {
	mc := maps.Config{
		UDPTimeout:   cfg.UDPTimeout.D(),
		ICMPTooBig:   cfg.ICMPTooBig != nil && *cfg.ICMPTooBig,
		SecondChance: secondChance(cfg),
		// Off by default; see docs/xdp.md.
		SYNInsertLimit: cfg.SYNInsertLimit,
	}
	d.rec.SetRetirePrevious(cfg.SecondChanceRetire.D())
	if d.nhOK {
		mc.IfMAC, mc.NextHopMAC = d.nh.IfMAC, d.nh.NextHopMAC
		mc.MTU = uint16(d.nh.MTU)
	} else if old, err := d.set.Config(); err == nil && !isZeroMAC(old.NextHopMAC) {
		// Adopting: keep what the previous daemon resolved until we know better.
		mc.IfMAC, mc.NextHopMAC, mc.MTU = old.IfMAC, old.NextHopMAC, old.MTU
	} else {
		mc.IfMAC, mc.NextHopMAC = make([]byte, 6), make([]byte, 6)
		if ifc, err := net.InterfaceByName(cfg.Interface); err == nil {
			mc.IfMAC = ifc.HardwareAddr
			mc.MTU = uint16(ifc.MTU)
		}
	}
	if cfg.MTU != 0 {
		mc.MTU = uint16(cfg.MTU)
	}
	if mc.MTU < 576 {
		mc.MTU = 1500
	}
	src4, src6 := cfg.EncapSource4Addr(), cfg.EncapSource6Addr()
	if src4.IsValid() {
		mc.Src4, mc.Src4HashBits = src4, 8
	} else {
		mc.Src4 = interfaceAddr(cfg.Interface, true)
	}
	if src6.IsValid() {
		mc.Src6 = src6
	} else {
		mc.Src6 = interfaceAddr(cfg.Interface, false)
	}
	return d.set.SetConfig(mc)
}

func isZeroMAC(m net.HardwareAddr) bool {
	for _, b := range m {
		if b != 0 {
			return false
		}
	}
	return true
}

// interfaceAddr is the interface's first global address of a family (the default outer source).
func interfaceAddr(iface string, v4 bool) netip.Addr {
	ifc, err := net.InterfaceByName(iface)
	if err != nil {
		return netip.Addr{}
	}
	addrs, _ := ifc.Addrs()
	for _, a := range addrs {
		pfx, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		ip := pfx.Addr().Unmap()
		if ip.Is4() == v4 && ip.IsGlobalUnicast() {
			return ip
		}
	}
	return netip.Addr{}
}

// Reload re-reads the configuration file and applies it; on error the running state stays.
func (d *Daemon) Reload() (api.ChangeResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counts.reloads++
	fail := func(err error) (api.ChangeResult, error) {
		d.counts.reloadErrors++
		return api.ChangeResult{}, err
	}
	if d.opt.ConfigPath == "" {
		return fail(errors.New("reload: the daemon was started without --config: nothing to reload"))
	}
	next, err := config.LoadSnapshotted(d.opt.ConfigPath)
	if err != nil {
		return fail(fmt.Errorf("reload: %w", err))
	}
	if d.opt.Override != nil {
		d.opt.Override(next)
	}
	next.ApplyDefaults()
	if err := d.storeReload(next); err != nil {
		return fail(fmt.Errorf("reload: %w", err))
	}
	if err := next.Validate(); err != nil {
		return fail(fmt.Errorf("reload: %w", err))
	}
	if err := fixedFields(d.cfg, next); err != nil {
		return fail(fmt.Errorf("reload: %w", err))
	}
	if err := d.writeMapConfigLocked(next); err != nil {
		return fail(fmt.Errorf("reload: %w", err))
	}
	res, err := d.switchToLocked(next)
	if err != nil {
		_ = d.writeMapConfigLocked(d.cfg) // the old configuration's, back in effect
		return fail(fmt.Errorf("reload: %w", err))
	}
	d.log.Info("configuration reloaded", "path", d.opt.ConfigPath, "vips", len(next.VIPs), "slots_written", res.SlotsWritten)
	return api.ChangeResult{Message: fmt.Sprintf("reloaded %s: %d VIPs", d.opt.ConfigPath, len(next.VIPs)), SlotsWritten: res.SlotsWritten}, nil
}

// fixedFields refuses changes that need a restart (map sizes, pins, interface).
func fixedFields(cur, next *config.Config) error {
	type f struct {
		name     string
		old, new any
	}
	for _, x := range []f{
		{"interface", cur.Interface, next.Interface}, {"pin_dir", cur.PinDir, next.PinDir},
		{"ring_slots", cur.RingSlots, next.RingSlots}, {"max_vips", cur.MaxVIPs, next.MaxVIPs},
		{"max_backends", cur.MaxBackends, next.MaxBackends}, {"conn_table_size", cur.ConnTableSize, next.ConnTableSize},
		{"xdp_mode", cur.XDPMode, next.XDPMode}, {"socket", cur.Socket, next.Socket}, {"metrics", cur.Metrics, next.Metrics},
	} {
		if x.old != x.new {
			return fmt.Errorf("%s changed from %v to %v: this needs a restart of `lb run` (map sizes also need `lb detach`); put it back to reload the rest", x.name, x.old, x.new)
		}
	}
	return bgpFixed(cur, next)
}
