// Package bird runs the BIRD 2 routing daemon (Debian's bird2) as the lab's router: a passive
// BGP neighbour of every balancer that installs the VIP routes it learns into the router
// namespace's kernel table, several balancers' routes merged into one ECMP route. It writes the
// configuration, builds the command line (bird runs in the foreground with its configuration and
// control socket in a directory of its own, one per lab or test), and reads the sessions and
// routes back through birdc.
package bird

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Neighbor is one balancer the router accepts a session from.
type Neighbor struct {
	// Name is the BGP protocol's name in bird (lb1): letters, digits and _.
	Name     string
	Addr     netip.Addr
	ASN      uint32
	Password string
	// LocalASN, when set, is the router's AS on this session instead of Config.ASN: the
	// neighbour's own makes an iBGP session (next hop taken as directly connected).
	LocalASN uint32
}

// Config is the router's BGP configuration.
type Config struct {
	RouterID netip.Addr
	ASN      uint32
	// HoldTime is the hold time bird offers (the session uses the smaller of both sides').
	HoldTime  time.Duration
	Neighbors []Neighbor
	// BFD runs BFD (RFC 5880/5881, single hop) with every neighbour; a BFD session that goes
	// down shuts the BGP session down at once (nil: no BFD).
	BFD *BFD
	// GracefulRestart makes bird a graceful-restart helper (RFC 4724): it keeps the routes of a
	// neighbour whose session dropped without a NOTIFICATION for the restart time the neighbour
	// announced, until its End-of-RIB.
	GracefulRestart bool
}

// BFD is bird's BFD timers on every interface.
type BFD struct {
	MinRx, MinTx time.Duration
	Multiplier   int
}

