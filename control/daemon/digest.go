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

// ringDigestsLocked is the digest of every VIP's ring as last written, in configuration order.
func (d *Daemon) ringDigestsLocked() []api.RingDigest {
	out := make([]api.RingDigest, 0, len(d.cfg.VIPs))
	for _, v := range d.cfg.VIPs {
		id, ok := d.rec.VIPID(v.Key())
		if !ok {
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
