// Command l4scale is the driver of the L4 control plane's scale benchmark (bench/l4scale.sh runs
// it as root): at each of several VIP counts (16 backends a VIP, rings sized from them under a cap
// of 65537 by default) it starts
// the real daemon (`switchyard lb run`) on a veth in a network namespace of its own, cold (no
// pins) and again over its own pins (adopt), then times drains, undrains and `vip add` through
// the control socket, and reads the ring maps' kernel memory and the daemon's resident memory.
// Prints a table and writes one flat JSON object. Every round is checked: a call that fails, an
// adopt that rewrote ring slots, or a daemon that did not come up fails the run, and nothing is
// written.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

type opts struct {
	bin      string
	sizes    []int
	backends int
	ring     uint32
	sizing   string // ring_sizing: auto (each VIP's ring from its backends, at most ring) or fixed
	rounds   int
	changes  int
	out      string
	smoke    bool
	// prof, when set, is a directory: the daemon runs as bench/prof (built there) and writes a
	// CPU profile of each start and of the rest of each run into it.
	prof string
}

func main() {
	var o opts
	var sizes string
	flag.StringVar(&o.bin, "bin", "bin/switchyard", "the switchyard `BINARY`")
	flag.StringVar(&sizes, "vips", "16,256,4096", "comma-separated VIP `COUNTS`")
	flag.IntVar(&o.backends, "backends", 16, "backends per VIP")
	ring := flag.Uint("ring", 65537, "Maglev ring size: the cap of automatic sizes, or every ring's with -ring-sizing fixed")
	flag.StringVar(&o.sizing, "ring-sizing", "auto", "ring_sizing: auto or fixed")
	flag.IntVar(&o.rounds, "rounds", 3, "cold start + adopt rounds per VIP count")
	flag.IntVar(&o.changes, "changes", 5, "drains (and undrains) and vip adds per round")
	flag.StringVar(&o.out, "out", "bench/out/l4scale.json", "JSON `FILE`")
	flag.BoolVar(&o.smoke, "smoke", false, "mark the result as a short run")
	flag.StringVar(&o.prof, "prof", "", "write CPU profiles of every daemon start and run into `DIR` (runs bench/prof)")
	flag.Parse()
	o.ring = uint32(*ring)
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			fail("bad -vips %q: give counts of at least 2", sizes)
		}
		o.sizes = append(o.sizes, n)
	}
	if err := run(o); err != nil {
		fail("%v", err)
	}
}

func fail(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "l4scale bench: FAILED: "+f+"\n", a...)
	os.Exit(1)
}

// lab is one namespace pair: the balancer's side (the daemon's interface) and a peer that holds
// the next hop's address, so that the daemon resolves it at once.
type lab struct {
	nsLB, nsPeer, dir string
}

