package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/app"
	"github.com/switchyard/switchyard/lab/experiment"
)

func init() {
	prefix := &cli.StringFlag{Name: "prefix", Value: "sy", Usage: "name prefix of the lab's namespaces (sy-rt, sy-c1...): several labs can run side by side"}
	register(&cli.Command{
		Name:  "lab",
		Usage: "a network-namespace lab that runs every stop, its demo and its experiments",
		Description: `The lab builds, with netlink, a topology of network namespaces on this machine: clients, a
router as the fabric, balancers running switchyard's XDP forwarder, backends (VIPs on their
loopback, the decap program on their interface, an app server) and namespaces for the DNS,
edge-cache and L7 stops. Traffic stays inside those namespaces (198.18.0.0/15, fd00:5e::/32).
Needs root.

Examples:
   switchyard lab up                      # build the default lab and start its processes
   switchyard lab status --json           # namespaces, interfaces, addresses, VIPs, backends
   switchyard lab demo --duration 30s     # send traffic and show where it goes
   switchyard lab experiment list
   switchyard lab experiment run l4-skew --quick
   switchyard lab down                    # remove every namespace, pin and process`,
		Subcommands: []*cli.Command{
			{
				Name:  "up",
				Usage: "build the lab and start its processes (idempotent)",
				Description: `Builds the namespaces, loads xdp_pass, decap and the forwarder, and starts the app
servers, the balancer daemon and the DNS, edge and L7 stops. Running it again keeps what runs.
It prints the address of the live web view of every stop and of a Prometheus scraping them
(--ui, --prometheus; docs/ops.md).

Examples:
   switchyard lab up
   switchyard lab up --backends 5 --balancers 2 --json
   switchyard lab up --prefix t1 --l7 0 --no-dns --no-edge --balancer direct
   switchyard lab up --cdn --prefix cdn    # the Mini-CDN topology (labcdn.go)`,
				Flags:  append(upFlags(prefix), &cli.BoolFlag{Name: "json", Usage: "print the lab's status as JSON"}, cdnFlag),
				Action: labUp,
			},
			{
				Name:  "down",
				Usage: "remove every namespace, link, pin and process of the lab (also after a crash)",
				Description: `Examples:
   switchyard lab down
   switchyard lab down --prefix t1`,
				Flags:  []cli.Flag{prefix},
				Action: labDown,
			},
			{
				Name:  "status",
				Usage: "show what runs: namespaces, roles, interfaces, addresses, processes, VIPs and backends",
				Description: `Examples:
   switchyard lab status
   switchyard lab status --json | jq '.vips[] | {name, address, backends}'`,
				Flags:  []cli.Flag{prefix, &cli.BoolFlag{Name: "json", Usage: "machine-readable status for scripts"}},
				Action: labStatus,
			},
			labDemoCmd(prefix),
			labExperimentCmd(),
			{
				Name:   "app",
				Hidden: true,
				Usage:  "the lab's app server (runs inside a backend namespace)",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "name", Required: true, Usage: "the name the server reports"},
					&cli.StringFlag{Name: "listen", Value: ":80", Usage: "HTTP listen address"},
					&cli.StringSliceFlag{Name: "udp", Usage: "UDP echo address (repeatable; bind each VIP so answers come from it)"},
				},
				Action: labApp,
			},
			labOriginCommand(), // labcdn.go
		},
	})
}

// labExperimentCmd is `lab experiment`: list and run the experiments (lab/experiment).
func labExperimentCmd() *cli.Command {
	return &cli.Command{
		Name:  "experiment",
		Usage: "the seeds' measurements re-run on the real system",
		Subcommands: []*cli.Command{
			{
				Name:   "list",
				Usage:  "list the experiments",
				Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "machine-readable list"}},
				Action: labExperimentList,
			},
			{
				Name:  "run",
				Usage: "run one experiment and print the measured table beside the lesson's figures",
				Description: `Examples:
   switchyard lab experiment run l4-skew
   switchyard lab experiment run health-check --quick --json`,
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "quick", Usage: "scaled-down run (seconds), said in the output"},
					&cli.BoolFlag{Name: "json", Usage: "also print a machine-readable result"},
				},
				Action: labExperimentRun,
			},
		},
	}
}

