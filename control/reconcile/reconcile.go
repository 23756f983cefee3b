// Package reconcile makes the forwarder's maps equal to a desired state, writing only what
// differs. VIP ids and backend ids are read back from the (pinned) maps when it starts, so a
// restarted daemon keeps every id, every ring slot and so every established flow.
//
// Backend ids are per address: an address used by several VIPs has one backend slot, and the
// slot lives while any VIP lists the address (drained or unhealthy included, so that established
// flows keep flowing). A VIP's ring holds the backends that take new flows.
//
// Second chance: whenever a VIP's table changes, the table it replaces becomes the VIP's previous
// ring (prev_rings), so that a mid-stream packet the forwarder has no entry for can carry the
// backend the old table gave it (docs/xdp.md). The previous ring is a function of the history of
// tables alone: the last table that differed from the current one. It is retired (emptied) when
// the VIP goes, and, with SetRetirePrevious, a fixed time after the change.
package reconcile

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"time"

	"github.com/switchyard/switchyard/maps"
	"github.com/switchyard/switchyard/maps/maglev"
)

// VIP is the desired state of one VIP.
type VIP struct {
	Key   maps.VIPKey
	Flags maps.VIPFlags
	// Backends are every backend the VIP lists; those with InRing false keep their slot but
	// take no new flow.
	Backends []Backend
}

// Backend is the desired state of one backend of a VIP.
type Backend struct {
	Addr netip.Addr
	// Weight is the share of new flows when in the ring.
	Weight uint32
	// InRing is false for a drained or unhealthy backend.
	InRing bool
}

// Maps is what the reconciler needs from the forwarder's maps (maps.Set implements it).
type Maps interface {
	RingSize() uint32
	MaxVIPs() uint32
	MaxBackends() uint32
	VIPs() ([]maps.VIP, error)
	PutVIP(maps.VIP) error
	DeleteVIP(maps.VIPKey) error
	Backends() ([]maps.Backend, error)
	PutBackend(maps.Backend) error
	DeleteBackend(uint32) error
	Ring(vipID uint32) ([]uint32, error)
	WriteRing(vipID uint32, old, table []uint32) (int, error)
	PrevRing(vipID uint32) ([]uint32, error)
	WritePrevRing(vipID uint32, old, table []uint32) (int, error)
	ResetVIPStats(id uint32) error
	ResetBackendStats(id uint32) error
}

// Result says what one Apply changed.
type Result struct {
	VIPsAdded, VIPsRemoved, VIPsUpdated int
	BackendsAdded, BackendsRemoved      int
	// RingsRebuilt counts rings with at least one slot written; SlotsWritten counts slots.
	RingsRebuilt, SlotsWritten int
	// PrevSlotsWritten counts the slots of previous rings written (second chance).
	PrevSlotsWritten int
}

// Changed reports whether anything was written.
func (r Result) Changed() bool { return r != Result{} }

// Reconciler owns the ids and a copy of every ring as last written.
type Reconciler struct {
	m          Maps
	vipIDs     map[maps.VIPKey]uint32
	vipFlags   map[maps.VIPKey]maps.VIPFlags
	backendIDs map[netip.Addr]uint32
	rings      map[uint32][]uint32
	// prev is every previous ring as last written, and prevSince when it was set (the start of
	// this reconciler for rings read back from the maps).
	prev      map[uint32][]uint32
	prevSince map[uint32]time.Time
	retire    time.Duration
	now       func() time.Time
	// stale are extra slots found holding an address that already has one; Apply empties them.
	stale []uint32
}

