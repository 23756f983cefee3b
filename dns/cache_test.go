package dns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/policy"
)

// A cache fed more distinct answers than it holds keeps a bounded size and keeps the answers
// that are asked again (CLOCK second chance), instead of being wiped when full.
func TestAnswerCacheEvictsColdEntries(t *testing.T) {
	c := newAnswerCache()
	wire := make([]byte, 64)
	key := func(i int) []byte { return []byte(fmt.Sprintf("name-%d", i)) }
	const hot = 1000
	for i := 0; i < hot; i++ {
		c.put(key(i), wire, &cacheEntry{})
	}
	// Stream many cold keys past the cache, asking the hot ones again between them.
	for i := hot; i < hot+4*cacheEntries; i++ {
		c.put(key(i), wire, &cacheEntry{})
		if i%16 == 0 {
			for j := 0; j < hot; j += 97 {
				c.get(key(j))
			}
		}
		if i%4096 == 0 {
			for j := 0; j < hot; j++ {
				c.get(key(j))
			}
		}
	}
	if n := c.len(); n > cacheEntries || n < cacheEntries/2 {
		t.Fatalf("cache holds %d entries, want at most %d and not wiped", n, cacheEntries)
	}
	kept := 0
	for j := 0; j < hot; j++ {
		if c.get(key(j)) != nil {
			kept++
		}
	}
	if kept < hot*9/10 {
		t.Fatalf("only %d of %d hot entries survived a stream of cold ones", kept, hot)
	}
	for i := range c.shards {
		sh := &c.shards[i]
		if len(sh.index) != len(sh.ring) {
			t.Fatalf("shard %d: index %d entries, ring %d", i, len(sh.index), len(sh.ring))
		}
		for k, slot := range sh.index {
			if sh.ring[slot].key != k {
				t.Fatalf("shard %d: index points %q at slot %d holding %q", i, k, slot, sh.ring[slot].key)
			}
		}
	}
}

// The byte bound holds too: large answers evict sooner than small ones.
func TestAnswerCacheByteBound(t *testing.T) {
	c := newAnswerCache()
	wire := make([]byte, cacheWireMax)
	for i := 0; i < 3*cacheBytes/cacheWireMax; i++ {
		c.put([]byte(fmt.Sprintf("k%d", i)), wire, &cacheEntry{})
	}
	total := 0
	for i := range c.shards {
		if b := c.shards[i].bytes; b > cacheBytes/cacheShards {
			t.Fatalf("shard %d holds %d bytes, bound %d", i, b, cacheBytes/cacheShards)
		}
		total += c.shards[i].bytes
	}
	if total < cacheBytes/2 {
		t.Fatalf("cache holds %d bytes after filling, want near %d", total, cacheBytes)
	}
	c.put([]byte("huge"), make([]byte, cacheWireMax+1), &cacheEntry{})
	if c.get([]byte("huge")) != nil {
		t.Fatal("an answer over cacheWireMax was cached")
	}
}

// A zone with more names than the old cache held (16,384) is answered from the cache on the
// second pass: nothing wipes it while it fills.
func TestAnswerCacheLargeZone(t *testing.T) {
	const names = 20000
	var b strings.Builder
	b.WriteString("listen: 127.0.0.1:0\nzones:\n  - origin: big.test.\n    records:\n")
	for i := 0; i < names; i++ {
		fmt.Fprintf(&b, "      - 'h%d A 192.0.2.%d'\n", i, i%250+1)
	}
	srv := newTestServer(t, b.String(), Options{})
	src := netip.MustParseAddr("127.0.0.1")
	for pass := 0; pass < 2; pass++ {
		for i := 0; i < names; i++ {
			raw := packQuery(t, fmt.Sprintf("h%d.big.test.", i), mdns.TypeA, true)
			var m mdns.Msg
			if err := m.Unpack(srv.Respond(raw, src, false)); err != nil || len(m.Answer) != 1 ||
				!m.Answer[0].(*mdns.A).A.Equal(net.IPv4(192, 0, 2, byte(i%250+1))) {
				t.Fatalf("pass %d h%d: %v %v", pass, i, err, m.Answer)
			}
		}
	}
	st := srv.state.Load()
	hits := 0
	for i := 0; i < names; i++ {
		raw := packQuery(t, fmt.Sprintf("h%d.big.test.", i), mdns.TypeA, true)
		if st.cache.get(cacheKey(nil, raw, false)) != nil {
			hits++
		}
	}
	if hits != names {
		t.Fatalf("%d of %d names cached after two passes", hits, names)
	}
}