func sh(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func newLab() (*lab, error) {
	p := fmt.Sprintf("sysc%d", os.Getpid())
	l := &lab{nsLB: p + "a", nsPeer: p + "b"}
	var err error
	if l.dir, err = os.MkdirTemp("", "switchyard-l4scale-"); err != nil {
		return nil, err
	}
	for _, ns := range []string{l.nsLB, l.nsPeer} {
		if err := namednetns.Create(ns); err != nil {
			l.close()
			return nil, err
		}
	}
	steps := [][]string{
		{"ip", "link", "add", "sysc0", "netns", l.nsLB, "type", "veth", "peer", "name", "sysc1", "netns", l.nsPeer},
		{"ip", "-n", l.nsLB, "addr", "add", "198.18.0.2/24", "dev", "sysc0"},
		{"ip", "-n", l.nsPeer, "addr", "add", "198.18.0.1/24", "dev", "sysc1"},
		{"ip", "-n", l.nsLB, "link", "set", "sysc0", "up"}, {"ip", "-n", l.nsPeer, "link", "set", "sysc1", "up"},
	}
	for _, s := range steps {
		if err := sh(s...); err != nil {
			l.close()
			return nil, err
		}
	}
	return l, nil
}

func (l *lab) close() {
	_ = namednetns.Remove(l.nsLB)
	_ = namednetns.Remove(l.nsPeer)
	_ = os.RemoveAll(l.dir)
}

func (l *lab) pinDir() string { return "/sys/fs/bpf/switchyard-l4scale-" + strconv.Itoa(os.Getpid()) }

// vipConfig is VIP i with its backends: VIP i takes pool addresses i*4 .. i*4+per-1, so every
// VIP has its own backend set and each address serves per/4 VIPs (distinct addresses stay under
// the 65,535 ids ring slots hold).
func vipConfig(i, per, pool int) config.VIP {
	v := config.VIP{Name: fmt.Sprintf("v%d", i), Address: fmt.Sprintf("198.%d.%d.%d", 19+i/65536, i/256%256, i%256), Port: 80, Protocol: "tcp"}
	for j := 0; j < per; j++ {
		k := (i*4 + j) % pool
		v.Backends = append(v.Backends, config.Backend{Address: fmt.Sprintf("10.%d.%d.%d", k/65536, k/256%256, k%256), Weight: 1})
	}
	return v
}

func (l *lab) writeConfig(n int, o opts) (string, error) {
	pool := min(n*4+o.backends, 65000)
	c := config.Config{Interface: "sysc0", PinDir: l.pinDir(), Socket: filepath.Join(l.dir, "lb.sock"), NextHop: "198.18.0.1",
		RingSize: o.ring, RingSizing: o.sizing, MaxVIPs: uint32(n + 1), MaxBackends: 65536}
	for i := 0; i < n; i++ {
		c.VIPs = append(c.VIPs, vipConfig(i, o.backends, pool))
	}
	path := filepath.Join(l.dir, "lb.yaml")
	return path, c.Save(path)
}

// daemon is a running `switchyard lb run`.
type daemon struct {
	cmd *exec.Cmd
	log *os.File
}

// start runs the daemon; name (such as 4096-cold-0) names its profiles when o.prof is set.
func (l *lab) start(o opts, cfg, name string) (*daemon, time.Duration, error) {
	logf, err := os.CreateTemp(l.dir, "daemon-*.log")
	if err != nil {
		return nil, 0, err
	}
	args := []string{o.bin, "lb", "run", "--config", cfg}
	if o.prof != "" {
		args = []string{filepath.Join(o.prof, "prof"), "-stop", "lb", "-config", cfg, "-pprof", "",
			"-start-profile", filepath.Join(o.prof, name+"-start.pprof"), "-run-profile", filepath.Join(o.prof, name+"-run.pprof")}
	}
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + l.nsLB, "--"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	d := &daemon{cmd: cmd, log: logf}
	c := api.NewClient(filepath.Join(l.dir, "lb.sock"))
	deadline := t0.Add(120 * time.Second)
	for {
		// Ready: the socket answers (it is served once the maps are reconciled and the program
		// attached). `lb status` is timed on its own: it digests every ring.
		var hs []api.HealthInfo
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := c.Call(ctx, api.OpHealth, api.Empty{}, &hs)
		cancel()
		if err == nil {
			return d, time.Since(t0), nil
		}
		if time.Now().After(deadline) || exited(cmd) {
			d.stop()
			b, _ := os.ReadFile(logf.Name())
			return nil, 0, fmt.Errorf("daemon did not come up (%v):\n%s", err, b)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func exited(cmd *exec.Cmd) bool {
	return cmd.ProcessState != nil || syscall.Kill(cmd.Process.Pid, 0) != nil
}

func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
	}
	d.log.Close()
}

func (d *daemon) logText() string {
	b, _ := os.ReadFile(d.log.Name())
	return string(b)
}

// cpu is the daemon's CPU time so far (user + system), from /proc (clock ticks of 10 ms).
func (d *daemon) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", d.cmd.Process.Pid)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat", d.cmd.Process.Pid)
	}
	return time.Duration(u+s) * 10 * time.Millisecond, nil
}

// rssAnon reads the daemon's resident anonymous memory (kB) from /proc.
func (d *daemon) rssAnon() (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "RssAnon:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no RssAnon in /proc/%d/status", d.cmd.Process.Pid)
}

// ringBytes is the kernel memory of the ring maps (rings16 and prev_rings16), from fdinfo.
func (l *lab) ringBytes() (float64, error) {
	total := 0.0
	for _, name := range []string{bpfobj.LBMapRings16, bpfobj.LBMapPrevRings16} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(loader.MapsDir(l.pinDir()), name), nil)
		if err != nil {
			return 0, err
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
		m.Close()
		if err != nil {
			return 0, err
		}
		found := false
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "memlock:"); ok {
				v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
				if err != nil {
					return 0, err
				}
				total += v
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("no memlock in the fdinfo of %s", name)
		}
	}
	return total, nil
}