// labDemoCmd is `lab demo`: the lab up, bounded traffic, a view of where it goes.
func labDemoCmd(prefix cli.Flag) *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "bring the lab up, send real traffic and show where it goes; tear down at the end",
		Description: `Sends a bounded rate of HTTP requests (--rate in total, shared by the clients) to the VIPs
and shows, per backend, requests per second (averaged over 5 s) and open connections, and what
the balancer, L7, edge and DNS stops count; a summary is printed at the end. On a terminal it redraws one screen; without one
(CI, make demo | tee) it prints a line per interval. Ctrl-C or --duration ends it (default
10m on a terminal, 1m without one; also DEMO_DURATION=20s make demo); a lab the demo brought
up is then torn down (keep it with --keep).

Examples:
   switchyard lab demo
   switchyard lab demo --duration 20s --rate 200`,
		Flags: append(upFlags(prefix),
			&cli.DurationFlag{Name: "duration", Value: 10 * time.Minute, EnvVars: []string{"DEMO_DURATION"}, Usage: "how long to send traffic, at most 1h (default 10m on a terminal, 1m without one)"},
			&cli.IntFlag{Name: "rate", Value: 100, Usage: "requests per second over all clients (1..5000)"},
			&cli.DurationFlag{Name: "interval", Value: time.Second, Usage: "time between two views"},
			&cli.BoolFlag{Name: "keep", Usage: "leave the lab up at the end"},
		),
		Action: labDemo,
	}
}

