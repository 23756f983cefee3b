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
	"slices"
	"sort"
	"time"

	"github.com/switchyard/switchyard/internal/maglev"
	"github.com/switchyard/switchyard/maps"
)

// VIP is the desired state of one VIP.
type VIP struct {
	Key   maps.VIPKey
	Flags maps.VIPFlags
	// RingSize is the size of the VIP's ring, a prime; 0 takes Maps.RingSize. A VIP whose size
	// changes gets a new range of the ring maps (docs/xdp.md, "Ring sizes").
	RingSize uint32
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
	RingSlots() uint32
	MaxVIPs() uint32
	MaxBackends() uint32
	VIPs() ([]maps.VIP, error)
	PutVIP(maps.VIP) error
	DeleteVIP(maps.VIPKey) error
	Backends() ([]maps.Backend, error)
	PutBackend(maps.Backend) error
	DeleteBackend(uint32) error
	RingAt(maps.RingRange) ([]uint32, error)
	WriteRingAt(r maps.RingRange, table []uint32) (int, error)
	PrevRingAt(maps.RingRange) ([]uint32, error)
	WritePrevRingAt(r maps.RingRange, table []uint32) (int, error)
	ResetVIPStats(id uint32) error
	ResetBackendStats(id uint32) error
}

// Signatures is implemented by Maps that keep, beside the rings, the signature of the input
// each VIP's table was built from (maps.Set with a ring_sigs map, see loader.RingSigs). With it,
// a restarted reconciler knows which rings are already right and builds none of them; without
// it, the first Apply builds every ring once (and writes only the slots that differ).
type Signatures interface {
	// RingSig is the signature recorded for a VIP id, 0 when unknown.
	RingSig(vipID uint32) uint64
	// SetRingSig records it (0: unknown, set before a ring is rewritten).
	SetRingSig(vipID uint32, sig uint64) error
}

// Result says what one Apply changed.
type Result struct {
	VIPsAdded, VIPsRemoved, VIPsUpdated int
	BackendsAdded, BackendsRemoved      int
	// RingsRebuilt counts rings with at least one slot written; SlotsWritten counts slots.
	RingsRebuilt, SlotsWritten int
	// PrevSlotsWritten counts the slots of previous rings written (second chance).
	PrevSlotsWritten int
	// TablesBuilt counts the Maglev tables computed: only VIPs whose in-ring backends (address,
	// id, weight) changed, or whose ring was not known yet, are built.
	TablesBuilt int
}

// Changed reports whether anything was written.
func (r Result) Changed() bool {
	r.TablesBuilt = 0
	return r != Result{}
}

// Reconciler owns the ids and, per VIP, the signature of the table its ring holds. It keeps no
// copy of any ring: the rings are read through their memory maps when a table changes.
type Reconciler struct {
	m          Maps
	sigStore   Signatures // nil when m keeps no signatures
	vipIDs     map[maps.VIPKey]uint32
	vipFlags   map[maps.VIPKey]maps.VIPFlags
	backendIDs map[netip.Addr]uint32
	backendAt  map[uint32]netip.Addr
	vipIDsUsed idSet
	beIDsUsed  idSet
	// last is every wanted VIP's backends as the last Apply gave them, refs the number of those
	// VIPs listing each address; dirty says the last Apply did not finish (count again), sweep
	// that every backend slot must be checked for removal once.
	last         map[maps.VIPKey]*lastInput
	refs         map[netip.Addr]int
	dirty, sweep bool
	// sigs is the signature of the table each VIP id's ring holds (absent: unknown).
	sigs map[uint32]uint64
	// prevSince is when each previous ring that may hold candidates was set (the start of this
	// reconciler for rings read back from the maps); absent means known empty.
	prevSince map[uint32]time.Time
	retire    time.Duration
	now       func() time.Time
	// version counts, per VIP id, the writes to its ring and previous ring, and epoch the
	// backend ids freed: together they say when a digest of a ring must be computed again.
	version map[uint32]uint64
	epoch   uint64
	// stale are extra slots found holding an address that already has one; Apply empties them.
	stale []uint32
	// order is the VIP keys of the last Apply, sorted (sortedKeys).
	order []maps.VIPKey
	// ranges is the ring range each VIP id's vips entry names, slots the allocator of the ring
	// maps' space (slots.go).
	ranges map[uint32]maps.RingRange
	slots  *slotAlloc
	// stable and prev: the caller's inputs are never changed in place, and the last one
	// (delta.go).
	stable bool
	prev   []VIP
	deltas int // delta Applies done (tests)
}

