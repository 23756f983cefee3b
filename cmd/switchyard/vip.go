package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/internal/yamlx"
)

func init() {
	register(&cli.Command{
		Name:  "vip",
		Usage: "add, remove and list the L4 balancer's VIPs (through the running `lb run` daemon)",
		Description: `A VIP is an address, a port (0 = every port) and a protocol, balanced over backends with
   Maglev. Changes are applied at once and written back to the daemon's configuration file.
   A VIP is named by its name or by ADDRESS:PORT/PROTO.

   Examples:
     switchyard vip add web 198.18.100.1:80
     switchyard vip add dns 198.18.100.2:53 --protocol udp --hash source-only
     switchyard vip add web6 [fd00:5e:100::1]:443 --health http --health-port 80 --health-path /health
     switchyard vip list
     switchyard vip remove web`,
		Subcommands: []*cli.Command{vipAddCmd(), vipRemoveCmd(), vipListCmd(), vipBGPCmd()},
	})
}

func vipAddCmd() *cli.Command {
	return &cli.Command{
		Name:      "add",
		Usage:     "add a VIP (with --backend to add backends at once)",
		ArgsUsage: "NAME ADDRESS[:PORT]",
		Description: `Examples:
     switchyard vip add web 198.18.100.1:80 --backend 198.18.3.1 --backend 198.18.3.2
     switchyard vip add any 198.18.100.9 --protocol tcp          (port 0: every port)
     switchyard vip add api 198.18.100.3:8080 --health tcp --health-interval 1s --health-rise 2 --health-fall 3
     switchyard vip add h3 198.18.100.4:443 --protocol udp --quic quic-lb:2:0 --backend 198.18.3.1
     switchyard vip add h3k 198.18.100.5:443 --protocol udp --quic katran
     switchyard vip add big 198.18.100.6:80 --ring-size 131071`,
		Flags: append(l4SocketFlags(),
			&cli.StringFlag{Name: "protocol", Aliases: []string{"p"}, Value: "tcp", Usage: "`PROTO`: tcp or udp"},
			&cli.StringFlag{Name: "hash", Value: config.HashFiveTuple, Usage: "`HASH`: five-tuple, source-only or no-source-port"},
			&cli.StringSliceFlag{Name: "backend", Aliases: []string{"b"}, Usage: "backend `ADDRESS` (weight 1; repeat)"},
			&cli.StringFlag{Name: "health", Usage: "health check `TYPE`: tcp or http (default none)"},
			&cli.StringFlag{Name: "health-mode", Usage: "`MODE`: tunnel (probe the VIP through the tunnel) or direct (the backend's own address); default the file's health_mode, else tunnel"},
			&cli.UintFlag{Name: "health-port", Usage: "probed `PORT` (default the VIP port)"},
			&cli.StringFlag{Name: "health-path", Usage: "http check `PATH` (default /)"},
			&cli.IntFlag{Name: "health-status", Usage: "http `STATUS` that means healthy (default 200)"},
			&cli.DurationFlag{Name: "health-interval", Usage: "probe `INTERVAL` (default 2s)"},
			&cli.DurationFlag{Name: "health-timeout", Usage: "probe `TIMEOUT` (default 1s)"},
			&cli.IntFlag{Name: "health-rise", Usage: "`N` successes to become healthy (default 2)"},
			&cli.IntFlag{Name: "health-fall", Usage: "`N` failures to become unhealthy (default 3)"},
			&cli.StringFlag{Name: "quic", Usage: quicFlagUsage},
			&cli.UintFlag{Name: "ring-size", Usage: "fixed Maglev ring `SIZE` (a prime) for this VIP (default: sized from its backends)"},
		),
		Action: l4Action(func(c *cli.Context, args []string) error {
			if err := l4Args(c, args, 2, "switchyard vip add NAME ADDRESS[:PORT]"); err != nil {
				return err
			}
			addr, port, err := config.ParseAddrPort(args[1])
			if err != nil {
				return err
			}
			v := config.VIP{Name: args[0], Address: addr.String(), Port: port, Protocol: c.String("protocol"), Hash: c.String("hash")}
			for _, b := range c.StringSlice("backend") {
				v.Backends = append(v.Backends, config.Backend{Address: b, Weight: 1})
			}
			if c.String("health-mode") != "" && c.String("health") == "" {
				return fmt.Errorf("--health-mode without --health: name the check type too (--health tcp or http)")
			}
			if t := c.String("health"); t != "" {
				if c.Uint("health-port") > 65535 {
					return fmt.Errorf("invalid --health-port %d: use 1..65535", c.Uint("health-port"))
				}
				v.Health = &config.HealthCheck{Type: t, Mode: c.String("health-mode"), Port: uint16(c.Uint("health-port")), Path: c.String("health-path"),
					ExpectStatus: c.Int("health-status"), Interval: config.Duration(c.Duration("health-interval")),
					Timeout: config.Duration(c.Duration("health-timeout")), Rise: c.Int("health-rise"), Fall: c.Int("health-fall")}
			}
			if q := c.String("quic"); q != "" {
				if v.QUIC, err = parseQUICFlag(q); err != nil {
					return err
				}
				if v.Protocol != "udp" {
					return fmt.Errorf("--quic needs --protocol udp: QUIC runs over UDP")
				}
			}
			if n := c.Uint("ring-size"); n != 0 {
				if n >= 1<<24 {
					return fmt.Errorf("invalid --ring-size %d: use a prime between 3 and 16777216, or leave it out", n)
				}
				v.RingSize = uint32(n)
			}
			return l4Change(c, api.OpVIPAdd, api.VIPAdd{VIP: v})
		}),
	}
}

