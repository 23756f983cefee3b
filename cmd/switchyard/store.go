package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/control/store"
)

// l4PrintFleet prints the ring digests and the store's state of `lb status`.
func l4PrintFleet(w io.Writer, st api.Status) {
	for _, r := range st.Rings {
		prev := ""
		if r.Previous != "" {
			prev = ", previous ring " + r.Previous
		}
		fmt.Fprintf(w, "ring digest %s\t%s (%d backends in the ring%s)\n", r.VIP, r.Digest, r.InRing, prev)
	}
	s := st.Store
	if s == nil {
		fmt.Fprintf(w, "store\tnone (VIPs from the configuration file)\n")
		return
	}
	state := "connected"
	if !s.Connected {
		state = "DISCONNECTED (forwarding with the last state)"
	}
	fmt.Fprintf(w, "store\t%s %s since %s (%s)\n", s.URL, state, s.Since.Format(time.RFC3339), time.Since(s.Since).Truncate(time.Second))
	fmt.Fprintf(w, "store revision\tin effect %d, watched %d, store %d\n", s.Revision, s.WatchedRevision, s.StoreRevision)
	fmt.Fprintf(w, "store events\t%d events, %d rewatches, %d re-lists, %d writes (%d conflicts, %d errors), %d refused\n",
		s.Events, s.Rewatches, s.Resyncs, s.Writes, s.WriteConflicts, s.WriteErrors, s.Refusals)
	if s.Refused != "" {
		fmt.Fprintf(w, "store refused\t%s\n", s.Refused)
	}
	if s.LastError != "" && !s.Connected {
		fmt.Fprintf(w, "store error\t%s\n", s.LastError)
	}
}

func l4StoreFlag() cli.Flag {
	return &cli.StringFlag{Name: "store", EnvVars: []string{"SWITCHYARD_STORE"}, Required: true, Usage: "fleet store `URL` etcd://HOST:PORT[,HOST:PORT...]/PREFIX"}
}

func l4OpenStore(c *cli.Context) (*store.Store, context.Context, context.CancelFunc, error) {
	u, err := store.ParseURL(c.String("store"))
	if err != nil {
		return nil, nil, nil, err
	}
	s, err := store.Open(u, store.Options{})
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(c.Context, 10*time.Second)
	return s, ctx, cancel, nil
}

// l4StoreCmd is `lb store`: seed the fleet store from a file, list what it holds.
func l4StoreCmd() *cli.Command {
	return &cli.Command{
		Name:  "store",
		Usage: "the fleet store (etcd): seed it from a file, list what it holds",
		Description: `With ` + "`lb run --store URL`" + ` every balancer of a fleet takes its VIPs and backends from the store
   (PREFIX/vips/<name>, one YAML value per VIP) and ` + "`switchyard vip|backend`" + ` changes go there.
   These commands talk to etcd directly, no daemon needed. See docs/fleet.md.

   Examples:
     switchyard lb store seed --store etcd://10.0.0.1:2379/switchyard/prod lb.yaml
     switchyard lb store list --store etcd://10.0.0.1:2379/switchyard/prod`,
		Subcommands: []*cli.Command{
			{
				Name:      "seed",
				Usage:     "write the VIPs and global guard of a configuration file that the store does not hold yet (never overwrites)",
				ArgsUsage: "FILE",
				Description: `Each VIP, and the file's global guard:, is written only if its key is absent: seeding
   twice, or from two nodes, changes nothing that is there. Run it where etcd is reachable.

   Examples:
     switchyard lb store seed --store etcd://10.0.0.1:2379/switchyard/prod /etc/switchyard/lb.yaml`,
				Flags:  []cli.Flag{l4StoreFlag()},
				Action: l4Action(l4StoreSeed),
			},
			{
				Name:  "list",
				Usage: "list the VIPs the store holds, with the revision of each",
				Description: `Invalid values (written by hand with etcdctl) are listed as INVALID with the reason;
   the daemons refuse a snapshot holding one and keep their running state.

   Examples:
     switchyard lb store list --store etcd://10.0.0.1:2379/switchyard/prod
     switchyard lb store list --store etcd://10.0.0.1:2379/switchyard/prod --json`,
				Flags:  []cli.Flag{l4StoreFlag(), &cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"}},
				Action: l4StoreList,
			},
		},
	}
}

// l4StoreSeed is `lb store seed`: write the file's VIPs the store does not hold yet.
func l4StoreSeed(c *cli.Context, args []string) error {
	if err := l4Args(c, args, 1, "switchyard lb store seed --store URL FILE"); err != nil {
		return err
	}
	cfg, err := config.Load(args[0])
	if err != nil {
		return err
	}
	s, ctx, cancel, err := l4OpenStore(c)
	if err != nil {
		return err
	}
	defer cancel()
	defer s.Close()
	added, err := s.Seed(ctx, cfg.VIPs)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "seeded %s: %d of %d VIPs written (%s); the others were there already\n",
		s.URL(), len(added), len(cfg.VIPs), strings.Join(added, ", "))
	if cfg.Guard.Empty() {
		return nil
	}
	wrote, err := s.SeedGuard(ctx, cfg.Guard)
	switch {
	case err != nil:
		return err
	case wrote:
		fmt.Fprintf(c.App.Writer, "global guard written to %s\n", s.GuardKey())
	default:
		fmt.Fprintf(c.App.Writer, "global guard not written: %s holds one already (change it with `switchyard guard ...`)\n", s.GuardKey())
	}
	return nil
}