// New reads the ids that the maps hold (from an earlier run, or none).
func New(m Maps) (*Reconciler, error) {
	r := &Reconciler{m: m, vipIDs: map[maps.VIPKey]uint32{}, vipFlags: map[maps.VIPKey]maps.VIPFlags{},
		backendIDs: map[netip.Addr]uint32{}, backendAt: map[uint32]netip.Addr{}, dirty: true,
		vipIDsUsed: newIDSet(0, m.MaxVIPs()), beIDsUsed: newIDSet(1, m.MaxBackends()),
		sigs: map[uint32]uint64{}, prevSince: map[uint32]time.Time{}, version: map[uint32]uint64{}, now: time.Now,
		ranges: map[uint32]maps.RingRange{}}
	r.sigStore, _ = m.(Signatures)
	vips, err := m.VIPs()
	if err != nil {
		return nil, fmt.Errorf("read back vips: %w", err)
	}
	start := r.now()
	for _, v := range vips {
		r.vipIDs[v.Key] = v.ID
		r.vipFlags[v.Key] = v.Flags
		r.vipIDsUsed.add(v.ID)
		r.prevSince[v.ID] = start
		r.ranges[v.ID] = v.Ring
		if r.sigStore != nil {
			if sig := r.sigStore.RingSig(v.ID); sig != 0 {
				r.sigs[v.ID] = sig
			}
		}
	}
	var bad []uint32
	r.slots, bad = newSlotAlloc(m.RingSlots(), r.ranges)
	for _, id := range bad {
		// No range, or one that overlaps another VIP's (or leaves the maps): placed anew.
		delete(r.ranges, id)
		delete(r.sigs, id)
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
				r.beIDsUsed.add(b.ID)
				continue
			}
			r.stale = append(r.stale, old)
		}
		r.setBackend(a, b.ID)
	}
	return r, nil
}

func (r *Reconciler) setBackend(a netip.Addr, id uint32) {
	r.backendIDs[a] = id
	r.backendAt[id] = a
	r.beIDsUsed.add(id)
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
	a, ok := r.backendAt[id]
	return a, ok
}

// Ring returns the ring of a VIP as the map holds it (a copy; nil when it has none).
func (r *Reconciler) Ring(id uint32) ([]uint32, error) {
	rg, ok := r.ranges[id]
	if !ok {
		return nil, nil
	}
	return r.m.RingAt(rg)
}

// PrevRing returns the previous ring of a VIP as the map holds it (a copy; nil when it has none).
func (r *Reconciler) PrevRing(id uint32) ([]uint32, error) {
	rg, ok := r.ranges[id]
	if !ok {
		return nil, nil
	}
	return r.m.PrevRingAt(rg)
}

// RingRange is the range of the ring maps that a VIP id's ring is at (false: none yet).
func (r *Reconciler) RingRange(id uint32) (maps.RingRange, bool) {
	rg, ok := r.ranges[id]
	return rg, ok
}

// ringSize is the size of a VIP's ring.
func (r *Reconciler) ringSize(v *VIP) uint32 {
	if v.RingSize != 0 {
		return v.RingSize
	}
	return r.m.RingSize()
}

// Version changes whenever the ring or previous ring of the VIP id may hold other backends than
// before (a write, or a backend id freed): a digest of the rings computed at one version holds
// until the next.
func (r *Reconciler) Version(id uint32) [2]uint64 { return [2]uint64{r.version[id], r.epoch} }

