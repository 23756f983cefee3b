package zone

import (
	"slices"
	"sync"

	"github.com/miekg/dns"
)

// setCache holds RRsets unpacked for answers, by their offset in the zone's data, so the sets
// queries keep asking for are unpacked once and shared read-only, as the parsed records of the
// zone form before the packed one were; the rest of the zone stays packed. Bounded: a full
// shard drops an arbitrary entry (Go's map order), as the signature cache does.
type setCache struct {
	shards [8]setShard
}

type setShard struct {
	mu sync.RWMutex
	m  map[uint32][]dns.RR
}

// setCacheEntries bounds the unpacked sets a zone keeps (a few MiB at most).
const setCacheEntries = 1 << 14

func (c *setCache) shard(off uint32) *setShard { return &c.shards[off%uint32(len(c.shards))] }

func (c *setCache) get(off uint32) []dns.RR {
	sh := c.shard(off)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.m[off]
}

func (c *setCache) put(off uint32, rrs []dns.RR) {
	sh := c.shard(off)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		sh.m = map[uint32][]dns.RR{}
	}
	if len(sh.m) >= setCacheEntries/len(c.shards) {
		for k := range sh.m {
			delete(sh.m, k)
			break
		}
	}
	sh.m[off] = rrs
}

// shared returns the RRset s of the node owned by owner, unpacked once and shared: callers
// must not modify the records (they copy what they change, as they did with parsed records).
func (z *Zone) shared(s rrset, owner string) []dns.RR {
	if s.count == 0 {
		return nil
	}
	if rrs := z.sets.get(s.off); rrs != nil {
		return rrs
	}
	// Clipped: a caller's append copies instead of writing into the shared array.
	rrs := slices.Clip(s.rrs(owner))
	z.sets.put(s.off, rrs)
	return rrs
}
