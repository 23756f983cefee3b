package daemon

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/internal/maglev"
)

// TestRingDigestByAddress: two nodes that gave the same backends other ids (a different
// history) build the same table and must show the same digest; a different table must not.
func TestRingDigestByAddress(t *testing.T) {
	a1, a2 := netip.MustParseAddr("198.18.3.1"), netip.MustParseAddr("198.18.3.2")
	build := func(id1, id2 uint32, w2 uint32) ([]uint32, func(uint32) (netip.Addr, bool)) {
		ring, err := maglev.Build([]maglev.Backend{{ID: id1, Identity: a1.String(), Weight: 1}, {ID: id2, Identity: a2.String(), Weight: w2}}, 4099)
		if err != nil {
			t.Fatal(err)
		}
		return ring, func(id uint32) (netip.Addr, bool) {
			switch id {
			case id1:
				return a1, true
			case id2:
				return a2, true
			}
			return netip.Addr{}, false
		}
	}
	r1, f1 := build(1, 2, 1)
	r2, f2 := build(7, 3, 1)
	if d1, _ := ringDigest(r1, f1); d1 != first(ringDigest(r2, f2)) {
		t.Fatal("same table by address, different ids: digests differ")
	}
	r3, f3 := build(1, 2, 2)
	if d1, _ := ringDigest(r1, f1); d1 == first(ringDigest(r3, f3)) {
		t.Fatal("different weights, same digest")
	}
	if d, n := ringDigest(r1, f1); d >= 1<<digestBits || n != 2 {
		t.Fatalf("digest %x (wider than %d bits?), %d backends (want 2)", d, digestBits, n)
	}
}

func TestStoreOptionsRefuseFileVIPs(t *testing.T) {
	c := &config.Config{Interface: "eth0", VIPs: []config.VIP{{Name: "web", Address: "198.18.100.1", Port: 80}}}
	if err := checkStoreOptions(Options{Config: c, Store: "etcd://127.0.0.1:2379/sy"}); err == nil || !strings.Contains(err.Error(), "lb store seed") {
		t.Fatalf("file VIPs with a store: %v", err)
	}
	if err := checkStoreOptions(Options{Config: &config.Config{Interface: "eth0"}, Store: "etcd://127.0.0.1:2379"}); err == nil || !strings.Contains(err.Error(), "no prefix") {
		t.Fatalf("store without prefix: %v", err)
	}
	if err := checkStoreOptions(Options{Config: c}); err != nil {
		t.Fatalf("no store: %v", err)
	}
	// The global guard lives in the store too: a file's is refused, naming the move.
	g := &config.Config{Interface: "eth0", Guard: &config.Guard{Deny: []string{"203.0.113.0/24"}}}
	if err := checkStoreOptions(Options{Config: g, Store: "etcd://127.0.0.1:2379/sy"}); err == nil || !strings.Contains(err.Error(), "guard: a global guard in the configuration file") || !strings.Contains(err.Error(), "lb store seed") {
		t.Fatalf("file guard with a store: %v", err)
	}
}

func first(d uint64, _ int) uint64 { return d }
