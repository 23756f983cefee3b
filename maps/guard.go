package maps

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"time"

	"github.com/cilium/ebpf"

	"github.com/switchyard/switchyard/internal/layout"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// The DDoS guard (bpf/include/guard.h, docs/xdp.md "The guard"): allow and deny rules in two LPM
// tries, global or per VIP; per VIP, token buckets of new connections per source prefix and for
// the whole VIP. The forwarder consults it for flows without a connection-table entry only.
const (
	// GuardScopeGlobal is the scope of a rule that applies to every VIP whose guard is on.
	GuardScopeGlobal = uint16(layout.GuardScopeGlobal)
	// GuardRulesMax is how many rules each trie (allow, deny) holds.
	GuardRulesMax = layout.GuardRulesMax
	// GuardSourcesDefault is the default number of source buckets (loader.Options.GuardSources).
	GuardSourcesDefault = int(bpfobj.LBGuardSizesGUARD_SRC_DEFAULT)

	guardAllow       = uint32(bpfobj.LBGuardFlagsGUARD_ALLOW)
	guardDeny        = uint32(bpfobj.LBGuardFlagsGUARD_DENY)
	guardGlobalAllow = uint32(bpfobj.LBGuardFlagsGUARD_GLOBAL_ALLOW)
	guardGlobalDeny  = uint32(bpfobj.LBGuardFlagsGUARD_GLOBAL_DENY)
	guardSrcLimit    = uint32(bpfobj.LBGuardFlagsGUARD_SRC_LIMIT)
	guardVIPLimit    = uint32(bpfobj.LBGuardFlagsGUARD_VIP_LIMIT)
)

// GuardCounterNames names the guard's counters (the map guard_counters), indexed by enum
// guard_counter_index. The drop reasons are guard_deny, guard_source_rate and guard_vip_rate.
var GuardCounterNames = [bpfobj.LBGuardCounterIndexGUARD_CNT_MAX]string{
	bpfobj.LBGuardCounterIndexGUARD_CNT_DENY:        "deny",
	bpfobj.LBGuardCounterIndexGUARD_CNT_SRC_RATE:    "source_rate",
	bpfobj.LBGuardCounterIndexGUARD_CNT_VIP_RATE:    "vip_rate",
	bpfobj.LBGuardCounterIndexGUARD_CNT_ALLOWED:     "allowed",
	bpfobj.LBGuardCounterIndexGUARD_CNT_SRC_NEW:     "source_buckets_made",
	bpfobj.LBGuardCounterIndexGUARD_CNT_FOREIGN_MAC: "foreign_mac_passed",
	bpfobj.LBGuardCounterIndexGUARD_CNT_UNCONFIRMED: "unconfirmed_promoted",
}

// GuardDropReasons are the GuardCounterNames that count drops.
var GuardDropReasons = []string{"deny", "source_rate", "vip_rate"}

// GuardRule is an allow or deny rule of one VIP (Scope = its id) or of every VIP
// (GuardScopeGlobal). Prefix is masked.
type GuardRule struct {
	Scope  uint16
	Prefix netip.Prefix
	Deny   bool
}

// GuardLimit is a token bucket: Rate new connections a second, up to Burst at once.
type GuardLimit struct {
	Rate  uint64
	Burst uint64
}

// GuardVIP is one VIP's guard. The zero value is off (no map lookup but the one that says so).
type GuardVIP struct {
	// SourcePrefix4 and SourcePrefix6 are the prefix lengths a source bucket covers.
	SourcePrefix4, SourcePrefix6 uint8
	// PerSource limits new connections per source prefix; zero Rate is none.
	PerSource GuardLimit
	// PerVIP limits new connections to the VIP; zero Rate is none.
	PerVIP GuardLimit
	// Allow, Deny: the VIP has rules of its own; GlobalAllow, GlobalDeny: global rules apply.
	Allow, Deny, GlobalAllow, GlobalDeny bool
}

// guardValue is the map value of a VIP's guard.
func (g GuardVIP) guardValue() bpfobj.LBGuardVip {
	v := bpfobj.LBGuardVip{SrcPlen4: g.SourcePrefix4, SrcPlen6: g.SourcePrefix6}
	for _, f := range []struct {
		on   bool
		flag uint32
	}{{g.Allow, guardAllow}, {g.Deny, guardDeny}, {g.GlobalAllow, guardGlobalAllow}, {g.GlobalDeny, guardGlobalDeny},
		{g.PerSource.Rate > 0, guardSrcLimit}, {g.PerVIP.Rate > 0, guardVIPLimit}} {
		if f.on {
			v.Flags |= f.flag
		}
	}
	v.SrcCostNs, v.SrcCapNs = bucketNs(g.PerSource)
	v.VipCostNs, v.VipCapNs = bucketNs(g.PerVIP)
	return v
}

// bucketNs is a limit as the program keeps it: the time one token takes to come, and the time a
// full bucket holds.
func bucketNs(l GuardLimit) (cost, capacity uint64) {
	if l.Rate == 0 {
		return 0, 0
	}
	cost = uint64(time.Second) / l.Rate
	if cost == 0 {
		cost = 1
	}
	burst := max(l.Burst, 1)
	return cost, cost * burst
}

// GuardState is everything the guard's maps hold that the control plane writes: the guard of
// each VIP id whose guard is on, and the rules.
type GuardState struct {
	VIPs  map[uint32]GuardVIP
	Rules map[GuardRule]bool
}

func guardKey(r GuardRule) bpfobj.LBGuardPrefixKey {
	w, fam := addrWords(r.Prefix.Addr())
	return bpfobj.LBGuardPrefixKey{Prefixlen: 32 + uint32(r.Prefix.Bits()), Scope: r.Scope, Family: fam, Addr: w}
}

