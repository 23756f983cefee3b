package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/maps"
)

func init() {
	register(&cli.Command{
		Name:  "guard",
		Usage: "the L4 balancer's DDoS guard: allow and deny prefixes, new-connection limits (through the running `lb run` daemon)",
		Description: `The guard runs in XDP on flows without a connection-table entry only: an established flow is
   never limited nor denied. Rules are global (every VIP) or of one VIP (--vip); an allow wins over
   a deny. Changes are validated as the file is, applied at once and written back to the daemon's
   configuration file (with --store: global and per-VIP rules go to the store, for the whole fleet).

   Examples:
     switchyard guard add deny 203.0.113.0/24
     switchyard guard add allow 203.0.113.8/29 --vip web
     switchyard guard remove deny 203.0.113.0/24
     switchyard guard limit --vip web --source-rate 50 --source-burst 100 --prefix-v4 24 --prefix-v6 48
     switchyard guard limit --vip web --vip-rate 20000
     switchyard guard limit --vip web --source-off
     switchyard guard list`,
		Subcommands: []*cli.Command{guardRuleCmd("add", api.OpGuardAdd), guardRuleCmd("remove", api.OpGuardRemove), guardLimitCmd(), guardListCmd()},
	})
}

func guardRuleCmd(name, op string) *cli.Command {
	return &cli.Command{
		Name:      name,
		Usage:     name + " an allow or deny prefix (global, or of one VIP with --vip)",
		ArgsUsage: "allow|deny PREFIX",
		Description: `A prefix that overlaps one of the same list is refused (keep the wider one); an allow inside
   a deny exempts its sources.

   Examples:
     switchyard guard ` + name + ` deny 203.0.113.0/24
     switchyard guard ` + name + ` allow 203.0.113.8/29 --vip web`,
		Flags: append(l4SocketFlags(), &cli.StringFlag{Name: "vip", Usage: "the `VIP` (name or address:port/proto) the rule is for; default every VIP"}),
		Action: l4Action(func(c *cli.Context, args []string) error {
			if err := l4Args(c, args, 2, "switchyard guard "+name+" allow|deny PREFIX [--vip VIP]"); err != nil {
				return err
			}
			if args[0] != api.GuardAllow && args[0] != api.GuardDeny {
				return fmt.Errorf("unknown list %q: use allow or deny", args[0])
			}
			return l4Change(c, op, api.GuardRuleReq{VIP: c.String("vip"), List: args[0], Prefix: args[1]})
		}),
	}
}

