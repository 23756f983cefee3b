package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/edge"
)

// printTierStats prints `edge stats --tiers`: per origin, the upper tiers chosen and their
// measurements, and the tiered-cache analytics in both roles (lower: client requests, upper:
// requests from lower tiers).
func printTierStats(w io.Writer, base string, rep edge.StatsReport) {
	fmt.Fprintf(w, "edge %s: tiered cache\n", base)
	for _, o := range rep.Origins {
		fmt.Fprintf(w, "origin %s (%s), topology %s", o.Origin, o.URL, o.Topology)
		if o.Primary != "" {
			fmt.Fprintf(w, ", primary %s", o.Primary)
		}
		if o.Secondary != "" {
			fmt.Fprintf(w, ", secondary %s", o.Secondary)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "  %-6s %9s %9s %9s %13s %13s\n", "role", "requests", "hits", "origin_req", "origin_bytes", "bytes_served")
		for _, r := range []struct {
			name string
			s    edge.RoleStats
		}{{"lower", o.Lower}, {"upper", o.Upper}} {
			fmt.Fprintf(w, "  %-6s %9d %9d %9d %13d %13d\n", r.name, r.s.Requests, r.s.Hits, r.s.OriginRequests, r.s.OriginBytes, r.s.BytesServed)
		}
		fmt.Fprintf(w, "  through upper tiers: %d requests, %d hits at the upper tier (origin requests saved), %d bytes, %d fallbacks\n",
			o.TierRequests, o.UpperHits, o.TierBytes, o.Fallbacks)
		for _, t := range o.Tiers {
			state := t.Rank
			if t.Down {
				state += " down"
			}
			fmt.Fprintf(w, "  tier %-28s edge->tier %7.2f ms  tier->origin %7.2f ms  %s\n", t.URL, t.EdgeMS, t.OriginMS, state)
		}
	}
}

// pushObject is `edge push --object FILE URL`: the file's bytes, with the --header fields, are
// sent to every --admin edge, which stores them as the response for URL.
func pushObject(c *cli.Context) error {
	if c.NArg() != 1 || c.IsSet("file") || c.Bool("refresh") {
		return fmt.Errorf("push --object: give exactly one URL (the object's), without --file or --refresh")
	}
	body, err := os.ReadFile(c.String("object"))
	if err != nil {
		return fmt.Errorf("push --object: %w", err)
	}
	header := http.Header{}
	for _, h := range c.StringSlice("header") {
		name, value, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return fmt.Errorf("push --object: header %q is not 'Name: value'", h)
		}
		header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	clients, err := adminClients(c)
	if err != nil {
		return err
	}
	for _, cl := range clients {
		ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
		res, err := cl.PushObject(ctx, c.Args().First(), c.Int("status"), header, body)
		cancel()
		if err != nil {
			return err
		}
		fmt.Fprintf(c.App.Writer, "%s: %s: %d %s (%d bytes)\n", cl.Base, res.URL, res.Status, res.Cache, len(body))
		printForwards(c.App.Writer, res.Forwarded, "  ")
	}
	return nil
}

// printForwards shows where an edge forwarded a pushed object (admin.push_to), indented by hop.
func printForwards(w io.Writer, fs []edge.PushResult, indent string) {
	for _, f := range fs {
		if f.Error != "" {
			fmt.Fprintf(w, "%s-> %s: error: %s\n", indent, f.Peer, f.Error)
			continue
		}
		fmt.Fprintf(w, "%s-> %s: %d %s\n", indent, f.Peer, f.Status, f.Cache)
		printForwards(w, f.Forwarded, indent+"  ")
	}
}
