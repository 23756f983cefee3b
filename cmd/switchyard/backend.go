package main

import (
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/control/api"
)

func init() {
	register(&cli.Command{
		Name:  "backend",
		Usage: "add, remove, drain, undrain, weigh and list the backends of the L4 balancer's VIPs",
		Description: `Backends are named by their VIP (name or ADDRESS:PORT/PROTO) and their address.
   Drain takes a backend out of the Maglev ring: no new connection reaches it, its established
   connections continue until they close or drain_timeout ends. ` + "`backend list`" + ` shows the
   remaining active flows; remove it once it shows "drained" (0 active flows).

   Examples:
     switchyard backend add web 198.18.3.3 --weight 2
     switchyard backend drain web 198.18.3.1
     switchyard backend list web
     switchyard backend remove web 198.18.3.1
     switchyard backend undrain web 198.18.3.1
     switchyard backend weight web 198.18.3.2 3`,
		Subcommands: []*cli.Command{
			backendAddCmd(),
			backendSimpleCmd("remove", []string{"rm"}, api.OpBackendRemove, "remove a backend from a VIP (its remaining flows move to other backends)"),
			backendSimpleCmd("drain", nil, api.OpBackendDrain, "take a backend out of the ring; established flows continue until drain_timeout"),
			backendSimpleCmd("undrain", nil, api.OpBackendUndrain, "put a drained backend back in the ring"),
			backendWeightCmd(),
			backendListCmd(),
		},
	})
}

func backendAddCmd() *cli.Command {
	return &cli.Command{
		Name:         "add",
		Usage:        "add a backend to a VIP",
		ArgsUsage:    "VIP ADDRESS",
		BashComplete: l4CompleteVIPs,
		Description: `Examples:
     switchyard backend add web 198.18.3.3
     switchyard backend add web6 fd00:5e:3::3 --weight 2
     switchyard backend add h3 198.18.3.3 --server-id 7     (QUIC VIPs: the ID its connection IDs carry)`,
		Flags: append(l4SocketFlags(), &cli.UintFlag{Name: "weight", Aliases: []string{"w"}, Value: 1, Usage: "relative `WEIGHT` of new flows"},
			&cli.UintFlag{Name: "server-id", Usage: "QUIC server `ID` its connection IDs carry (QUIC VIPs only; default its backend id; give every backend of the VIP one, or none)"}),
		Action: l4Action(func(c *cli.Context, args []string) error {
			if err := l4BackendArgs(c, args, "switchyard backend add VIP ADDRESS [--weight N]"); err != nil {
				return err
			}
			w := c.Uint("weight")
			if w == 0 || w > 1<<16 {
				return fmt.Errorf("invalid --weight %d: use 1..65536 (to take a backend out use `backend drain`)", w)
			}
			sid := c.Uint("server-id")
			if sid > 1<<32-1 {
				return fmt.Errorf("invalid --server-id %d: use 1..4294967295 (and at most what the VIP's server ID length holds)", sid)
			}
			return l4Change(c, api.OpBackendAdd, api.BackendReq{VIP: args[0], Address: args[1], Weight: uint32(w), ServerID: uint32(sid)})
		}),
	}
}

// backendSimpleCmd builds the commands that take VIP ADDRESS and nothing else.
func backendSimpleCmd(name string, aliases []string, op, usage string) *cli.Command {
	return &cli.Command{
		Name:         name,
		Aliases:      aliases,
		Usage:        usage,
		ArgsUsage:    "VIP ADDRESS",
		BashComplete: l4CompleteVIPs,
		Description: fmt.Sprintf(`Examples:
     switchyard backend %s web 198.18.3.1
     switchyard backend %s 198.18.100.1:80/tcp 198.18.3.1 --json`, name, name),
		Flags: l4SocketFlags(),
		Action: l4Action(func(c *cli.Context, args []string) error {
			if err := l4BackendArgs(c, args, "switchyard backend "+name+" VIP ADDRESS"); err != nil {
				return err
			}
			return l4Change(c, op, api.BackendReq{VIP: args[0], Address: args[1]})
		}),
	}
}

func backendWeightCmd() *cli.Command {
	return &cli.Command{
		Name:         "weight",
		Usage:        "set a backend's weight (its share of new flows)",
		ArgsUsage:    "VIP ADDRESS WEIGHT",
		BashComplete: l4CompleteVIPs,
		Description: `Examples:
     switchyard backend weight web 198.18.3.2 3`,
		Flags: l4SocketFlags(),
		Action: l4Action(func(c *cli.Context, args []string) error {
			if err := l4Args(c, args, 3, "switchyard backend weight VIP ADDRESS WEIGHT"); err != nil {
				return err
			}
			w, err := strconv.ParseUint(args[2], 10, 32)
			if err != nil || w == 0 || w > 1<<16 {
				return fmt.Errorf("invalid weight %q: use 1..65536 (to take a backend out use `backend drain`)", args[2])
			}
			return l4Change(c, api.OpBackendWeight, api.BackendReq{VIP: args[0], Address: args[1], Weight: uint32(w)})
		}),
	}
}

func backendListCmd() *cli.Command {
	return &cli.Command{
		Name:         "list",
		Aliases:      []string{"ls"},
		Usage:        "list backends with state (active/draining/drained/unhealthy), weight, health, ring share, active flows",
		ArgsUsage:    "[VIP]",
		BashComplete: l4CompleteVIPs,
		Description: `Examples:
     switchyard backend list
     switchyard backend list web --json`,
		Flags: l4SocketFlags(),
		Action: l4Action(func(c *cli.Context, args []string) error {
			if len(args) > 1 {
				return fmt.Errorf("backend list: at most one VIP, got %d arguments: usage: switchyard backend list [VIP]", len(args))
			}
			vip := ""
			if len(args) == 1 {
				vip = args[0]
			}
			var bs []api.BackendInfo
			if err := l4Call(c, api.OpBackendList, api.VIPRef{VIP: vip}, &bs); err != nil {
				return err
			}
			return l4Output(c, bs, func(w io.Writer) {
				fmt.Fprintln(w, "VIP\tBACKEND\tID\tSTATE\tWEIGHT\tHEALTH\tRING SHARE\tACTIVE FLOWS\tDRAIN LEFT\tQUIC SERVER ID")
				for _, b := range bs {
					left := "-"
					if b.DrainLeft > 0 {
						left = b.DrainLeft.Truncate(time.Second).String()
					}
					sid := "-"
					if b.ServerID != 0 {
						sid = fmt.Sprint(b.ServerID)
					}
					fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%s\t%.1f%%\t%d\t%s\t%s\n", b.VIP, b.Address, b.ID, b.State, b.Weight, b.Health, b.RingShare*100, b.ActiveFlows, left, sid)
				}
				if len(bs) == 0 {
					fmt.Fprintln(w, "(no backend: add one with `switchyard backend add VIP ADDRESS`)")
				}
			})
		}),
	}
}

// l4BackendArgs checks VIP ADDRESS arguments before anything is sent, so a typo is reported as
// such even when no daemon runs.
func l4BackendArgs(c *cli.Context, args []string, usage string) error {
	if err := l4Args(c, args, 2, usage); err != nil {
		return err
	}
	if _, err := netip.ParseAddr(args[1]); err != nil {
		return fmt.Errorf("invalid backend address %q: use an IPv4 or IPv6 address such as 198.18.3.3 or fd00:5e:3::3", args[1])
	}
	return nil
}
