package store

import (
	"slices"
	"sync"
)

// The tag index maps each purge tag to the keys of the stored entries that carry it, so a tag
// purge touches the entries it removes and not the whole store. It is kept for the union of both
// tiers: a key is added when an entry with the tag is stored, and removed when the key's entry
// is gone from both tiers or no longer carries the tag (untag checks the current entry, so the
// order in which a replacement and the eviction callback of the old version run does not matter).
// Untagged entries cost nothing here.
type tagIndex struct {
	mu   sync.Mutex
	keys map[string]map[string]struct{} // tag -> keys
}

func (t *tagIndex) add(m *Meta) {
	if len(m.Tags) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.keys == nil {
		t.keys = map[string]map[string]struct{}{}
	}
	for _, tag := range m.Tags {
		set := t.keys[tag]
		if set == nil {
			set = map[string]struct{}{}
			t.keys[tag] = set
		}
		set[m.Key] = struct{}{}
	}
}

// remove drops key from the sets of old's tags that cur (the key's current entry, nil when
// there is none) does not carry.
func (t *tagIndex) remove(old, cur *Meta) {
	if old == nil || len(old.Tags) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tag := range old.Tags {
		if cur != nil && slices.Contains(cur.Tags, tag) {
			continue
		}
		if set := t.keys[tag]; set != nil {
			delete(set, old.Key)
			if len(set) == 0 {
				delete(t.keys, tag)
			}
		}
	}
}

// tagged returns the keys indexed under tag.
func (t *tagIndex) tagged(tag string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	set := t.keys[tag]
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	return out
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

// untag updates the tag index after key's entry old was replaced or removed in one tier.
func (s *Store) untag(old *Meta) {
	if old == nil || len(old.Tags) == 0 {
		return
	}
	cur, _ := s.Peek(old.Key)
	s.tags.remove(old, cur)
}

// Tagged calls fn with the metadata of every stored entry that carries tag, until fn returns
// false; it visits those entries only. Stale index keys (an entry replaced without the tag)
// are dropped on the way.
func (s *Store) Tagged(tag string, fn func(*Meta) bool) {
	for _, k := range s.tags.tagged(tag) {
		m, ok := s.Peek(k)
		if !ok || !slices.Contains(m.Tags, tag) {
			s.tags.remove(&Meta{Key: k, Tags: []string{tag}}, nil)
			continue
		}
		if !fn(m) {
			return
		}
	}
}
