package policy

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/switchyard/switchyard/dns/geoip"
)

// Locator finds what a geolocation database knows of an address (*geoip.DB).
type Locator interface {
	Lookup(addr netip.Addr) (geoip.Location, bool)
}

// Groups places client addresses in the configured client groups. An entry of a group is a
// subnet ("10.1.0.0/16") or a database selector ("country:DE", "continent:EU", "asn:64500"):
// the subnets are one source, matched first by longest prefix (an operator's explicit table
// wins), the databases the other, matched by ASN, then country, then continent.
type Groups struct {
	entries   []groupEntry // sorted by prefix length, longest first
	asn       map[uint32]string
	country   map[string]string
	continent map[string]string
	// db is the City or Country database, asnDB the ASN one; nil when not configured.
	db, asnDB Locator
}

type groupEntry struct {
	prefix netip.Prefix
	group  string
}

// Client is what the groups know of a client address.
type Client struct {
	// Group is the client's group, "" when none matched.
	Group string
	// Bits is the prefix length every address sharing this answer shares: the matching subnet's,
	// or the database networks' (the longest of those consulted); -1 when nothing is known.
	Bits int
	// Loc is the database's record of the address when Located (the nearest-site policy reads
	// its coordinates).
	Loc     geoip.Location
	Located bool
}

// Selector kinds of a group entry.
const (
	SelectCountry   = "country"
	SelectContinent = "continent"
	SelectASN       = "asn"
)

// ParseEntry splits a group entry into a subnet or a selector kind and value; the error names
// the forms accepted.
func ParseEntry(s string) (prefix netip.Prefix, kind, value string, err error) {
	if k, v, ok := strings.Cut(s, ":"); ok { // an IPv6 subnet has colons too, but no such kind
		switch k = strings.ToLower(k); k {
		case SelectCountry, SelectContinent:
			if len(v) != 2 {
				return netip.Prefix{}, "", "", fmt.Errorf("%q: a %s is a two-letter code, e.g. %s:DE or %s:EU", s, k, SelectCountry, SelectContinent)
			}
			return netip.Prefix{}, k, strings.ToUpper(v), nil
		case SelectASN:
			if _, err := strconv.ParseUint(strings.TrimPrefix(strings.ToUpper(v), "AS"), 10, 32); err != nil {
				return netip.Prefix{}, "", "", fmt.Errorf("%q: an ASN is a number, e.g. asn:64500", s)
			}
			return netip.Prefix{}, k, strings.TrimPrefix(strings.ToUpper(v), "AS"), nil
		}
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, "", "", fmt.Errorf("%q: write a subnet (10.1.0.0/16, 2001:db8::/32) or country:DE, continent:EU, asn:64500", s)
	}
	return p.Masked(), "", "", nil
}

// NewGroups compiles the group table (entries validated by package config) over the databases
// (nil when absent).
func NewGroups(groups map[string][]string, db, asnDB Locator) (*Groups, error) {
	g := &Groups{asn: map[uint32]string{}, country: map[string]string{}, continent: map[string]string{}, db: db, asnDB: asnDB}
	names := make([]string, 0, len(groups))
	for name := range groups {
		names = append(names, name)
	}
	sort.Strings(names) // a selector in two groups goes to the first by name, the same every time
	for _, name := range names {
		for _, s := range groups[name] {
			p, kind, v, err := ParseEntry(s)
			if err != nil {
				return nil, fmt.Errorf("parse group %s: %w", name, err)
			}
			switch kind {
			case "":
				g.entries = append(g.entries, groupEntry{prefix: p, group: name})
			case SelectASN:
				n, _ := strconv.ParseUint(v, 10, 32)
				setOnce(g.asn, uint32(n), name)
			case SelectCountry:
				setOnce(g.country, v, name)
			case SelectContinent:
				setOnce(g.continent, v, name)
			}
		}
	}
	sort.SliceStable(g.entries, func(i, j int) bool {
		if g.entries[i].prefix.Bits() != g.entries[j].prefix.Bits() {
			return g.entries[i].prefix.Bits() > g.entries[j].prefix.Bits()
		}
		return g.entries[i].group < g.entries[j].group
	})
	return g, nil
}

func setOnce[K comparable](m map[K]string, k K, v string) {
	if _, ok := m[k]; !ok {
		m[k] = v
	}
}

// Match returns the group of addr and the length of the matching prefix, which is the scope an
// EDNS Client Subnet answer may be cached for. ok is false when no group covers addr.
func (g *Groups) Match(addr netip.Addr) (group string, bits int, ok bool) {
	c := g.Classify(addr)
	return c.Group, c.Bits, c.Group != ""
}

// Classify places addr: the subnets first, then the databases.
func (g *Groups) Classify(addr netip.Addr) Client {
	addr = addr.Unmap()
	for _, e := range g.entries {
		if e.prefix.Contains(addr) {
			return Client{Group: e.group, Bits: e.prefix.Bits()}
		}
	}
	c := Client{Bits: -1}
	if g.db == nil && g.asnDB == nil {
		return c
	}
	var asLoc geoip.Location
	var asOK bool
	if g.asnDB != nil {
		if asLoc, asOK = g.asnDB.Lookup(addr); asOK {
			c.Bits = asLoc.Bits
		}
	}
	if g.db != nil {
		if c.Loc, c.Located = g.db.Lookup(addr); c.Located {
			c.Bits = max(c.Bits, c.Loc.Bits)
		}
	}
	if asOK && c.Loc.ASN == 0 {
		c.Loc.ASN = asLoc.ASN
	}
	switch {
	case c.Loc.ASN != 0 && g.asn[c.Loc.ASN] != "":
		c.Group = g.asn[c.Loc.ASN]
	case c.Loc.Country != "" && g.country[c.Loc.Country] != "":
		c.Group = g.country[c.Loc.Country]
	case c.Loc.Continent != "" && g.continent[c.Loc.Continent] != "":
		c.Group = g.continent[c.Loc.Continent]
	}
	if c.Bits >= 0 && g.splits(addr, c.Bits) {
		// A subnet entry inside the database network answers differently: do not widen past it.
		c.Bits = -1
	}
	return c
}

// splits reports whether a subnet entry longer than bits lies inside addr's /bits network.
func (g *Groups) splits(addr netip.Addr, bits int) bool {
	if len(g.entries) == 0 {
		return false
	}
	net, err := addr.Prefix(bits)
	if err != nil {
		return true
	}
	for _, e := range g.entries {
		if e.prefix.Bits() > bits && net.Contains(e.prefix.Addr()) {
			return true
		}
	}
	return false
}