// labExperimentList prints the registered experiments.
func labExperimentList(c *cli.Context) error {
	list := experiment.List()
	if c.Bool("json") {
		type row struct {
			Name, Stop, Summary string
			NeedsRoot           bool
		}
		var rows []row
		for _, e := range list {
			rows = append(rows, row{e.Name, e.Stop, e.Summary, e.NeedsRoot})
		}
		return json.NewEncoder(c.App.Writer).Encode(rows)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTOP\tROOT\tSUMMARY")
	for _, e := range list {
		root := ""
		if e.NeedsRoot {
			root = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Name, e.Stop, root, e.Summary)
	}
	return tw.Flush()
}

// labExperimentRun runs one experiment by name and prints its output.
func labExperimentRun(c *cli.Context) error {
	// Flags may follow the name (`run l4-skew --quick`), which the
	// CLI library leaves among the arguments.
	quick, asJSON := c.Bool("quick"), c.Bool("json")
	var names []string
	for _, a := range c.Args().Slice() {
		switch a {
		case "--quick", "-quick":
			quick = true
		case "--json", "-json":
			asJSON = true
		default:
			if strings.HasPrefix(a, "-") {
				return fmt.Errorf("experiment run: unknown flag %s: use --quick or --json", a)
			}
			names = append(names, a)
		}
	}
	if len(names) != 1 {
		return errors.New("experiment run: give exactly one experiment name (see `switchyard lab experiment list`)")
	}
	e, err := experiment.Get(names[0])
	if err != nil {
		return err
	}
	if e.NeedsRoot && os.Geteuid() != 0 {
		return fmt.Errorf("experiment %s needs root (it builds network namespaces or loads BPF): run it as root", e.Name)
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return e.Run(ctx, c.App.Writer, experiment.Options{Quick: quick, JSON: asJSON})
}

// labStatus prints what runs in the lab.
func labStatus(c *cli.Context) error {
	if err := needRoot("lab status"); err != nil {
		return err
	}
	st, err := lab.GetStatus(c.String("prefix"))
	if err != nil {
		return err
	}
	return printStatus(c, st)
}

// upFlags size the lab: `lab up` and `lab demo` (which brings the lab up when it is not).
func upFlags(prefix cli.Flag) []cli.Flag {
	flags := []cli.Flag{prefix,
		&cli.IntFlag{Name: "clients", Value: 2, Usage: "client namespaces"},
		&cli.IntFlag{Name: "backends", Value: 3, Usage: "backend namespaces behind the web VIPs"},
		&cli.IntFlag{Name: "balancers", Value: 2, Usage: "balancer namespaces; the router spreads the VIPs over them by ECMP (each runs its own forwarder; Maglev gives them the same table)"},
		&cli.IntFlag{Name: "l7", Value: 2, Usage: "L7 instances behind their own VIP (0: none)"},
		&cli.BoolFlag{Name: "no-dns", Usage: "no DNS namespace"},
		&cli.BoolFlag{Name: "no-edge", Usage: "no edge-cache namespace"},
		&cli.StringFlag{Name: "balancer", Value: "auto", Usage: "auto, daemon (`switchyard lb run` per balancer) or direct (forwarder maps written once, no health checks)"},
		&cli.IntFlag{Name: "store-members", Value: 1, Usage: "etcd members of the fleet store in their own namespace; the daemons take the VIPs from it (0: none, each daemon uses its file)"},
		&cli.BoolFlag{Name: "store-plain", Usage: "run the store without TLS and auth (etcd://); by default etcds:// with the lab's CA, client certificates and a user limited to the lab's prefix"},
		&cli.BoolFlag{Name: "store-passwords", Usage: "the store's users authenticate by password (a file in the lab's etcd-pki) instead of client certificates"},
		&cli.BoolFlag{Name: "static-routes", Usage: "static ECMP VIP routes on the router instead of BGP (bird2); always so with --balancer direct"},
	}
	return append(flags, observeFlags()...) // labui.go
}

func needRoot(what string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s: needs root (network namespaces and BPF): run it as root", what)
	}
	return nil
}

// hasCommand reports whether this binary has the command path (e.g. "lb", "run"): the lab runs
// the stops that exist.
func hasCommand(path ...string) bool {
	cmds := commands
	for _, name := range path {
		var found *cli.Command
		for _, c := range cmds {
			if c.Name == name {
				found = c
			}
		}
		if found == nil {
			return false
		}
		cmds = found.Subcommands
	}
	return true
}

func labUp(c *cli.Context) error {
	if err := needRoot("lab up"); err != nil {
		return err
	}
	if c.Bool("cdn") {
		return labUpCDN(c) // labcdn.go
	}
	o, err := upOptions(c)
	if err != nil {
		return err
	}
	if _, err := lab.Up(o); err != nil {
		return fmt.Errorf("lab up: %w (clean up with `switchyard lab down --prefix %s`)", err, o.Spec.Prefix)
	}
	st, err := lab.GetStatus(o.Spec.Prefix)
	if err != nil {
		return err
	}
	return printStatus(c, st)
}

func upOptions(c *cli.Context) (lab.UpOptions, error) {
	if err := checkObserveFlags(c); err != nil { // labui.go
		return lab.UpOptions{}, err
	}
	s := lab.DefaultSpec()
	s.Prefix = c.String("prefix")
	if c.IsSet("clients") {
		s.Clients = c.Int("clients")
	}
	if c.IsSet("backends") {
		s.Backends = c.Int("backends")
	}
	if c.IsSet("balancers") {
		s.Balancers = c.Int("balancers")
	}
	if c.IsSet("l7") {
		s.L7 = c.Int("l7")
	}
	s.DNS, s.Edge = !c.Bool("no-dns"), !c.Bool("no-edge")
	if _, err := lab.Plan(s); err != nil { // bad sizes or prefix, before anything is built
		return lab.UpOptions{}, err
	}
	mode := c.String("balancer")
	switch mode {
	case "auto":
		mode = lab.ModeDirect
		if hasCommand("lb", "run") {
			mode = lab.ModeDaemon
		}
	case lab.ModeDaemon:
		if !hasCommand("lb", "run") {
			return lab.UpOptions{}, errors.New("lab up: --balancer daemon needs `switchyard lb run`, which this binary lacks: use --balancer direct")
		}
	case lab.ModeDirect:
	default:
		return lab.UpOptions{}, fmt.Errorf("lab up: --balancer %q: use auto, daemon or direct", mode)
	}
	// The router learns the VIP routes from the balancer daemons over BGP; the direct
	// forwarder announces nothing, so it gets static routes.
	s.BGP = mode == lab.ModeDaemon && !c.Bool("static-routes")
	exe, err := lab.Binary()
	if err != nil {
		return lab.UpOptions{}, err
	}
	o := lab.UpOptions{Spec: s, Exe: exe, Balancer: mode, StoreMembers: c.Int("store-members"), StorePlain: c.Bool("store-plain"), StorePasswords: c.Bool("store-passwords"), Stops: map[string]bool{
		"dns": hasCommand("dns", "run"), "edge": hasCommand("edge", "run"), "l7": hasCommand("l7", "run"),
	}}
	observeOptions(c, &o)
	return o, nil
}

func printStatus(c *cli.Context, st *lab.Status) error {
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	st.Print(c.App.Writer)
	return nil
}

func labDown(c *cli.Context) error {
	if err := needRoot("lab down"); err != nil {
		return err
	}
	p := c.String("prefix")
	if err := lab.Destroy(p); err != nil {
		return fmt.Errorf("lab down: %w", err)
	}
	fmt.Fprintf(c.App.Writer, "lab %q is down: namespaces, pins and processes removed\n", p)
	return nil
}

func labDemo(c *cli.Context) error {
	if err := needRoot("lab demo"); err != nil {
		return err
	}
	live := isTerminal(c.App.Writer)
	d := c.Duration("duration")
	if !c.IsSet("duration") && !live {
		d = time.Minute // non-interactive (CI, `make demo | tee`): a short bounded run
	}
	if d <= 0 || d > time.Hour {
		return fmt.Errorf("lab demo: --duration %s out of range: use 1s..1h", d)
	}
	rate := c.Int("rate")
	if rate < 1 || rate > 5000 {
		return fmt.Errorf("lab demo: --rate %d out of range: use 1..5000 requests per second", rate)
	}
	p := c.String("prefix")
	st, err := lab.LoadState(p)
	if err == nil && st.CDN != nil {
		return fmt.Errorf("lab demo: lab %q is the Mini-CDN (lab up --cdn), which the demo does not drive: use another --prefix", p)
	}
	broughtUp := false
	if err != nil {
		o, err := upOptions(c)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.App.Writer, "bringing lab %q up (balancer: %s)...\n", p, o.Balancer)
		if st, err = lab.Up(o); err != nil {
			lab.Destroy(p)
			return fmt.Errorf("lab demo: %w", err)
		}
		broughtUp = true
		if s, err := lab.GetStatus(p); err == nil {
			s.Print(c.App.Writer)
		}
		// Give the app servers (and the daemon's health checks) a moment to come up.
		time.Sleep(2 * time.Second)
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if st.UI != "" {
		fmt.Fprintf(c.App.Writer, "live view of the whole path: %s\n", st.UI)
	}
	fmt.Fprintf(c.App.Writer, "sending %d requests/s in total (shared by the clients) for at most %s, along:\n", rate, d)
	for _, t := range lab.DemoTargets(st) {
		fmt.Fprintf(c.App.Writer, "  %-5s %-28s %s\n", t.Name, t.URL, t.Route)
	}
	derr := lab.Demo(ctx, st, c.App.Writer, lab.DemoOptions{Duration: d, Interval: c.Duration("interval"), Rate: rate, Live: live})
	if broughtUp && !c.Bool("keep") {
		fmt.Fprintf(c.App.Writer, "tearing lab %q down...\n", p)
		if err := lab.Destroy(p); err != nil {
			return errors.Join(derr, fmt.Errorf("lab demo: tear down: %w (run `switchyard lab down`)", err))
		}
	}
	return derr
}

// isTerminal reports whether w is a terminal (a live screen) rather than a pipe or file.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func labApp(c *cli.Context) error {
	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("lab app: listen on %s: %w", c.String("listen"), err)
	}
	var udp []net.PacketConn
	for _, a := range c.StringSlice("udp") {
		if _, err := netip.ParseAddrPort(a); err != nil {
			return fmt.Errorf("lab app: --udp %q: %w (use ADDR:PORT, e.g. 198.18.100.1:7)", a, err)
		}
		u, err := net.ListenPacket("udp", a)
		if err != nil {
			return fmt.Errorf("lab app: listen udp on %s: %w", a, err)
		}
		udp = append(udp, u)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(c.App.ErrWriter, "app %s: http on %s, udp echo on %v\n", c.String("name"), ln.Addr(), c.StringSlice("udp"))
	return app.New(c.String("name")).Run(ctx, ln, udp...)
}
