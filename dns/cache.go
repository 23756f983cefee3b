package dns

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// answerCache keeps the packed responses of static answers keyed by the query bytes after the
// ID, so a repeated question skips parsing, lookup and packing: only the ID and the question's
// letter case are patched. Dynamic names and ECS queries are never cached, because their answer
// depends on the client and on health. A reload builds a new cache with the new state.
type answerCache struct {
	mu      sync.RWMutex
	entries map[string]*cacheEntry
}

type cacheEntry struct {
	wire    []byte
	queries prometheus.Counter
}

// cacheKeyMax bounds the query size that is cached; longer queries (large OPT options) take
// the normal path.
const cacheKeyMax = 320

// cacheEntries bounds memory: a flood of distinct names cannot grow the cache beyond it; when
// full it is emptied and refills with what is asked now.
const cacheEntries = 16384

func newAnswerCache() *answerCache { return &answerCache{entries: map[string]*cacheEntry{}} }

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

func (c *answerCache) get(key []byte) *cacheEntry {
	c.mu.RLock()
	e := c.entries[string(key)]
	c.mu.RUnlock()
	return e
}

func (c *answerCache) put(key, wire []byte, queries prometheus.Counter) {
	if len(wire) < 12 {
		return
	}
	e := &cacheEntry{wire: append([]byte(nil), wire...), queries: queries}
	c.mu.Lock()
	if len(c.entries) >= cacheEntries {
		c.entries = map[string]*cacheEntry{}
	}
	c.entries[string(key)] = e
	c.mu.Unlock()
}

// response copies the cached wire answer with the query's ID and question bytes (which carry
// the client's letter case, for resolvers that use 0x20 randomisation).
func (e *cacheEntry) response(raw []byte) []byte {
	out := make([]byte, len(e.wire))
	copy(out, e.wire)
	out[0], out[1] = raw[0], raw[1]
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