// Failover answers are cached, and a health transition makes them stale at once: the first
// query after the primary fails gets the secondary, not the cached primary.
func TestCachedDynamicAnswerFollowsHealth(t *testing.T) {
	primary, secondary := newFlip(t, false), newFlip(t, false)
	yml := "listen: 127.0.0.1:0\n" + strings.NewReplacer("CHECKTYPE", "tcp", "ALLDOWN", "fail-closed",
		"PRIMARY", primary.addr, "SECONDARY", secondary.addr).Replace(healthYAML)
	srv := newTestServer(t, yml, Options{ManualHealth: true})
	src := netip.MustParseAddr("127.0.0.1")
	raw := packQuery(t, "app.hc.test.", mdns.TypeA, true)
	answer := func() string {
		var m mdns.Msg
		if err := m.Unpack(srv.Respond(raw, src, false)); err != nil || len(m.Answer) != 1 {
			t.Fatalf("answer: %v %v", err, m.Answer)
		}
		return m.Answer[0].(*mdns.A).A.String()
	}
	if a := answer(); a != "192.0.2.1" {
		t.Fatalf("healthy: %s, want the primary", a)
	}
	if srv.state.Load().cache.get(cacheKey(nil, raw, false)) == nil {
		t.Fatal("a failover answer was not cached")
	}
	if a := answer(); a != "192.0.2.1" {
		t.Fatalf("cached: %s, want the primary", a)
	}
	primary.stop()
	for i := 0; i < 3; i++ { // fall: 3
		srv.Health().Round(context.Background())
	}
	if a := answer(); a != "192.0.2.2" {
		t.Fatalf("after the primary failed: %s, want the secondary (stale cache entry served)", a)
	}
}

// Geolocation with a client subnet is cached per subnet (the ECS option is part of the key);
// without ECS it depends on the source address, and weighted answers rotate: neither is cached
// under the query alone.
func TestCachedDynamicAnswerPolicies(t *testing.T) {
	srv := newTestServer(t, testConfig(t), Options{})
	cached := func(name, subnet string, src netip.Addr) (string, bool) {
		m := new(mdns.Msg)
		m.SetQuestion(name, mdns.TypeA)
		m.SetEdns0(1232, false)
		if subnet != "" {
			p := netip.MustParsePrefix(subnet)
			m.IsEdns0().Option = append(m.IsEdns0().Option, &mdns.EDNS0_SUBNET{Code: mdns.EDNS0SUBNET,
				Family: 1, SourceNetmask: uint8(p.Bits()), Address: p.Addr().AsSlice()})
		}
		raw, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		var r mdns.Msg
		if err := r.Unpack(srv.Respond(raw, src, false)); err != nil || len(r.Answer) == 0 {
			t.Fatalf("%s %s: %v %v", name, subnet, err, r.Answer)
		}
		e := srv.state.Load().cache.get(cacheKey(nil, raw, false))
		return r.Answer[0].(*mdns.A).A.String(), e != nil && e.rotate == nil
	}
	local := netip.MustParseAddr("127.0.0.1")
	for i := 0; i < 2; i++ { // twice: the second answer comes from the cache
		if a, ok := cached("app.example.com.", "10.1.0.0/24", local); a != "198.51.100.34" || !ok {
			t.Fatalf("g1 subnet: %s cached %v, want 198.51.100.34 cached", a, ok)
		}
		if a, ok := cached("app.example.com.", "10.2.0.0/24", local); a != "198.51.100.35" || !ok {
			t.Fatalf("g2 subnet: %s cached %v, want 198.51.100.35 cached", a, ok)
		}
	}
	if _, ok := cached("app.example.com.", "", local); ok {
		t.Fatal("geolocation without ECS was cached: its answer depends on the source address")
	}
	if _, ok := cached("static.example.com.", "10.1.0.0/24", local); ok {
		t.Fatal("a weighted answer was cached under its query: it must rotate (cached per decision)")
	}
}

// Weighted answers are cached per decision: the rotation still advances on every query (the
// shares stay exact), and after the first round every answer comes from the cache.
func TestCachedWeightedAnswersKeepRotating(t *testing.T) {
	srv := newTestServer(t, testConfig(t), Options{})
	src := netip.MustParseAddr("127.0.0.1")
	raw := packQuery(t, "static.example.com.", mdns.TypeA, true)
	count := map[string]int{}
	for i := 0; i < 100; i++ {
		var m mdns.Msg
		if err := m.Unpack(srv.Respond(raw, src, false)); err != nil || len(m.Answer) != 1 {
			t.Fatalf("answer %d: %v %v", i, err, m.Answer)
		}
		count[m.Answer[0].(*mdns.A).A.String()]++
	}
	want := map[string]int{"198.51.100.34": 50, "198.51.100.35": 30, "198.51.100.6": 20}
	for a, n := range want {
		if count[a] != n {
			t.Fatalf("shares %v, want %v", count, want)
		}
	}
	st := srv.state.Load()
	e := st.cache.get(cacheKey(nil, raw, false))
	if e == nil || e.rotate == nil {
		t.Fatal("the weighted query has no cache entry naming its policy")
	}
	var scratch [cacheKeyMax + rotateSigMax]byte
	key := cacheKey(scratch[:0], raw, false)
	variants := 0
	for i := range e.rotate.Sites {
		if st.cache.get(rotateKey(key, policyDecision([]int{i}, "weighted"))) != nil {
			variants++
		}
	}
	if variants != 3 {
		t.Fatalf("%d of 3 per-decision answers cached", variants)
	}
}

func policyDecision(sites []int, reason string) policy.Decision {
	return policy.Decision{Sites: sites, Reason: reason}
}
