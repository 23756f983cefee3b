package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/control/daemon"
	"github.com/switchyard/switchyard/loader"
)

func init() {
	register(&cli.Command{
		Name:  "lb",
		Usage: "the XDP L4 balancer: run the daemon, detach it, inspect health, stats and flows",
		Description: `The L4 stop: an XDP forwarder (Maglev + connection table, IPIP/IP6IP6 direct server
   return) owned by a root daemon. The daemon keeps its maps and link pinned under
   /sys/fs/bpf/switchyard/<iface>/, so a restart or upgrade loses no established flow.
   VIPs and backends are managed with ` + "`switchyard vip`" + ` and ` + "`switchyard backend`" + `. See docs/l4.md.

   Examples:
     switchyard lb run --config /etc/switchyard/lb.yaml
     switchyard lb run --iface eth0 --xdp-mode generic --metrics 127.0.0.1:9100
     switchyard lb status
     switchyard lb stats --json
     switchyard lb flow tcp 198.18.0.5:40000 198.18.100.1:80
     switchyard lb detach --iface eth0`,
		Subcommands: []*cli.Command{l4RunCmd(), l4DetachCmd(), l4StatusCmd(), l4HealthCmd(), l4StatsCmd(), l4FlowCmd(),
			l4ConfigCmd(), l4DecapCmd(), l4PassCmd(), l4StoreCmd(), l4DrainNodeCmd()},
	})
}

// l4SocketFlags are the flags of every command that talks to the daemon.
func l4SocketFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "socket", EnvVars: []string{"SWITCHYARD_SOCKET"}, Usage: "control socket `PATH` of the daemon (default: /run/switchyard/<iface>.sock, or the only socket there)"},
		&cli.StringFlag{Name: "iface", Aliases: []string{"i"}, Usage: "`INTERFACE` of the daemon, to find its default socket"},
		labSocketFlag(),
		&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
	}
}

// l4SocketPath finds the daemon's socket from --socket, --iface or the only socket in /run/switchyard.
func l4SocketPath(c *cli.Context) (string, error) {
	if s := c.String("socket"); s != "" {
		return s, nil
	}
	if i := c.String("iface"); i != "" {
		return config.DefaultSocket(i), nil
	}
	socks, _ := filepath.Glob("/run/switchyard/*.sock")
	switch {
	case c.String("lab") != "" || len(socks) == 0:
		return labSocketPath(c.String("lab")) // a lab's daemon (labsocket.go)
	case len(socks) == 1:
		return socks[0], nil
	}
	return "", fmt.Errorf("several daemons run (%s): choose one with --iface or --socket", strings.Join(socks, ", "))
}

// l4CompleteVIPs completes the first argument with the VIP names the daemon knows (shell
// completion through --generate-bash-completion); nothing when the daemon does not answer.
func l4CompleteVIPs(c *cli.Context) {
	if c.NArg() > 0 {
		return
	}
	var vs []api.VIPInfo
	if l4Call(c, api.OpVIPList, api.Empty{}, &vs) != nil {
		return
	}
	for _, v := range vs {
		fmt.Fprintln(c.App.Writer, v.Name)
	}
}

// l4Call performs one API call against the daemon.
func l4Call(c *cli.Context, op string, req, resp any) error {
	path, err := l4SocketPath(c)
	if err != nil {
		return err
	}
	return api.NewClient(path).Call(c.Context, op, req, resp)
}

