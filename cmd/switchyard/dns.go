package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"

	sydns "github.com/switchyard/switchyard/dns"
	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/adminauth"
	"github.com/switchyard/switchyard/internal/gcheadroom"
	"github.com/switchyard/switchyard/internal/handover"
)

func init() {
	register(&cli.Command{
		Name:  "dns",
		Usage: "authoritative DNS with geolocation, latency, weighted and failover policies",
		Description: `The DNS stop answers the zones of a YAML configuration over UDP and TCP; its dynamic
   names resolve by a routing policy over health-checked sites. See docs/dns.md.

   Examples:
     switchyard dns check --config dns.yaml
     switchyard dns run --config dns.yaml --listen 127.0.0.1:5353 --metrics 127.0.0.1:9153
     switchyard dns query --server 127.0.0.1:5353 app.example.com A
     switchyard dns query --server 127.0.0.1:5353 --subnet 10.1.0.0/24 app.example.com
     switchyard dns keygen --zone example.com.   (DNSSEC key; prints the DS for the parent)
     switchyard dns status --metrics 127.0.0.1:9153   (zones' serials, dynamic updates taken)
     switchyard dns reload --metrics 127.0.0.1:9153 --token-file dns.token --zone example.com.
     switchyard dns upgrade --control /run/switchyard/dns.sock   (with dns run --control ...)`,
		Subcommands: []*cli.Command{dnsRunCmd(), dnsCheckCmd(), dnsQueryCmd(), dnsKeygenCmd(), dnsKeysCmd(), dnsStatusCmd(), dnsReloadCmd(), upgradeCommand("dns")},
	})
}

var dnsConfigFlag = &cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "YAML configuration `FILE`", Required: true}

func dnsRunCmd() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "serve the configured zones until SIGINT/SIGTERM; SIGHUP reloads the configuration",
		Description: `With --metrics and --token-file, POST /reload on the metrics listener reloads the
   configuration or one zone (switchyard dns reload).

   Examples:
     switchyard dns run --config dns.yaml
     switchyard dns run --config dns.yaml --metrics 127.0.0.1:9153 --token-file /etc/switchyard/dns.token
     switchyard dns run --config dns.yaml --listen 0.0.0.0:53 --metrics 0.0.0.0:9153 --query-log   (":9153" is loopback)`,
		Flags: append([]cli.Flag{
			dnsConfigFlag,
			&cli.StringFlag{Name: "listen", Usage: "override the configured UDP+TCP `ADDR:PORT`"},
			&cli.StringFlag{Name: "metrics", Usage: "serve Prometheus metrics on `ADDR:PORT` at /metrics"},
			&cli.BoolFlag{Name: "query-log", Usage: "log every query (overrides query_log)"},
		}, append(append(tokenFlags(dnsTokenEnv, "admin token that `dns reload` must send to POST /reload on the metrics listener (none: reloads only by SIGHUP)"),
			uiFlags()...), upgradeFlags("dns")...)...),
		Action: func(c *cli.Context) error {
			log := slog.New(slog.NewTextHandler(c.App.ErrWriter, nil))
			gen, err := startGeneration(c, "dns", log)
			if err != nil {
				return err
			}
			defer gen.Close()
			// A failure before Ready goes to the process being replaced, which keeps serving.
			return gen.Fail(dnsServe(c, gen, log))
		},
	}
}

func dnsServe(c *cli.Context, gen *handover.Process, log *slog.Logger) error {
	path := c.String("config")
	load := func() (*config.Config, error) {
		cfg, err := config.Load(path)
		if err != nil {
			return nil, err
		}
		if c.IsSet("listen") {
			cfg.Listen = c.String("listen")
		}
		if c.Bool("query-log") {
			cfg.QueryLog = true
		}
		return cfg, nil
	}
	cfg, err := load()
	if err != nil {
		return err
	}
	token, err := adminToken(c, dnsTokenEnv)
	if err != nil {
		return err
	}
	defer gcheadroom.Hold(sydns.GCHeadroom)() // this process is the server's, zones loading included
	srv, err := sydns.NewServer(cfg, sydns.Options{Logger: log, Sockets: gen.Sockets()})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := srv.Start(ctx); err != nil {
		return err
	}
	defer srv.Close()
	defer gcheadroom.Hold(sydns.GCHeadroom)()                  // this process is the server's
	metricsAddr := ""                                          // where --ui reads the metrics
	if m := adminauth.Loopback(c.String("metrics")); m != "" { // ":9153" binds to loopback
		ln, err := gen.Sockets().Listen("tcp", m)
		if err != nil {
			return fmt.Errorf("listen metrics %s: %w", m, err)
		}
		mux := http.NewServeMux()
		// The metrics on every path, as before; POST /reload is `dns reload`'s (needs the token).
		mux.Handle("/", promhttp.HandlerFor(srv.Registry(), promhttp.HandlerOpts{}))
		mux.Handle("/reload", srv.ReloadHandler(token, load))
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go hs.Serve(ln)
		defer hs.Close()
		metricsAddr = ln.Addr().String()
	}
	// Before Ready: the web view's listener is inherited too (Ready closes what is not taken).
	if err := startUIOn(ctx, c, gen.Sockets(), "dns", metricsAddr, "--metrics ADDR:PORT"); err != nil {
		return err
	}
	if err := gen.Ready(); err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// Printed once SIGHUP is handled, so whoever waits for this line may send it.
	fmt.Fprintf(c.App.Writer, "switchyard dns serving on %s (udp+tcp)\n", srv.Addr())
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-gen.Upgraded():
			// Replaced: answer what is in flight; the new process reads the same sockets.
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		case <-hup:
			if err := srv.ReloadWith(load); err != nil {
				log.Error("dns reload failed; old zones kept", "err", err)
			}
		}
	}
}

