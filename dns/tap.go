package dns

import (
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/dnstap"
)

// newTap builds the dnstap output of cfg (nil without a dnstap block); Start runs it. Its
// metrics are registered once per server, so the block is read at start only.
func (s *Server) newTap(cfg *config.Config) (*dnstap.Tap, error) {
	d := cfg.Dnstap
	if d == nil {
		return nil, nil
	}
	network, addr := d.Target(cfg.Dir)
	id := d.Identity
	if id == "" {
		id, _ = os.Hostname()
	}
	ver := d.Version
	if ver == "" {
		ver = "switchyard"
	}
	return dnstap.New(dnstap.Options{Network: network, Address: addr, Identity: id, Version: ver,
		Queries: d.LogQueries(), Responses: d.LogResponses(), Queue: d.Queue, Log: s.log,
		Registry: s.opt.Registry})
}

// tapTime is the time a query arrived when dnstap logs it (the zero time otherwise: no clock
// read on the answer path of a server without dnstap).
func (s *Server) tapTime() time.Time {
	if !s.tap.Enabled() {
		return time.Time{}
	}
	return time.Now()
}

// logTap hands a query and its response (nil: none sent) to dnstap; it never blocks.
func (s *Server) logTap(p dnstap.Protocol, src, local netip.AddrPort, qt time.Time, query, response []byte) {
	if s.tap.Enabled() {
		s.tap.Log(p, src, local, qt, query, response)
	}
}

// addrPort is a net.Addr of a TCP or UDP socket as a netip.AddrPort (unmapped).
func addrPort(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	case *net.UDPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}
