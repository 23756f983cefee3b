// Package maps gives typed access to every map of switchyard's XDP forwarder: VIPs, backends,
// Maglev rings, the connection table, configuration and the per-CPU counters. It is the only code
// that writes to those maps; the control plane calls it with desired state and it writes the
// differences.
package maps

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// Proto is an IP protocol number that a VIP balances.
type Proto uint8

// The protocols a VIP can balance.
const (
	TCP Proto = 6
	UDP Proto = 17
)

func (p Proto) String() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	}
	return fmt.Sprintf("proto-%d", uint8(p))
}

// ParseProto reads "tcp" or "udp".
func ParseProto(s string) (Proto, error) {
	switch s {
	case "tcp", "TCP":
		return TCP, nil
	case "udp", "UDP":
		return UDP, nil
	}
	return 0, fmt.Errorf("parse protocol %q: use tcp or udp", s)
}

// VIPFlags are per-VIP hashing options.
type VIPFlags uint32

// VIP hashing options: enum vip_flags of bpf/include/consts.h, generated into loader.
const (
	// HashSrcOnly hashes the client address only: every connection of a client goes to the
	// same backend.
	HashSrcOnly = VIPFlags(bpfobj.LBVipFlagsVIP_HASH_SRC_ONLY)
	// NoSrcPort leaves the source port out of the hash.
	NoSrcPort = VIPFlags(bpfobj.LBVipFlagsVIP_NO_SRC_PORT)
)

// VIPKey identifies a VIP. Port 0 means every port of the address.
type VIPKey struct {
	Addr  netip.Addr
	Port  uint16
	Proto Proto
}

func (k VIPKey) String() string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(k.Addr, k.Port), k.Proto)
}

// VIP is a VIP as the forwarder holds it.
type VIP struct {
	Key VIPKey
	// ID selects the VIP's stats slot and generation: 0 <= ID < MaxVIPs.
	ID    uint32
	Flags VIPFlags
	// Ring is the VIP's Maglev ring: a range of the ring maps. Left zero in PutVIP, the VIP
	// keeps the range it has, or else takes the fixed one of its id (ID x RingSize), as callers
	// that place every ring themselves at one size do.
	Ring RingRange
}

// RingRange is a VIP's ring: Size slots (a prime) of the ring maps from slot Off.
type RingRange struct {
	Off, Size uint32
}

// End is the slot after the range.
func (r RingRange) End() uint64 { return uint64(r.Off) + uint64(r.Size) }

// Backend is a backend as the forwarder holds it.
type Backend struct {
	// ID indexes the backends array: 1 <= ID < MaxBackends (0 means "no backend").
	ID   uint32
	Addr netip.Addr
}

// Set is the forwarder's maps, with the sizes they were loaded with.
type Set struct {
	m           *bpfobj.LBMaps
	rings       mappedRing // the rings16 map, memory-mapped
	prevRings   mappedRing // the prev_rings16 map, memory-mapped
	filter      mappedU32  // the vip_filter map, memory-mapped
	ringSize    uint32     // the size of the rings placed at id x ringSize
	slots       uint32     // ring slots each ring map holds
	maxVIPs     uint32
	maxBackends uint32
	// addrs counts the VIPs on each address and filterUse the addresses on each vip_filter
	// slot, so that adding or removing a VIP costs O(1) whatever the number of VIPs (read from
	// vip_addrs on first use; nil until then).
	addrs     map[netip.Addr]uint32
	filterUse []uint32
	sigs      *ebpf.Map // ring signatures (UseRingSigs); nil: none kept
	// ranges is the ring range of every VIP id in the vips map that this Set read or wrote.
	ranges map[uint32]RingRange
}