// Render writes bird.conf: a device protocol, one kernel protocol per family exporting the BGP
// routes with multipath merging (ECMP; the kernel hashes the 5-tuple when
// fib_multipath_hash_policy=1), and a passive session per neighbour importing IPv4 and IPv6
// unicast and exporting nothing.
func (c Config) Render() string {
	hold := int(c.HoldTime / time.Second)
	if hold == 0 {
		hold = 90
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# written by switchyard's lab (lab/bird)\nrouter id %s;\nlog stderr all;\n\n", c.RouterID)
	b.WriteString("protocol device { scan time 10; }\n\n")
	for _, fam := range []string{"ipv4", "ipv6"} {
		fmt.Fprintf(&b, `protocol kernel kernel_%[1]s {
	%[1]s { import none; export filter { if source = RTS_BGP then accept; reject; }; };
	merge paths on limit 16;
}

`, fam)
	}
	opts := ""
	if c.BFD != nil {
		fmt.Fprintf(&b, "protocol bfd {\n\tinterface \"*\" { min rx interval %d ms; min tx interval %d ms; multiplier %d; };\n}\n\n",
			c.BFD.MinRx.Milliseconds(), c.BFD.MinTx.Milliseconds(), c.BFD.Multiplier)
		opts += "\tbfd on;\n"
	}
	if c.GracefulRestart {
		opts += "\tgraceful restart on;\n"
	}
	fmt.Fprintf(&b, `template bgp balancer {
	local as %d;
	passive on;
	hold time %d;
	keepalive time %d;
	error wait time 1, 5;
%s	ipv4 { import all; export none; };
	ipv6 { import all; export none; };
}
`, c.ASN, hold, max(hold/3, 1), opts)
	for _, n := range c.Neighbors {
		fmt.Fprintf(&b, "\nprotocol bgp %s from balancer {\n\tneighbor %s as %d;\n", n.Name, n.Addr, n.ASN)
		if n.LocalASN != 0 {
			fmt.Fprintf(&b, "\tlocal as %d;\n", n.LocalASN)
		}
		if n.LocalASN == n.ASN {
			b.WriteString("\tdirect;\n") // iBGP: the balancer is on the link, no IGP resolves its next hop
		}
		if n.Password != "" {
			fmt.Fprintf(&b, "\tpassword %q;\n", n.Password)
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// Paths of a bird directory.
func ConfPath(dir string) string   { return filepath.Join(dir, "bird.conf") }
func SocketPath(dir string) string { return filepath.Join(dir, "bird.ctl") }

// Write creates dir and writes the configuration into it.
func Write(dir string, c Config) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create bird directory: %w", err)
	}
	if err := os.WriteFile(ConfPath(dir), []byte(c.Render()), 0o600); err != nil {
		return fmt.Errorf("write bird config: %w", err)
	}
	return nil
}

// Argv is bird's command line for a directory: in the foreground (the caller owns the process),
// with the directory's configuration and control socket, so that several labs run side by side.
func Argv(dir string) []string {
	return []string{"bird", "-f", "-c", ConfPath(dir), "-s", SocketPath(dir), "-P", filepath.Join(dir, "bird.pid")}
}

// Available says whether bird and birdc are installed.
func Available() error {
	for _, p := range []string{"bird", "birdc"} {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("%s not found: install Debian's bird2 (apt-get install bird2, or make deps)", p)
		}
	}
	return nil
}

// WaitReady waits until bird answers on its control socket.
func WaitReady(dir string, d time.Duration) error {
	deadline := time.Now().Add(d)
	var err error
	for time.Now().Before(deadline) {
		if _, err = Protocols(dir); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("bird in %s did not answer on its socket within %s: %w", dir, d, err)
}

// birdc runs one birdc command against the directory's socket.
func birdc(dir string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "birdc", append([]string{"-s", SocketPath(dir)}, args...)...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("birdc %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	if bytes.Contains(out, []byte("Unable to connect")) {
		return out, fmt.Errorf("birdc %s: %s", strings.Join(args, " "), bytes.TrimSpace(out))
	}
	return out, nil
}

// Protocol is one line of `birdc show protocols`.
type Protocol struct {
	Name  string `json:"name"`
	Proto string `json:"proto"`
	State string `json:"state"`
	Since string `json:"since"`
	// Info is bird's session state for BGP: Established, Active, Connect...
	Info string `json:"info"`
}

// Established is true for a BGP session that is up.
func (p Protocol) Established() bool { return p.Proto == "BGP" && p.Info == "Established" }

// Protocols reads `birdc show protocols`.
func Protocols(dir string) ([]Protocol, error) {
	out, err := birdc(dir, "show", "protocols")
	if err != nil {
		return nil, err
	}
	var ps []Protocol
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// Name Proto Table State Since Info; the table column is "---" for device protocols.
		if len(f) < 5 || f[0] == "Name" || strings.HasPrefix(f[0], "BIRD") {
			continue
		}
		p := Protocol{Name: f[0], Proto: f[1], State: f[3], Since: f[4]}
		if len(f) > 5 {
			// "since" may be "2026-12-01 10:00:00" (two fields) or "10:00:00.123".
			rest := f[5:]
			if len(rest) > 0 && strings.Count(rest[0], ":") == 2 && strings.Contains(p.Since, "-") {
				p.Since += " " + rest[0]
				rest = rest[1:]
			}
			p.Info = strings.Join(rest, " ")
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// ProtocolDetail is `birdc show protocols all NAME`: the session's state, its last error and
// its BFD and graceful-restart state, for a report when a session does not come up.
func ProtocolDetail(dir, name string) string {
	out, err := birdc(dir, "show", "protocols", "all", name)
	if err != nil {
		return err.Error()
	}
	return string(bytes.TrimSpace(out))
}

// Route is one prefix of bird's table with every path bird has for it.
type Route struct {
	Prefix string      `json:"prefix"`
	Paths  []RoutePath `json:"paths"`
}

// RoutePath is one path: the BGP protocol (balancer) it came from and its next hop.
type RoutePath struct {
	From    string `json:"from"`
	Via     string `json:"via"`
	Primary bool   `json:"primary"`
	// BGP holds the path's BGP attributes as `birdc show route all` prints them, by name without
	// the BGP. prefix: community "(65001,100) (65001,200)", large_community "(65001, 1, 2)", med
	// "10", local_pref "100", as_path "65001" (RoutesAll only).
	BGP map[string]string `json:"bgp,omitempty"`
}

// Routes reads `birdc show route` (every table).
func Routes(dir string) ([]Route, error) {
	out, err := birdc(dir, "show", "route", "table", "all")
	if err != nil {
		return nil, err
	}
	return parseRoutes(out), nil
}

// RoutesAll reads `birdc show route all` (every table): the routes with their BGP attributes.
func RoutesAll(dir string) ([]Route, error) {
	out, err := birdc(dir, "show", "route", "all", "table", "all")
	if err != nil {
		return nil, err
	}
	return parseRoutes(out), nil
}

// RoutesFor reads `birdc show route for ADDR` (every table): the routes bird would use for
// an address, each with all its paths. Cheap enough to poll every 10 ms.
func RoutesFor(dir string, a netip.Addr) ([]Route, error) {
	out, err := birdc(dir, "show", "route", "for", a.String(), "table", "all")
	if err != nil {
		return nil, err
	}
	return parseRoutes(out), nil
}

func parseRoutes(out []byte) []Route {
	var rs []Route
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		switch {
		case len(f) == 0 || strings.HasPrefix(line, "BIRD") || strings.HasPrefix(line, "Table"):
		case strings.HasPrefix(f[0], "BGP.") && len(rs) > 0:
			// "	BGP.community: (65001,100)" under a path of `show route all`.
			r := &rs[len(rs)-1]
			if len(r.Paths) > 0 {
				p := &r.Paths[len(r.Paths)-1]
				if p.BGP == nil {
					p.BGP = map[string]string{}
				}
				name, val, _ := strings.Cut(strings.TrimSpace(line), ":")
				p.BGP[strings.TrimPrefix(name, "BGP.")] = strings.TrimSpace(val)
			}
		case f[0] == "via" && len(rs) > 0:
			r := &rs[len(rs)-1]
			if len(r.Paths) > 0 && len(f) > 1 {
				r.Paths[len(r.Paths)-1].Via = f[1]
			}
		case strings.Contains(line, "["):
			// "198.18.100.1/32  unicast [lb1 10:00:00.000] * (100) [AS65001i]", or a further
			// path of the same prefix, which starts with white space.
			if line[0] != ' ' && line[0] != '\t' {
				rs = append(rs, Route{Prefix: f[0]})
			}
			if len(rs) == 0 {
				continue
			}
			p := RoutePath{Primary: strings.Contains(line, "] * (")}
			if i := strings.IndexByte(line, '['); i >= 0 {
				p.From = strings.Fields(line[i+1:])[0]
			}
			rs[len(rs)-1].Paths = append(rs[len(rs)-1].Paths, p)
		}
	}
	return rs
}
