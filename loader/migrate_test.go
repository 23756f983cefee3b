package loader_test

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
	"github.com/switchyard/switchyard/maps"
)

// v2Pins pins, under pin/maps-v2, the maps of the layout-v2 forwarder (testdata/lb_v2_bpfel.o,
// the object of the last v2 binary) with the sizes that binary's loader gave them, and returns
// its collection: a balancer left running by a v2 binary.
func v2Pins(t *testing.T, pin string, opts loader.Options) *ebpf.Collection {
	t.Helper()
	spec, err := ebpf.LoadCollectionSpec("testdata/lb_v2_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"vips", "vip_addrs", "vip_gens", "vip_stats", "vip_drops"} {
		spec.Maps[name].MaxEntries = opts.MaxVIPs
	}
	spec.Maps["rings16"].MaxEntries = loader.RingWords(opts.MaxVIPs, opts.RingSize)
	spec.Maps["prev_rings16"].MaxEntries = loader.RingWords(opts.MaxVIPs, opts.RingSize)
	for _, name := range []string{"backends", "backend_stats", "quic_servers"} {
		spec.Maps[name].MaxEntries = opts.MaxBackends
	}
	spec.Maps["conntrack4"].MaxEntries = opts.ConnTableSize
	spec.Maps["conntrack"].MaxEntries = opts.ConnTableSize
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinByName
	}
	dir := filepath.Join(pin, "maps-v2")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	c, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: dir}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// v2VIP writes a VIP of id 0 into v2 maps as a v2 binary did: its 8-byte vips entry, its address
