package loader_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/switchyard/switchyard/internal/maglev"
)

// The Katran peer of BenchmarkXDP: Katran's balancer.bpf.c, built at bench time from
// KATRAN_DIR with Katran's own flags and wrapped by bench/katran/katran_bench.c (the same wrappers
// as switchyard's xdp_lb_bench, bpf/include/bench.h). Its maps are set as Katran's user space sets
// them: one VIP, 16 reals, a ring of 65537 slots, and one LRU per CPU (lru_mapping). Nothing of
// Katran is in this tree; without KATRAN_DIR the Katran cases are skipped.

// katranFlags are Katran's BPF build flags (its Makefile-bpf), plus -g: its maps are declared
// in a BTF .maps section, which needs the debug info (the code generated is the same).
var katranFlags = []string{"-O2", "-g", "-target", "bpf", "-DDEBUG", "-D__KERNEL__",
	"-Wno-unused-value", "-Wno-pointer-sign", "-Wno-compare-distinct-pointer-types"}

// katranInsertEverySYN raises Katran's MAX_CONN_RATE (default 125,000 new connections a second
// per core, above which it stops inserting new flows into its LRU) out of reach: the variant that
// inserts every SYN, as switchyard does.
const katranInsertEverySYN = "-DMAX_CONN_RATE=4294967295U"

// Katran's stats map indexes past MAX_VIPS (balancer_consts.h).
const (
	katranLRUCntrs   = 0  // v1: packets toward a VIP, v2: LRU misses
	katranLRUMiss    = 1  // v1: misses of a TCP SYN, v2: misses of a non-SYN TCP packet
	katranXDPTXCntr  = 17 // v1: XDP_TX
	katranXDPPassCnt = 19 // v1: XDP_PASS
)

// katranLRUPerCPU is the size of each CPU's LRU: Katran's user space gives each forwarding core
// LruSize / cores entries; 2M a CPU holds the many-flows case's 2^20 flows without eviction (and
// is, on 2 CPUs, the size of switchyard's table in the benchmark).
const katranLRUPerCPU = 2 << 20

var katranBuild struct {
	once        sync.Once
	dir         string // the temporary build directory, removed by TestMain
	def, insert string // object paths
	err         error
}

// TestMain removes Katran's build directory once every test and benchmark is done.
func TestMain(m *testing.M) {
	code := m.Run()
	if katranBuild.dir != "" {
		os.RemoveAll(katranBuild.dir)
	}
	os.Exit(code)
}

// buildKatran compiles the wrapper twice (default, insert every SYN) into a temporary directory
// (kept for the process: every benchmark round reuses the objects).
func buildKatran(tb testing.TB, katranDir string) (def, insert string) {
	tb.Helper()
	katranBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "switchyard-katran-")
		if err != nil {
			katranBuild.err = err
			return
		}
		katranBuild.dir = dir
		// Katran's sources include "katran/lib/...": a directory whose "katran" entry is KATRAN_DIR.
		// With -target bpf, glibc's headers ask for gnu/stubs-32.h: an empty one is enough.
		abs, err := filepath.Abs(katranDir)
		if err == nil {
			err = os.Symlink(abs, filepath.Join(dir, "katran"))
		}
		if err == nil {
			err = os.MkdirAll(filepath.Join(dir, "stubs", "gnu"), 0o755)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "stubs", "gnu", "stubs-32.h"), nil, 0o644)
		}
		if err != nil {
			katranBuild.err = err
			return
		}
		src, _ := filepath.Abs("../bench/katran/katran_bench.c")
		inc, _ := filepath.Abs("../bpf/include")
		for _, v := range []struct {
			out   *string
			extra []string
		}{{&katranBuild.def, nil}, {&katranBuild.insert, []string{katranInsertEverySYN}}} {
			obj := filepath.Join(dir, fmt.Sprintf("katran%d.o", len(v.extra)))
			args := append(append([]string{}, katranFlags...), v.extra...)
			// inc for bench.h, inc/vendor so that the kernel headers switchyard vendors come
			// before the host's, as they did when they sat in inc.
			args = append(args, "-I", dir, "-I", inc, "-I", filepath.Join(inc, "vendor"), "-idirafter", filepath.Join(dir, "stubs"),
				"-idirafter", "/usr/include/x86_64-linux-gnu", "-c", src, "-o", obj)
			if out, err := exec.Command("clang", args...).CombinedOutput(); err != nil {
				katranBuild.err = fmt.Errorf("build katran (clang %v): %w\n%s", args, err, out)
				return
			}
			*v.out = obj
		}
	})
	if katranBuild.err != nil {
		tb.Fatal(katranBuild.err)
	}
	return katranBuild.def, katranBuild.insert
}

// katranPeer is Katran loaded twice over the same maps: its default build and the one that
// inserts every SYN.
type katranPeer struct {
	bench, flows             *ebpf.Program // default build
	benchInsert, flowsInsert *ebpf.Program // MAX_CONN_RATE out of reach
	stats                    *ebpf.Map
	maxVIPs                  uint32
}

