package zone

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/miekg/dns"
)

// setCache holds RRsets unpacked for answers, by their zone and offset in the zone's data, so
// the sets queries keep asking for are unpacked once and shared read-only, as the parsed records
// of the zone form before the packed one were; the rest of the zone stays packed. One cache
// serves every zone of the process: its bound is the process's, so a server of 100,000 small
// zones keeps no more unpacked sets than one of a single large zone (a cache per zone grew with
// the number of zones). Bounded: a full shard drops an arbitrary entry (Go's map order), as the
// signature cache does. Sets of a zone that a reload replaced are never asked for again (a new
// zone has a new id) and leave as other entries arrive.
type setCache struct {
	shards [16]setShard
}

type setShard struct {
	mu sync.RWMutex
	m  map[cacheKey][]dns.RR
}

// cacheKey names a set: the zone's build id (zoneIDs) and the set's offset in its data.
type cacheKey struct {
	zone uint64
	off  uint32
}

// setCacheEntries bounds the unpacked sets the process keeps (a few MiB at most).
const setCacheEntries = 1 << 15

// sets is the process's set cache; zoneIDs numbers the zones built, its keys' first half.
var (
	sets    setCache
	zoneIDs atomic.Uint64
)

func (c *setCache) shard(k cacheKey) *setShard {
	return &c.shards[(k.off^uint32(k.zone))%uint32(len(c.shards))]
}

func (c *setCache) get(k cacheKey) []dns.RR {
	sh := c.shard(k)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.m[k]
}

func (c *setCache) put(k cacheKey, rrs []dns.RR) {
	sh := c.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		sh.m = map[cacheKey][]dns.RR{}
	}
	if len(sh.m) >= setCacheEntries/len(c.shards) {
		for k := range sh.m {
			delete(sh.m, k)
			break
		}
	}
	sh.m[k] = rrs
}

// shared returns the RRset s of the node owned by owner, unpacked once and shared: callers
// must not modify the records (they copy what they change, as they did with parsed records).
func (z *Zone) shared(s rrset, owner string) []dns.RR {
	if s.count == 0 {
		return nil
	}
	k := cacheKey{zone: z.id, off: s.off}
	if rrs := sets.get(k); rrs != nil {
		return rrs
	}
	// Clipped: a caller's append copies instead of writing into the shared array.
	rrs := slices.Clip(s.rrs(owner))
	sets.put(k, rrs)
	return rrs
}