// l4Output prints v as JSON with --json, else as the table that table writes.
func l4Output(c *cli.Context, v any, table func(w io.Writer)) error {
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 2, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// l4Change runs a change operation and prints its result.
func l4Change(c *cli.Context, op string, req any) error {
	var res api.ChangeResult
	if err := l4Call(c, op, req, &res); err != nil {
		return err
	}
	return l4Output(c, res, func(w io.Writer) {
		fmt.Fprintln(w, res.Message)
		if res.Saved != "" {
			fmt.Fprintf(w, "saved to %s\n", res.Saved)
		}
	})
}

// l4Args checks the number of positional arguments.
func l4Args(c *cli.Context, args []string, n int, usage string) error {
	if len(args) != n {
		return fmt.Errorf("%s: expected %d argument(s), got %d (%s): usage: %s", c.Command.FullName(), n, len(args), strings.Join(args, " "), usage)
	}
	return nil
}

// l4Action lets flags follow positional arguments (`backend add web 198.18.3.1 --weight 2`):
// urfave/cli stops parsing flags at the first argument, so the rest are set here on the same
// flag set, and the action gets the positional arguments alone.
func l4Action(f func(c *cli.Context, args []string) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		var pos []string
		in := c.Args().Slice()
		for i := 0; i < len(in); i++ {
			a := in[i]
			if a == "--" {
				pos = append(pos, in[i+1:]...)
				break
			}
			if len(a) < 2 || a[0] != '-' || (a[1] >= '0' && a[1] <= '9') {
				pos = append(pos, a)
				continue
			}
			name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
			fl := l4FindFlag(c.Command.Flags, name)
			if fl == nil {
				return fmt.Errorf("unknown flag %s: see `%s --help`", a, c.Command.HelpName)
			}
			if _, isBool := fl.(*cli.BoolFlag); isBool && !hasVal {
				val = "true"
			} else if !hasVal {
				if i+1 >= len(in) {
					return fmt.Errorf("flag %s needs a value: see `%s --help`", a, c.Command.HelpName)
				}
				i++
				val = in[i]
			}
			if err := c.Set(fl.Names()[0], val); err != nil {
				return fmt.Errorf("invalid value %q for %s: %w", val, a, err)
			}
		}
		return f(c, pos)
	}
}

func l4FindFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

func l4RunCmd() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "run the balancer daemon (root): attach or adopt the forwarder and serve the control socket",
		Description: `Loads the XDP forwarder (or adopts the one an earlier daemon pinned: maps kept, program
   swapped atomically through the pinned bpf_link), reconciles the maps to the configuration,
   runs health checks and serves the control socket (root-only) and, with --metrics, /metrics.
   SIGHUP reloads the configuration (an invalid one is refused, with line and field, and the
   running state stays). SIGTERM/SIGINT stop the daemon WITHOUT detaching: traffic keeps flowing.
   With a bgp section they drain instead, as ` + "`lb drain-node`" + ` does (docs/fleet.md).
   Flags override the file.

   Examples:
     switchyard lb run --config /etc/switchyard/lb.yaml
     switchyard lb run --iface eth0
     switchyard lb run --config lb.yaml --iface veth0 --xdp-mode generic --metrics 127.0.0.1:9100
     nsenter --net=/run/netns/lb -- switchyard lb run --config lb.yaml --log-format json
     switchyard lb run --config node.yaml --store etcd://10.0.0.1:2379,10.0.0.2:2379/switchyard/prod`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "YAML configuration `FILE` (CLI changes are written back to it)"},
			&cli.StringFlag{Name: "iface", Aliases: []string{"i"}, Usage: "`INTERFACE` to attach to (overrides interface:)"},
			&cli.StringFlag{Name: "pin-dir", Usage: "bpffs `DIR` for maps and link (default /sys/fs/bpf/switchyard/<iface>)"},
			&cli.StringFlag{Name: "socket", Usage: "control socket `PATH` (default /run/switchyard/<iface>.sock)"},
			&cli.StringFlag{Name: "metrics", Usage: "serve Prometheus metrics on `ADDR:PORT` at /metrics"},
			&cli.StringFlag{Name: "xdp-mode", Usage: "`MODE`: native (default) or generic (slow; for interfaces without native XDP)"},
			&cli.StringFlag{Name: "next-hop", Usage: "router `ADDRESS` toward the backends (default: the default route's gateway)"},
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "`FORMAT` of logs on stderr: text or json"},
			&cli.BoolFlag{Name: "debug", Usage: "log debug messages (every map reconciliation)"},
			&cli.StringFlag{Name: "store", EnvVars: []string{"SWITCHYARD_STORE"}, Usage: "fleet store `URL` etcd://HOST:PORT[,HOST:PORT...]/PREFIX: VIPs and backends come from there (the file keeps the node's own settings); see docs/fleet.md"},
		}, uiFlags()...),
		Action: l4Run,
	}
}

