package zone

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
)

// The index keeps a few names in a slice and moves them to a map past indexFew, with every
// name found (or not) the same way on both sides of the move.
func TestIndexFewAndMany(t *testing.T) {
	x := newIndex(2)
	for i := range 3 * indexFew {
		x.set(fmt.Sprintf("n%d.z.test.", i), uint32(i))
		if small := x.m == nil; small != (i < indexFew) {
			t.Fatalf("after %d names: slice %v, want %v", i+1, small, i < indexFew)
		}
		x.set(fmt.Sprintf("n%d.z.test.", i), uint32(i)+100) // replaces, never adds
		if x.len() != i+1 {
			t.Fatalf("after %d names: len %d", i+1, x.len())
		}
		for j := 0; j <= i; j++ {
			if off, ok := x.get(fmt.Sprintf("n%d.z.test.", j)); !ok || off != uint32(j)+100 {
				t.Fatalf("after %d names: n%d = %d %v", i+1, j, off, ok)
			}
		}
		if _, ok := x.get("missing.z.test."); ok {
			t.Fatal("a missing name found")
		}
	}
	seen := 0
	for range x.all() {
		seen++
	}
	if seen != 3*indexFew {
		t.Errorf("all yielded %d names, want %d", seen, 3*indexFew)
	}
}

// A zone's packed data is sized to what it holds: a slice grown by append keeps up to twice
// its length, which with many small zones was half of what they cost.
func TestZoneDataExact(t *testing.T) {
	s, err := build(t, "@ NS ns1", "ns1 A 192.0.2.53", "www A 192.0.2.1", "www AAAA 2001:db8::1", "mail MX 10 www")
	if err != nil {
		t.Fatal(err)
	}
	z := s.Find("z.test.")
	if len(z.data) != cap(z.data) {
		t.Errorf("zone data: length %d, capacity %d; want them equal", len(z.data), cap(z.data))
	}
}

// The unpacked sets are one cache for every zone, keyed by the zone's build: zones of the
// same shape (sets at the same offsets) never see each other's records, nor does a zone an
// update replaced (the new zone's sets are at the same offsets), and many zones together keep
// no more than the cache's bound.
func TestSetCacheAcrossZones(t *testing.T) {
	var zones []config.Zone
	const n = setCacheEntries/2 + 100 // two sets each: more than the cache holds
	for i := range n {
		zones = append(zones, config.Zone{Origin: fmt.Sprintf("z%d.test.", i),
			Records: []string{"@ NS ns1", "ns1 A 192.0.2.53", fmt.Sprintf("www A 10.%d.%d.1", i>>8&255, i&255)}})
	}
	s, err := buildZones(t, zones...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		z := s.Find(fmt.Sprintf("www.z%d.test.", i))
		r := z.Lookup(fmt.Sprintf("www.z%d.test.", i), dns.TypeA)
		want := fmt.Sprintf("10.%d.%d.1", i>>8&255, i&255)
		if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != want {
			t.Fatalf("z%d: %v, want %s", i, r.Answer, want)
		}
		z.Lookup(fmt.Sprintf("ns1.z%d.test.", i), dns.TypeA)
	}
	cached := 0
	for i := range sets.shards {
		sets.shards[i].mu.RLock()
		cached += len(sets.shards[i].m)
		sets.shards[i].mu.RUnlock()
	}
	if cached > setCacheEntries {
		t.Errorf("%d sets cached for %d zones, want at most %d", cached, n, setCacheEntries)
	}

	z := s.Find("z0.test.")
	z.Lookup("www.z0.test.", dns.TypeA) // cached
	old := z.RRset("www.z0.test.", dns.TypeA)
	add, _ := dns.NewRR("www.z0.test. 300 IN A 192.0.2.77")
	nz, err := z.Apply(old, []dns.RR{add})
	if err != nil {
		t.Fatal(err)
	}
	if r := nz.Lookup("www.z0.test.", dns.TypeA); len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.77" {
		t.Errorf("after an update: %v, want 192.0.2.77", r.Answer)
	}
}
