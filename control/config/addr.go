package config

import "net/netip"

// parsedAddr is an address field's parsed form, kept beside the field's YAML string, which stays
// the source of truth: the parsed form is used only while the string is still the one it was
// parsed from, so a field changed after validation is parsed again rather than read stale.
// Validation fills it (it parses every address anyway); downstream code reads the Addr
// accessors instead of parsing the string again.
type parsedAddr struct {
	src  string
	addr netip.Addr
}

// set records a, the parse of s, unmapped (as the maps and health keys hold addresses).
func (p *parsedAddr) set(s string, a netip.Addr) { p.src, p.addr = s, a.Unmap() }

// of is the parsed, unmapped address of s: the recorded one when s is its source, else a fresh
// parse (the zero Addr when s is not an address, as for an empty optional field).
func (p *parsedAddr) of(s string) netip.Addr {
	if p.addr.IsValid() && p.src == s {
		return p.addr
	}
	a, _ := netip.ParseAddr(s)
	return a.Unmap()
}

// Addr is the VIP's address, parsed and unmapped; the zero Addr when Address is not valid.
func (v *VIP) Addr() netip.Addr { return v.addr.of(v.Address) }

// Addr is the backend's address, parsed and unmapped; the zero Addr when Address is not valid.
func (b *Backend) Addr() netip.Addr { return b.addr.of(b.Address) }

// NextHopAddr is next_hop parsed; the zero Addr when it is left out.
func (c *Config) NextHopAddr() netip.Addr { return c.nextHop.of(c.NextHop) }

// EncapSource4Addr is encap_source4 parsed; the zero Addr when it is left out.
func (c *Config) EncapSource4Addr() netip.Addr { return c.encap4.of(c.EncapSource4) }

// EncapSource6Addr is encap_source6 parsed; the zero Addr when it is left out.
func (c *Config) EncapSource6Addr() netip.Addr { return c.encap6.of(c.EncapSource6) }

// adoptParsed takes the parsed addresses of p, a VIP Equal to v (the same strings), so that a
// VIP a change left alone is not parsed again.
func (v *VIP) adoptParsed(p *VIP) {
	v.addr = p.addr
	for i := range v.Backends {
		v.Backends[i].addr = p.Backends[i].addr
	}
}
