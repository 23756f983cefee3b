package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/edge"
	"github.com/switchyard/switchyard/internal/handover"
)

func init() {
	register(&cli.Command{
		Name:  "edge",
		Usage: "run the RFC 9111 edge cache, and purge, push and inspect running edges",
		Description: `The edge stop: an HTTP cache close to the user with request collapsing, stale serving,
   a memory and a disk tier, purge/push, and smart tiered caching. See docs/edge.md.

   Examples:
     switchyard edge run --config /etc/switchyard/edge.yaml
     switchyard edge run --listen 127.0.0.1:8080 --origin http://127.0.0.1:8000 --admin-listen 127.0.0.1:9091 --token-file /etc/switchyard/edge/default.token
     switchyard edge purge --admin 127.0.0.1:9091 --token-file /etc/switchyard/edge/default.token http://www.example.com/index.html
     switchyard edge purge --admin 127.0.0.1:9091 --prefix http://www.example.com/static/ --tag shipments --soft
     switchyard edge push --admin 127.0.0.1:9091 --admin 127.0.0.2:9091 --file common-objects.txt
     switchyard edge stats --admin 127.0.0.1:9091
     switchyard edge upgrade --control /run/switchyard/edge.sock   (with edge run --control ...)`,
		Subcommands: []*cli.Command{edgeRunCommand(), edgePurgeCommand(), edgePushCommand(), edgeStatsCommand(), upgradeCommand("edge")},
	})
}

func edgeRunCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "run an edge cache in the foreground until SIGINT or SIGTERM",
		Description: `Reads the YAML config (--config), then applies any flags given on top of it.

   Examples:
     switchyard edge run --config edge.yaml
     switchyard edge run --origin http://127.0.0.1:8000 --listen :8080 --memory 512MiB --disk-dir /var/cache/sy --disk-size 10GiB`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "YAML config file"},
			&cli.StringFlag{Name: "listen", Usage: "client address (overrides listen)"},
			&cli.StringFlag{Name: "origin", Usage: "origin base URL (overrides origin)"},
			&cli.StringFlag{Name: "admin-listen", Usage: "admin API address (overrides admin.listen)"},
			&cli.StringFlag{Name: "memory", Usage: "memory tier budget, e.g. 256MiB (overrides memory.max_bytes)"},
			&cli.StringFlag{Name: "disk-dir", Usage: "disk tier directory (overrides disk.dir)"},
			&cli.StringFlag{Name: "disk-size", Usage: "disk tier budget, e.g. 10GiB (overrides disk.max_bytes)"},
			&cli.DurationFlag{Name: "grace", Usage: "default stale-while-revalidate/stale-if-error window (overrides grace)"},
			&cli.StringSliceFlag{Name: "tier", Usage: "upper-tier candidate base URL, repeatable (overrides tiers.candidates)"},
		}, append(append(tokenFlags(edgeTokenEnv, "admin bearer token (overrides admin.token)"), uiFlags()...), upgradeFlags("edge")...)...),
		Action: func(c *cli.Context) error {
			gen, err := startGeneration(c, "edge", slog.Default())
			if err != nil {
				return err
			}
			defer gen.Close()
			// A failure before Ready goes to the process being replaced, which keeps serving.
			return gen.Fail(edgeServe(c, gen))
		},
	}
}

