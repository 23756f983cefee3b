package store

import (
	"slices"
	"sync"
)

// The tag index maps each purge tag to the key hashes of the stored entries that carry it, so a
// tag purge touches the entries it removes and not the whole store. It holds hashes, not key
// strings, so a million tagged entries are pointer-free map buckets the collector does not scan.
// A hash is resolved to its keys through the memory tier's index and, for entries on disk, the
// disk names (hashNames); a collision is harmless: every key found is checked for the tag, and
// a hash leaves a tag's set only when no stored key with that hash carries the tag.
//
// It is kept for the union of both tiers: a hash is added when an entry with the tag is stored,
// and removed when the key's entry is gone from both tiers or no longer carries the tag (untag
// checks the current entry, so the order in which a replacement and the eviction callback of the
// old version run does not matter). Untagged entries cost nothing here.
type tagIndex struct {
	mu     sync.Mutex
	hashes map[string]map[uint64]struct{} // tag -> key hashes
}

func (t *tagIndex) add(s *Store, m *Meta) {
	if len(m.Tags) == 0 {
		return
	}
	h := s.hash(m.Key)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.hashes == nil {
		t.hashes = map[string]map[uint64]struct{}{}
	}
	for _, tag := range m.Tags {
		set := t.hashes[tag]
		if set == nil {
			set = map[uint64]struct{}{}
			t.hashes[tag] = set
		}
		set[h] = struct{}{}
	}
}

// drop removes hash h from tag's set.
func (t *tagIndex) drop(tag string, h uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if set := t.hashes[tag]; set != nil {
		delete(set, h)
		if len(set) == 0 {
			delete(t.hashes, tag)
		}
	}
}

// tagged returns the key hashes indexed under tag.
func (t *tagIndex) tagged(tag string) []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	set := t.hashes[tag]
	out := make([]uint64, 0, len(set))
	for h := range set {
		out = append(out, h)
	}
	return out
}

// hashNames maps the key hashes of tagged disk entries to their keys (the disk index is keyed
// by string; the memory tier resolves its own). A second key with the same hash goes to more.
type hashNames struct {
	mu    sync.Mutex
	names map[uint64]string
	more  map[uint64][]string
}

func (n *hashNames) add(s *Store, m *Meta) {
	if len(m.Tags) == 0 {
		return
	}
	h := s.hash(m.Key)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.names == nil {
		n.names, n.more = map[uint64]string{}, map[uint64][]string{}
	}
	switch cur, ok := n.names[h]; {
	case !ok:
		n.names[h] = m.Key
	case cur != m.Key && !slices.Contains(n.more[h], m.Key):
		n.more[h] = append(n.more[h], m.Key)
	}
}

func (n *hashNames) remove(s *Store, m *Meta) {
	if len(m.Tags) == 0 {
		return
	}
	h := s.hash(m.Key)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.names[h] != m.Key {
		if i := slices.Index(n.more[h], m.Key); i >= 0 {
			n.more[h] = slices.Delete(n.more[h], i, i+1)
		}
	} else if more := n.more[h]; len(more) > 0 {
		n.names[h], n.more[h] = more[0], more[1:]
	} else {
		delete(n.names, h)
	}
	if len(n.more[h]) == 0 {
		delete(n.more, h)
	}
}

func (n *hashNames) get(h uint64) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	k, ok := n.names[h]
	if !ok {
		return nil
	}
	return append([]string{k}, n.more[h]...)
}

// keysWithHash returns the stored keys whose hash is h, from either tier.
func (s *Store) keysWithHash(h uint64) []string {
	keys := s.mem.keysWithHash(h)
	if s.disk != nil {
		for _, k := range s.names.get(h) {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// Peek returns the metadata stored under key, from the memory tier or the disk index, without
// reading a body or counting an access for eviction.
func (s *Store) Peek(key string) (*Meta, bool) {
	if e, ok := s.mem.Peek(key); ok {
		return e.Meta, true
	}
	if s.disk != nil {
		if ent, ok := s.disk.GetEntryQuietly(key); ok {
			return ent.Value, true
		}
	}
	return nil, false
}

// tagStored indexes the tags of m, just stored. The disk index may have evicted m (even turned
// it away at admission) before its tags were added, its deletion callback then finding nothing
// to drop: so once they are added, an entry no longer stored loses them again (a deletion after
// this point drops them itself).
func (s *Store) tagStored(m *Meta) {
	if len(m.Tags) == 0 {
		return
	}
	s.tags.add(s, m)
	onDisk := false
	if s.disk != nil {
		if _, onDisk = s.disk.GetIfPresent(m.Key); !onDisk {
			s.names.remove(s, m)
		}
	}
	if !onDisk && !s.mem.Contains(m.Key) {
		s.untagAs(m, nil)
	}
}

// untag updates the tag index after key's entry old was replaced or removed in one tier: each
// of old's tags that the key's current entry does not carry loses the key's hash, unless another
// stored key with the same hash carries it.
func (s *Store) untag(old *Meta) {
	if old == nil || len(old.Tags) == 0 {
		return
	}
	cur, _ := s.Peek(old.Key)
	s.untagAs(old, cur)
}

// untagAs is untag with the key's current entry cur (nil when it is gone) given.
func (s *Store) untagAs(old, cur *Meta) {
	if old == nil || len(old.Tags) == 0 {
		return
	}
	h := s.hash(old.Key)
	for _, tag := range old.Tags {
		if cur != nil && slices.Contains(cur.Tags, tag) {
			continue
		}
		if !s.carried(h, old.Key, tag) {
			s.tags.drop(tag, h)
		}
	}
}

// carried reports whether a stored key other than except, with hash h, carries tag.
func (s *Store) carried(h uint64, except, tag string) bool {
	for _, k := range s.keysWithHash(h) {
		if k == except {
			continue
		}
		if m, ok := s.Peek(k); ok && slices.Contains(m.Tags, tag) {
			return true
		}
	}
	return false
}

// Tagged calls fn with the metadata of every stored entry that carries tag, until fn returns
// false; it visits those entries only. Stale index hashes (an entry replaced without the tag, or
// gone) are dropped on the way.
func (s *Store) Tagged(tag string, fn func(*Meta) bool) {
	for _, h := range s.tags.tagged(tag) {
		found := false
		for _, k := range s.keysWithHash(h) {
			m, ok := s.Peek(k)
			if !ok || !slices.Contains(m.Tags, tag) {
				continue
			}
			found = true
			if !fn(m) {
				return
			}
		}
		if !found {
			s.tags.drop(tag, h)
		}
	}
}
