package zone

import (
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// A zone's copies made by Apply (dynamic updates, incremental transfer steps) form a lineage:
// each copy knows its version in it and the changes of the last recentMax versions. A cache of
// answers uses them to keep an answer across an update that changed nothing the answer reads
// (Unchanged), instead of building every answer of the zone again after each update. A copy
// made any other way (a build, a full transfer, new keys) starts a lineage of its own.

// recentMax bounds the changes a copy remembers: an answer cached from a copy more versions
// back is built again.
const recentMax = 256

// change is what one Apply changed: the RRsets it deleted from or added to, and the owners below
// the apex whose NS RRset it touched (a delegation made, changed or removed).
type change struct {
	sets map[setID]struct{}
	cuts []string
}

func newChange(origin string, del, add []dns.RR) *change {
	c := &change{sets: make(map[setID]struct{}, len(del)+len(add))}
	for _, rrs := range [][]dns.RR{del, add} {
		for _, rr := range rrs {
			h := rr.Header()
			k := setID{strings.ToLower(h.Name), h.Rrtype}
			c.sets[k] = struct{}{}
			if k.t == dns.TypeNS && k.name != origin && !slices.Contains(c.cuts, k.name) {
				c.cuts = append(c.cuts, k.name)
			}
		}
	}
	return c
}

// touches reports whether the change may alter an answer that reads the names of a CNAME chain
// (the name asked first, then each CNAME's target) for type qtype and the glue of targets: a
// CNAME or qtype RRset at a name of the chain (any RRset of the name asked for ANY), a
// delegation at or above one, the addresses of a target.
func (c *change) touches(names []string, qtype uint16, targets []string) bool {
	if qtype == dns.TypeANY {
		for k := range c.sets {
			if k.name == names[0] {
				return true
			}
		}
	}
	for _, name := range names {
		if c.has(name, qtype) || c.has(name, dns.TypeCNAME) {
			return true
		}
		for _, cut := range c.cuts {
			if name == cut || strings.HasSuffix(name, "."+cut) {
				return true
			}
		}
	}
	for _, t := range targets {
		if c.has(t, dns.TypeA) || c.has(t, dns.TypeAAAA) {
			return true
		}
	}
	return false
}

func (c *change) has(name string, t uint16) bool {
	_, ok := c.sets[setID{name, t}]
	return ok
}

// descend makes nz the next version of z's lineage, changed by del and add.
func (nz *Zone) descend(z *Zone, del, add []dns.RR) {
	nz.lineage, nz.version = z.lineageID(), z.version+1
	recent := z.recent
	if len(recent) >= recentMax {
		recent = recent[len(recent)-recentMax+1:]
	}
	nz.recent = append(slices.Clip(recent), newChange(z.Origin, del, add))
}

// lineageID names z's lineage: the id of the copy that started it.
func (z *Zone) lineageID() uint64 {
	if z.lineage == 0 {
		return z.id
	}
	return z.lineage
}

// Unchanged reports whether a positive answer for qtype that old built from the names of a
// CNAME chain (names[0] the name asked, then each CNAME's target; no wildcard), with the glue
// of targets, is what z builds: z descends from old by updates alone, few enough that z
// remembers them, and none of them touched what the answer reads (change.touches). Answers
// made of other data (wildcards, denial proofs, referrals) are not judged here: their callers
// build them again.
func (z *Zone) Unchanged(old *Zone, names []string, qtype uint16, targets []string) bool {
	if old == nil || z.lineageID() != old.lineageID() || z.version < old.version {
		return false
	}
	n := z.version - old.version
	if n > uint64(len(z.recent)) {
		return false
	}
	for _, c := range z.recent[len(z.recent)-int(n):] {
		if c.touches(names, qtype, targets) {
			return false
		}
	}
	return true
}