func edgeServe(c *cli.Context, gen *handover.Process) error {
	cfg, err := edgeConfigFromFlags(c)
	if err != nil {
		return err
	}
	e, err := edge.New(cfg, edge.WithSockets(gen.Sockets()))
	if err != nil {
		return err
	}
	e.ApplyMemoryLimit() // this process is the edge's: keep RSS near the budget
	if err := e.Start(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Before Ready: the web view's listener is inherited too (Ready closes what is not taken).
	if err := startUIOn(ctx, c, gen.Sockets(), "edge", e.AdminAddr(), "an admin address (--admin-listen or admin.listen)"); err != nil {
		e.Close()
		return err
	}
	if err := gen.Ready(); err != nil {
		e.Close()
		return err
	}
	fmt.Fprintf(c.App.Writer, "edge listening on %s, origin %s", e.Addr(), cfg.Origin)
	if a := e.AdminAddr(); a != "" {
		fmt.Fprintf(c.App.Writer, ", admin on %s", a)
	}
	fmt.Fprintln(c.App.Writer)
	ctx, cancel := untilUpgraded(ctx, gen) // replaced: drain like on SIGTERM
	defer cancel()
	<-ctx.Done()
	return e.Close()
}

// edgeConfigFromFlags loads --config (if any) and applies the flags on top.
func edgeConfigFromFlags(c *cli.Context) (edge.Config, error) {
	var cfg edge.Config
	if p := c.String("config"); p != "" {
		var err error
		if cfg, err = edge.LoadConfig(p); err != nil {
			return cfg, err
		}
	}
	set := func(name string, dst *string) {
		if c.IsSet(name) {
			*dst = c.String(name)
		}
	}
	set("listen", &cfg.Listen)
	set("origin", &cfg.Origin)
	set("admin-listen", &cfg.Admin.Listen)
	set("disk-dir", &cfg.Disk.Dir)
	token, err := adminToken(c, edgeTokenEnv)
	if err != nil {
		return cfg, err
	}
	if token != "" {
		cfg.Admin.Token = token
	}
	for _, f := range []struct {
		name string
		dst  *edge.ByteSize
	}{{"memory", &cfg.Memory.MaxBytes}, {"disk-size", &cfg.Disk.MaxBytes}} {
		if c.IsSet(f.name) {
			n, err := edge.ParseByteSize(c.String(f.name))
			if err != nil {
				return cfg, fmt.Errorf("flag --%s: %w", f.name, err)
			}
			*f.dst = edge.ByteSize(n)
		}
	}
	if c.IsSet("grace") {
		cfg.Grace = edge.Duration(c.Duration("grace"))
	}
	if c.IsSet("tier") {
		cfg.Tiers.Candidates = c.StringSlice("tier")
		if cfg.Tiers.Topology == edge.TopologyNone {
			cfg.Tiers.Topology = "" // the config file had no tiers: --tier means smart
		}
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("configure edge: %w (set it in --config or with a flag)", err)
	}
	return cfg, nil
}

// adminFlags are shared by purge, push and stats.
func adminFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringSliceFlag{Name: "admin", Aliases: []string{"a"}, Required: true, Usage: "admin API address of an edge, repeatable to reach every edge"},
		&cli.DurationFlag{Name: "timeout", Value: time.Minute, Usage: "per-edge request timeout"},
	}, tokenFlags(edgeTokenEnv, "admin bearer token")...)
}

// edgeTokenEnv is the environment variable that may hold the edge's admin token.
const edgeTokenEnv = "SWITCHYARD_EDGE_TOKEN"

func adminClients(c *cli.Context) ([]edge.AdminClient, error) {
	token, err := adminToken(c, edgeTokenEnv)
	if err != nil {
		return nil, err
	}
	if token == "" {
		return nil, fmt.Errorf("missing admin token: pass --token-file FILE or set %s", edgeTokenEnv)
	}
	var out []edge.AdminClient
	for _, a := range c.StringSlice("admin") {
		out = append(out, edge.AdminClient{Base: a, Token: token})
	}
	return out, nil
}

