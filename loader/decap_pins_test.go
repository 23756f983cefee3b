package loader_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// TestDecapPinsOfOlderBinary: pins made before the allow-lists existed (no decap_sc_peers,
// decap_sc_sources, decap_sc_refused) are read by `lb decap stats` with a message saying to
// re-attach, and re-attaching (OpenDecap) creates the new maps beside them, keeps the tunnel
// addresses, and starts with forwarding off.
func TestDecapPinsOfOlderBinary(t *testing.T) {
	testutil.RequireRoot(t)
	pin := fmt.Sprintf("/sys/fs/bpf/switchyard/test/decap-old-%d", os.Getpid())
	t.Cleanup(func() { os.RemoveAll(pin) })
	d, err := loader.OpenDecap(pin)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetAddrs([]netip.Addr{netip.MustParseAddr("198.18.3.1")}); err != nil {
		t.Fatal(err)
	}
	d.Close()
	for _, m := range []string{bpfobj.DecapMapDecapScPeers, bpfobj.DecapMapDecapScSources, bpfobj.DecapMapDecapScRefused} {
		if err := os.Remove(filepath.Join(loader.DecapMapsDir(pin), m)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := loader.OpenDecapPinned(pin); err == nil || !strings.Contains(err.Error(), "an older switchyard attached it: run switchyard lb decap again") {
		t.Fatalf("open old pins: %v", err)
	}
	if d, err = loader.OpenDecap(pin); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var v uint32
	if err := d.Objs.DecapAddrs.Lookup(decapKeyOf("198.18.3.1"), &v); err != nil {
		t.Fatalf("tunnel address lost: %v", err)
	}
	if p, s, err := d.SecondChance(); err != nil || len(p)+len(s) != 0 {
		t.Fatalf("lists %v %v %v: want empty", p, s, err)
	}
	r, err := loader.OpenDecapPinned(pin)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
}

// decapKeyOf is the decap_addrs key of an IPv4 address (bytes in network order in memory).
func decapKeyOf(s string) bpfobj.DecapDecapKey {
	b := netip.MustParseAddr(s).As4()
	return bpfobj.DecapDecapKey{Addr: [4]uint32{uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24}, Family: 4}
}