// l4Run is lb run's action: the configuration from the file and flags, a logger, the daemon.
func l4Run(c *cli.Context) error {
	override := func(cfg *config.Config) {
		for flag, field := range map[string]*string{"iface": &cfg.Interface, "pin-dir": &cfg.PinDir, "socket": &cfg.Socket,
			"metrics": &cfg.Metrics, "xdp-mode": &cfg.XDPMode, "next-hop": &cfg.NextHop} {
			if c.IsSet(flag) {
				*field = c.String(flag)
			}
		}
	}
	cfg, path, err := l4RunConfig(c, override)
	if err != nil {
		return err
	}
	logger, err := l4RunLogger(c)
	if err != nil {
		return err
	}
	d, err := daemon.New(daemon.Options{Config: cfg, ConfigPath: path, Override: override, Logger: logger, Store: c.String("store")})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := startUI(ctx, c, "l4", cfg.Metrics, "--metrics ADDR:PORT"); err != nil {
		return err
	}
	return d.Run(ctx)
}

// l4RunConfig loads --config (or starts from an empty configuration with --iface), applies the
// flags' overrides and the defaults, and validates; path is the file's absolute path, or empty.
func l4RunConfig(c *cli.Context, override func(*config.Config)) (*config.Config, string, error) {
	cfg := &config.Config{}
	path := c.String("config")
	if path != "" {
		var err error
		if cfg, err = config.LoadSnapshotted(path); err != nil { // an unchanged file: its snapshot
			return nil, "", err
		}
		if path, err = filepath.Abs(path); err != nil {
			return nil, "", fmt.Errorf("resolve config path: %w", err)
		}
	} else if !c.IsSet("iface") {
		return nil, "", errors.New("lb run: give --config FILE or at least --iface INTERFACE")
	}
	override(cfg)
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, "", fmt.Errorf("lb run: %w", err)
	}
	return cfg, path, nil
}

// l4RunLogger is the daemon's logger, as --log-format and --debug ask.
func l4RunLogger(c *cli.Context) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{}
	if c.Bool("debug") {
		opts.Level = slog.LevelDebug
	}
	switch c.String("log-format") {
	case "text":
		return slog.New(slog.NewTextHandler(c.App.ErrWriter, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(c.App.ErrWriter, opts)), nil
	default:
		return nil, fmt.Errorf("unknown --log-format %q: use text or json", c.String("log-format"))
	}
}

func l4DetachCmd() *cli.Command {
	return &cli.Command{
		Name:  "detach",
		Usage: "detach the forwarder and remove its pinned link and maps (drops every established flow)",
		Description: `Stop the daemon first (SIGTERM); this then removes what it left pinned.

   Examples:
     switchyard lb detach --iface eth0
     switchyard lb detach --iface veth0 --pin-dir /sys/fs/bpf/switchyard/lab/lb-veth0`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "iface", Aliases: []string{"i"}, Usage: "`INTERFACE` the forwarder runs on", Required: true},
			&cli.StringFlag{Name: "pin-dir", Usage: "bpffs `DIR` (default /sys/fs/bpf/switchyard/<iface>)"},
			&cli.StringFlag{Name: "socket", EnvVars: []string{"SWITCHYARD_SOCKET"}, Usage: "control socket `PATH` of the daemon, to check it is stopped (default /run/switchyard/<iface>.sock)"},
		},
		Action: func(c *cli.Context) error {
			if os.Geteuid() != 0 {
				return errors.New("lb detach: not root: removing BPF pins needs root: run with sudo")
			}
			sock := c.String("socket")
			if sock == "" {
				sock = config.DefaultSocket(c.String("iface"))
			}
			// A running daemon would keep the program attached through its own handle.
			if err := api.NewClient(sock).Call(c.Context, api.OpStatus, api.Empty{}, nil); err == nil {
				return fmt.Errorf("lb detach: a daemon still runs on %s: stop it first (SIGTERM), then detach", sock)
			}
			dir := c.String("pin-dir")
			if dir == "" {
				dir = config.DefaultPinDir(c.String("iface"))
			}
			if err := loader.Detach(dir); err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "detached: removed link and maps under %s\n", dir)
			return nil
		},
	}
}