func edgePurgeCommand() *cli.Command {
	return &cli.Command{
		Name:      "purge",
		Usage:     "purge cached responses by URL, prefix or tag on one or more edges",
		ArgsUsage: "[URL...]",
		Description: `Hard purges remove entries; --soft marks them stale (still usable for grace and
   stale-if-error, revalidated before being served fresh).

   Examples:
     switchyard edge purge --admin 127.0.0.1:9091 --token-file admin.token http://www.example.com/index.html
     switchyard edge purge --admin 127.0.0.1:9091 --prefix http://www.example.com/static/
     switchyard edge purge --admin 127.0.0.1:9091 --admin 127.0.0.2:9091 --tag shipments --soft

   With --fleet the purge goes to one edge, which sends it on to every member of its fleet
   (admin.fleet: listed peers, or the edges registered in its etcd store) and retries each until
   it has applied it; the command waits and shows which members have:
     switchyard edge purge --admin 127.0.0.1:9091 --fleet http://www.example.com/index.html`,
		Flags: append(adminFlags(),
			&cli.StringSliceFlag{Name: "prefix", Usage: "absolute URL prefix, repeatable"},
			&cli.StringSliceFlag{Name: "tag", Usage: "Surrogate-Key / Cache-Tag value, repeatable"},
			&cli.BoolFlag{Name: "soft", Usage: "mark stale instead of removing"},
			&cli.BoolFlag{Name: "fleet", Usage: "send on to the edge's fleet (admin.fleet) and wait until every member applied it"},
		),
		Action: func(c *cli.Context) error {
			p := edge.PurgeRequest{URLs: c.Args().Slice(), Prefixes: c.StringSlice("prefix"), Tags: c.StringSlice("tag"), Soft: c.Bool("soft"), Fleet: c.Bool("fleet")}
			if len(p.URLs)+len(p.Prefixes)+len(p.Tags) == 0 {
				return fmt.Errorf("nothing to purge: give URLs as arguments, or --prefix, or --tag")
			}
			clients, err := adminClients(c)
			if err != nil {
				return err
			}
			if p.Fleet {
				if len(clients) != 1 {
					return fmt.Errorf("--fleet sends the purge to one edge, which reaches the others: give one --admin")
				}
				return fleetPurge(c, clients[0], p)
			}
			for _, cl := range clients {
				ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
				res, err := cl.Purge(ctx, p)
				cancel()
				if err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "%s: purged %d\n", cl.Base, res.Purged)
			}
			return nil
		},
	}
}

func edgePushCommand() *cli.Command {
	return &cli.Command{
		Name:      "push",
		Usage:     "push (prewarm) URLs to every edge given",
		ArgsUsage: "[URL...]",
		Description: `Each edge fetches the URLs it does not hold fresh, so common objects (page shell,
   scripts, styles) are in place before the first user asks; unique objects stay pull-based.

   Examples:
     switchyard edge push --admin 127.0.0.1:9091 http://www.example.com/app.js http://www.example.com/style.css
     switchyard edge push --admin 127.0.0.1:9091 --admin 127.0.0.2:9091 --file common.txt --refresh

   With --object the body itself is pushed (the origin's true push): every edge stores FILE as
   the response for the one URL given, with the --header fields, and never asks the origin:
     switchyard edge push --admin 10.0.0.1:9091 --admin 10.0.0.2:9091 --object app.js \
       --header 'Content-Type: text/javascript' --header 'Cache-Control: max-age=86400' http://www.example.com/app.js`,
		Flags: append(adminFlags(),
			&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "file with one URL per line (# comments allowed)"},
			&cli.BoolFlag{Name: "refresh", Usage: "revalidate even fresh copies (after an update at the origin)"},
			&cli.StringFlag{Name: "object", Usage: "push this file's bytes as the body of the one URL given (true push)"},
			&cli.StringSliceFlag{Name: "header", Aliases: []string{"H"}, Usage: "response header 'Name: value' stored with --object, repeatable"},
			&cli.IntFlag{Name: "status", Value: 200, Usage: "response status stored with --object"},
		),
		Action: func(c *cli.Context) error {
			if c.IsSet("object") {
				return pushObject(c) // edgetiers.go
			}
			urls := c.Args().Slice()
			if f := c.String("file"); f != "" {
				more, err := readURLList(f)
				if err != nil {
					return err
				}
				urls = append(urls, more...)
			}
			if len(urls) == 0 {
				return fmt.Errorf("nothing to push: give URLs as arguments or --file")
			}
			clients, err := adminClients(c)
			if err != nil {
				return err
			}
			failed := 0
			for _, cl := range clients {
				ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
				res, err := cl.Push(ctx, edge.PushRequest{URLs: urls, Refresh: c.Bool("refresh")})
				cancel()
				if err != nil {
					return err
				}
				for _, r := range res {
					if r.Error != "" || r.Status >= 400 {
						failed++
						fmt.Fprintf(c.App.Writer, "%s: %s: failed: %d %s\n", cl.Base, r.URL, r.Status, r.Error)
						continue
					}
					fmt.Fprintf(c.App.Writer, "%s: %s: %d %s\n", cl.Base, r.URL, r.Status, r.Cache)
				}
			}
			if failed > 0 {
				return fmt.Errorf("push: %d URL(s) failed", failed)
			}
			return nil
		},
	}
}