// New wraps loaded maps. ringSize is the size of the rings placed at VIP id x ringSize (PutVIP
// without a range); rings of other sizes are placed by the caller (VIP.Ring).
func New(m *bpfobj.LBMaps, ringSize uint32) (*Set, error) {
	if m == nil || m.Vips == nil {
		return nil, errors.New("open maps: no maps given")
	}
	maxVIPs := m.VipStats.MaxEntries()
	if ringSize == 0 {
		return nil, errors.New("open maps: no ring size given")
	}
	rings, err := mapRing(m.Rings16)
	if err != nil {
		return nil, fmt.Errorf("open maps: %w", err)
	}
	if m.PrevRings16 == nil || m.PrevRings16.MaxEntries() != m.Rings16.MaxEntries() {
		return nil, errors.New("open maps: prev_rings16 is missing or not the size of rings16: load the forwarder with this binary's loader")
	}
	prev, err := mapRing(m.PrevRings16)
	if err != nil {
		return nil, fmt.Errorf("open maps: %w", err)
	}
	filter, err := mapU32(m.VipFilter)
	if err != nil {
		return nil, fmt.Errorf("open maps: %w", err)
	}
	return &Set{m: m, rings: rings, prevRings: prev, filter: filter, ringSize: ringSize, slots: m.Rings16.MaxEntries() * uint32(loader.RingWordSlots),
		maxVIPs: maxVIPs, maxBackends: m.Backends.MaxEntries(), ranges: map[uint32]RingRange{}}, nil
}

// RingSlots is how many ring slots the ring maps hold: the space VIPs' rings are placed in.
func (s *Set) RingSlots() uint32 { return s.slots }

// RingSize is the size of the rings placed at VIP id x RingSize (PutVIP without a range).
func (s *Set) RingSize() uint32 { return s.ringSize }

// fixedRange is the range of VIP id's ring when its range is not given.
func (s *Set) fixedRange(id uint32) RingRange {
	return RingRange{Off: id * s.ringSize, Size: s.ringSize}
}

// rangeOf is the ring range of a VIP id: the one its vips entry names, else its fixed one.
// The vips map is listed first (O(VIPs)): another process (the daemon) may have moved the ring
// since; code that places rings itself reads them by range (RingAt).
func (s *Set) rangeOf(id uint32) RingRange {
	_, _ = s.VIPs()
	if r, ok := s.ranges[id]; ok {
		return r
	}
	return s.fixedRange(id)
}

// RangeOf is the ring range of a VIP id as the vips map names it, else the fixed one of its id.
func (s *Set) RangeOf(id uint32) RingRange { return s.rangeOf(id) }

// MaxVIPs is how many VIPs the maps hold.
func (s *Set) MaxVIPs() uint32 { return s.maxVIPs }

// MaxBackends is one more than the largest backend ID.
func (s *Set) MaxBackends() uint32 { return s.maxBackends }

// The address families of the BPF structs: enum family of bpf/include/consts.h, generated into
// loader.
const (
	familyV4 = uint8(bpfobj.LBFamilyFAMILY_V4)
	familyV6 = uint8(bpfobj.LBFamilyFAMILY_V6)
)

// addrWords puts an address in the BPF layout: network byte order, IPv4 in the first word.
func addrWords(a netip.Addr) (w [4]uint32, family uint8) {
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		w[0] = nativeWord(b[:])
		return w, familyV4
	}
	b := a.As16()
	for i := 0; i < 4; i++ {
		w[i] = nativeWord(b[i*4 : i*4+4])
	}
	return w, familyV6
}