// Apply makes the maps hold exactly desired. On error the maps may be partly updated; a later
// Apply with a correct state repairs them (every step compares with what is there).
//
// Only the VIPs whose table input changed are built: each VIP's signature (its in-ring
// backends' addresses, ids and weights, and the ring size) is compared with the one its ring was
// built from, so a drain or a new VIP costs one table, not one per VIP.
func (r *Reconciler) Apply(desired []VIP) (Result, error) {
	if res, done, err := r.applyDelta(desired); done {
		return res, err
	}
	var res Result
	want := make(map[maps.VIPKey]*VIP, len(desired))
	for i := range desired {
		v := &desired[i]
		v.Key.Addr = v.Key.Addr.Unmap()
		if _, dup := want[v.Key]; dup {
			return res, fmt.Errorf("apply: vip %s given twice", v.Key)
		}
		want[v.Key] = v
	}
	if uint32(len(want)) > r.m.MaxVIPs() {
		return res, fmt.Errorf("apply: %d VIPs, the maps hold %d: raise max_vips (needs `lb detach` and a restart)", len(want), r.m.MaxVIPs())
	}
	if r.dirty {
		// The last Apply failed (or none ran): count every VIP's backends again.
		r.last, r.refs, r.sweep = map[maps.VIPKey]*lastInput{}, map[netip.Addr]int{}, true
	}
	r.dirty = true
	r.slots.release() // ranges retired by the last Apply: no packet reads them any more
	fresh, zeroed := r.countBackends(want, false, nil)
	if err := r.addBackends(fresh, &res); err != nil {
		return res, err
	}
	var gone []maps.VIPKey
	for k := range r.vipIDs {
		if _, ok := want[k]; !ok {
			gone = append(gone, k)
		}
	}
	if err := r.removeVIPs(gone, &res); err != nil {
		return res, err
	}
	if err := r.putVIPs(r.sortedKeys(want), want, &res); err != nil {
		return res, err
	}
	if err := r.removeBackends(zeroed, &res); err != nil {
		return res, err
	}
	r.dirty = false
	r.keep(desired)
	return res, nil
}

// lastInput is a VIP's backends as the last Apply gave them, and the signature computed from
// them (0: not yet).
type lastInput struct {
	backends []Backend
	sig      uint64
	size     uint32 // the ring size sig was computed for
}

// countBackends keeps, per address, the number of wanted VIPs that list it, looking only at the
// VIPs whose backends changed since the last Apply (a change costs its VIP, not every backend of
// every VIP). It returns the addresses listed now that have no slot yet, and those no VIP lists
// any more.
//
// With delta (delta.go), want holds only the VIPs that changed or came, and gone the VIPs that
// went; the others keep their counts.
func (r *Reconciler) countBackends(want map[maps.VIPKey]*VIP, delta bool, gone []maps.VIPKey) (fresh, zeroed []netip.Addr) {
	drop := func(bs []Backend) {
		for _, b := range bs {
			a := b.Addr.Unmap()
			if r.refs[a]--; r.refs[a] <= 0 {
				zeroed = append(zeroed, a)
			}
		}
	}
	for k, v := range want {
		old := r.last[k]
		if old != nil && slices.Equal(old.backends, v.Backends) {
			continue
		}
		if old != nil {
			drop(old.backends)
		}
		for _, b := range v.Backends {
			a := b.Addr.Unmap()
			if r.refs[a]++; r.refs[a] == 1 {
				if _, ok := r.backendIDs[a]; !ok {
					fresh = append(fresh, a)
				}
			}
		}
		r.last[k] = &lastInput{backends: slices.Clone(v.Backends)}
	}
	if delta {
		for _, k := range gone {
			if old := r.last[k]; old != nil {
				drop(old.backends)
				delete(r.last, k)
			}
		}
		return fresh, zeroed
	}
	for k, old := range r.last {
		if _, ok := want[k]; !ok {
			drop(old.backends)
			delete(r.last, k)
		}
	}
	return fresh, zeroed
}

// addBackends gives a backend slot to every address any VIP lists, before any ring refers to it.
func (r *Reconciler) addBackends(fresh []netip.Addr, res *Result) error {
	sort.Slice(fresh, func(i, j int) bool { return fresh[i].Less(fresh[j]) })
	for _, a := range fresh {
		if _, ok := r.backendIDs[a]; ok || r.refs[a] <= 0 {
			continue // given twice, or listed no more
		}
		id, ok := r.beIDsUsed.free()
		if !ok {
			return errors.New("apply: every backend id is in use: raise max_backends")
		}
		if err := r.m.ResetBackendStats(id); err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		if err := r.m.PutBackend(maps.Backend{ID: id, Addr: a}); err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		r.setBackend(a, id)
		res.BackendsAdded++
	}
	return nil
}

