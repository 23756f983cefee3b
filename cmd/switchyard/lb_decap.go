package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// l4DecapCmd is `switchyard lb decap`: the backend side of the balancer (docs/xdp.md).
func l4DecapCmd() *cli.Command {
	flags := l4AttachFlags()
	// --iface is checked in the actions: a required flag of a parent is also demanded before its
	// subcommand (`lb decap stats --iface X` would fail).
	flags[0] = &cli.StringFlag{Name: "iface", Aliases: []string{"i"}, Usage: "`INTERFACE` to attach to"}
	return &cli.Command{
		Name:  "decap",
		Usage: "attach the decapsulation program to a backend's interface (IPIP/IP6IP6 to its own addresses)",
		Description: `Loads xdp_decap, sets the tunnel addresses it accepts and its second-chance allow-lists,
   attaches it and pins its link, then exits (the program stays). The backend must also hold the
   VIP on lo and have rp_filter off. Each run sets the addresses and lists to exactly what it is
   given.

   Second chance (docs/xdp.md): a tunnel packet carrying a candidate for a flow this backend does
   not hold is sent on to the candidate only when the candidate is inside --second-chance-peers
   (the backends' networks) and the outer source inside --tunnel-sources (the balancers'
   encap_source4/encap_source6 ranges; without those, the balancers' interface addresses).
   Without both, forwarding is off: such packets are decapsulated here (the stack answers with a
   reset, as without second chance) and counted second_chance_refused.

   Examples:
     switchyard lb decap --iface eth0 --addr 198.18.3.1
     switchyard lb decap --iface eth0 --addr 198.18.3.1 --addr fd00:5e:3::1 --xdp-mode generic \
       --second-chance-peers 198.18.3.0/24,fd00:5e:3::/64 --tunnel-sources 198.18.255.0/24,fd00:5e:ff::/96
     switchyard lb decap stats --iface eth0
     switchyard lb decap --iface eth0 --detach`,
		Flags: append(flags,
			&cli.StringSliceFlag{Name: "addr", Usage: "tunnel `ADDRESS` of this backend (repeat for several)"},
			&cli.StringSliceFlag{Name: "second-chance-peers", Usage: "`CIDR,...` a second-chance candidate must be inside to be forwarded to (the backends' networks)"},
			&cli.StringSliceFlag{Name: "tunnel-sources", Usage: "`CIDR,...` the outer source of a second-chance packet must be inside (the balancers' encap source ranges)"},
			decapPinDirFlag()),
		Subcommands: []*cli.Command{l4DecapStatsCmd()},
		Action:      l4DecapAttach,
	}
}

func decapPinDirFlag() cli.Flag {
	return &cli.StringFlag{Name: "pin-dir", Usage: "bpffs `DIR` (default /sys/fs/bpf/switchyard/decap-<iface>)"}
}

// decapPinDir is --pin-dir or the default of --iface.
func decapPinDir(c *cli.Context, cmd string) (iface, dir string, err error) {
	iface = c.String("iface")
	if iface == "" {
		return "", "", fmt.Errorf("%s: give --iface (the backend's interface that runs decap)", cmd)
	}
	dir = c.String("pin-dir")
	if dir == "" {
		dir = "/sys/fs/bpf/switchyard/decap-" + iface
	}
	return iface, dir, nil
}

func l4DecapAttach(c *cli.Context) error {
	iface, dir, err := decapPinDir(c, "lb decap")
	if err != nil {
		return err
	}
	if c.Bool("detach") {
		if os.Geteuid() != 0 {
			return errors.New("lb decap: not root: detaching XDP needs root: run with sudo")
		}
		if err := loader.Detach(dir); err != nil {
			return err
		}
		fmt.Fprintf(c.App.Writer, "decap detached from %s\n", iface)
		return nil
	}
	var addrs []netip.Addr
	for _, s := range c.StringSlice("addr") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("invalid --addr %q: give this backend's tunnel IP address", s)
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return errors.New("lb decap: give at least one --addr (the address the balancer encapsulates to)")
	}
	peers, err := parsePrefixes("second-chance-peers", c.StringSlice("second-chance-peers"))
	if err != nil {
		return err
	}
	sources, err := parsePrefixes("tunnel-sources", c.StringSlice("tunnel-sources"))
	if err != nil {
		return err
	}
	if err := loader.CheckSecondChance(peers, sources); err != nil {
		return fmt.Errorf("lb decap: %w", err)
	}
	if os.Geteuid() != 0 {
		return errors.New("lb decap: not root: attaching XDP needs root: run with sudo")
	}
	d, err := loader.OpenDecap(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.SetAddrs(addrs); err != nil {
		return err
	}
	if err := d.SetSecondChance(peers, sources); err != nil {
		return err
	}
	l, err := d.Attach(iface, loader.Mode(c.String("xdp-mode")), dir)
	if err != nil {
		return err
	}
	l.Close()
	fmt.Fprintf(c.App.Writer, "decap attached to %s for %v (pinned under %s)\n%s\n", iface, addrs, dir, secondChanceLine(peers, sources))
	return nil
}