func dnsCheckCmd() *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "validate a configuration and its zone files, print the zones and dynamic names",
		Description: `Exits non-zero with the line and field of the first problem.

   Example:
     switchyard dns check --config dns.yaml`,
		Flags: []cli.Flag{dnsConfigFlag},
		Action: func(c *cli.Context) error {
			cfg, err := config.Load(c.String("config"))
			if err != nil {
				return err
			}
			srv, err := sydns.NewServer(cfg, sydns.Options{})
			if err != nil {
				return err
			}
			w := c.App.Writer
			for _, z := range srv.Zones() {
				fmt.Fprintf(w, "zone %s: %d static records, serial %d\n", z.Origin, z.Count(), z.SOA.Serial)
			}
			names := srv.Names()
			sort.Slice(names, func(i, j int) bool { return names[i].FQDN < names[j].FQDN })
			for _, n := range names {
				fmt.Fprintf(w, "name %s: policy %s, ttl %ds, all-down %s, %d sites\n", n.FQDN, n.Policy, n.TTL, n.AllDown, len(n.Sites))
			}
			for _, line := range srv.TransferSummary() {
				fmt.Fprintln(w, line)
			}
			for _, line := range srv.UpdateSummary() {
				fmt.Fprintln(w, line)
			}
			for _, line := range srv.DNSSECSummary() {
				fmt.Fprintln(w, line)
			}
			for _, line := range srv.XDPSummary() {
				fmt.Fprintln(w, line)
			}
			fmt.Fprintln(w, "configuration OK")
			return nil
		},
	}
}

func dnsQueryCmd() *cli.Command {
	return &cli.Command{
		Name:      "query",
		Usage:     "send one query and print the response (a small dig)",
		ArgsUsage: "NAME [TYPE]",
		Description: `Examples:
     switchyard dns query --server 127.0.0.1:5353 www.example.com
     switchyard dns query --server 127.0.0.1:5353 --subnet 10.1.0.0/24 app.example.com A
     switchyard dns query --server 127.0.0.1:5353 --tcp example.com TXT`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "server", Value: "127.0.0.1:5353", Usage: "server `ADDR:PORT`"},
			&cli.BoolFlag{Name: "tcp", Usage: "query over TCP"},
			&cli.StringFlag{Name: "subnet", Usage: "EDNS Client Subnet `PREFIX`, e.g. 10.1.0.0/24"},
			&cli.StringFlag{Name: "source", Usage: "bind to local `ADDR` (the resolver address the server sees)"},
			&cli.BoolFlag{Name: "no-edns", Usage: "send no OPT record"},
			&cli.BoolFlag{Name: "dnssec", Usage: "set the DO bit: a signed zone adds RRSIG and NSEC records"},
			&cli.UintFlag{Name: "bufsize", Value: 1232, Usage: "EDNS UDP buffer `SIZE`"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() < 1 || c.NArg() > 2 {
				return errors.New("query: give NAME and optionally TYPE, e.g. `switchyard dns query app.example.com A`")
			}
			qtype := uint16(1)
			if c.NArg() == 2 {
				t, err := sydns.ParseType(c.Args().Get(1))
				if err != nil {
					return err
				}
				qtype = t
			}
			o := sydns.QueryOptions{TCP: c.Bool("tcp"), Subnet: c.String("subnet"), NoEDNS: c.Bool("no-edns"),
				DNSSEC: c.Bool("dnssec"), BufSize: uint16(c.Uint("bufsize"))}
			if s := c.String("source"); s != "" {
				a, err := netip.ParseAddr(s)
				if err != nil {
					return fmt.Errorf("parse --source %q: give an IP address: %w", s, err)
				}
				o.Source = a
			}
			ctx, cancel := context.WithTimeout(c.Context, 5*time.Second)
			defer cancel()
			resp, rtt, err := sydns.Query(ctx, c.String("server"), c.Args().Get(0), qtype, o)
			if err != nil {
				return err
			}
			fmt.Fprintln(c.App.Writer, resp.String())
			fmt.Fprintf(c.App.Writer, ";; round trip %s, %d bytes\n", rtt.Round(time.Microsecond), resp.Len())
			return nil
		},
	}
}