// newKatranPeer builds and loads Katran and fills its maps for one VIP (vip:port/TCP) and the
// given reals, as Katran's user space would.
func newKatranPeer(tb testing.TB, katranDir, vip string, port uint16, reals []string) *katranPeer {
	tb.Helper()
	def, insert := buildKatran(tb, katranDir)
	load := func(obj string, repl map[string]*ebpf.Map) *ebpf.Collection {
		spec, err := ebpf.LoadCollectionSpec(obj)
		if err != nil {
			tb.Fatal(err)
		}
		delete(spec.Programs, "balancer_ingress") // inlined into the wrappers
		coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
		if err != nil {
			tb.Fatalf("load katran %s: %v", obj, err)
		}
		tb.Cleanup(func() { coll.Close() })
		return coll
	}
	c := load(def, nil)
	ci := load(insert, c.Maps)
	k := &katranPeer{bench: c.Programs["katran_bench"], flows: c.Programs["katran_bench_flows"],
		benchInsert: ci.Programs["katran_bench"], flowsInsert: ci.Programs["katran_bench_flows"],
		stats: c.Maps["stats"], maxVIPs: c.Maps["stats"].MaxEntries() / 2}
	k.fill(tb, c, vip, port, reals)
	return k
}

func (k *katranPeer) fill(tb testing.TB, c *ebpf.Collection, vip string, port uint16, reals []string) {
	tb.Helper()
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	// vip_definition {addr[16], port (network order), proto, pad} -> vip_meta {flags, vip_num}.
	vk := make([]byte, 20)
	a := netip.MustParseAddr(vip).As4()
	copy(vk, a[:])
	binary.BigEndian.PutUint16(vk[16:], port)
	vk[18] = 6
	must(c.Maps["vip_map"].Put(vk, make([]byte, 8)))
	// reals: id -> real_definition {addr[16], flags, pad}; the ring holds ids 1..16.
	var mb []maglev.Backend
	for i, r := range reals {
		rv := make([]byte, 20)
		ra := netip.MustParseAddr(r).As4()
		copy(rv, ra[:])
		must(c.Maps["reals"].Put(uint32(i+1), rv))
		mb = append(mb, maglev.Backend{ID: uint32(i + 1), Identity: r, Weight: 1})
	}
	ring, err := maglev.Build(mb, 65537)
	must(err)
	keys := make([]uint32, len(ring))
	for i := range keys {
		keys[i] = uint32(i) // vip_num 0: slots 0..65536
	}
	_, err = c.Maps["ch_rings"].BatchUpdate(keys, ring, nil)
	must(err)
	// ctl_array[0]: the default router's MAC.
	mac := make([]byte, 8)
	copy(mac, nextHopMAC)
	must(c.Maps["ctl_array"].Put(uint32(0), mac))
	// One LRU per CPU, as KatranLb::initLrus makes them.
	ncpu, err := ebpf.PossibleCPU()
	must(err)
	outer := c.Maps["lru_mapping"]
	for cpu := 0; cpu < ncpu; cpu++ {
		spec := &ebpf.MapSpec{Type: ebpf.LRUHash, KeySize: 40, ValueSize: 16, MaxEntries: katranLRUPerCPU}
		m, err := ebpf.NewMap(spec)
		must(err)
		tb.Cleanup(func() { m.Close() })
		must(outer.Put(uint32(cpu), m))
	}
}

// stat sums Katran's stats[maxVIPs+idx] over CPUs.
func (k *katranPeer) stat(tb testing.TB, idx uint32) (v1, v2 uint64) {
	tb.Helper()
	var per []struct{ V1, V2 uint64 }
	if err := k.stats.Lookup(k.maxVIPs+idx, &per); err != nil {
		tb.Fatal(err)
	}
	for _, p := range per {
		v1 += p.V1
		v2 += p.V2
	}
	return v1, v2
}

// katranStats is the snapshot of the counters that prove a Katran pass's path.
type katranStats struct{ vip, miss, synMiss, tx, pass uint64 }

func (k *katranPeer) snapshot(tb testing.TB) katranStats {
	var s katranStats
	s.vip, s.miss = k.stat(tb, katranLRUCntrs)
	s.synMiss, _ = k.stat(tb, katranLRUMiss)
	s.tx, _ = k.stat(tb, katranXDPTXCntr)
	s.pass, _ = k.stat(tb, katranXDPPassCnt)
	return s
}

// katranPath names what every one of n passes must have done.
type katranPath int

const (
	katranPathPass        katranPath = iota // not a VIP: XDP_PASS
	katranPathNewFlow                       // a SYN: LRU miss, consistent hashing, XDP_TX
	katranPathEstablished                   // LRU hit, XDP_TX
)

// check fails unless every one of n passes between the snapshots took path p.
func (p katranPath) check(tb testing.TB, before, after katranStats, n uint64) {
	tb.Helper()
	d := katranStats{after.vip - before.vip, after.miss - before.miss, after.synMiss - before.synMiss,
		after.tx - before.tx, after.pass - before.pass}
	var want katranStats
	switch p {
	case katranPathPass:
		want = katranStats{pass: n}
	case katranPathNewFlow:
		want = katranStats{vip: n, miss: n, synMiss: n, tx: n}
	case katranPathEstablished:
		want = katranStats{vip: n, tx: n}
	}
	if d != want {
		tb.Fatalf("katran counters grew by %+v over %d passes, want %+v: not every pass took the measured path", d, n, want)
	}
}