// readURLList reads one URL per line, skipping blanks and # comments.
func readURLList(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read URL list: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read URL list %s: %w", path, err)
	}
	return out, nil
}

func edgeStatsCommand() *cli.Command {
	return &cli.Command{
		Name:  "stats",
		Usage: "show an edge's counters, hit ratio, storage and tier selection",
		Description: `Examples:
     switchyard edge stats --admin 127.0.0.1:9091 --token-file admin.token
     switchyard edge stats --admin 127.0.0.1:9091 --json
     switchyard edge stats --admin 127.0.0.1:9091 --tiers`,
		Flags: append(adminFlags(), &cli.BoolFlag{Name: "json", Usage: "print the raw JSON report"},
			&cli.BoolFlag{Name: "tiers", Usage: "print the tiered-cache analytics per origin and tier"}),
		Action: func(c *cli.Context) error {
			clients, err := adminClients(c)
			if err != nil {
				return err
			}
			for _, cl := range clients {
				ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
				rep, err := cl.Stats(ctx)
				cancel()
				if err != nil {
					return err
				}
				if c.Bool("json") {
					enc := json.NewEncoder(c.App.Writer)
					enc.SetIndent("", "  ")
					if err := enc.Encode(rep); err != nil {
						return fmt.Errorf("print stats: %w", err)
					}
					continue
				}
				if c.Bool("tiers") {
					printTierStats(c.App.Writer, cl.Base, rep) // edgetiers.go
					continue
				}
				printStats(c, cl.Base, rep)
			}
			return nil
		},
	}
}

func printStats(c *cli.Context, base string, rep edge.StatsReport) {
	w := c.App.Writer
	fmt.Fprintf(w, "edge %s: %d objects, memory %d bytes, disk %d bytes\n", base, rep.Objects, rep.MemoryBytes, rep.DiskBytes)
	names := make([]string, 0, len(rep.Counters))
	for k := range rep.Counters {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if k == "hit_ratio" {
			fmt.Fprintf(w, "  %-18s %.4f\n", k, rep.Counters[k])
			continue
		}
		fmt.Fprintf(w, "  %-18s %.0f\n", k, rep.Counters[k])
	}
	for _, t := range rep.Tiers {
		sel := ""
		if t.Selected {
			sel = " (selected)"
		}
		fmt.Fprintf(w, "  tier %s: %.2f ms to origin%s\n", t.URL, t.ScoreMS, sel)
	}
}

// fleetPurge sends a fleet purge to one edge and follows it until every member applied it (or
// left the fleet, or was given up on), or --timeout passes.
func fleetPurge(c *cli.Context, cl edge.AdminClient, p edge.PurgeRequest) error {
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	res, err := cl.Purge(ctx, p)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "%s: purged %d; fleet purge %s\n", cl.Base, res.Purged, res.Job)
	for {
		sctx, scancel := context.WithTimeout(c.Context, 10*time.Second) // past --timeout too: the last status
		st, err := cl.FleetPurge(sctx, res.Job)
		scancel()
		if err != nil {
			return err
		}
		if st.Done || ctx.Err() != nil {
			failed := 0
			for _, m := range st.Members {
				fmt.Fprintf(c.App.Writer, "  %s: %s after %d attempts %s\n", m.Admin, m.State, m.Attempts, m.Error)
				if m.State != "applied" && m.State != "gone" {
					failed++
				}
			}
			if failed > 0 {
				return fmt.Errorf("fleet purge %s: %d members have not applied it (follow it with GET /purge/%s on %s)", res.Job, failed, res.Job, cl.Base)
			}
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}
