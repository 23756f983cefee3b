// Package dnsxdp loads the DNS stop's XDP answer path (bpf/dnsxdp.c), attaches it to the
// interface of a UDP listener, and fills its map of packed static answers. The program answers
// a query whose key (QueryKey) is in the map and whose answer was packed in the current
// generation; everything else goes up to the socket unchanged. The dns package decides what
// goes in (answers static by construction) and when the generation moves (every reload).
package dnsxdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
	"golang.org/x/sys/unix"
)

// Limits of the program (enum dns_limits of bpf/dnsxdp.c).
const (
	// WireMax is the largest answer the program sends; larger ones stay on the socket path.
	WireMax = int(bpfobj.DnsxdpDnsLimitsDNS_WIRE_MAX)
	// Counters is how many answer counter slots there are.
	Counters = int(bpfobj.DnsxdpDnsLimitsDNS_COUNTERS)
	// MaxAnswers is the size of the answers LRU map.
	MaxAnswers = int(bpfobj.DnsxdpDnsLimitsDNS_ANSWERS_MAX)
	nameMax    = int(bpfobj.DnsxdpDnsLimitsDNS_NAME_MAX)
	optLen     = 11
	cookieOpt  = 10 // EDNS option code of DNS COOKIE (RFC 7873)
	cookieMax  = 40 // a client cookie (8) plus the largest server cookie (32)
)

// PassNames names the pass reasons of enum dns_pass_reason, for metrics and stats (index 0 is
// no reason).
var PassNames = [bpfobj.DnsxdpDnsPassReasonDNS_PASS_MAX]string{
	bpfobj.DnsxdpDnsPassReasonDNS_PASS_NOT_IP:   "not_ip",
	bpfobj.DnsxdpDnsPassReasonDNS_PASS_NOT_OURS: "not_listener",
	bpfobj.DnsxdpDnsPassReasonDNS_PASS_SHAPE:    "shape",
	bpfobj.DnsxdpDnsPassReasonDNS_PASS_NAME:     "name",
	bpfobj.DnsxdpDnsPassReasonDNS_PASS_CLASS:    "class",
	bpfobj.DnsxdpDnsPassReasonDNS_PASS_EDNS:     "edns",
	bpfobj.DnsxdpDnsPassReasonDNS_PASS_MISS:     "miss",
	bpfobj.DnsxdpDnsPassReasonDNS_PASS_STALE:    "stale",
	bpfobj.DnsxdpDnsPassReasonDNS_PASS_ROOM:     "room",
	bpfobj.DnsxdpDnsPassReasonDNS_PASS_OFF:      "off",
}

// Mode is how the program is attached: Generic (any interface, lo included), Native (the
// driver's XDP), Auto (native, else generic).
type Mode string

// Attach modes (the dns config's udp.xdp values besides off).
const (
	Generic Mode = "generic"
	Native  Mode = "native"
	Auto    Mode = "auto"
)

// inherited is the Mode of a link adopted from the process this one replaced.
const inherited Mode = "inherited"

// Key is the map key of a query: what fully determines a static answer.
type Key = bpfobj.DnsxdpDnsKey

// Program is the loaded program and its maps, and the links that attach it.
type Program struct {
	objs  bpfobj.DnsxdpObjects
	links []attached
}

type attached struct {
	ifname string
	mode   Mode
	l      link.Link
}

// Load loads the program; nothing is attached and the generation is 0 (it answers nothing).
func Load() (*Program, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("load dns xdp: remove memlock limit: %w", err)
	}
	spec, err := bpfobj.LoadDnsxdp()
	if err != nil {
		return nil, fmt.Errorf("load dns xdp spec: %w", err)
	}
	var p Program
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load dns xdp: the kernel's verifier refused the program: %+v", ve)
		}
		return nil, fmt.Errorf("load dns xdp: %w (needs root or CAP_BPF and Linux 5.18 or later)", err)
	}
	return &p, nil
}

// Prog is the XDP program (for BPF_PROG_TEST_RUN in tests).
func (p *Program) Prog() *ebpf.Program { return p.objs.XdpDns }

// Attach attaches the program to ifname in mode. A second XDP program on the interface (another
// server's, or the L4 forwarder's) makes it fail: the error says so.
func (p *Program) Attach(ifname string, mode Mode) error {
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return fmt.Errorf("attach dns xdp to %s: %w", ifname, err)
	}
	try := []Mode{mode}
	if mode == Auto {
		try = []Mode{Native, Generic}
	}
	var errs []error
	for _, m := range try {
		flags := link.XDPGenericMode
		if m == Native {
			flags = link.XDPDriverMode
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: p.objs.XdpDns, Interface: iface.Index, Flags: flags})
		if err == nil {
			p.links = append(p.links, attached{ifname, m, l})
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", m, err))
	}
	return fmt.Errorf("attach dns xdp to %s: %w (an interface takes one XDP program: is another server or the L4 forwarder on it? native mode needs a driver with XDP, generic works everywhere)",
		ifname, errors.Join(errs...))
}

// Adopt takes over an attached link (a descriptor inherited from the process this one replaces)
// and swaps this program in atomically: the old process's answers, packed from its files, are
// never sent again. Adopt owns fd from then on.
func (p *Program) Adopt(ifname string, fd int) error {
	l, err := link.NewFromFD(fd)
	if err != nil {
		return fmt.Errorf("adopt dns xdp link on %s: %w", ifname, err)
	}
	if err := l.Update(p.objs.XdpDns); err != nil {
		l.Close()
		return fmt.Errorf("adopt dns xdp link on %s: swap the program in: %w", ifname, err)
	}
	p.links = append(p.links, attached{ifname, inherited, l})
	return nil
}

