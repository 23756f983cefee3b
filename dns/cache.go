package dns

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/dns/policy"
	"github.com/switchyard/switchyard/dns/zone"
)

// answerCache keeps the packed responses of static answers keyed by the query bytes after the
// ID, so a repeated question skips parsing, lookup and packing: only the ID and the question's
// letter case are patched. The query bytes include an EDNS Client Subnet option, so a static
// answer with its ECS echo is cached too. Dynamic names are cached only when their policy
// decides by the query bytes and health alone (failover, and geolocation with a client
// subnet); such an entry carries the health generation it was decided in and is stale once any
// site changes state. A weighted name is decided each time (its rotation must advance), and its
// answer is then cached per decision: the query's entry names the policy, and the answer lives
// under the query key plus the decision. A reload builds a new cache with the new state; a
// change of one zone's data (an update, a transfer, a one-zone reload) keeps the cache, and the
// entries of the zone's old copy are stale from then on (each names the zone that answered), so
// an update of one zone does not empty the cache of the 100,000 others. Within the updated zone,
// a positive answer that names what it read (its CNAME chain and glue, answerDeps) moves to the
// new copy on its next hit when no update since changed any of that (carry).
//
// It is split in shards (a lock each, so the workers of several cores rarely meet) and each
// shard evicts by CLOCK (second chance): a hit sets the entry's reference bit, and a full shard
// sweeps its hand over the ring, clearing bits, until it finds an entry not asked since the last
// sweep. Eviction is O(1) amortised and memory is bounded by entries and by bytes, so a zone
// with more names than the cache holds keeps its popular answers instead of being wiped.
type answerCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
}

type cacheShard struct {
	mu    sync.RWMutex
	index map[string]int32 // key -> slot in ring
	ring  []*cacheEntry
	hand  int
	bytes int
	_     [40]byte // keep shards on separate cache lines
}

type cacheEntry struct {
	key  string
	wire []byte
	// zone is the zone copy that answered; the entry is stale once it is retired, unless deps
	// (nil for answers that read more than their own RRset) lets carry move it to the copy
	// that serves now.
	zone      atomic.Pointer[zone.Zone]
	deps      *answerDeps
	queries   prometheus.Counter
	decisions prometheus.Counter // nil for static answers
	health    bool               // valid only while the server's health generation is gen
	gen       uint64
	// rotate, when set, marks a query for a weighted name: no answer here, the caller decides
	// and looks up the answer under the decision's key (rotateKey).
	rotate *policy.Name
	// expires is the Unix second from which the entry is stale (a signed answer whose RRSIGs'
	// signing window ended); 0 never expires.
	expires int64
	ref     atomic.Bool // asked since the hand last passed
	// xdp marks a static answer the XDP answer path may send (xdp.go); xdpAt is the Unix second
	// it was last put in the program's map.
	xdp    bool
	xdpAt  atomic.Int64
	xdpGen atomic.Uint32 // the generation it was last put in
}

// fresh reports whether the entry's answer still holds: its zone copy serves, the sites' health
// is the one it was decided in (health-decided answers), its signatures are not due for renewal.
func (e *cacheEntry) fresh(healthGen uint64, now int64) bool {
	z := e.zone.Load()
	return (z == nil || !z.Retired()) && (!e.health || e.gen == healthGen) && (e.expires == 0 || now < e.expires)
}

// of sets the zone copy that answered e and returns e.
func (e *cacheEntry) of(z *zone.Zone) *cacheEntry {
	e.zone.Store(z)
	return e
}

// carry moves e, whose zone copy is retired, to the copy of its zone that serves in st when
// the updates between them changed nothing its answer reads (deps), and reports whether it
// did. Without it every cached answer of a zone is built again after each of its updates: a
// burst of updates then turned a zone's hits into misses for as long as it lasted.
func (e *cacheEntry) carry(st *state) bool {
	old := e.zone.Load()
	if e.deps == nil || old == nil {
		return false
	}
	cur := st.store.Find(old.Origin)
	if cur == nil || cur == old || cur.Origin != old.Origin || !cur.Unchanged(old, e.deps.names, e.deps.qtype, e.deps.targets) {
		return false
	}
	e.zone.CompareAndSwap(old, cur)
	return true
}

// cacheKeyMax bounds the query size that is cached; longer queries (large OPT options) take
// the normal path.
const cacheKeyMax = 320

// cacheShards is a power of two; cacheEntries and cacheBytes bound the whole cache. An entry
// costs its key and answer plus about cacheEntryOverhead bytes of map and pointers, so the byte
// bound holds a few hundred thousand typical answers: the popular part of a large zone.
const (
	cacheShards        = 16
	cacheEntries       = 1 << 18
	cacheBytes         = 64 << 20
	cacheEntryOverhead = 96
	cacheWireMax       = 4096 // larger answers (big TCP RRsets) are packed each time
)