// removeVIPs takes the VIPs gone out of the vips map first (no new packet matches), then
// clears their rings so that a later VIP given the same id starts from an empty ring.
func (r *Reconciler) removeVIPs(gone []maps.VIPKey, res *Result) error {
	sortKeys(gone)
	for _, k := range gone {
		id, ok := r.vipIDs[k]
		if !ok {
			continue
		}
		if err := r.m.DeleteVIP(k); err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		delete(r.vipIDs, k)
		delete(r.vipFlags, k)
		r.vipIDsUsed.remove(id)
		res.VIPsRemoved++
		// Its ring is left as it is: the range goes back to the allocator (after this Apply),
		// and whatever VIP is placed there next is written whole, ring and previous ring.
		r.slots.retire(r.ranges[id])
		delete(r.ranges, id)
		delete(r.prevSince, id)
		r.version[id]++
		if err := r.setSig(id, 0); err != nil {
			return err
		}
	}
	return nil
}

// putVIPs writes the wanted VIPs: ring first, then the vips entry, so a new VIP never sees a
// stale ring. Tables are built only for VIPs whose signature changed, in parallel, and written in
// key order as they come.
func (r *Reconciler) putVIPs(keys []maps.VIPKey, want map[maps.VIPKey]*VIP, res *Result) error {
	var jobs []buildJob
	for _, k := range keys {
		v := want[k]
		_, known := r.vipFlags[k] // in the vips map
		id, has := r.vipIDs[k]
		if !has {
			var ok bool
			if id, ok = r.vipIDsUsed.free(); !ok {
				return errors.New("apply: every VIP id is in use: raise max_vips")
			}
			if err := r.m.ResetVIPStats(id); err != nil {
				return fmt.Errorf("apply: %w", err)
			}
			// Taken now, so that the next new VIP gets the next id; put in the map below.
			r.vipIDsUsed.add(id)
			r.vipIDs[k] = id
		}
		size := r.ringSize(v)
		sig := r.last[k].sig
		if sig == 0 || r.last[k].size != size {
			sig = r.signature(v, size)
			r.last[k].sig, r.last[k].size = sig, size
		}
		if got, ok := r.sigs[id]; ok && got == sig && r.ranges[id].Size == size {
			if err := r.putVIP(k, id, v.Flags, known, false, res); err != nil {
				return err
			}
			continue
		}
		jobs = append(jobs, buildJob{key: k, id: id, known: known, flags: v.Flags, vip: v, sig: sig, size: size})
	}
	return r.buildAndWrite(jobs, res)
}

// sortedKeys is the keys of want in key order. The order of the last Apply is kept while the
// set of keys is the same, and otherwise edited: the keys gone are dropped and the new ones
// sorted and merged in (sorting 4,096 keys was a tenth of a change).
func (r *Reconciler) sortedKeys(want map[maps.VIPKey]*VIP) []maps.VIPKey {
	same := len(r.order) == len(want)
	for i := 0; same && i < len(r.order); i++ {
		_, same = want[r.order[i]]
	}
	if same {
		return r.order
	}
	kept := make([]maps.VIPKey, 0, len(want))
	had := make(map[maps.VIPKey]bool, len(r.order))
	for _, k := range r.order {
		if _, ok := want[k]; ok {
			kept = append(kept, k)
			had[k] = true
		}
	}
	var added []maps.VIPKey
	if len(kept) < len(want) {
		for k := range want {
			if !had[k] {
				added = append(added, k)
			}
		}
	}
	sortKeys(added)
	keys := make([]maps.VIPKey, 0, len(want))
	i, j := 0, 0
	for i < len(kept) || j < len(added) {
		if j == len(added) || (i < len(kept) && keyLess(kept[i], added[j])) {
			keys = append(keys, kept[i])
			i++
		} else {
			keys = append(keys, added[j])
			j++
		}
	}
	r.order = keys
	return keys
}

// putVIP writes a VIP's entry when it is new or its flags changed.
// With moved, the entry is written whatever else changed: the VIP's ring moved.
func (r *Reconciler) putVIP(k maps.VIPKey, id uint32, flags maps.VIPFlags, known, moved bool, res *Result) error {
	if known && r.vipFlags[k] == flags && !moved {
		return nil
	}
	if err := r.m.PutVIP(maps.VIP{Key: k, ID: id, Flags: flags, Ring: r.ranges[id]}); err != nil {
		if !known {
			// Not in the map: give the id back, so that a later Apply starts clean.
			delete(r.vipIDs, k)
			r.vipIDsUsed.remove(id)
		}
		return fmt.Errorf("apply: %w", err)
	}
	if known {
		res.VIPsUpdated++
	} else {
		res.VIPsAdded++
	}
	r.vipFlags[k] = flags
	return nil
}