// in vip_addrs and every vip_filter bit, and its ring (slots 0..ring-1) all backend be.
func v2VIP(t *testing.T, m *bpfobj.LBMaps, k maps.VIPKey, ring uint32, be uint16) {
	t.Helper()
	var key bpfobj.LBVipKey
	b := k.Addr.As4()
	key.Addr[0] = uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
	key.Port, key.Proto, key.Family = k.Port<<8|k.Port>>8, uint8(k.Proto), uint8(bpfobj.LBFamilyFAMILY_V4)
	if err := m.Vips.Put(key, [2]uint32{0, 0}); err != nil {
		t.Fatal(err)
	}
	addrKey := bpfobj.LBVipKey{Addr: key.Addr, Family: key.Family}
	if err := m.VipAddrs.Put(addrKey, uint32(1)); err != nil {
		t.Fatal(err)
	}
	for i := uint32(0); i < uint32(bpfobj.LBVipFilterSizeVIP_FILTER_SLOTS); i++ {
		if err := m.VipFilter.Put(i, uint32(1)); err != nil {
			t.Fatal(err)
		}
	}
	for w := uint32(0); w < loader.RingWords(1, ring); w++ {
		if err := m.Rings16.Put(w, bpfobj.LBRingWord{Id: [4]uint16{be, be, be, be}}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMigratesV2Pins: a forwarder started over pins of layout v2 takes them over: the VIP keeps
// its id and generation, the connection table is kept, so a flow established through the v2
// program keeps its backend through the new one while new flows follow the VIP's new ring; a
// migration stopped before the new program is attached is made again from the old maps, and the
// attach retires the old pins.
func TestMigratesV2Pins(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireKernel(t, testutil.XDP)
	pin := fmt.Sprintf("/sys/fs/bpf/switchyard/test/migrate-%d", os.Getpid())
	t.Cleanup(func() { os.RemoveAll(pin) })
	if err := loader.EnsureBPFFS(pin); err != nil {
		t.Skip(err)
	}
	opts := loader.Options{PinDir: pin, MaxVIPs: 4, RingSize: testRing, MaxBackends: 16, ConnTableSize: 1024}
	old := v2Pins(t, pin, opts)
	a, b := netip.MustParseAddr("198.18.3.1"), netip.MustParseAddr("198.18.3.2")
	web := maps.VIPKey{Addr: netip.MustParseAddr("198.18.100.1"), Port: 80, Proto: maps.TCP}
	oldSet, oldMaps := setOver(t, old)
	for id, addr := range map[uint32]netip.Addr{1: a, 2: b} {
		if err := oldSet.PutBackend(maps.Backend{ID: id, Addr: addr}); err != nil {
			t.Fatal(err)
		}
	}
	v2VIP(t, oldMaps, web, testRing, 1)
	established := pkt{src: "198.18.0.10", dst: "198.18.100.1", sport: 40000, dport: 80, proto: "tcp", flags: "S"}
	if got := sendTo(t, old.Programs["xdp_lb"], established.build(t)); got != a {
		t.Fatalf("v2 program sent the SYN to %v, want %s", got, a)
	}
	var gen uint32
	_ = oldMaps.VipGens.Lookup(uint32(0), &gen)

	check := func(f *loader.Forwarder) {
		t.Helper()
		s, err := maps.New(&f.Objs.LBMaps, testRing)
		if err != nil {
			t.Fatal(err)
		}
		vs, err := s.VIPs()
		if err != nil || len(vs) != 1 || vs[0].Key != web || vs[0].ID != 0 || vs[0].Ring.Size != 0 {
			t.Fatalf("migrated VIPs %+v (%v), want web with id 0 and no ring yet", vs, err)
		}
		// The control plane's part: the VIP's ring (now all b) at a range, then its entry.
		rg := maps.RingRange{Off: 7, Size: 11}
		table := make([]uint32, rg.Size)
		for i := range table {
			table[i] = 2
		}
		if _, err := s.WriteRingAt(rg, table); err != nil {
			t.Fatal(err)
		}
		if err := s.PutVIP(maps.VIP{Key: web, ID: 0, Ring: rg}); err != nil {
			t.Fatal(err)
		}
		var g uint32
		if err := f.Objs.VipGens.Lookup(uint32(0), &g); err != nil || g != gen {
			t.Fatalf("vip generation %d (%v), want %d kept: established flows would be voided", g, err, gen)
		}
		ack := established
		ack.flags = "A"
		if got := sendTo(t, f.Objs.XdpLb, ack.build(t)); got != a {
			t.Fatalf("established flow sent to %v by the new program, want %s (its v2 entry)", got, a)
		}
		fresh := pkt{src: "198.18.0.11", dst: "198.18.100.1", sport: 40001, dport: 80, proto: "tcp", flags: "S"}
		if got := sendTo(t, f.Objs.XdpLb, fresh.build(t)); got != b {
			t.Fatalf("new flow sent to %v, want %s (the new ring)", got, b)
		}
	}
	f, err := loader.LoadForwarder(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Migrated {
		t.Fatal("v2 pins not migrated")
	}
	check(f)
	f.Close()
	// Stopped before the attach: the v2 program still runs; the next start migrates again.
	for _, d := range []string{"maps-v2", "maps-v3"} {
		if _, err := os.Stat(filepath.Join(pin, d)); err != nil {
			t.Fatalf("%s after a migration without attach: %v", d, err)
		}
	}
	f, err = loader.LoadForwarder(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Migrated {
		t.Fatal("a stopped migration was not made again")
	}
	check(f)
	// The attach swaps the program in and retires the v2 pins; the next start adopts v3's.
	ns := fmt.Sprintf("mig%d", os.Getpid())
	testutil.NamedNS(t, ns)
	for _, c := range [][]string{{"-n", ns, "link", "add", "d0", "type", "veth", "peer", "name", "d1"}, {"-n", ns, "link", "set", "d0", "up"}} {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", c, err, out)
		}
	}
	testutil.DoNamed(t, ns, func() error {
		l, _, err := f.Attach("d0", loader.Generic)
		if err == nil {
			l.Close()
		}
		return err
	})
	f.Close()
	if _, err := os.Stat(filepath.Join(pin, "maps-v2")); !os.IsNotExist(err) {
		t.Fatalf("v2 pins still there after the attach (%v)", err)
	}
	// A stop between the attach and that removal: both directories, the new program attached.
	if err := os.MkdirAll(filepath.Join(pin, "maps-v2"), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err = loader.LoadForwarder(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Migrated {
		t.Fatal("a finished migration was made again")
	}
	if _, err := os.Stat(filepath.Join(pin, "maps-v2")); !os.IsNotExist(err) {
		t.Fatalf("v2 pins of a finished migration not removed (%v)", err)
	}
	ack := established
	ack.flags = "A"
	if got := sendTo(t, f.Objs.XdpLb, ack.build(t)); got != a {
		t.Fatalf("after the upgrade the established flow goes to %v, want %s", got, a)
	}
	_ = loader.Detach(pin)
}

// setOver is a maps.Set over the maps of a collection (of any layout with the same map names),
// which it takes from the collection.
func setOver(t *testing.T, c *ebpf.Collection) (*maps.Set, *bpfobj.LBMaps) {
	t.Helper()
	// The v2 object lacks the maps added since (the guard's, the unconfirmed tables): those
	// fields stay nil, as nothing in this test reaches them.
	var m bpfobj.LBMaps
	rv := reflect.ValueOf(&m).Elem()
	for i := range rv.NumField() {
		if om, ok := c.Maps[rv.Type().Field(i).Tag.Get("ebpf")]; ok {
			clone, err := om.Clone()
			if err != nil {
				t.Fatal(err)
			}
			rv.Field(i).Set(reflect.ValueOf(clone))
		}
	}
	t.Cleanup(func() { m.Close() })
	s, err := maps.New(&m, testRing)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetConfig(maps.Config{IfMAC: lbMAC, NextHopMAC: nextHopMAC, MTU: 1500, Src4: src4Base, Src4HashBits: 16,
		Src6: src6Base, ICMPTooBig: true}); err != nil {
		t.Fatal(err)
	}
	return s, &m
}

// sendTo runs a frame through a forwarding program and returns the backend (outer destination)
// it was encapsulated to; the test fails on any other verdict.
func sendTo(t *testing.T, prog *ebpf.Program, frame []byte) netip.Addr {
	t.Helper()
	out := make([]byte, len(frame)+512)
	o := ebpf.RunOptions{Data: frame, DataOut: out}
	ret, err := prog.Run(&o)
	if err != nil {
		t.Fatal(err)
	}
	if ret != 3 { // XDP_TX
		t.Fatalf("verdict %d, want XDP_TX", ret)
	}
	return decodeEncap(t, o.DataOut).outerDst
}
