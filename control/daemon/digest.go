package daemon

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"sync"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/reconcile"
)

// digestBits keeps the digest exact as a float64 metric value.
const digestBits = 48

// ringDigest hashes a Maglev table slot by slot by backend address (ids are node-local: two
// nodes with different histories give one address different ids, and must still compare
// equal). An empty slot hashes as the zero address. Each distinct backend's address is hashed
// once (FNV-1a of its 16 bytes); the slots fold those hashes in order (an FNV-style multiply
// per slot), so a digest of 65537 slots costs a fraction of a millisecond. It also returns the
// number of distinct backends in the ring.
func ringDigest[T uint16 | uint32](ring []T, addr func(uint32) (netip.Addr, bool)) (uint64, int) {
	sc := scratchPool.Get().(*digestScratch)
	defer scratchPool.Put(sc)
	defer sc.reset()
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	n := 0
	for _, id := range ring {
		v := sc.hashOf(uint32(id))
		if v == 0 {
			var b [16]byte
			if a, found := addr(uint32(id)); found && id != 0 {
				b = a.As16()
			}
			f := fnv.New64a()
			f.Write(b[:])
			v = f.Sum64() | 1 // 0 marks "not hashed yet"
			sc.set(uint32(id), v)
			if id != 0 {
				n++
			}
		}
		h = (h ^ v) * prime
	}
	return h & (1<<digestBits - 1), n
}

// digestScratch holds the per-backend hashes of one digest: a table for 16-bit ids (every id a
// ring holds) and a map for any other, reused from digest to digest.
type digestScratch struct {
	small [1 << 16]uint64
	used  []uint16
	big   map[uint32]uint64
}

var scratchPool = sync.Pool{New: func() any { return &digestScratch{big: map[uint32]uint64{}} }}

func (s *digestScratch) hashOf(id uint32) uint64 {
	if id < 1<<16 {
		return s.small[id]
	}
	return s.big[id]
}

func (s *digestScratch) set(id uint32, v uint64) {
	if id < 1<<16 {
		s.small[id] = v
		s.used = append(s.used, uint16(id))
		return
	}
	s.big[id] = v
}

func (s *digestScratch) reset() {
	for _, id := range s.used {
		s.small[id] = 0
	}
	s.used = s.used[:0]
	clear(s.big)
}

// cachedDigest is a VIP's ring digest at one reconciler version of its rings.
type cachedDigest struct {
	version [2]uint64
	rd      api.RingDigest
}

// ringDigestsLocked is the digest of every VIP's ring as last written, in configuration order.
// A digest is computed again only when the reconciler wrote that VIP's rings (or freed a backend
// id) since: reading and hashing every ring at every scrape would cost seconds at 4,096 VIPs.
func (d *Daemon) ringDigestsLocked() []api.RingDigest {
	out := make([]api.RingDigest, 0, len(d.cfg.VIPs))
	if d.digests == nil {
		d.digests = map[uint32]cachedDigest{}
	}
	for _, v := range d.cfg.VIPs {
		id, ok := d.rec.VIPID(reconcile.KeyOf(&v))
		if !ok {
			continue
		}
		ver := d.rec.Version(id)
		if c, ok := d.digests[id]; ok && c.version == ver {
			rd := c.rd
			rd.VIP = v.Name
			out = append(out, rd)
			continue
		}
		rg, ok := d.rec.RingRange(id)
		if !ok {
			continue
		}
		ring, err := d.set.RingViewAt(rg)
		if err != nil {
			continue
		}
		val, in := ringDigest(ring, d.rec.BackendAddr)
		rd := api.RingDigest{VIP: v.Name, Digest: fmt.Sprintf("%012x", val), Value: val, InRing: in}
		if prev, err := d.set.PrevRingViewAt(rg); err == nil {
			if pv, pin := ringDigest(prev, d.rec.BackendAddr); pin > 0 {
				rd.Previous = fmt.Sprintf("%012x", pv)
			}
		}
		d.digests[id] = cachedDigest{version: ver, rd: rd}
		out = append(out, rd)
	}
	return out
}