func call(sock, op string, req any) (time.Duration, error) {
	c := api.NewClient(sock)
	var res api.ChangeResult
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := c.Call(ctx, op, req, &res); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	return time.Since(t0), nil
}

// scale is the figures of one VIP count (medians over the rounds and changes).
type scale struct {
	cold, adopt, drain, vipAdd, status time.Duration
	// the daemon's CPU time: to be ready (cold, adopt), and per change (drain, vip add)
	coldCPU, adoptCPU, drainCPU, vipAddCPU time.Duration
	ringPerSlot, rssMiB                    float64
	ringMiB                                float64 // kernel memory of both ring maps
	vipRing                                uint32  // the ring size of a VIP of the bench
}

// samples are one VIP count's measurements, one a round (drains and adds: one a change).
type samples struct {
	colds, adopts, drains, adds, statuses, coldCPU, adoptCPU, drainCPU, addCPU []time.Duration
	rss                                                                        []float64
}

func measure(l *lab, o opts, n int) (scale, error) {
	var s scale
	cfg, err := l.writeConfig(n, o)
	if err != nil {
		return s, err
	}
	var m samples
	for r := 0; r < o.rounds; r++ {
		if err := measureRound(l, o, n, r, cfg, &m, &s); err != nil {
			return s, err
		}
	}
	_ = loader.Detach(l.pinDir())
	s.cold, s.adopt, s.drain, s.vipAdd, s.status = median(m.colds), median(m.adopts), median(m.drains), median(m.adds), median(m.statuses)
	s.coldCPU, s.adoptCPU, s.drainCPU, s.vipAddCPU = median(m.coldCPU), median(m.adoptCPU), median(m.drainCPU), median(m.addCPU)
	sort.Float64s(m.rss)
	s.rssMiB = m.rss[len(m.rss)/2]
	return s, nil
}

// measureRound is round r: a cold start, then an adopting start that is asked its status and
// then changed (measureChanges); the first round also measures the ring memory into s.
func measureRound(l *lab, o opts, n, r int, cfg string, m *samples, s *scale) error {
	sock := filepath.Join(l.dir, "lb.sock")
	_ = loader.Detach(l.pinDir())
	d, cold, err := l.start(o, cfg, fmt.Sprintf("%d-cold-%d", n, r))
	if err != nil {
		return fmt.Errorf("%d VIPs, cold start: %w", n, err)
	}
	m.colds = append(m.colds, cold)
	c, err := d.cpu()
	if err != nil {
		d.stop()
		return err
	}
	m.coldCPU = append(m.coldCPU, c)
	d.stop()
	d, adopt, err := l.start(o, cfg, fmt.Sprintf("%d-adopt-%d", n, r))
	if err != nil {
		return fmt.Errorf("%d VIPs, adopt: %w", n, err)
	}
	defer d.stop()
	m.adopts = append(m.adopts, adopt)
	c0, err := d.cpu()
	if err != nil {
		return err
	}
	m.adoptCPU = append(m.adoptCPU, c0)
	t0 := time.Now()
	var st api.Status
	if err := api.NewClient(sock).Call(context.Background(), api.OpStatus, api.Empty{}, &st); err != nil || len(st.Rings) != n {
		return fmt.Errorf("%d VIPs: lb status: %v (%d ring digests)", n, err, len(st.Rings))
	}
	m.statuses = append(m.statuses, time.Since(t0))
	if c0, err = d.cpu(); err != nil {
		return err
	}
	if !strings.Contains(d.logText(), "slots_written=0") {
		return fmt.Errorf("%d VIPs: the adopting daemon rewrote ring slots:\n%s", n, d.logText())
	}
	if err := measureChanges(d, sock, o, n, c0, m); err != nil {
		return err
	}
	if r == 0 {
		b, err := l.ringBytes()
		if err != nil {
			return err
		}
		slots := loader.PinnedRingSlots(l.pinDir())
		s.ringPerSlot, s.ringMiB = b/float64(slots), b/(1<<20)
		c := config.Config{RingSize: o.ring, RingSizing: o.sizing}
		v := vipConfig(0, o.backends, 65000)
		s.vipRing = c.VIPRingSize(&v)
	}
	return nil
}