func vipRemoveCmd() *cli.Command {
	return &cli.Command{
		Name:         "remove",
		Aliases:      []string{"rm"},
		Usage:        "remove a VIP and its backends (its packets then go to the kernel)",
		ArgsUsage:    "VIP",
		BashComplete: l4CompleteVIPs,
		Description: `Examples:
     switchyard vip remove web
     switchyard vip remove 198.18.100.1:80/tcp`,
		Flags: l4SocketFlags(),
		Action: l4Action(func(c *cli.Context, args []string) error {
			if err := l4Args(c, args, 1, "switchyard vip remove VIP"); err != nil {
				return err
			}
			return l4Change(c, api.OpVIPRemove, api.VIPRef{VIP: args[0]})
		}),
	}
}

func vipListCmd() *cli.Command {
	return &cli.Command{
		Name:    "list",
		Aliases: []string{"ls"},
		Usage:   "list the VIPs with their ids, hash, health check and backends in the ring",
		Description: `Examples:
     switchyard vip list
     switchyard vip list --json`,
		Flags: l4SocketFlags(),
		Action: func(c *cli.Context) error {
			var vs []api.VIPInfo
			if err := l4Call(c, api.OpVIPList, api.Empty{}, &vs); err != nil {
				return err
			}
			return l4Output(c, vs, func(w io.Writer) {
				fmt.Fprintln(w, "NAME\tADDRESS\tPORT\tPROTO\tHASH\tID\tHEALTH\tIN RING/BACKENDS")
				for _, v := range vs {
					h := "-"
					if v.Health != nil {
						h = v.Health.Type
						if v.Health.Type == "http" {
							h += " " + v.Health.Path
						}
						h += fmt.Sprintf(" :%d", v.Health.Port)
					}
					fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t%d/%d\n", v.Name, v.Address, v.Port, v.Protocol, v.Hash, v.ID, h, v.InRing, v.Backends)
				}
				if len(vs) == 0 {
					fmt.Fprintln(w, "(no VIP: add one with `switchyard vip add NAME ADDRESS:PORT`)")
				}
			})
		},
	}
}

