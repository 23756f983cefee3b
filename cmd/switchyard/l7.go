package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/internal/handover"
	"github.com/switchyard/switchyard/l7"
)

func init() {
	adminFlag := &cli.StringFlag{Name: "admin", Usage: "admin endpoint `HOST:PORT` of a running l7 (its admin.address)"}
	configFlag := &cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "L7 configuration `FILE` (YAML)"}
	register(&cli.Command{
		Name:  "l7",
		Usage: "content-aware HTTP proxy tier: routes each request to an application pool",
		Description: `The L7 tier terminates HTTP/1.1, HTTP/2 (TLS and h2c) and upgrades, matches every request
on host, path, method, header and query (first match wins, in file order), and balances it over
the route's pool with health checks, outlier ejection, retry budgets, shedding and rate limits.

Examples:
  switchyard l7 run --config l7.yaml              # serve; SIGHUP reloads, SIGUSR1 reopens the access log, SIGTERM drains and exits
  switchyard l7 routes --config l7.yaml           # validate a file and print its route table
  switchyard l7 routes --admin 127.0.0.1:9901     # the table a running proxy uses
  switchyard l7 backends --admin 127.0.0.1:9901   # health, drain, ejection and in-flight per backend
  switchyard l7 drain --admin 127.0.0.1:9901 --token-file l7.token --pool reads --backend 127.0.0.1:9001
  switchyard l7 drain --admin 127.0.0.1:9901 --token-file l7.token --pool reads --backend 127.0.0.1:9001 --undo
  SWITCHYARD_L7_TOKEN=... switchyard l7 reload --admin 127.0.0.1:9901   # drain and reload need admin.token
  switchyard l7 run --config l7.yaml --control /run/switchyard/l7.sock
  switchyard l7 upgrade --control /run/switchyard/l7.sock  # new binary + config, no request dropped`,
		Subcommands: []*cli.Command{
			{
				Name:      "run",
				Usage:     "run the proxy on the configured listeners until interrupted",
				UsageText: "switchyard l7 run --config l7.yaml [--log-level debug] [--control /run/switchyard-l7-default/control.sock]",
				Flags:     append(append([]cli.Flag{configFlag, &cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"}}, uiFlags()...), upgradeFlags("l7")...),
				Action:    l7Run,
			},
			{
				Name:      "routes",
				Usage:     "print the route table, in precedence order, from a file or a running proxy",
				UsageText: "switchyard l7 routes --config l7.yaml | --admin 127.0.0.1:9901 [--json]",
				Flags:     []cli.Flag{configFlag, adminFlag, &cli.BoolFlag{Name: "json", Usage: "print JSON"}},
				Action:    l7Routes,
			},
			{
				Name:      "backends",
				Usage:     "print every backend of a running proxy with its state",
				UsageText: "switchyard l7 backends --admin 127.0.0.1:9901 [--json]",
				Flags:     []cli.Flag{adminFlag, &cli.BoolFlag{Name: "json", Usage: "print JSON"}},
				Action:    l7Backends,
			},
			{
				Name:      "drain",
				Usage:     "stop new requests to a backend (in-flight ones finish); --undo puts it back",
				UsageText: "switchyard l7 drain --admin 127.0.0.1:9901 --token-file FILE --pool POOL --backend HOST:PORT [--undo]",
				Flags: append([]cli.Flag{adminFlag,
					&cli.StringFlag{Name: "pool", Required: true, Usage: "pool `NAME`"},
					&cli.StringFlag{Name: "backend", Required: true, Usage: "backend `HOST:PORT`"},
					&cli.BoolFlag{Name: "undo", Usage: "undrain: send new requests to the backend again"}}, l7TokenFlags()...),
				Action: l7Drain,
			},
			{
				Name:      "reload",
				Usage:     "make a running proxy re-read its configuration file (the old one stays on error)",
				UsageText: "switchyard l7 reload --admin 127.0.0.1:9901 --token-file FILE",
				Flags:     append([]cli.Flag{adminFlag}, l7TokenFlags()...),
				Action:    l7Reload,
			},
			upgradeCommand("l7"),
		},
	})
}

func l7Run(c *cli.Context) error {
	path := c.String("config")
	if path == "" {
		return fmt.Errorf("l7 run: --config is required; e.g. switchyard l7 run --config l7.yaml")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return fmt.Errorf("l7 run: --log-level %q: use debug, info, warn or error", c.String("log-level"))
	}
	log := slog.New(slog.NewJSONHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: level}))
	gen, err := startGeneration(c, "l7", log)
	if err != nil {
		return err
	}
	defer gen.Close()
	// A failure before Ready goes to the process being replaced, which keeps serving.
	return gen.Fail(l7Serve(c, gen, path, log))
}