func (s *Set) guardTrie(deny bool) *ebpf.Map {
	if deny {
		return s.m.GuardDeny
	}
	return s.m.GuardAllow
}

// WriteGuard changes the guard's maps from have, what they hold, to want, writing only the
// differences: rules no longer wanted go first (the tries never hold more than they must), then
// new rules, then the VIPs' entries, so a VIP never names rules that are not there yet.
func (s *Set) WriteGuard(have, want GuardState) error {
	if s.m.GuardVips == nil {
		return errors.New("set guard: the forwarder has no guard maps: load it with this binary")
	}
	if err := checkGuardFits(want); err != nil {
		return err
	}
	for r := range have.Rules {
		if !want.Rules[r] {
			if err := s.guardTrie(r.Deny).Delete(guardKey(r)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("delete guard rule %s: %w", r.Prefix, err)
			}
		}
	}
	for r := range want.Rules {
		if !have.Rules[r] {
			if err := s.guardTrie(r.Deny).Put(guardKey(r), uint32(1)); err != nil {
				return fmt.Errorf("put guard rule %s: %w", r.Prefix, err)
			}
		}
	}
	for id := range have.VIPs {
		if _, ok := want.VIPs[id]; !ok {
			if err := s.m.GuardVips.Put(id, bpfobj.LBGuardVip{}); err != nil {
				return fmt.Errorf("clear guard of vip %d: %w", id, err)
			}
		}
	}
	for id, g := range want.VIPs {
		if old, ok := have.VIPs[id]; ok && old == g {
			continue
		}
		if err := s.m.GuardVips.Put(id, g.guardValue()); err != nil {
			return fmt.Errorf("put guard of vip %d: %w", id, err)
		}
	}
	return nil
}

// checkGuardFits refuses a state the maps cannot hold, before anything is written.
func checkGuardFits(want GuardState) error {
	var allow, deny int
	for r := range want.Rules {
		if r.Deny {
			deny++
		} else {
			allow++
		}
	}
	if allow > GuardRulesMax || deny > GuardRulesMax {
		return fmt.Errorf("set guard: %d allow and %d deny rules, the maps hold %d of each: merge prefixes", allow, deny, GuardRulesMax)
	}
	return nil
}

// GuardRules lists the rules in the tries, in a stable order.
func (s *Set) GuardRules() ([]GuardRule, error) {
	var out []GuardRule
	for _, deny := range []bool{false, true} {
		var (
			k bpfobj.LBGuardPrefixKey
			v uint32
		)
		it := s.guardTrie(deny).Iterate()
		for it.Next(&k, &v) {
			p, err := wordsAddr(k.Addr, k.Family).Prefix(int(k.Prefixlen) - 32)
			if err != nil {
				return nil, fmt.Errorf("read guard rule: %w", err)
			}
			out = append(out, GuardRule{Scope: k.Scope, Prefix: p, Deny: deny})
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("list guard rules: %w", err)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].less(out[j]) })
	return out, nil
}

func (r GuardRule) less(o GuardRule) bool {
	if r.Deny != o.Deny {
		return !r.Deny
	}
	if r.Scope != o.Scope {
		return r.Scope < o.Scope
	}
	if c := r.Prefix.Addr().Compare(o.Prefix.Addr()); c != 0 {
		return c < 0
	}
	return r.Prefix.Bits() < o.Prefix.Bits()
}

// GuardCounters reads the guard's counters by name (GuardCounterNames), summed over every
// possible CPU, with evictions of source buckets (buckets made less buckets present) as
// "source_buckets_evicted".
func (s *Set) GuardCounters() (map[string]Counter, error) {
	out := make(map[string]Counter, len(GuardCounterNames)+1)
	if s.m.GuardCounters == nil {
		return out, nil
	}
	for i, name := range GuardCounterNames {
		c, err := sumPerCPU(s.m.GuardCounters, uint32(i))
		if err != nil {
			return nil, fmt.Errorf("read guard counter %s: %w", name, err)
		}
		out[name] = c
	}
	live, err := s.GuardSources()
	if err != nil {
		return nil, err
	}
	if made := out["source_buckets_made"].Packets; made > uint64(live) {
		out["source_buckets_evicted"] = Counter{Packets: made - uint64(live)}
	} else {
		out["source_buckets_evicted"] = Counter{}
	}
	return out, nil
}

// GuardSources counts the source buckets present, read in batches (BPF_MAP_LOOKUP_BATCH: 16
// calls for a full map of 65,536, where a walk of the keys made one call a key).
func (s *Set) GuardSources() (int, error) {
	n := 0
	err := readAll(s.m.GuardSrc, func(bpfobj.LBGuardSrcKey, bpfobj.LBGuardBucket) { n++ })
	if err != nil {
		return n, fmt.Errorf("count guard source buckets: %w", err)
	}
	return n, nil
}

// ReadGuard reads what the guard's maps hold, as WriteGuard's have: the rules, and every VIP id
// whose guard is on as a zero GuardVIP (which no wanted guard equals, so it is rewritten).
func (s *Set) ReadGuard() (GuardState, error) {
	st := GuardState{VIPs: map[uint32]GuardVIP{}, Rules: map[GuardRule]bool{}}
	if s.m.GuardVips == nil {
		return st, nil
	}
	rules, err := s.GuardRules()
	if err != nil {
		return st, err
	}
	for _, r := range rules {
		st.Rules[r] = true
	}
	var v bpfobj.LBGuardVip
	for id := range s.m.GuardVips.MaxEntries() {
		if err := s.m.GuardVips.Lookup(id, &v); err != nil {
			return st, fmt.Errorf("read guard of vip %d: %w", id, err)
		}
		if v.Flags != 0 {
			st.VIPs[id] = GuardVIP{}
		}
	}
	return st, nil
}