func vipBGPCmd() *cli.Command {
	return &cli.Command{
		Name:         "bgp",
		Usage:        "set a VIP's route policy and the nodes that announce it (replaces its bgp section)",
		ArgsUsage:    "VIP",
		BashComplete: l4CompleteVIPs,
		Description: `The VIP's communities add to the node's bgp.communities; --med and --local-pref replace the
   node's. --announce-from keeps the VIP to the nodes named (bgp.node) or labelled (bgp.labels);
   with --store every name must be a node registered in the store. VIPs on the same address
   share the section. --yaml takes the whole section (for overrides per node). docs/fleet.md.

   Examples:
     switchyard vip bgp web --community 65001:200 --large-community 65001:1:2 --med 10
     switchyard vip bgp api --announce-from lb1 --announce-from eu
     switchyard vip bgp web --yaml '{communities: ["65001:200"], overrides: [{node: lb3, med: 100}]}'
     switchyard vip bgp web --clear`,
		Flags: append(l4SocketFlags(),
			&cli.StringSliceFlag{Name: "community", Usage: "`ASN:VALUE`, no-export or no-advertise (repeat)"},
			&cli.StringSliceFlag{Name: "large-community", Usage: "`GLOBAL:LOCAL1:LOCAL2` (repeat)"},
			&cli.Int64Flag{Name: "med", Value: -1, Usage: "`MED` (0..4294967295; lowest preferred)"},
			&cli.Int64Flag{Name: "local-pref", Value: -1, Usage: "`LOCAL_PREF` (0..4294967295; highest preferred; iBGP peers only)"},
			&cli.StringSliceFlag{Name: "announce-from", Usage: "node `NAME` or label announcing the VIP (repeat; default every node)"},
			&cli.StringFlag{Name: "yaml", Usage: "the whole bgp section as `YAML`"},
			&cli.BoolFlag{Name: "clear", Usage: "remove the VIP's bgp section"},
		),
		Action: l4Action(func(c *cli.Context, args []string) error {
			if err := l4Args(c, args, 1, "switchyard vip bgp VIP [--community C] [--med N] [--announce-from NODE] | --yaml SECTION | --clear"); err != nil {
				return err
			}
			b, err := vipBGPFromFlags(c)
			if err != nil {
				return err
			}
			return l4Change(c, api.OpVIPBGP, api.VIPBGPReq{VIP: args[0], BGP: b})
		}),
	}
}

// vipBGPFromFlags builds the section from --yaml or the flags (nil for --clear).
func vipBGPFromFlags(c *cli.Context) (*config.VIPBGP, error) {
	flags := c.IsSet("community") || c.IsSet("large-community") || c.IsSet("med") || c.IsSet("local-pref") || c.IsSet("announce-from")
	switch {
	case c.Bool("clear") && (flags || c.IsSet("yaml")):
		return nil, fmt.Errorf("--clear removes the section: give it alone")
	case c.Bool("clear"):
		return nil, nil
	case c.IsSet("yaml") && flags:
		return nil, fmt.Errorf("--yaml gives the whole section: put the other settings into it")
	case c.IsSet("yaml"):
		var b config.VIPBGP
		if err := yamlx.Decode([]byte(c.String("yaml")), &b); err != nil {
			return nil, fmt.Errorf("--yaml: %w", err)
		}
		return &b, nil
	case !flags:
		return nil, fmt.Errorf("nothing to set: give --community, --large-community, --med, --local-pref, --announce-from, --yaml or --clear")
	}
	b := &config.VIPBGP{AnnounceFrom: c.StringSlice("announce-from")}
	b.Communities, b.LargeCommunities = c.StringSlice("community"), c.StringSlice("large-community")
	for _, f := range []struct {
		name string
		dst  **uint32
	}{{"med", &b.MED}, {"local-pref", &b.LocalPref}} {
		if !c.IsSet(f.name) {
			continue
		}
		v := c.Int64(f.name)
		if v < 0 || v > 1<<32-1 {
			return nil, fmt.Errorf("invalid --%s %d: use 0..4294967295", f.name, v)
		}
		u := uint32(v)
		*f.dst = &u
	}
	return b, nil
}
