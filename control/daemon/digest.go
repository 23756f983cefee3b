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
// equal). An empty slot hashes as the zero address.
func ringDigest(ring []uint32, addr func(uint32) (netip.Addr, bool)) uint64 {
	cache := map[uint32][16]byte{}
	h := fnv.New64a()
	for _, id := range ring {
		b, ok := cache[id]
		if !ok {
			if a, found := addr(id); found && id != 0 {
				b = a.As16()
			}
			cache[id] = b
		}
		h.Write(b[:])
	}
	return h.Sum64() & (1<<digestBits - 1)
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
		ring, err := d.rec.Ring(id)
		if err != nil {
			continue
		}
		in := map[uint32]bool{}
		for _, b := range ring {
			if b != 0 {
				in[b] = true
			}
		}
		val := ringDigest(ring, d.rec.BackendAddr)
		rd := api.RingDigest{VIP: v.Name, Digest: fmt.Sprintf("%012x", val), Value: val, InRing: len(in)}
		if prev, err := d.rec.PrevRing(id); err == nil && !allZero(prev) {
			rd.Previous = fmt.Sprintf("%012x", ringDigest(prev, d.rec.BackendAddr))
		}
		d.digests[id] = cachedDigest{version: ver, rd: rd}
		out = append(out, rd)
	}
	return out
}

func allZero(ring []uint32) bool {
	for _, id := range ring {
		if id != 0 {
			return false
		}
	}
	return true
}
