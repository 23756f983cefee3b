package l7

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/switchyard/switchyard/internal/proxyproto"
)

// ProxyProtocol is a listener's `proxy_protocol:` block: connections from the trusted sources
// (the balancers in front) start with a PROXY protocol header (HAProxy's v1 or v2), and the
// proxy takes the client's address from it; other sources are served as they are, so a client
// cannot forge its address.
type ProxyProtocol struct {
	// Trusted are the balancers' addresses or prefixes (e.g. 10.0.0.0/8, 192.0.2.7).
	Trusted []string `yaml:"trusted"`
}

// prefixes parses Trusted, naming the entry that does not parse.
func (p *ProxyProtocol) prefixes() ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(p.Trusted))
	for i, s := range p.Trusted {
		pf, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("trusted[%d]: %q is neither an address nor a prefix (write 10.0.0.0/8 or 192.0.2.7)", i, s)
			}
			pf = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, pf.Masked())
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("trusted: empty; list the balancers that send the header")
	}
	return out, nil
}

// proxyListener is a listener whose trusted peers send a PROXY protocol header first. It is
// served on the goroutine engine (acceptLoop reads the header on the connection's goroutine),
// never the event loops, which accept for themselves.
type proxyListener struct {
	net.Listener
	trusted []netip.Prefix
	timeout time.Duration // for the header, the read-header timeout
}

// header reads c's PROXY header when c comes from a trusted source; other connections are
// returned as they are.
func (pl *proxyListener) header(c net.Conn) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return c, nil
	}
	for _, pf := range pl.trusted {
		if pf.Contains(ap.Addr().Unmap()) {
			return proxyproto.Accept(c, pl.timeout)
		}
	}
	return c, nil
}