// parsePrefixes reads a list flag of CIDR prefixes (a bare address is a host prefix).
func parsePrefixes(flag string, vals []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range vals {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		p, err := netip.ParsePrefix(v)
		if err != nil {
			a, aerr := netip.ParseAddr(v)
			if aerr != nil {
				return nil, fmt.Errorf("invalid --%s %q: give CIDR prefixes such as 198.18.3.0/24,fd00:5e:3::/64", flag, v)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p)
	}
	return out, nil
}

// secondChanceLine says whether second-chance forwarding is on and for what.
func secondChanceLine(peers, sources []netip.Prefix) string {
	if len(peers) == 0 || len(sources) == 0 {
		return "second-chance forwarding: off (give --second-chance-peers and --tunnel-sources to turn it on)"
	}
	return fmt.Sprintf("second-chance forwarding: to candidates in %s from tunnel sources in %s", joinPrefixes(peers), joinPrefixes(sources))
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// decapStats is what `lb decap stats --json` prints.
type decapStats struct {
	Interface         string                      `json:"interface"`
	PinDir            string                      `json:"pin_dir"`
	SecondChancePeers []string                    `json:"second_chance_peers"`
	TunnelSources     []string                    `json:"tunnel_sources"`
	Counters          map[string]bpfobj.LBCounter `json:"counters"`
}

func l4DecapStatsCmd() *cli.Command {
	return &cli.Command{
		Name:  "stats",
		Usage: "show a backend's decap counters and second-chance allow-lists (read from its pins)",
		Description: `Reads the maps the decap program pinned (no daemon needed): decap_* (tunnel packets
   stripped), pass, drop, and second_chance_* (what became of packets that carried a candidate:
   owned, forwarded, no_candidate, skipped, malformed, refused and its reasons refused_source and
   refused_candidate; docs/xdp.md, "Second chance").

   Examples:
     switchyard lb decap stats --iface eth0
     switchyard lb decap stats --pin-dir /sys/fs/bpf/switchyard/decap-eth0 --iface eth0 --json`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "iface", Aliases: []string{"i"}, Usage: "`INTERFACE` decap runs on"},
			decapPinDirFlag(),
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
		},
		Action: func(c *cli.Context) error {
			iface, dir, err := decapPinDir(c, "lb decap stats")
			if err != nil {
				return err
			}
			if os.Geteuid() != 0 {
				return errors.New("lb decap stats: not root: reading pinned BPF maps needs root: run with sudo")
			}
			d, err := loader.OpenDecapPinned(dir)
			if err != nil {
				return fmt.Errorf("lb decap stats: %w", err)
			}
			defer d.Close()
			st := decapStats{Interface: iface, PinDir: dir, SecondChancePeers: []string{}, TunnelSources: []string{}}
			if st.Counters, err = d.Counters(); err != nil {
				return fmt.Errorf("lb decap stats: %w", err)
			}
			peers, sources, err := d.SecondChance()
			if err != nil {
				return fmt.Errorf("lb decap stats: %w", err)
			}
			for _, p := range peers {
				st.SecondChancePeers = append(st.SecondChancePeers, p.String())
			}
			for _, p := range sources {
				st.TunnelSources = append(st.TunnelSources, p.String())
			}
			return l4Output(c, st, func(w io.Writer) {
				fmt.Fprintln(w, "COUNTER\tPACKETS\tBYTES")
				names := make([]string, 0, len(st.Counters))
				for n := range st.Counters {
					names = append(names, n)
				}
				sort.Strings(names)
				for _, n := range names {
					fmt.Fprintf(w, "%s\t%d\t%d\n", n, st.Counters[n].Packets, st.Counters[n].Bytes)
				}
				fmt.Fprintf(w, "\n%s\n", secondChanceLine(peers, sources))
			})
		},
	}
}