func l4StatusCmd() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the daemon: interface, link and program ids, next hop, counts",
		Description: `Examples:
     switchyard lb status
     switchyard lb status --iface eth0 --json`,
		Flags: l4SocketFlags(),
		Action: func(c *cli.Context) error {
			var st api.Status
			if err := l4Call(c, api.OpStatus, api.Empty{}, &st); err != nil {
				return err
			}
			return l4Output(c, st, func(w io.Writer) {
				fmt.Fprintf(w, "interface\t%s (%s XDP)\n", st.Interface, st.XDPMode)
				fmt.Fprintf(w, "pin dir\t%s\n", st.PinDir)
				fmt.Fprintf(w, "config\t%s\n", l4Or(st.Config, "(none: save with `lb config save --path`)"))
				fmt.Fprintf(w, "link id / program id\t%d / %d (adopted: %v)\n", st.LinkID, st.ProgramID, st.Adopted)
				fmt.Fprintf(w, "next hop\t%s %s (mtu %d)\n", l4Or(st.Gateway, "unresolved"), st.NextHopMAC, st.MTU)
				fmt.Fprintf(w, "vips / backends\t%d / %d\n", st.VIPs, st.Backends)
				fmt.Fprintf(w, "started\t%s\n", st.Started.Format(time.RFC3339))
				l4PrintFleet(w, st)
				l4PrintBGP(w, st.BGP)
			})
		},
	}
}

func l4Or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func l4HealthCmd() *cli.Command {
	return &cli.Command{
		Name:  "health",
		Usage: "show every health check: state, consecutive results, last error",
		Description: `Examples:
     switchyard lb health
     switchyard lb health --json`,
		Flags: l4SocketFlags(),
		Action: func(c *cli.Context) error {
			var hs []api.HealthInfo
			if err := l4Call(c, api.OpHealth, api.Empty{}, &hs); err != nil {
				return err
			}
			return l4Output(c, hs, func(w io.Writer) {
				fmt.Fprintln(w, "VIP\tBACKEND\tCHECK\tMODE\tSTATE\tOK\tFAIL\tSINCE\tLAST ERROR")
				for _, h := range hs {
					state := "healthy"
					if !h.Healthy {
						state = "unhealthy"
					} else if !h.Checked {
						state = "pending"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", h.VIP, h.Backend, h.Check, h.Mode, state, h.Successes, h.Failures,
						time.Since(h.Since).Truncate(time.Second), h.LastError)
				}
				if len(hs) == 0 {
					fmt.Fprintln(w, "(no health check configured: every backend counts as healthy)")
				}
			})
		},
	}
}