// New reads the ids that the maps hold (from an earlier run, or none).
func New(m Maps) (*Reconciler, error) {
	r := &Reconciler{m: m, vipIDs: map[maps.VIPKey]uint32{}, vipFlags: map[maps.VIPKey]maps.VIPFlags{},
		backendIDs: map[netip.Addr]uint32{}, rings: map[uint32][]uint32{},
		prev: map[uint32][]uint32{}, prevSince: map[uint32]time.Time{}, now: time.Now}
	vips, err := m.VIPs()
	if err != nil {
		return nil, fmt.Errorf("read back vips: %w", err)
	}
	for _, v := range vips {
		r.vipIDs[v.Key] = v.ID
		r.vipFlags[v.Key] = v.Flags
	}
	bes, err := m.Backends()
	if err != nil {
		return nil, fmt.Errorf("read back backends: %w", err)
	}
	for _, b := range bes {
		a := b.Addr.Unmap()
		if old, dup := r.backendIDs[a]; dup {
			// Two slots for one address cannot come from this reconciler; keep the lower id
			// and let Apply free the other.
			if old < b.ID {
				r.stale = append(r.stale, b.ID)
				continue
			}
			r.stale = append(r.stale, old)
		}
		r.backendIDs[a] = b.ID
	}
	return r, nil
}

// VIPID returns a VIP's id.
func (r *Reconciler) VIPID(k maps.VIPKey) (uint32, bool) {
	id, ok := r.vipIDs[k]
	return id, ok
}

// BackendID returns the id of a backend address.
func (r *Reconciler) BackendID(a netip.Addr) (uint32, bool) {
	id, ok := r.backendIDs[a.Unmap()]
	return id, ok
}

