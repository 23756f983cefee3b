package loader

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
)

// SecondChancePrefixMax is how many prefixes each second-chance allow-list holds (SC_PREFIX_MAX
// in bpf/include/consts.h).
const SecondChancePrefixMax = 256

// DecapRefusedNames mirrors enum decap_sc_refused_index in bpf/include/consts.h: second-chance
// packets decap would have forwarded but decapsulated here instead, by reason. Counters also
// reports their sum as "second_chance_refused".
var DecapRefusedNames = []string{"second_chance_refused_source", "second_chance_refused_candidate"}

// CheckSecondChance validates the allow-lists of second-chance forwarding (docs/xdp.md, "Second
// chance"): peers, the prefixes a candidate must be inside (the backends' networks), and
// sources, the prefixes the outer source must be inside (the balancers' encap_source4/6 ranges).
// Both empty means forwarding off. Peers of a family without tunnel sources of that family would
// never forward and are refused as a mistake.
func CheckSecondChance(peers, sources []netip.Prefix) error {
	has := map[string]map[bool]bool{"second-chance peers": {}, "tunnel sources": {}}
	for _, l := range []struct {
		what string
		ps   []netip.Prefix
	}{{"second-chance peers", peers}, {"tunnel sources", sources}} {
		if len(l.ps) > SecondChancePrefixMax {
			return fmt.Errorf("%d %s: at most %d: give wider prefixes", len(l.ps), l.what, SecondChancePrefixMax)
		}
		for _, p := range l.ps {
			if err := checkPrefix(p); err != nil {
				return fmt.Errorf("invalid %s: %w", l.what, err)
			}
			has[l.what][p.Addr().Is4()] = true
		}
	}
	for _, v4 := range []bool{true, false} {
		if has["second-chance peers"][v4] && !has["tunnel sources"][v4] {
			f, src := familyName(v4), "encap_source6"
			if v4 {
				src = "encap_source4"
			}
			return fmt.Errorf("%s second-chance peers but no %s tunnel sources: a candidate is forwarded only when "+
				"the outer source is allowed too: add the balancers' %s range (or leave the %s peers out)", f, f, src, f)
		}
	}
	return nil
}

func checkPrefix(p netip.Prefix) error {
	if !p.IsValid() {
		return errors.New("invalid prefix: give ADDRESS/BITS")
	}
	if p.Addr().Is4In6() {
		return fmt.Errorf("%s is IPv4-mapped: give IPv4 prefixes as IPv4 (%s)", p, netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0)).Masked())
	}
	if p.Addr().Zone() != "" {
		return fmt.Errorf("%s has a zone: give a prefix without %%zone", p)
	}
	if m := p.Masked(); m != p {
		return fmt.Errorf("%s has host bits set: give %s", p, m)
	}
	return nil
}

func familyName(v4 bool) string {
	if v4 {
		return "IPv4"
	}
	return "IPv6"
}

// SetSecondChance makes the allow-lists of second-chance forwarding exactly peers and sources
// (see CheckSecondChance; nil, nil turns forwarding off). Invalid lists change nothing. New
// prefixes go in before stale ones go out, so a change never refuses what both lists allow.
func (d *Decap) SetSecondChance(peers, sources []netip.Prefix) error {
	if err := CheckSecondChance(peers, sources); err != nil {
		return fmt.Errorf("set second-chance allow-lists: %w", err)
	}
	if err := setPrefixes(d.Objs.DecapScPeers, peers); err != nil {
		return fmt.Errorf("set second-chance peers: %w", err)
	}
	if err := setPrefixes(d.Objs.DecapScSources, sources); err != nil {
		return fmt.Errorf("set tunnel sources: %w", err)
	}
	return nil
}

// SecondChance reads the allow-lists back, each sorted (IPv4 first).
func (d *Decap) SecondChance() (peers, sources []netip.Prefix, err error) {
	if peers, err = readPrefixes(d.Objs.DecapScPeers); err != nil {
		return nil, nil, fmt.Errorf("read second-chance peers: %w", err)
	}
	if sources, err = readPrefixes(d.Objs.DecapScSources); err != nil {
		return nil, nil, fmt.Errorf("read tunnel sources: %w", err)
	}
	return peers, sources, nil
}

func setPrefixes(m *ebpf.Map, ps []netip.Prefix) error {
	want := map[DecapScPrefixKey]bool{}
	for _, p := range ps {
		k := prefixKey(p)
		want[k] = true
		if err := m.Put(k, uint32(1)); err != nil {
			return fmt.Errorf("put %s: %w", p, err)
		}
	}
	var stale []DecapScPrefixKey
	var k DecapScPrefixKey
	var v uint32
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete %s: %w", keyPrefix(k), err)
		}
	}
	return nil
}

func readPrefixes(m *ebpf.Map) ([]netip.Prefix, error) {
	var out []netip.Prefix
	var k DecapScPrefixKey
	var v uint32
	it := m.Iterate()
	for it.Next(&k, &v) {
		out = append(out, keyPrefix(k))
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Bits(), b.Bits())
	})
	return out, nil
}

// prefixKey is the LPM key of a prefix: family and pad (32 bits) match first, then the address.
func prefixKey(p netip.Prefix) DecapScPrefixKey {
	dk := decapKey(p.Addr())
	return DecapScPrefixKey{Prefixlen: uint32(32 + p.Bits()), Family: dk.Family, Addr: dk.Addr}
}

func keyPrefix(k DecapScPrefixKey) netip.Prefix {
	var b [16]byte
	for i, w := range k.Addr {
		b[i*4], b[i*4+1], b[i*4+2], b[i*4+3] = byte(w), byte(w>>8), byte(w>>16), byte(w>>24)
	}
	if k.Family == 4 {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte(b[:4])), int(k.Prefixlen)-32)
	}
	return netip.PrefixFrom(netip.AddrFrom16(b), int(k.Prefixlen)-32)
}