func newAnswerCache() *answerCache {
	c := &answerCache{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].index = map[string]int32{}
	}
	return c
}

// cacheKey builds the key into dst: transport, header flags and counts, then the question and
// additional section with the name lowercased. It returns nil for queries that must not be
// cached (too short or long, responses, more than one question, any answer/authority records).
func cacheKey(dst, raw []byte, tcp bool) []byte {
	if len(raw) < 17 || len(raw)+1 > cacheKeyMax || raw[2]&0x80 != 0 {
		return nil
	}
	// QDCOUNT 1, ANCOUNT 0, NSCOUNT 0.
	if raw[4] != 0 || raw[5] != 1 || raw[6]|raw[7]|raw[8]|raw[9] != 0 {
		return nil
	}
	t := byte(0)
	if tcp {
		t = 1
	}
	dst = append(dst, t)
	dst = append(dst, raw[2:]...)
	for i := 11; i < len(dst); i++ { // lowercase the question name (offset 12 in raw)
		if c := dst[i]; c >= 'A' && c <= 'Z' {
			dst[i] = c + 32
		}
		if dst[i] == 0 && i > 11 {
			break
		}
	}
	return dst
}

func (c *answerCache) shard(key []byte) *cacheShard {
	return &c.shards[maphash.Bytes(c.seed, key)&(cacheShards-1)]
}

func (c *answerCache) get(key []byte) *cacheEntry {
	sh := c.shard(key)
	sh.mu.RLock()
	var e *cacheEntry
	if i, ok := sh.index[string(key)]; ok {
		e = sh.ring[i]
	}
	sh.mu.RUnlock()
	if e != nil && !e.ref.Load() {
		e.ref.Store(true) // only written when clear: hot entries stay read-shared across cores
	}
	return e
}

// put stores wire under key with the metadata of e (its counters and health generation).
func (c *answerCache) put(key, wire []byte, e *cacheEntry) {
	if (e.rotate == nil && len(wire) < 12) || len(wire) > cacheWireMax || key == nil {
		return
	}
	e.key, e.wire = string(key), append([]byte(nil), wire...)
	size := entrySize(e)
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i, ok := sh.index[e.key]; ok { // two workers missed at once: keep the newer
		sh.bytes += size - entrySize(sh.ring[i])
		sh.ring[i] = e
		return
	}
	for len(sh.ring) > 0 && (len(sh.ring) >= cacheEntries/cacheShards || sh.bytes+size > cacheBytes/cacheShards) {
		sh.evict()
	}
	sh.index[e.key] = int32(len(sh.ring))
	sh.ring = append(sh.ring, e)
	sh.bytes += size
}

// evict removes one entry by CLOCK: the hand skips (and clears) entries asked since its last
// pass and takes the first one that was not. The last ring slot moves into the hole, so the
// ring stays dense; the hand stays where it is and looks at the moved entry next.
func (sh *cacheShard) evict() {
	for {
		if sh.hand >= len(sh.ring) {
			sh.hand = 0
		}
		e := sh.ring[sh.hand]
		if e.ref.Load() {
			e.ref.Store(false)
			sh.hand++
			continue
		}
		last := len(sh.ring) - 1
		moved := sh.ring[last]
		sh.ring[sh.hand] = moved
		sh.index[moved.key] = int32(sh.hand)
		sh.ring[last] = nil
		sh.ring = sh.ring[:last]
		delete(sh.index, e.key)
		sh.bytes -= entrySize(e)
		return
	}
}

func entrySize(e *cacheEntry) int {
	n := 2*len(e.key) + len(e.wire) + cacheEntryOverhead
	if e.deps != nil {
		n += 64
		for _, name := range append(e.deps.names, e.deps.targets...) {
			n += len(name) + 16
		}
	}
	return n
}

// len reports the number of entries (for tests).
func (c *answerCache) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.RLock()
		n += len(sh.ring)
		sh.mu.RUnlock()
	}
	return n
}

// response copies the cached wire answer into dst[:0] (grown if needed) with the query's ID and
// question bytes (which carry the client's letter case, for resolvers that use 0x20
// randomisation).
func (e *cacheEntry) response(dst, raw []byte) []byte {
	out := append(dst[:0], e.wire...)
	out[0], out[1] = raw[0], raw[1]
	return copyQuestionCase(out, raw)
}

// copyQuestionCase copies the question bytes of the query raw (the client's letter case) over
// those of the answer out, which has the same question.
func copyQuestionCase(out, raw []byte) []byte {
	// The question section has the same length in query and answer; find its end in raw.
	end := 12
	for end < len(raw) && raw[end] != 0 {
		end += int(raw[end]) + 1
	}
	end += 5 // root label + qtype + qclass
	if end <= len(raw) && end <= len(out) {
		copy(out[12:end], raw[12:end])
	}
	return out
}