// removeBackends empties, last, the backend slots no VIP lists any more, after no ring points
// at them; their flows re-hash on their next packet.
func (r *Reconciler) removeBackends(zeroed []netip.Addr, res *Result) error {
	if r.sweep {
		// After a full count every slot is a candidate (slots read back no VIP lists).
		zeroed = zeroed[:0]
		for a := range r.backendIDs {
			zeroed = append(zeroed, a)
		}
		r.sweep = false
	}
	var gone []netip.Addr
	for _, a := range zeroed {
		if _, has := r.backendIDs[a]; has && r.refs[a] <= 0 && !slices.Contains(gone, a) {
			gone = append(gone, a)
		}
		if r.refs[a] <= 0 {
			delete(r.refs, a)
		}
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i].Less(gone[j]) })
	for _, a := range gone {
		id := r.backendIDs[a]
		if err := r.m.DeleteBackend(id); err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		delete(r.backendIDs, a)
		delete(r.backendAt, id)
		r.beIDsUsed.remove(id)
		r.epoch++
		res.BackendsRemoved++
	}
	for _, id := range r.stale {
		if err := r.m.DeleteBackend(id); err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		if _, live := r.backendAt[id]; !live {
			r.beIDsUsed.remove(id)
		}
		r.epoch++
		res.BackendsRemoved++
	}
	r.stale = nil
	return nil
}

// tableInput lists a VIP's backends as the table build wants them: every listed backend of
// positive weight, and which of them are out of the ring (drained, unhealthy).
func (r *Reconciler) tableInput(v *VIP) []tableBackend {
	var bs []tableBackend
	for _, b := range v.Backends {
		if b.Weight == 0 {
			continue
		}
		a := b.Addr.Unmap()
		bs = append(bs, tableBackend{Backend: maglev.Backend{ID: r.backendIDs[a], Identity: a.String(), Weight: b.Weight}, out: !b.InRing})
	}
	return bs
}

// writeRing makes the ring of VIP id, at its range, equal to table, leaving its old table in the
// previous ring when the ring changes (written first, so that a packet never pairs the new ring
// with a stale previous one). The signature is unknown while the ring is written and sig (0:
// none) once it is.
func (r *Reconciler) writeRing(id uint32, rg maps.RingRange, table []uint32, sig uint64) (int, int, error) {
	if rot, ok := r.m.(rotator); ok {
		// The same steps in the maps' memory, without copying the rings out.
		if err := r.setSig(id, 0); err != nil {
			return 0, 0, err
		}
		n, pn, err := rot.RotateRingAt(rg, table)
		if n > 0 || pn > 0 {
			r.version[id]++
			r.prevSince[id] = r.now()
		}
		if err != nil {
			return n, pn, fmt.Errorf("apply: %w", err)
		}
		return n, pn, r.setSig(id, sig)
	}
	old, err := r.m.RingAt(rg)
	if err != nil {
		return 0, 0, fmt.Errorf("apply: %w", err)
	}
	if equal(old, table) {
		return 0, 0, r.setSig(id, sig)
	}
	if err := r.setSig(id, 0); err != nil {
		return 0, 0, err
	}
	pn, err := r.writePrev(id, rg, old)
	if err != nil {
		return 0, pn, err
	}
	n, err := r.m.WriteRingAt(rg, table)
	r.version[id]++
	if err != nil {
		return n, pn, fmt.Errorf("apply: %w", err)
	}
	return n, pn, r.setSig(id, sig)
}