func l7Serve(c *cli.Context, gen *handover.Process, path string, log *slog.Logger) error {
	cfg, err := l7.LoadConfig(path)
	if err != nil {
		return err
	}
	s, err := l7.NewServer(cfg, l7.WithLogger(log), l7.WithConfigPath(path), l7.WithSockets(gen.Sockets()))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc, err := s.Listen()
	if err != nil {
		s.Close()
		return err
	}
	// Before Ready: the web view's listener is inherited too (Ready closes what is not taken).
	if err := startUIOn(ctx, c, gen.Sockets(), "l7", cfg.Admin.Address, "an admin address (admin: {address: ...})"); err != nil {
		s.Close()
		return err
	}
	if err := gen.Ready(); err != nil {
		s.Close()
		return err
	}
	ctx, cancel := untilUpgraded(ctx, gen) // replaced: drain like on SIGTERM
	defer cancel()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP, syscall.SIGUSR1)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case sig := <-hup:
				if sig == syscall.SIGUSR1 { // logrotate moved the access log
					if err := s.ReopenAccessLog(); err != nil {
						log.Error("reopen access log failed; writing to the old file", "err", err)
					}
					continue
				}
				if err := s.ReloadFile(); err != nil {
					log.Error("reload failed; previous configuration stays", "err", err)
				}
			}
		}
	}()
	return s.Wait(ctx, errc)
}

func l7Routes(c *cli.Context) error {
	var routes []l7.RouteInfo
	switch {
	case c.String("config") != "":
		cfg, err := l7.LoadConfig(c.String("config"))
		if err != nil {
			return err
		}
		routes = l7.Routes(cfg)
	case c.String("admin") != "":
		if err := adminCall(c, http.MethodGet, "/routes", &routes); err != nil {
			return err
		}
	default:
		return fmt.Errorf("l7 routes: give --config FILE or --admin HOST:PORT")
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, routes)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ORDER\tNAME\tHOST\tPATH\tMETHODS\tHEADERS\tQUERY\tPOOL\tRETRIES")
	for _, r := range routes {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%d\n", r.Order, r.Name, dash(r.Host), dash(r.Path),
			dash(strings.Join(r.Methods, ",")), r.Headers, r.Query, r.Pool, r.Retries)
	}
	fmt.Fprintln(tw, "(first match wins, in this order; no match answers 404)")
	return tw.Flush()
}

func l7Backends(c *cli.Context) error {
	var bs []l7.BackendInfo
	if err := adminCall(c, http.MethodGet, "/backends", &bs); err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, bs)
	}
	printBackends(c.App.Writer, bs)
	return nil
}

func printBackends(w io.Writer, bs []l7.BackendInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tBACKEND\tWEIGHT\tHEALTH\tDRAIN\tEJECTED\tIN-FLIGHT")
	for _, b := range bs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\n", b.Pool, b.Address, b.Weight, yes(b.Healthy, "up", "down"),
			yes(b.Draining, "draining", "-"), yes(b.Ejected, "ejected", "-"), b.InFlight)
	}
	tw.Flush()
}

func l7Drain(c *cli.Context) error {
	q := url.Values{"pool": {c.String("pool")}, "backend": {c.String("backend")}}
	if c.Bool("undo") {
		q.Set("undo", "1")
	}
	var bs []l7.BackendInfo
	if err := adminCall(c, http.MethodPost, "/drain?"+q.Encode(), &bs); err != nil {
		return err
	}
	verb := "draining"
	if c.Bool("undo") {
		verb = "undrained"
	}
	fmt.Fprintf(c.App.Writer, "%s %s in pool %s\n", verb, c.String("backend"), c.String("pool"))
	printBackends(c.App.Writer, bs)
	return nil
}

func l7Reload(c *cli.Context) error {
	if err := adminCall(c, http.MethodPost, "/reload", nil); err != nil {
		return err
	}
	fmt.Fprintln(c.App.Writer, "reloaded")
	return nil
}

// l7TokenEnv is the environment variable that may hold the running l7's admin token.
const l7TokenEnv = "SWITCHYARD_L7_TOKEN"

// l7TokenFlags give the running l7's admin token to drain and reload.
func l7TokenFlags() []cli.Flag {
	return tokenFlags(l7TokenEnv, "the running l7's admin.token (drain and reload need it)")
}

// adminCall sends one request to the admin endpoint and decodes a JSON answer into out.
func adminCall(c *cli.Context, method, path string, out any) error {
	addr := c.String("admin")
	if addr == "" {
		return fmt.Errorf("l7 %s: --admin HOST:PORT is required (the admin.address of the running proxy)", c.Command.Name)
	}
	status, body, err := adminRequest(c, l7TokenEnv, method, "http://"+addr+path, 5*time.Second)
	if err != nil {
		return err
	}
	if status == http.StatusUnauthorized {
		return fmt.Errorf("admin %s %s: unauthorized: pass the proxy's admin.token with --token-file FILE or %s", method, path, l7TokenEnv)
	}
	if status != http.StatusOK {
		return fmt.Errorf("admin %s %s: %s", method, path, strings.TrimSpace(string(body)))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("decode admin answer: %w", err)
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yes(b bool, y, n string) string {
	if b {
		return y
	}
	return n
}
