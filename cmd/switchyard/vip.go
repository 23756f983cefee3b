package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/config"
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
		Subcommands: []*cli.Command{vipAddCmd(), vipRemoveCmd(), vipListCmd()},
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