func l4StatsCmd() *cli.Command {
	return &cli.Command{
		Name:  "stats",
		Usage: "show packets, bytes, rates and active flows per VIP and backend, and the forwarder counters",
		Description: `Rates are over the daemon's last one-second sample.

   Examples:
     switchyard lb stats
     switchyard lb stats --json`,
		Flags: l4SocketFlags(),
		Action: func(c *cli.Context) error {
			var st api.Stats
			if err := l4Call(c, api.OpStats, api.Empty{}, &st); err != nil {
				return err
			}
			return l4Output(c, st, func(w io.Writer) {
				fmt.Fprintln(w, "VIP\tID\tPACKETS\tBYTES\tPPS\tBIT/S\tACTIVE FLOWS\tDROPPED")
				for _, v := range st.VIPs {
					fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%.0f\t%.0f\t%d\t%d\n", v.Name, v.ID, v.Packets, v.Bytes, v.PPS, v.BPS, v.ActiveFlows, v.Dropped.Packets)
				}
				fmt.Fprintln(w, "\nBACKEND\tID\tPACKETS\tBYTES\tPPS\tBIT/S\tACTIVE FLOWS")
				for _, b := range st.Backends {
					fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%.0f\t%.0f\t%d\n", b.Address, b.ID, b.Packets, b.Bytes, b.PPS, b.BPS, b.ActiveFlows)
				}
				fmt.Fprintf(w, "\nCOUNTER\tPACKETS\tBYTES\n")
				names := make([]string, 0, len(st.Counters))
				for n := range st.Counters {
					names = append(names, n)
				}
				sort.Strings(names)
				for _, n := range names {
					fmt.Fprintf(w, "%s\t%d\t%d\n", n, st.Counters[n].Packets, st.Counters[n].Bytes)
				}
				fmt.Fprintf(w, "\nconnection table entries\t%d\n", st.Flows)
			})
		},
	}
}

func l4FlowCmd() *cli.Command {
	return &cli.Command{
		Name:      "flow",
		Usage:     "tell which backend a flow gets and why (connection table or Maglev slot)",
		ArgsUsage: "PROTO CLIENT:PORT VIP:PORT",
		Description: `Examples:
     switchyard lb flow tcp 198.18.0.5:40000 198.18.100.1:80
     switchyard lb flow udp [fd00:5e::5]:5353 [fd00:5e:100::1]:53 --json`,
		Flags: l4SocketFlags(),
		Action: l4Action(func(c *cli.Context, args []string) error {
			if err := l4Args(c, args, 3, "switchyard lb flow tcp 198.18.0.5:40000 198.18.100.1:80"); err != nil {
				return err
			}
			var fi api.FlowInfo
			req := api.FlowReq{Proto: args[0], Src: args[1], Dst: args[2]}
			if err := l4Call(c, api.OpFlow, req, &fi); err != nil {
				return err
			}
			return l4Output(c, fi, func(w io.Writer) {
				fmt.Fprintf(w, "flow\t%s\n", fi.Flow)
				fmt.Fprintf(w, "vip\t%s\n", fi.VIP)
				fmt.Fprintf(w, "backend\t%s\n", l4Or(fi.Backend, "none (dropped)"))
				fmt.Fprintf(w, "reason\t%s\n", fi.Reason)
				fmt.Fprintf(w, "maglev slot\t%d -> %s\n", fi.Slot, l4Or(fi.RingBackend, "empty"))
				if fi.Tracked {
					fmt.Fprintf(w, "connection table\tbackend id %d, idle %s, closing %v\n", fi.BackendID, fi.Idle.Truncate(time.Millisecond), fi.Closing)
				}
				if fi.SecondChance != "" {
					fmt.Fprintf(w, "second chance\t%s (every packet carries it; the first backend sends on what it does not hold)\n", fi.SecondChance)
				}
				if fi.Note != "" {
					fmt.Fprintf(w, "note\t%s\n", fi.Note)
				}
			})
		}),
	}
}