// BackendAddr is the inverse of BackendID.
func (r *Reconciler) BackendAddr(id uint32) (netip.Addr, bool) {
	for a, i := range r.backendIDs {
		if i == id {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// Ring returns the ring of a VIP as last written (read from the map the first time).
func (r *Reconciler) Ring(id uint32) ([]uint32, error) {
	if t, ok := r.rings[id]; ok {
		return t, nil
	}
	t, err := r.m.Ring(id)
	if err != nil {
		return nil, err
	}
	r.rings[id] = t
	return t, nil
}

// Apply makes the maps hold exactly desired. On error the maps may be partly updated; a later
// Apply with a correct state repairs them (every step compares with what is there).
func (r *Reconciler) Apply(desired []VIP) (Result, error) {
	var res Result
	want := map[maps.VIPKey]*VIP{}
	addrs := map[netip.Addr]bool{}
	for i := range desired {
		v := &desired[i]
		v.Key.Addr = v.Key.Addr.Unmap()
		if _, dup := want[v.Key]; dup {
			return res, fmt.Errorf("apply: vip %s given twice", v.Key)
		}
		want[v.Key] = v
		for _, b := range v.Backends {
			addrs[b.Addr.Unmap()] = true
		}
	}
	if uint32(len(want)) > r.m.MaxVIPs() {
		return res, fmt.Errorf("apply: %d VIPs, the maps hold %d: raise max_vips (needs `lb detach` and a restart)", len(want), r.m.MaxVIPs())
	}

	// 1. Backend slots for every address any VIP lists, before any ring refers to them.
	for _, a := range sortedAddrs(addrs) {
		if _, ok := r.backendIDs[a]; ok {
			continue
		}
		id, err := r.freeBackendID()
		if err != nil {
			return res, err
		}
		if err := r.m.ResetBackendStats(id); err != nil {
			return res, fmt.Errorf("apply: %w", err)
		}
		if err := r.m.PutBackend(maps.Backend{ID: id, Addr: a}); err != nil {
			return res, fmt.Errorf("apply: %w", err)
		}
		r.backendIDs[a] = id
		res.BackendsAdded++
	}

	// 2. VIPs gone: out of the vips map first (no new packet matches), then their rings cleared
	// so that a later VIP given the same id starts from an empty ring.
	for _, k := range sortedKeys(r.vipIDs) {
		if _, ok := want[k]; ok {
			continue
		}
		id := r.vipIDs[k]
		if err := r.m.DeleteVIP(k); err != nil {
			return res, fmt.Errorf("apply: %w", err)
		}
		delete(r.vipIDs, k)
		delete(r.vipFlags, k)
		res.VIPsRemoved++
		n, pn, err := r.writeRing(id, make([]uint32, r.m.RingSize()), false)
		res.PrevSlotsWritten += pn
		if err != nil {
			return res, err
		}
		res.SlotsWritten += n
	}

	// 3. VIPs wanted: ring first, then the vips entry, so a new VIP never sees a stale ring.
	for _, k := range sortedKeys(want) {
		v := want[k]
		id, known := r.vipIDs[k]
		if !known {
			var err error
			if id, err = r.freeVIPID(); err != nil {
				return res, err
			}
			if err := r.m.ResetVIPStats(id); err != nil {
				return res, fmt.Errorf("apply: %w", err)
			}
		}
		table, err := r.build(v)
		if err != nil {
			return res, err
		}
		n, pn, err := r.writeRing(id, table, true)
		res.PrevSlotsWritten += pn
		if err != nil {
			return res, err
		}
		if n > 0 {
			res.RingsRebuilt++
			res.SlotsWritten += n
		}
		if !known || r.vipFlags[k] != v.Flags {
			if err := r.m.PutVIP(maps.VIP{Key: k, ID: id, Flags: v.Flags}); err != nil {
				return res, fmt.Errorf("apply: %w", err)
			}
			if known {
				res.VIPsUpdated++
			} else {
				res.VIPsAdded++
			}
			r.vipIDs[k], r.vipFlags[k] = id, v.Flags
		}
	}

	// 4. Backend slots no VIP lists any more: emptied last, after no ring points at them; their
	// flows re-hash on their next packet.
	for _, a := range sortedAddrs(keysOf(r.backendIDs)) {
		if addrs[a] {
			continue
		}
		if err := r.m.DeleteBackend(r.backendIDs[a]); err != nil {
			return res, fmt.Errorf("apply: %w", err)
		}
		delete(r.backendIDs, a)
		res.BackendsRemoved++
	}
	for _, id := range r.stale {
		if err := r.m.DeleteBackend(id); err != nil {
			return res, fmt.Errorf("apply: %w", err)
		}
		res.BackendsRemoved++
	}
	r.stale = nil
	return res, nil
}

// build computes a VIP's Maglev table from its in-ring backends.
func (r *Reconciler) build(v *VIP) ([]uint32, error) {
	var bs []maglev.Backend
	for _, b := range v.Backends {
		if !b.InRing || b.Weight == 0 {
			continue
		}
		a := b.Addr.Unmap()
		bs = append(bs, maglev.Backend{ID: r.backendIDs[a], Identity: a.String(), Weight: b.Weight})
	}
	t, err := maglev.Build(bs, uint64(r.m.RingSize()))
	if err != nil {
		return nil, fmt.Errorf("apply: vip %s: %w", v.Key, err)
	}
	return t, nil
}

// writeRing makes a VIP's ring equal to table. With rotate, a ring that changes leaves its old
// table in the previous ring (written first, so that a packet never pairs the new ring with a
// stale previous one); without, the previous ring is emptied with it (a VIP that goes).
func (r *Reconciler) writeRing(id uint32, table []uint32, rotate bool) (int, int, error) {
	old, err := r.Ring(id)
	if err != nil {
		return 0, 0, fmt.Errorf("apply: %w", err)
	}
	if equal(old, table) {
		return 0, 0, nil
	}
	next := make([]uint32, len(table))
	if rotate {
		copy(next, old)
	}
	pn, err := r.writePrev(id, next)
	if err != nil {
		return 0, pn, err
	}
	n, err := r.m.WriteRing(id, old, table)
	if err != nil {
		delete(r.rings, id) // unknown now: read it again next time
		return n, pn, fmt.Errorf("apply: %w", err)
	}
	r.rings[id] = table
	return n, pn, nil
}

// PrevRing returns the previous ring of a VIP as last written (read from the map the first time).
func (r *Reconciler) PrevRing(id uint32) ([]uint32, error) {
	if t, ok := r.prev[id]; ok {
		return t, nil
	}
	t, err := r.m.PrevRing(id)
	if err != nil {
		return nil, err
	}
	r.prev[id] = t
	r.prevSince[id] = r.now()
	return t, nil
}

func (r *Reconciler) writePrev(id uint32, table []uint32) (int, error) {
	old, err := r.PrevRing(id)
	if err != nil {
		return 0, fmt.Errorf("apply: %w", err)
	}
	n, err := r.m.WritePrevRing(id, old, table)
	if err != nil {
		delete(r.prev, id)
		return n, fmt.Errorf("apply: previous ring: %w", err)
	}
	r.prev[id] = table
	r.prevSince[id] = r.now()
	return n, nil
}

// DropFromPrevious empties the slots of a VIP's previous ring that name a backend, so that no
// mid-stream miss is sent on to it any more (a drain that timed out cuts its flows). It returns
// the slots written.
func (r *Reconciler) DropFromPrevious(vipID, backendID uint32) (int, error) {
	t, err := r.PrevRing(vipID)
	if err != nil {
		return 0, err
	}
	next := append([]uint32(nil), t...)
	for i, id := range next {
		if id == backendID {
			next[i] = 0
		}
	}
	since, had := r.prevSince[vipID]
	n, err := r.writePrev(vipID, next)
	if had {
		r.prevSince[vipID] = since // a removal is no new change: the retirement time stands
	}
	return n, err
}

// SetRetirePrevious makes RetirePrevious empty a previous ring d after the change that set it;
// 0 (the default) keeps it until the next change.
func (r *Reconciler) SetRetirePrevious(d time.Duration) { r.retire = d }

// RetirePrevious empties the previous rings set longer ago than the retirement time (none when
// it is 0) and returns the slots written. The daemon calls it every second.
func (r *Reconciler) RetirePrevious(now time.Time) (int, error) {
	if r.retire <= 0 {
		return 0, nil
	}
	total := 0
	for _, id := range sortedIDs(r.vipIDs) {
		t, err := r.PrevRing(id)
		if err != nil {
			return total, err
		}
		if now.Sub(r.prevSince[id]) < r.retire || isZero(t) {
			continue
		}
		n, err := r.writePrev(id, make([]uint32, len(t)))
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func equal(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func isZero(t []uint32) bool {
	for _, v := range t {
		if v != 0 {
			return false
		}
	}
	return true
}

func sortedIDs(m map[maps.VIPKey]uint32) []uint32 {
	out := make([]uint32, 0, len(m))
	for _, id := range m {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (r *Reconciler) freeVIPID() (uint32, error) {
	used := map[uint32]bool{}
	for _, id := range r.vipIDs {
		used[id] = true
	}
	for id := uint32(0); id < r.m.MaxVIPs(); id++ {
		if !used[id] {
			return id, nil
		}
	}
	return 0, errors.New("apply: every VIP id is in use: raise max_vips")
}

func (r *Reconciler) freeBackendID() (uint32, error) {
	used := map[uint32]bool{}
	for _, id := range r.backendIDs {
		used[id] = true
	}
	for id := uint32(1); id < r.m.MaxBackends(); id++ {
		if !used[id] {
			return id, nil
		}
	}
	return 0, errors.New("apply: every backend id is in use: raise max_backends")
}

func keysOf(m map[netip.Addr]uint32) map[netip.Addr]bool {
	out := make(map[netip.Addr]bool, len(m))
	for a := range m {
		out[a] = true
	}
	return out
}

func sortedAddrs(m map[netip.Addr]bool) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

func sortedKeys[V any](m map[maps.VIPKey]V) []maps.VIPKey {
	out := make([]maps.VIPKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}