// measureChanges drains and undrains a backend, then adds and removes a VIP, o.changes times
// each on the running daemon d (whose CPU time was c0), and then reads its memory.
func measureChanges(d *daemon, sock string, o opts, n int, c0 time.Duration, m *samples) error {
	vip := vipConfig(n/2, o.backends, min(n*4+o.backends, 65000))
	for k := 0; k < o.changes; k++ {
		b := vip.Backends[k%len(vip.Backends)].Address
		for _, op := range []string{api.OpBackendDrain, api.OpBackendUndrain} {
			t, err := call(sock, op, api.BackendReq{VIP: vip.Name, Address: b})
			if err != nil {
				return err
			}
			m.drains = append(m.drains, t)
		}
	}
	c1, err := d.cpu()
	if err != nil {
		return err
	}
	m.drainCPU = append(m.drainCPU, (c1-c0)/time.Duration(2*o.changes))
	for k := 0; k < o.changes; k++ {
		nv := vipConfig(n+1, o.backends, 65000)
		nv.Name = "added"
		t, err := call(sock, api.OpVIPAdd, api.VIPAdd{VIP: nv})
		if err == nil {
			_, err = call(sock, api.OpVIPRemove, api.VIPRef{VIP: "added"})
		}
		if err != nil {
			return err
		}
		m.adds = append(m.adds, t)
	}
	c2, err := d.cpu()
	if err != nil {
		return err
	}
	m.addCPU = append(m.addCPU, (c2-c1)/time.Duration(o.changes)) // an add and its remove
	rss, err := d.rssAnon()
	if err != nil {
		return err
	}
	m.rss = append(m.rss, rss)
	return nil
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func run(o opts) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (network namespaces, XDP)")
	}
	if _, err := os.Stat(o.bin); err != nil {
		return fmt.Errorf("%s missing: run go build -o bin/switchyard ./cmd/switchyard", o.bin)
	}
	if o.prof != "" {
		if _, err := os.Stat(filepath.Join(o.prof, "prof")); err != nil {
			return fmt.Errorf("-prof %s: no profiling daemon there: go build -o %s/prof ./bench/prof", o.prof, o.prof)
		}
	}
	l, err := newLab()
	if err != nil {
		return err
	}
	defer l.close()
	defer func() { _ = loader.Detach(l.pinDir()) }()
	out := map[string]any{"backends_per_vip": o.backends, "ring_size": o.ring, "ring_sizing": o.sizing, "rounds": o.rounds, "smoke": o.smoke}
	fmt.Printf("%6s %10s %10s %10s %10s %10s %12s %9s %12s   daemon CPU ms: %8s %8s %8s %12s\n", "vips", "cold ms", "adopt ms", "drain ms", "vip add ms", "status ms", "ring B/slot", "ring MiB", "rss anon MiB",
		"cold", "adopt", "drain", "add+remove")
	var first scale
	for i, n := range o.sizes {
		s, err := measure(l, o, n)
		if err != nil {
			return err
		}
		if i == 0 {
			first = s
		}
		fmt.Printf("%6d %10.1f %10.1f %10.2f %10.2f %10.1f %12.2f %9.1f %12.1f   %23.0f %8.0f %8.1f %12.1f\n", n, ms(s.cold), ms(s.adopt), ms(s.drain), ms(s.vipAdd), ms(s.status), s.ringPerSlot, s.ringMiB, s.rssMiB,
			ms(s.coldCPU), ms(s.adoptCPU), ms(s.drainCPU), ms(s.vipAddCPU))
		p := fmt.Sprintf("vips%d_", n)
		out[p+"cold_ms"], out[p+"adopt_ms"], out[p+"drain_ms"], out[p+"vip_add_ms"] = ms(s.cold), ms(s.adopt), ms(s.drain), ms(s.vipAdd)
		out[p+"ring_bytes_per_slot"], out[p+"rss_anon_mib"] = round2(s.ringPerSlot), round2(s.rssMiB)
		out[p+"ring_mib"], out[p+"vip_ring_size"] = round2(s.ringMiB), s.vipRing
		out[p+"cold_cpu_ms"], out[p+"adopt_cpu_ms"], out[p+"first_status_ms"] = ms(s.coldCPU), ms(s.adoptCPU), ms(s.status)
		out[p+"drain_cpu_ms"], out[p+"vip_add_remove_cpu_ms"] = ms(s.drainCPU), ms(s.vipAddCPU)
		if i > 0 {
			per := (s.rssMiB - first.rssMiB) / float64(n-o.sizes[0])
			out[p+"rss_anon_kib_per_vip"] = round2(per * 1024)
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return writeAtomic(o.out, append(b, '\n'))
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }

func writeAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
