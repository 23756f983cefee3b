package daemon

import (
	"fmt"
	"hash/fnv"
	"net/netip"

	"github.com/switchyard/switchyard/control/api"
)

// digestBits keeps the digest exact as a float64 metric value.
const digestBits = 48

// ringDigest hashes a Maglev table slot by slot by backend address (ids are node-local: two
// nodes with different histories give one address different ids, and must still compare
// equal). An empty slot hashes as the zero address. Each distinct backend's address is hashed
// once (FNV-1a of its 16 bytes); the slots fold those hashes in order (an FNV-style multiply
// per slot), so a digest of 65537 slots costs well under a millisecond.
func ringDigest[T uint16 | uint32](ring []T, addr func(uint32) (netip.Addr, bool)) uint64 {
	var top T
	for _, id := range ring {
		top = max(top, id)
	}
	byID := make([]uint64, int(top)+1)
	known := make([]bool, int(top)+1)
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for _, id := range ring {
		if !known[id] {
			var b [16]byte
			if a, found := addr(uint32(id)); found && id != 0 {
				b = a.As16()
			}
			f := fnv.New64a()
			f.Write(b[:])
			byID[id], known[id] = f.Sum64(), true
		}
		h = (h ^ byID[id]) * prime
	}
	return h & (1<<digestBits - 1)
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
		id, ok := d.rec.VIPID(v.Key())
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
		ring, err := d.set.RingView(id)
		if err != nil {
			continue
		}
		val := ringDigest(ring, d.rec.BackendAddr)
		rd := api.RingDigest{VIP: v.Name, Digest: fmt.Sprintf("%012x", val), Value: val, InRing: distinct(ring)}
		if prev, err := d.set.PrevRingView(id); err == nil && !allZero(prev) {
			rd.Previous = fmt.Sprintf("%012x", ringDigest(prev, d.rec.BackendAddr))
		}
		d.digests[id] = cachedDigest{version: ver, rd: rd}
		out = append(out, rd)
	}
	return out
}

// distinct counts the backends a ring holds.
func distinct(ring []uint16) int {
	var seen [1 << 16 / 64]uint64
	n := 0
	for _, id := range ring {
		if w, bit := id/64, uint64(1)<<(id%64); id != 0 && seen[w]&bit == 0 {
			seen[w] |= bit
			n++
		}
	}
	return n
}

func allZero[T uint16 | uint32](ring []T) bool {
	for _, id := range ring {
		if id != 0 {
			return false
		}
	}
	return true
}
