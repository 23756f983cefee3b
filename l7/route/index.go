package route

import (
	"net/http"
	"strings"
)

// index finds a table's first matching route without trying every route. It keeps the table's
// first-match precedence exactly: a lookup yields only candidate lists (each in table order)
// that together hold every route whose host and path could hold for the request, and the
// candidates are then tried in table order with every condition, so the first to pass is the
// route a scan of the whole table would return.
//
// Routes are grouped by host: an exact host (a map lookup of the lower-cased request host), a
// "*.suffix" wildcard (a lookup of each ".suffix" of the request host) and routes without a
// host. Inside a group, exact paths are one map lookup, prefixes one lookup per segment
// boundary of the path (the prefix tree over path segments, flattened into a map: "/a/b/c" can
// only match the prefixes "/", "/a", "/a/b" and "/a/b/c"), and regex or path-less routes are a
// list tried in order. The cost of a match is therefore set by the host's labels, the path's
// segments and the routes that share them, not by the size of the table.
type index struct {
	n     int // len(Routes) the index was built for
	exact map[string]*group
	wild  map[string]*group // by ".suffix"
	// wildLens holds the lengths of the wild keys, so most suffixes of a host need no lookup.
	wildLens lengths
	any      *group // routes without a host
	// odd holds routes whose host the maps cannot key exactly (a non-ASCII exact host, which
	// strings.EqualFold may fold to an ASCII one); they are tried like the rest of a group.
	odd []*Route
}

// group is the routes of one host key, indexed by path.
type group struct {
	exact  map[string][]*Route
	prefix map[string][]*Route // by the prefix without its trailing slash
	rest   []*Route            // regex and path-less routes
	// the lengths of the exact and prefix keys: a path is looked up only at lengths some key has
	exactLens, prefixLens lengths
	maxPrefix             int
	// keys is a 256-bit filter over the path keys' length, second and last byte: most paths a
	// group cannot hold are ruled out without hashing the string for a map lookup.
	keys [4]uint64
}

func keyBit(k string) uint8 {
	if len(k) < 2 {
		return uint8(len(k))
	}
	return uint8(len(k)*31 + int(k[1])*7 + int(k[len(k)-1]))
}

func (g *group) addKey(k string) { b := keyBit(k); g.keys[b>>6] |= 1 << (b & 63) }

func (g *group) mayHave(k string) bool { b := keyBit(k); return g.keys[b>>6]&(1<<(b&63)) != 0 }

// lengths is a set of string lengths: bit n for length n < 63, bit 63 for any longer one.
type lengths uint64

func (l *lengths) add(n int) { *l |= 1 << min(n, 63) }

func (l lengths) has(n int) bool { return l&(1<<min(n, 63)) != 0 }

func buildIndex(routes []*Route) *index {
	x := &index{n: len(routes), exact: map[string]*group{}, wild: map[string]*group{}}
	for _, rt := range routes {
		var g *group
		switch h := rt.Host; {
		case h == "":
			if x.any == nil {
				x.any = &group{}
			}
			g = x.any
		case strings.HasPrefix(h, "*."):
			g = groupOf(x.wild, h[1:])
			x.wildLens.add(len(h) - 1)
		case isASCII(h):
			g = groupOf(x.exact, strings.ToLower(h))
		default:
			x.odd = append(x.odd, rt)
			continue
		}
		g.add(rt)
	}
	return x
}

func groupOf(m map[string]*group, key string) *group {
	g := m[key]
	if g == nil {
		g = &group{}
		m[key] = g
	}
	return g
}

func (g *group) add(rt *Route) {
	switch {
	case rt.PathExact != "":
		if g.exact == nil {
			g.exact = map[string][]*Route{}
		}
		g.exact[rt.PathExact] = append(g.exact[rt.PathExact], rt)
		g.exactLens.add(len(rt.PathExact))
		g.addKey(rt.PathExact)
	case rt.PathPrefix != "":
		if g.prefix == nil {
			g.prefix = map[string][]*Route{}
		}
		g.prefix[rt.prefix] = append(g.prefix[rt.prefix], rt)
		g.prefixLens.add(len(rt.prefix))
		g.addKey(rt.prefix)
		g.maxPrefix = max(g.maxPrefix, len(rt.prefix))
	default:
		g.rest = append(g.rest, rt)
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// addList appends l to the candidate lists when it is not empty.
func addList(lists [][]*Route, l []*Route) [][]*Route {
	if len(l) > 0 {
		lists = append(lists, l)
	}
	return lists
}

// addGroup appends the lists of g that can hold routes matching path p.
func addGroup(lists [][]*Route, g *group, p string) [][]*Route {
	if g == nil {
		return lists
	}
	if g.exactLens.has(len(p)) && g.mayHave(p) {
		lists = addList(lists, g.exact[p])
	}
	if g.prefix != nil {
		// A prefix pre matches p when pre is "", p itself, or p up to a "/" (see matchPath).
		if g.prefixLens.has(0) {
			lists = addList(lists, g.prefix[""])
		}
		if p != "" && g.prefixLens.has(len(p)) && g.mayHave(p) {
			lists = addList(lists, g.prefix[p])
		}
		for i := 1; i < len(p) && i <= g.maxPrefix; i++ {
			if p[i] == '/' && g.prefixLens.has(i) && g.mayHave(p[:i]) {
				lists = addList(lists, g.prefix[p[:i]])
			}
		}
	}
	return addList(lists, g.rest)
}

// match returns the first route of the table, in table order, that matches; host is the
// request's host as hostOnly returns it.
func (x *index) match(r *http.Request, host, p string) *Route {
	// Most requests have a handful of candidate lists: they live on the stack.
	var buf [16][]*Route
	lists := addGroup(buf[:0], x.exact[host], p)
	for i := 0; i < len(host) && x.wildLens != 0; i++ {
		if host[i] == '.' && x.wildLens.has(len(host)-i) {
			lists = addGroup(lists, x.wild[host[i:]], p)
		}
	}
	lists = addGroup(lists, x.any, p)
	lists = addList(lists, x.odd)
	var query map[string][]string
	for {
		best := -1
		for i, l := range lists {
			if len(l) > 0 && (best < 0 || l[0].Index < lists[best][0].Index) {
				best = i
			}
		}
		if best < 0 {
			return nil
		}
		rt := lists[best][0]
		lists[best] = lists[best][1:]
		if rt.matches(r, host, p, &query) {
			return rt
		}
	}
}