// placeRing writes a VIP's table at a new range of its size, with an empty previous ring (no
// table of another size maps a flow to the same slot), then switches the VIP's entry to it in
// one update, and retires the range it had. It is how a VIP gets its first ring, and a new one
// when its size changes.
func (r *Reconciler) placeRing(j buildJob, table []uint32, res *Result) (int, int, error) {
	rg, ok := r.slots.take(j.size)
	if !ok {
		return 0, 0, fmt.Errorf("apply: vip %s: no free range of %d ring slots (%d of %d free): raise ring_slots (needs `lb detach` and a restart) or give VIPs smaller ring_size", j.key, j.size, r.slots.freeSlots(), r.m.RingSlots())
	}
	if err := r.setSig(j.id, 0); err != nil {
		r.slots.put(rg)
		return 0, 0, err
	}
	n, err := r.m.WriteRingAt(rg, table)
	pn := 0
	if err == nil {
		pn, err = r.m.WritePrevRingAt(rg, make([]uint32, j.size))
	}
	if err != nil {
		r.slots.put(rg)
		return n, pn, fmt.Errorf("apply: %w", err)
	}
	old, had := r.ranges[j.id]
	r.ranges[j.id] = rg
	if err := r.putVIP(j.key, j.id, j.flags, j.known, true, res); err != nil {
		if had {
			r.ranges[j.id] = old
		} else {
			delete(r.ranges, j.id)
		}
		r.slots.put(rg)
		return n, pn, err
	}
	if had {
		r.slots.retire(old)
	}
	r.version[j.id]++
	delete(r.prevSince, j.id)
	return n, pn, r.setSig(j.id, j.sig)
}

// rotator is implemented by Maps that rotate a ring into the previous ring in place
// (maps.Set.RotateRing).
type rotator interface {
	RotateRingAt(r maps.RingRange, table []uint32) (n, pn int, err error)
}

// setSig records the signature of a VIP's ring, in memory and, when the maps keep them, there.
func (r *Reconciler) setSig(id uint32, sig uint64) error {
	if sig == 0 {
		delete(r.sigs, id)
	} else {
		r.sigs[id] = sig
	}
	if r.sigStore == nil {
		return nil
	}
	if err := r.sigStore.SetRingSig(id, sig); err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	return nil
}

func (r *Reconciler) writePrev(id uint32, rg maps.RingRange, table []uint32) (int, error) {
	n, err := r.m.WritePrevRingAt(rg, table)
	r.version[id]++
	if err != nil {
		return n, fmt.Errorf("apply: previous ring: %w", err)
	}
	if isZero(table) {
		delete(r.prevSince, id)
	} else {
		r.prevSince[id] = r.now()
	}
	return n, nil
}

// DropFromPrevious empties the slots of a VIP's previous ring that name a backend, so that no
// mid-stream miss is sent on to it any more (a drain that timed out cuts its flows). It returns
// the slots written.
func (r *Reconciler) DropFromPrevious(vipID, backendID uint32) (int, error) {
	rg, ok := r.ranges[vipID]
	if !ok {
		return 0, nil
	}
	t, err := r.m.PrevRingAt(rg)
	if err != nil {
		return 0, err
	}
	for i, id := range t {
		if id == backendID {
			t[i] = 0
		}
	}
	since, had := r.prevSince[vipID]
	n, err := r.writePrev(vipID, rg, t)
	if _, still := r.prevSince[vipID]; had && still {
		r.prevSince[vipID] = since // a removal is no new change: the retirement time stands
	}
	return n, err
}

// SetRetirePrevious makes RetirePrevious empty a previous ring d after the change that set it;
// 0 (the default) keeps it until the next change.
func (r *Reconciler) SetRetirePrevious(d time.Duration) { r.retire = d }

// RetirePrevious empties the previous rings set longer ago than the retirement time (none when
// it is 0) and returns the slots written. The daemon calls it every second; it reads only the
// previous rings that may hold candidates and are due.
func (r *Reconciler) RetirePrevious(now time.Time) (int, error) {
	if r.retire <= 0 {
		return 0, nil
	}
	var due []uint32
	for id, since := range r.prevSince {
		if now.Sub(since) >= r.retire {
			due = append(due, id)
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i] < due[j] })
	total := 0
	for _, id := range due {
		rg, ok := r.ranges[id]
		if !ok {
			delete(r.prevSince, id)
			continue
		}
		n, err := r.writePrev(id, rg, make([]uint32, rg.Size))
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

func sortKeys(ks []maps.VIPKey) {
	sort.Slice(ks, func(i, j int) bool { return keyLess(ks[i], ks[j]) })
}

// keyLess orders VIP keys by address, port and protocol.
func keyLess(a, b maps.VIPKey) bool {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c < 0
	}
	if a.Port != b.Port {
		return a.Port < b.Port
	}
	return a.Proto < b.Proto
}
