package dns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	mdns "github.com/miekg/dns"
)

// QueryOptions tune Query.
type QueryOptions struct {
	// TCP sends the query over TCP instead of UDP.
	TCP bool
	// Subnet adds an EDNS Client Subnet option (e.g. "10.1.0.0/24").
	Subnet string
	// Source binds the client to this local address (the "resolver address" the server sees).
	Source netip.Addr
	// BufSize is the EDNS UDP buffer size advertised (default 1232; 0 with NoEDNS sends no OPT).
	BufSize uint16
	// NoEDNS sends a plain RFC 1035 query without OPT.
	NoEDNS bool
	// DNSSEC sets the DO bit, asking a signed zone for its RRSIGs and NSEC records.
	DNSSEC bool
	// Timeout of the exchange (default 2s).
	Timeout time.Duration
}

// ParseType turns "A", "aaaa", "TYPE65" into a query type.
func ParseType(s string) (uint16, error) {
	s = strings.ToUpper(s)
	if t, ok := mdns.StringToType[s]; ok {
		return t, nil
	}
	var n uint16
	if _, err := fmt.Sscanf(s, "TYPE%d", &n); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("parse query type %q: unknown; use A, AAAA, CNAME, MX, TXT, SRV, CAA, NS, SOA, ANY or TYPEn", s)
}

// Query sends one question to server (address:port) and returns the response and round trip.
// It does not follow truncation: callers see TC and decide, as the lab's resolvers do.
func Query(ctx context.Context, server, name string, qtype uint16, o QueryOptions) (*mdns.Msg, time.Duration, error) {
	m := new(mdns.Msg)
	m.SetQuestion(mdns.Fqdn(name), qtype)
	m.RecursionDesired = false
	if !o.NoEDNS {
		size := o.BufSize
		if size == 0 {
			size = 1232
		}
		m.SetEdns0(size, o.DNSSEC)
		if o.Subnet != "" {
			p, err := netip.ParsePrefix(o.Subnet)
			if err != nil {
				return nil, 0, fmt.Errorf("parse subnet %q: write it as 10.1.0.0/24: %w", o.Subnet, err)
			}
			e := &mdns.EDNS0_SUBNET{Code: mdns.EDNS0SUBNET, SourceNetmask: uint8(p.Bits()), Address: p.Addr().AsSlice()}
			e.Family = 1
			if p.Addr().Is6() {
				e.Family = 2
			}
			opt := m.IsEdns0()
			opt.Option = append(opt.Option, e)
		}
	}
	c := &mdns.Client{Net: "udp", Timeout: o.Timeout}
	if o.TCP {
		c.Net = "tcp"
	}
	if c.Timeout == 0 {
		c.Timeout = 2 * time.Second
	}
	if o.Source.IsValid() {
		if o.TCP {
			c.Dialer = &net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(o.Source, 0)), Timeout: c.Timeout}
		} else {
			c.Dialer = &net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(o.Source, 0)), Timeout: c.Timeout}
		}
	}
	resp, rtt, err := c.ExchangeContext(ctx, m, server)
	if err != nil {
		return nil, 0, fmt.Errorf("query %s %s at %s: %w", name, mdns.TypeToString[qtype], server, err)
	}
	return resp, rtt, nil
}