func l4ConfigCmd() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "check a configuration file, or save/reload the running one",
		Description: `Examples:
     switchyard lb config check lb.yaml
     switchyard lb config save
     switchyard lb config save --path /etc/switchyard/lb.yaml
     switchyard lb config reload`,
		Subcommands: []*cli.Command{
			{
				Name:      "check",
				Usage:     "validate a configuration file (no daemon needed); errors name line and field",
				ArgsUsage: "FILE",
				Description: `Examples:
     switchyard lb config check /etc/switchyard/lb.yaml`,
				Action: l4Action(func(c *cli.Context, args []string) error {
					if err := l4Args(c, args, 1, "switchyard lb config check FILE"); err != nil {
						return err
					}
					cfg, err := config.Load(args[0])
					if err != nil {
						return err
					}
					n := 0
					for _, v := range cfg.VIPs {
						n += len(v.Backends)
					}
					fmt.Fprintf(c.App.Writer, "%s: valid: interface %s, %d VIPs, %d backends\n", args[0], cfg.Interface, len(cfg.VIPs), n)
					for _, w := range cfg.Warnings() {
						fmt.Fprintf(c.App.Writer, "%s: warning: %s\n", args[0], w)
					}
					return nil
				}),
			},
			{
				Name:  "save",
				Usage: "write the running configuration (with every CLI change) to its file or to --path",
				Description: `Examples:
     switchyard lb config save
     switchyard lb config save --path /etc/switchyard/lb.yaml`,
				Flags: append(l4SocketFlags(), &cli.StringFlag{Name: "path", Usage: "`FILE` to write (default: the daemon's --config)"}),
				Action: func(c *cli.Context) error {
					var res api.SaveResult
					path := c.String("path")
					if path != "" {
						abs, err := filepath.Abs(path)
						if err != nil {
							return fmt.Errorf("resolve --path: %w", err)
						}
						path = abs
					}
					if err := l4Call(c, api.OpConfigSave, api.SaveReq{Path: path}, &res); err != nil {
						return err
					}
					return l4Output(c, res, func(w io.Writer) { fmt.Fprintf(w, "saved to %s\n", res.Path) })
				},
			},
			{
				Name:  "reload",
				Usage: "re-read the daemon's configuration file (like SIGHUP); an invalid file changes nothing",
				Description: `Examples:
     switchyard lb config reload`,
				Flags: l4SocketFlags(),
				Action: func(c *cli.Context) error {
					return l4Change(c, api.OpConfigReload, api.Empty{})
				},
			},
		},
	}
}

func l4AttachFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "iface", Aliases: []string{"i"}, Usage: "`INTERFACE` to attach to", Required: true},
		&cli.StringFlag{Name: "xdp-mode", Value: "native", Usage: "`MODE`: native or generic"},
		&cli.BoolFlag{Name: "detach", Usage: "remove the program (and its pins) instead"},
	}
}

func l4PassCmd() *cli.Command {
	return &cli.Command{
		Name:  "pass",
		Usage: "attach the XDP_PASS program (needed on the veth peer that receives the balancer's XDP_TX frames)",
		Description: `Examples:
     switchyard lb pass --iface veth-rt
     switchyard lb pass --iface veth-rt --detach`,
		Flags: append(l4AttachFlags(), &cli.StringFlag{Name: "pin-path", Usage: "bpffs `PATH` of the link (default /sys/fs/bpf/switchyard/pass-<iface>)"}),
		Action: func(c *cli.Context) error {
			if os.Geteuid() != 0 {
				return errors.New("lb pass: not root: attaching XDP needs root: run with sudo")
			}
			iface := c.String("iface")
			p := c.String("pin-path")
			if p == "" {
				p = "/sys/fs/bpf/switchyard/pass-" + iface
			}
			if c.Bool("detach") {
				if err := os.Remove(p); err != nil {
					return fmt.Errorf("lb pass --detach: remove %s: %w (was it attached with another --pin-path?)", p, err)
				}
				fmt.Fprintf(c.App.Writer, "pass detached from %s\n", iface)
				return nil
			}
			l, err := loader.AttachPass(iface, loader.Mode(c.String("xdp-mode")), p)
			if err != nil {
				return err
			}
			l.Close()
			fmt.Fprintf(c.App.Writer, "pass attached to %s (link pinned at %s)\n", iface, p)
			return nil
		},
	}
}