func wordsAddr(w [4]uint32, family uint8) netip.Addr {
	if family == familyV4 {
		var b [4]byte
		putNativeWord(b[:], w[0])
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	for i := 0; i < 4; i++ {
		putNativeWord(b[i*4:], w[i])
	}
	return netip.AddrFrom16(b)
}

// nativeWord reads 4 bytes in memory order as the BPF program (little-endian) loads them.
func nativeWord(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func putNativeWord(b []byte, w uint32) {
	b[0], b[1], b[2], b[3] = byte(w), byte(w>>8), byte(w>>16), byte(w>>24)
}

// netPort converts a port to the network-order value the BPF program sees in a __u16.
func netPort(p uint16) uint16 { return p<<8 | p>>8 }

func vipKey(k VIPKey) bpfobj.LBVipKey {
	w, fam := addrWords(k.Addr)
	return bpfobj.LBVipKey{Addr: w, Port: netPort(k.Port), Proto: uint8(k.Proto), Family: fam}
}

func addrOnlyKey(a netip.Addr) bpfobj.LBVipKey {
	w, fam := addrWords(a)
	return bpfobj.LBVipKey{Addr: w, Family: fam}
}

// PutVIP adds or updates a VIP. A VIP whose entry changes ring switches to the new range in
// one update of the vips hash map: a packet reads the old range or the new one, whole.
func (s *Set) PutVIP(v VIP) error {
	if !v.Key.Addr.IsValid() {
		return errors.New("put vip: no address")
	}
	if v.ID >= s.maxVIPs {
		return fmt.Errorf("put vip %s: id %d beyond the %d VIPs the maps hold: raise --max-vips", v.Key, v.ID, s.maxVIPs)
	}
	if v.Ring.Size == 0 {
		v.Ring = s.rangeOf(v.ID)
		if v.Ring.Size != s.ringSize {
			v.Ring = s.fixedRange(v.ID)
		}
	}
	if v.Ring.End() > uint64(s.slots) {
		return fmt.Errorf("put vip %s: ring slots %d..%d beyond the %d the ring maps hold: raise ring_slots (needs `lb detach`)", v.Key, v.Ring.Off, v.Ring.End(), s.slots)
	}
	k := vipKey(v.Key)
	var old bpfobj.LBVipMeta
	exists := s.m.Vips.Lookup(k, &old) == nil
	keep := exists && old.Id == v.ID
	if !keep {
		// A VIP new to this id: connection-table entries made for the id's previous VIP must
		// not be taken for this one's.
		if err := s.bumpGen(v.ID); err != nil {
			return fmt.Errorf("put vip %s: %w", v.Key, err)
		}
	}
	if err := s.m.Vips.Put(k, bpfobj.LBVipMeta{Id: v.ID, Flags: uint32(v.Flags), RingOff: v.Ring.Off, RingSize: v.Ring.Size}); err != nil {
		return fmt.Errorf("put vip %s: %w", v.Key, err)
	}
	if err := loader.BumpVIPsVersion(s.m.VipsVersion); err != nil {
		return fmt.Errorf("put vip %s: %w", v.Key, err)
	}
	s.ranges[v.ID] = v.Ring
	if exists {
		return nil // its address is counted already
	}
	return s.addVIPAddr(v.Key.Addr, 1)
}

// bumpGen invalidates every connection-table entry made for a VIP id (see struct flow_state).
func (s *Set) bumpGen(id uint32) error {
	var g uint32
	if err := s.m.VipGens.Lookup(id, &g); err != nil {
		return fmt.Errorf("read vip generation %d: %w", id, err)
	}
	if err := s.m.VipGens.Put(id, uint32(uint16(g+1))); err != nil {
		return fmt.Errorf("bump vip generation %d: %w", id, err)
	}
	return nil
}

// DeleteVIP removes a VIP; its established flows stop at once (their entries are invalidated).
// Its ring is left as it is; the caller rewrites it when the id is reused.
func (s *Set) DeleteVIP(k VIPKey) error {
	var old bpfobj.LBVipMeta
	if err := s.m.Vips.Lookup(vipKey(k), &old); err != nil {
		return nil // not there: nothing to do
	}
	if err := s.bumpGen(old.Id); err != nil {
		return fmt.Errorf("delete vip %s: %w", k, err)
	}
	if err := s.m.Vips.Delete(vipKey(k)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete vip %s: %w", k, err)
	}
	if err := loader.BumpVIPsVersion(s.m.VipsVersion); err != nil {
		return fmt.Errorf("delete vip %s: %w", k, err)
	}
	delete(s.ranges, old.Id)
	return s.addVIPAddr(k.Addr, -1)
}

// loadAddrs reads the VIP count of every address from vip_addrs, once.
func (s *Set) loadAddrs() error {
	if s.addrs != nil {
		return nil
	}
	addrs, use := map[netip.Addr]uint32{}, make([]uint32, vipFilterSlots)
	var k bpfobj.LBVipKey
	var n uint32
	it := s.m.VipAddrs.Iterate()
	for it.Next(&k, &n) {
		addrs[wordsAddr(k.Addr, k.Family)] = n
		use[vipAddrSlot(k.Addr)]++
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list vip addresses: %w", err)
	}
	s.addrs, s.filterUse = addrs, use
	return nil
}

// addVIPAddr keeps vip_addrs and vip_filter true when a VIP on address a comes (delta 1) or goes
// (-1): an address is in vip_addrs, and its filter bit set, while at least one VIP uses it.
func (s *Set) addVIPAddr(a netip.Addr, delta int) error {
	if err := s.loadAddrs(); err != nil {
		return err
	}
	a = a.Unmap()
	n := s.addrs[a]
	if delta < 0 && n == 0 {
		return nil
	}
	n = uint32(int(n) + delta)
	k := addrOnlyKey(a)
	slot := vipAddrSlot(k.Addr)
	if n == 0 {
		if err := s.m.VipAddrs.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete vip address %s: %w", a, err)
		}
		delete(s.addrs, a)
		if s.filterUse[slot]--; s.filterUse[slot] == 0 {
			return s.writeFilter(slot, 0)
		}
		return nil
	}
	if err := s.m.VipAddrs.Put(k, n); err != nil {
		return fmt.Errorf("put vip address %s: %w", a, err)
	}
	if _, had := s.addrs[a]; !had {
		s.filterUse[slot]++
	}
	s.addrs[a] = n
	return s.writeFilter(slot, 1) // also repairs a bit an older binary left unset
}

func (s *Set) writeFilter(slot, v uint32) error {
	if err := s.filter.write(slot, v); err != nil {
		return fmt.Errorf("write vip filter: %w", err)
	}
	return nil
}

// VIPs lists the VIPs in the map, sorted by id.
func (s *Set) VIPs() ([]VIP, error) {
	var (
		k   bpfobj.LBVipKey
		v   bpfobj.LBVipMeta
		out []VIP
	)
	ranges := map[uint32]RingRange{}
	it := s.m.Vips.Iterate()
	for it.Next(&k, &v) {
		out = append(out, VIP{
			Key:   VIPKey{Addr: wordsAddr(k.Addr, k.Family), Port: netPort(k.Port), Proto: Proto(k.Proto)},
			ID:    v.Id,
			Flags: VIPFlags(v.Flags),
			Ring:  RingRange{Off: v.RingOff, Size: v.RingSize},
		})
		ranges[v.Id] = RingRange{Off: v.RingOff, Size: v.RingSize}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list vips: %w", err)
	}
	s.ranges = ranges
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// PutBackend sets a backend slot.
func (s *Set) PutBackend(b Backend) error {
	if b.ID == 0 || b.ID >= s.maxBackends {
		return fmt.Errorf("put backend %s: id %d out of range 1..%d", b.Addr, b.ID, s.maxBackends-1)
	}
	if !b.Addr.IsValid() {
		return fmt.Errorf("put backend %d: no address", b.ID)
	}
	w, fam := addrWords(b.Addr)
	if err := s.m.Backends.Put(b.ID, bpfobj.LBBackend{Addr: w, Family: fam}); err != nil {
		return fmt.Errorf("put backend %s: %w", b.Addr, err)
	}
	return nil
}

// DeleteBackend empties a backend slot: flows still pinned to it re-hash on their next packet.
func (s *Set) DeleteBackend(id uint32) error {
	if id == 0 || id >= s.maxBackends {
		return fmt.Errorf("delete backend: id %d out of range", id)
	}
	if err := s.m.Backends.Put(id, bpfobj.LBBackend{}); err != nil {
		return fmt.Errorf("delete backend %d: %w", id, err)
	}
	return nil
}

// Backends lists the occupied backend slots, by id.
func (s *Set) Backends() ([]Backend, error) {
	var out []Backend
	err := readAll(s.m.Backends, func(k uint32, v bpfobj.LBBackend) {
		if v.Family != 0 {
			out = append(out, Backend{ID: k, Addr: wordsAddr(v.Addr, v.Family)})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list backends: %w", err)
	}
	return out, nil
}

// Ring reads a VIP's Maglev ring (one copy from the memory-mapped rings map).
func (s *Set) Ring(vipID uint32) ([]uint32, error) {
	if err := s.checkID(vipID, "read ring"); err != nil {
		return nil, err
	}
	return s.RingAt(s.rangeOf(vipID))
}

// PrevRing reads a VIP's previous Maglev table (prev_rings16): the second-chance candidates.
func (s *Set) PrevRing(vipID uint32) ([]uint32, error) {
	if err := s.checkID(vipID, "read previous ring"); err != nil {
		return nil, err
	}
	return s.PrevRingAt(s.rangeOf(vipID))
}

// RingView is a VIP's ring as the map holds it, without a copy: the slice is the memory map
// itself, for reading only (write with WriteRing), and sees later writes.
func (s *Set) RingView(vipID uint32) ([]uint16, error) {
	if err := s.checkID(vipID, "read ring"); err != nil {
		return nil, err
	}
	return s.RingViewAt(s.rangeOf(vipID))
}

// PrevRingView is PrevRing without a copy, as RingView.
func (s *Set) PrevRingView(vipID uint32) ([]uint16, error) {
	if err := s.checkID(vipID, "read previous ring"); err != nil {
		return nil, err
	}
	return s.PrevRingViewAt(s.rangeOf(vipID))
}

// WriteRing makes a VIP's ring equal to table, writing only the slots that differ from what the
// map holds (read through its memory map, so old, the ring as the caller last knew it, is not
// needed; it may be nil). It returns the number of slots written.
func (s *Set) WriteRing(vipID uint32, old, table []uint32) (int, error) {
	if err := s.checkID(vipID, "write ring"); err != nil {
		return 0, err
	}
	return s.WriteRingAt(s.rangeOf(vipID), table)
}

// WritePrevRing makes a VIP's previous table equal to table, as WriteRing does for the ring.
func (s *Set) WritePrevRing(vipID uint32, old, table []uint32) (int, error) {
	if err := s.checkID(vipID, "write previous ring"); err != nil {
		return 0, err
	}
	return s.WritePrevRingAt(s.rangeOf(vipID), table)
}

// RotateRing is RotateRingAt for a VIP id's ring.
func (s *Set) RotateRing(vipID uint32, table []uint32) (n, pn int, err error) {
	if err := s.checkID(vipID, "write ring"); err != nil {
		return 0, 0, err
	}
	return s.RotateRingAt(s.rangeOf(vipID), table)
}

func (s *Set) checkID(vipID uint32, what string) error {
	if vipID >= s.maxVIPs {
		return fmt.Errorf("%s: vip id %d out of range", what, vipID)
	}
	return nil
}

// RingAt reads the ring at a range (a copy).
func (s *Set) RingAt(r RingRange) ([]uint32, error) { return s.readRing(s.rings, "ring", r) }

// PrevRingAt reads the previous ring at a range (a copy).
func (s *Set) PrevRingAt(r RingRange) ([]uint32, error) {
	return s.readRing(s.prevRings, "previous ring", r)
}

// RingViewAt is the ring at a range without a copy, as RingView.
func (s *Set) RingViewAt(r RingRange) ([]uint16, error) { return s.ringView(s.rings, "read ring", r) }

// PrevRingViewAt is the previous ring at a range without a copy, as RingView.
func (s *Set) PrevRingViewAt(r RingRange) ([]uint16, error) {
	return s.ringView(s.prevRings, "read previous ring", r)
}

// WriteRingAt makes the ring at a range equal to table (of the range's size), writing only the
// slots that differ. It returns the number of slots written.
func (s *Set) WriteRingAt(r RingRange, table []uint32) (int, error) {
	return s.writeRing(s.rings, "ring", r, table)
}

// WritePrevRingAt makes the previous ring at a range equal to table, as WriteRingAt.
func (s *Set) WritePrevRingAt(r RingRange, table []uint32) (int, error) {
	return s.writeRing(s.prevRings, "previous ring", r, table)
}

// ClearPrevRingAt empties the previous ring at a range (a ring placed anew has no previous
// table of its size). It returns the slots written.
func (s *Set) ClearPrevRingAt(r RingRange) (int, error) {
	cur, err := s.ringView(s.prevRings, "write previous ring", r)
	if err != nil {
		return 0, err
	}
	n := 0
	for i := range cur {
		if cur[i] != 0 {
			cur[i] = 0
			n++
		}
	}
	return n, nil
}

func (s *Set) ringView(m mappedRing, what string, r RingRange) ([]uint16, error) {
	if r.Size == 0 || r.End() > uint64(s.slots) {
		return nil, fmt.Errorf("%s: slots %d..%d outside the %d the ring maps hold", what, r.Off, r.End(), s.slots)
	}
	v, err := m.view(r.Off, r.Size)
	if err != nil {
		return nil, fmt.Errorf("%s at %d: %w", what, r.Off, err)
	}
	return v, nil
}

func (s *Set) readRing(m mappedRing, what string, r RingRange) ([]uint32, error) {
	v, err := s.ringView(m, "read "+what, r)
	if err != nil {
		return nil, err
	}
	out := make([]uint32, len(v))
	for i, id := range v {
		out[i] = uint32(id)
	}
	return out, nil
}

func (s *Set) writeRing(m mappedRing, what string, r RingRange, table []uint32) (int, error) {
	cur, err := s.ringView(m, "write "+what, r)
	if err != nil {
		return 0, err
	}
	if uint32(len(table)) != r.Size {
		return 0, fmt.Errorf("write %s at %d: table has %d slots, the ring %d", what, r.Off, len(table), r.Size)
	}
	var top uint32
	for _, id := range table {
		top = max(top, id)
	}
	if top > 0xffff {
		return 0, fmt.Errorf("write %s at %d: backend id %d does not fit the 16-bit slots: lower max_backends", what, r.Off, top)
	}
	n := 0
	for i, id := range table {
		if cur[i] != uint16(id) {
			cur[i] = uint16(id) // one aligned 2-byte store: the program reads the old or the new id
			n++
		}
	}
	return n, nil
}

// RotateRingAt makes the ring at a range equal to table and, when that changes it, first makes
// its previous ring the ring as it was (second chance), without copying either out of the memory
// maps. It returns the ring slots and the previous-ring slots written; nothing is written when
// the ring already equals table.
func (s *Set) RotateRingAt(r RingRange, table []uint32) (n, pn int, err error) {
	cur, err := s.ringView(s.rings, "write ring", r)
	if err != nil {
		return 0, 0, err
	}
	if uint32(len(table)) != r.Size {
		return 0, 0, fmt.Errorf("write ring at %d: table has %d slots, the ring %d", r.Off, len(table), r.Size)
	}
	same := true
	for i, id := range table {
		if uint32(cur[i]) != id {
			same = false
			break
		}
	}
	if same {
		return 0, 0, nil
	}
	prev, err := s.ringView(s.prevRings, "write previous ring", r)
	if err != nil {
		return 0, 0, err
	}
	for i, id := range cur {
		if prev[i] != id {
			prev[i] = id
			pn++
		}
	}
	n, err = s.writeRing(s.rings, "ring", r, table)
	return n, pn, err
}

// Config is the forwarder's configuration.
type Config struct {
	// IfMAC is the source MAC of encapsulated frames: the interface's own.
	IfMAC net.HardwareAddr
	// NextHopMAC is the destination MAC of encapsulated frames: the next hop toward backends.
	NextHopMAC net.HardwareAddr
	// MTU is the largest IP packet the egress link carries; larger after encapsulation is dropped.
	MTU uint16
	// Src4 is the outer IPv4 source base; its low Src4HashBits bits come from the flow.
	Src4         netip.Addr
	Src4HashBits int
	// Src6 is the outer IPv6 source base; its last 32 bits come from the flow.
	Src6 netip.Addr
	// UDPTimeout is how long an idle UDP flow keeps its backend.
	UDPTimeout time.Duration
	// ICMPTooBig answers over-MTU frames with ICMP frag-needed / packet-too-big.
	ICMPTooBig bool
	// SecondChance makes non-SYN TCP misses carry the previous table's pick when it differs
	// (docs/xdp.md, "Second chance").
	SecondChance bool
	// SYNInsertLimit, when not 0, is how many new connection-table entries a second each CPU
	// makes for SYNs; past it a SYN is forwarded without one (conntrack_insert_skipped).
	SYNInsertLimit uint32
}

// Config flags: enum cfg_flags of bpf/include/consts.h, generated into loader.
const (
	cfgICMPTooBig   = uint32(bpfobj.LBCfgFlagsCFG_ICMP_TOOBIG)
	cfgSecondChance = uint32(bpfobj.LBCfgFlagsCFG_SECOND_CHANCE)
)

// SetConfig writes the configuration.
func (s *Set) SetConfig(c Config) error {
	if len(c.IfMAC) != 6 || len(c.NextHopMAC) != 6 {
		return errors.New("set config: interface and next-hop MACs must be 6 bytes")
	}
	if c.MTU < 576 {
		return fmt.Errorf("set config: mtu %d below 576", c.MTU)
	}
	if c.Src4HashBits < 0 || c.Src4HashBits > 24 {
		return fmt.Errorf("set config: src4 hash bits %d out of range 0..24", c.Src4HashBits)
	}
	var lc bpfobj.LBLbConfig
	copy(lc.IfMac[:], c.IfMAC)
	copy(lc.NexthopMac[:], c.NextHopMAC)
	lc.Mtu = c.MTU
	lc.RingSize = s.ringSize
	if c.Src4.IsValid() {
		w, _ := addrWords(c.Src4)
		lc.Src4 = w[0]
	}
	lc.Src4Mask = uint32(1)<<c.Src4HashBits - 1
	if c.Src6.IsValid() {
		lc.Src6, _ = addrWords(c.Src6)
	}
	lc.UdpTimeoutNs = uint64(c.UDPTimeout.Nanoseconds())
	if c.ICMPTooBig {
		lc.Flags |= cfgICMPTooBig
	}
	if c.SecondChance {
		lc.Flags |= cfgSecondChance
	}
	lc.SynInsertLimit = c.SYNInsertLimit
	if err := s.m.Config.Put(uint32(0), lc); err != nil {
		return fmt.Errorf("set config: %w", err)
	}
	return nil
}

// Config reads the configuration back.
func (s *Set) Config() (Config, error) {
	var lc bpfobj.LBLbConfig
	if err := s.m.Config.Lookup(uint32(0), &lc); err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	bits := 0
	for m := lc.Src4Mask; m != 0; m >>= 1 {
		bits++
	}
	return Config{
		IfMAC:          append(net.HardwareAddr(nil), lc.IfMac[:]...),
		NextHopMAC:     append(net.HardwareAddr(nil), lc.NexthopMac[:]...),
		MTU:            lc.Mtu,
		Src4:           wordsAddr([4]uint32{lc.Src4}, 4),
		Src4HashBits:   bits,
		Src6:           wordsAddr(lc.Src6, 6),
		UDPTimeout:     time.Duration(lc.UdpTimeoutNs),
		ICMPTooBig:     lc.Flags&cfgICMPTooBig != 0,
		SecondChance:   lc.Flags&cfgSecondChance != 0,
		SYNInsertLimit: lc.SynInsertLimit,
	}, nil
}

// monotonicNow is the clock the forwarder stamps flows with (bpf_ktime_get_coarse_ns).
func monotonicNow() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts)
	return time.Duration(ts.Nano())
}

// UseRingSigs gives the Set the ring-signature map (loader.OpenRingSigs): RingSig and SetRingSig
// then read and write it. Without it they remember nothing.
func (s *Set) UseRingSigs(m *ebpf.Map) error {
	if m != nil && m.MaxEntries() != s.maxVIPs+1 {
		return fmt.Errorf("use ring signatures: map holds %d entries, the VIPs %d: open it with the forwarder's options", m.MaxEntries(), s.maxVIPs)
	}
	s.sigs = m
	return nil
}

// RingSig is the signature recorded for a VIP id's ring, 0 when unknown.
func (s *Set) RingSig(vipID uint32) uint64 {
	var v uint64
	if s.sigs == nil || vipID >= s.maxVIPs || s.sigs.Lookup(vipID, &v) != nil {
		return 0
	}
	return v
}

// SetRingSig records the signature of a VIP id's ring (0: unknown).
func (s *Set) SetRingSig(vipID uint32, sig uint64) error {
	if s.sigs == nil {
		return nil
	}
	if vipID >= s.maxVIPs {
		return fmt.Errorf("set ring signature: vip id %d out of range", vipID)
	}
	if err := s.sigs.Put(vipID, sig); err != nil {
		return fmt.Errorf("set ring signature %d: %w", vipID, err)
	}
	return nil
}
