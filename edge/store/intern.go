package store

import (
	"net/http"
	"strings"
	"sync"

	"github.com/switchyard/switchyard/edge/cachecontrol"
)

// Interning the parts of stored responses that repeat. A million entries with the same
// Cache-Control, Content-Type and Via held a million copies of each value, its []string and its
// parsed directives map: allocations the collector must visit on every cycle (marking 1M entries
// took seconds) and bytes the budget paid for. Committed metadata is immutable, so entries can
// share them: single-valued header fields and parsed directives are looked up in a bounded table
// and replaced by the shared copy. Fields that are nearly always unique are left alone, and the
// table stops growing at internMax values (it is never a way to pin memory).

const internMax = 8192

// unique are header fields whose values rarely repeat across entries.
var unique = map[string]bool{"Etag": true, "Last-Modified": true, "Date": true, "Expires": true,
	"Content-Length": true, "Surrogate-Key": true, "Cache-Tag": true, "Content-Disposition": true,
	"Set-Cookie": true, "Content-Md5": true, "Digest": true, "X-Request-Id": true}

type interner struct {
	mu     sync.Mutex
	values map[string][]string                // "Name\x00value" -> shared []string{value}
	dirs   map[string]cachecontrol.Directives // canonical form -> shared map
}

// header replaces h's repeating single-valued fields by shared slices.
func (in *interner) header(h http.Header) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.values == nil {
		in.values = map[string][]string{}
	}
	for k, vv := range h {
		if len(vv) != 1 || unique[k] {
			continue
		}
		key := k + "\x00" + vv[0]
		if s, ok := in.values[key]; ok {
			h[k] = s
		} else if len(in.values) < internMax {
			in.values[key] = vv[:1:1] // capped: an append never writes into a shared array
		}
	}
}

// directives returns the shared copy of d.
func (in *interner) directives(d cachecontrol.Directives) cachecontrol.Directives {
	if len(d) == 0 {
		return d
	}
	b, ok := canonDirectives(nil, d)
	if !ok {
		return d
	}
	key := string(b)
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.dirs == nil {
		in.dirs = map[string]cachecontrol.Directives{}
	}
	if s, ok := in.dirs[key]; ok {
		return s
	}
	if len(in.dirs) < internMax {
		in.dirs[key] = d
	}
	return d
}

// canonical returns the shared directives of a canonical form c (codec.go), parsing and
// remembering them on first sight. c may alias the memory tier's arena: the table keeps a copy.
func (in *interner) canonical(c string) cachecontrol.Directives {
	if c == "" {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if s, ok := in.dirs[c]; ok {
		return s
	}
	c = strings.Clone(c)
	d := parseCanon(c)
	if in.dirs == nil {
		in.dirs = map[string]cachecontrol.Directives{}
	}
	if len(in.dirs) < internMax {
		in.dirs[c] = d
	}
	return d
}

// intern shares m's repeating parts; m must not be modified afterwards (Meta.Clone copies the
// header before a change).
func (s *Store) intern(m *Meta) {
	s.interned.header(m.Header)
	m.Directives = s.interned.directives(m.Directives)
}