func guardLimitCmd() *cli.Command {
	return &cli.Command{
		Name:  "limit",
		Usage: "set or clear the new-connection limits per source prefix and per VIP",
		Description: `Token buckets of new connections (TCP SYNs, UDP datagrams without an entry), per source
   prefix and per VIP; a VIP's limits replace the global ones. A rate of 0 is refused: to drop a
   source, deny it.

   Examples:
     switchyard guard limit --vip web --source-rate 50 --source-burst 100 --prefix-v4 24 --prefix-v6 48
     switchyard guard limit --source-rate 200
     switchyard guard limit --vip web --vip-rate 20000 --vip-burst 40000
     switchyard guard limit --vip web --source-off --vip-off`,
		Flags: append(l4SocketFlags(),
			&cli.StringFlag{Name: "vip", Usage: "the `VIP` whose limits change; default the global ones"},
			&cli.Uint64Flag{Name: "source-rate", Usage: "new connections a second per source prefix (`N`)"},
			&cli.Uint64Flag{Name: "source-burst", Usage: "at once per source prefix (`N`, default the rate)"},
			&cli.IntFlag{Name: "prefix-v4", Usage: "IPv4 source prefix `LENGTH` sharing a bucket (default 32)"},
			&cli.IntFlag{Name: "prefix-v6", Usage: "IPv6 source prefix `LENGTH` sharing a bucket (default 64)"},
			&cli.BoolFlag{Name: "source-off", Usage: "remove the per-source limit"},
			&cli.Uint64Flag{Name: "vip-rate", Usage: "new connections a second to the VIP (`N`)"},
			&cli.Uint64Flag{Name: "vip-burst", Usage: "at once to the VIP (`N`, default the rate)"},
			&cli.BoolFlag{Name: "vip-off", Usage: "remove the per-VIP limit"},
		),
		Action: l4Action(func(c *cli.Context, args []string) error {
			if err := l4Args(c, args, 0, "switchyard guard limit [--vip VIP] --source-rate N | --vip-rate N | --source-off | --vip-off"); err != nil {
				return err
			}
			req := api.GuardLimitReq{VIP: c.String("vip")}
			switch {
			case c.Bool("source-off"):
				req.Set = append(req.Set, "per_source")
			case c.IsSet("source-rate"):
				req.Set = append(req.Set, "per_source")
				req.PerSource = &config.SourceLimit{Limit: config.Limit{Rate: c.Uint64("source-rate"), Burst: c.Uint64("source-burst")},
					PrefixV4: c.Int("prefix-v4"), PrefixV6: c.Int("prefix-v6")}
			}
			switch {
			case c.Bool("vip-off"):
				req.Set = append(req.Set, "per_vip")
			case c.IsSet("vip-rate"):
				req.Set = append(req.Set, "per_vip")
				req.PerVIP = &config.Limit{Rate: c.Uint64("vip-rate"), Burst: c.Uint64("vip-burst")}
			}
			if len(req.Set) == 0 {
				return fmt.Errorf("nothing to change: give --source-rate, --vip-rate, --source-off or --vip-off")
			}
			return l4Change(c, api.OpGuardLimit, req)
		}),
	}
}

func guardListCmd() *cli.Command {
	return &cli.Command{
		Name:    "list",
		Aliases: []string{"ls"},
		Usage:   "list the guard's rules and limits, and its counters",
		Description: `Examples:
     switchyard guard list
     switchyard guard list --json`,
		Flags: l4SocketFlags(),
		Action: func(c *cli.Context) error {
			var g api.GuardInfo
			if err := l4Call(c, api.OpGuardList, api.Empty{}, &g); err != nil {
				return err
			}
			return l4Output(c, g, func(w io.Writer) { printGuard(w, g) })
		},
	}
}

func printGuard(w io.Writer, g api.GuardInfo) {
	fmt.Fprintln(w, "SCOPE\tALLOW\tDENY\tPER SOURCE\tPER VIP")
	row := func(scope string, gd *config.Guard) {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", scope, orDash(strings.Join(gd.Allow, " ")), orDash(strings.Join(gd.Deny, " ")), sourceLimit(gd.PerSource), vipLimit(gd.PerVIP))
	}
	if g.Global != nil {
		row("(global)", g.Global)
	}
	names := make([]string, 0, len(g.VIPs))
	for n := range g.VIPs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		row(n, g.VIPs[n])
	}
	if g.Global == nil && len(names) == 0 {
		fmt.Fprintln(w, "(no rule: add one with `switchyard guard add deny PREFIX`)")
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "COUNTER\tPACKETS")
	for _, n := range append(append([]string{}, maps.GuardCounterNames[:]...), "source_buckets_evicted") {
		fmt.Fprintf(w, "%s\t%d\n", n, g.Counters[n].Packets)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func sourceLimit(s *config.SourceLimit) string {
	if s == nil {
		return "-"
	}
	return fmt.Sprintf("%s per /%d (v4), /%d (v6)", vipLimit(&s.Limit), orDefaultInt(s.PrefixV4, config.DefaultGuardPrefixV4), orDefaultInt(s.PrefixV6, config.DefaultGuardPrefixV6))
}

func vipLimit(l *config.Limit) string {
	if l == nil {
		return "-"
	}
	burst := l.Burst
	if burst == 0 {
		burst = l.Rate
	}
	return fmt.Sprintf("%d/s burst %d", l.Rate, burst)
}

func orDefaultInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