// l4StoreList is `lb store list`: the store's VIPs with their revisions, invalid values named.
func l4StoreList(c *cli.Context) error {
	s, ctx, cancel, err := l4OpenStore(c)
	if err != nil {
		return err
	}
	defer cancel()
	defer s.Close()
	sn, err := s.List(ctx)
	if err != nil {
		return err
	}
	type row struct {
		Name        string      `json:"name"`
		ModRevision int64       `json:"mod_revision"`
		VIP         *config.VIP `json:"vip,omitempty"`
		Error       string      `json:"error,omitempty"`
	}
	out := struct {
		Revision   int64         `json:"revision"`
		Guard      *config.Guard `json:"guard,omitempty"`
		GuardError string        `json:"guard_error,omitempty"`
		VIPs       []row         `json:"vips"`
	}{Revision: sn.Revision, Guard: sn.Guard}
	if sn.GuardErr != nil {
		out.GuardError = sn.GuardErr.Error()
	}
	for _, v := range sn.VIPs() {
		v := v
		out.VIPs = append(out.VIPs, row{Name: v.Name, ModRevision: sn.Entries[v.Name].ModRevision, VIP: &v})
	}
	for n, e := range sn.Entries {
		if e.Err != nil {
			out.VIPs = append(out.VIPs, row{Name: n, ModRevision: e.ModRevision, Error: e.Err.Error()})
		}
	}
	return l4Output(c, out, func(w io.Writer) {
		fmt.Fprintf(w, "revision %d\n", sn.Revision)
		switch g := out.Guard; {
		case out.GuardError != "":
			fmt.Fprintf(w, "global guard INVALID: %s\n", out.GuardError)
		case g != nil:
			fmt.Fprintf(w, "global guard: allow %s; deny %s; per source %s; per VIP %s\n", orDash(strings.Join(g.Allow, " ")), orDash(strings.Join(g.Deny, " ")), sourceLimit(g.PerSource), vipLimit(g.PerVIP))
		}
		fmt.Fprintln(w, "NAME\tADDRESS\tPORT\tPROTO\tBACKENDS\tREVISION")
		for _, r := range out.VIPs {
			if r.VIP == nil {
				fmt.Fprintf(w, "%s\tINVALID: %s\t\t\t\t%d\n", r.Name, r.Error, r.ModRevision)
				continue
			}
			var bs []string
			for _, b := range r.VIP.Backends {
				x := fmt.Sprintf("%s*%d", b.Address, b.Weight)
				if b.Drained {
					x += "(drained)"
				}
				bs = append(bs, x)
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%d\n", r.Name, r.VIP.Address, r.VIP.Port, r.VIP.Protocol, strings.Join(bs, " "), r.ModRevision)
		}
		if len(out.VIPs) == 0 {
			fmt.Fprintln(w, "(no VIP: seed with `switchyard lb store seed --store URL FILE` or add one through a daemon with `switchyard vip add`)")
		}
	})
}