// Link is one attachment: its interface, mode and link (whose descriptor an upgrade passes on).
type Link struct {
	Ifname string
	Mode   Mode
	Link   link.Link
}

// Links lists the attachments.
func (p *Program) Links() []Link {
	out := make([]Link, 0, len(p.links))
	for _, a := range p.links {
		out = append(out, Link{a.ifname, a.mode, a.l})
	}
	return out
}

// SetListener sets the address and port the program answers for and the generation; gen 0
// stops every answer at once.
func (p *Program) SetListener(ap netip.AddrPort, gen uint32) error {
	var c bpfobj.DnsxdpDnsConfig
	c.Gen = gen
	var pb [2]byte
	binary.BigEndian.PutUint16(pb[:], ap.Port())
	c.Port = binary.NativeEndian.Uint16(pb[:]) // network order in memory, as udp->dest
	a := ap.Addr().Unmap()
	if a.Is4() {
		c.Has4 = 1
		b := a.As4()
		c.Addr4 = binary.NativeEndian.Uint32(b[:])
	} else {
		c.Has6 = 1
		b := a.As16()
		for i := range c.Addr6 {
			c.Addr6[i] = binary.NativeEndian.Uint32(b[4*i:])
		}
	}
	if err := p.objs.Listener.Put(uint32(0), &c); err != nil {
		return fmt.Errorf("set dns xdp listener %s: %w", ap, err)
	}
	return nil
}

// Put stores the packed answer to the query whose key is k.
func (p *Program) Put(k *Key, a *bpfobj.DnsxdpDnsAnswer) error {
	if err := p.objs.Answers.Put(k, a); err != nil {
		return fmt.Errorf("put dns xdp answer: %w", err)
	}
	return nil
}

// Purge deletes every answer not of generation gen and returns how many it deleted.
func (p *Program) Purge(gen uint32) (int, error) {
	var k Key
	var a bpfobj.DnsxdpDnsAnswer
	var stale []Key
	it := p.objs.Answers.Iterate()
	for it.Next(&k, &a) {
		if a.Gen != gen {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("read dns xdp answers: %w", err)
	}
	n := 0
	for i := range stale {
		if err := p.objs.Answers.Delete(&stale[i]); err == nil {
			n++
		} else if !errors.Is(err, ebpf.ErrKeyNotExist) {
			return n, fmt.Errorf("delete stale dns xdp answer: %w", err)
		}
	}
	return n, nil
}

// Len counts the answers in the map (tests).
func (p *Program) Len() int {
	var k Key
	var a bpfobj.DnsxdpDnsAnswer
	n := 0
	it := p.objs.Answers.Iterate()
	for it.Next(&k, &a) {
		n++
	}
	return n
}

// AnswerCounts reads the answer counters, summed over CPUs: packets per slot.
func (p *Program) AnswerCounts(slots int) ([]uint64, error) {
	out := make([]uint64, slots)
	for i := range out {
		var per []bpfobj.DnsxdpDnsCounter
		if err := p.objs.AnswerCounters.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("read dns xdp answer counter %d: %w", i, err)
		}
		for _, c := range per {
			out[i] += c.Packets
		}
	}
	return out, nil
}

// PassCounts reads the pass counters, summed over CPUs, by reason (PassNames).
func (p *Program) PassCounts() (map[string]uint64, error) {
	out := make(map[string]uint64, len(PassNames))
	for i, name := range PassNames {
		if name == "" {
			continue
		}
		var per []bpfobj.DnsxdpDnsCounter
		if err := p.objs.PassCounters.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("read dns xdp pass counter %s: %w", name, err)
		}
		var n uint64
		for _, c := range per {
			n += c.Packets
		}
		out[name] = n
	}
	return out, nil
}

// Close detaches (closes this process's links: an attachment passed on in an upgrade stays with
// the successor) and releases the program and maps.
func (p *Program) Close() error {
	var errs []error
	for _, a := range p.links {
		if err := a.l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach dns xdp from %s: %w", a.ifname, err))
		}
	}
	p.links = nil
	if err := p.objs.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// AdoptFile is Adopt of a descriptor received from the process this one replaces; f is closed.
func (p *Program) AdoptFile(ifname string, f *os.File) error {
	defer f.Close()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("adopt dns xdp link on %s: %w", ifname, err)
	}
	return p.Adopt(ifname, fd)
}

// DetachFile detaches the XDP link whose descriptor f was received from the process this one
// replaces (the new configuration has no XDP path: the old answers must stop now); f is closed.
func DetachFile(f *os.File) {
	defer f.Close()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return
	}
	l, err := link.NewFromFD(fd)
	if err != nil {
		unix.Close(fd)
		return
	}
	l.Detach()
	l.Close()
}

// Reclaim swaps this program back onto its links. After an upgrade that failed once its
// successor had swapped its own program in, the successor's program (with a map nobody fills)
// would stay attached: a reload of this process puts its own back.
func (p *Program) Reclaim() {
	for _, a := range p.links {
		a.l.Update(p.objs.XdpDns)
	}
}

// Detach takes the program off the interfaces it attached itself, even where a descriptor of
// the link was passed on (Close alone leaves an attachment that another process holds). A link
// it adopted is left to Close: if this process fails before the process it replaces has gone,
// that one still holds the link and puts its own program back on its next reload (Reclaim).
func (p *Program) Detach() {
	for _, a := range p.links {
		if a.mode != inherited {
			a.l.Detach()
		}
	}
}
