package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/control/api"
)

func l4DrainNodeCmd() *cli.Command {
	return &cli.Command{
		Name:  "drain-node",
		Usage: "take this node out of the fleet: withdraw its VIPs over BGP, keep forwarding for a grace period, then detach",
		Description: `The daemon withdraws every VIP from its BGP peers at once, so the routers send new flows to the
   other balancers; it keeps forwarding the established flows that still arrive for the grace
   period (default bgp.drain_grace), then detaches the program, removes its pins and exits.
   SIGTERM does the same with bgp.drain_grace. Needs a bgp section (docs/fleet.md).
   With --depref it first announces every VIP with the highest MED (bgp.depref_med) for
   --depref-wait: routers prefer the other nodes and keep this one as a backup path, then it
   withdraws. The command waits until the daemon has exited, unless --no-wait.

   Examples:
     switchyard lb drain-node
     switchyard lb drain-node --grace 2m
     switchyard lb drain-node --iface eth0 --grace 10s --no-wait
     switchyard lb drain-node --depref --depref-wait 30s`,
		Flags: append(l4SocketFlags(),
			&cli.DurationFlag{Name: "grace", Usage: "how long to keep forwarding after the withdrawal (default bgp.drain_grace)"},
			&cli.BoolFlag{Name: "no-wait", Usage: "return once the VIPs are withdrawn"},
			&cli.BoolFlag{Name: "depref", Usage: "announce the VIPs with bgp.depref_med first, withdraw after --depref-wait"},
			&cli.DurationFlag{Name: "depref-wait", Value: 10 * time.Second, Usage: "how long to announce with the de-preference MED before withdrawing (with --depref)"}),
		Action: func(c *cli.Context) error {
			if c.Duration("grace") < 0 || c.Duration("depref-wait") < 0 {
				return errors.New("drain-node: --grace and --depref-wait must be positive")
			}
			if c.IsSet("depref-wait") && !c.Bool("depref") {
				return errors.New("drain-node: --depref-wait without --depref: add --depref to de-prefer the node first")
			}
			req := api.DrainNodeReq{Grace: c.Duration("grace"), Depref: c.Bool("depref"), DeprefWait: c.Duration("depref-wait")}
			var res api.DrainNodeResult
			if err := l4Call(c, api.OpDrainNode, req, &res); err != nil {
				return err
			}
			if err := l4Output(c, res, func(w io.Writer) { fmt.Fprintln(w, res.Message) }); err != nil {
				return err
			}
			if c.Bool("no-wait") {
				return nil
			}
			deadline := res.DetachAt.Add(30 * time.Second)
			for time.Now().Before(deadline) {
				if l4Call(c, api.OpStatus, api.Empty{}, nil) != nil {
					if !c.Bool("json") {
						fmt.Fprintln(c.App.Writer, "drained: the daemon detached the program and exited")
					}
					return nil
				}
				time.Sleep(200 * time.Millisecond)
			}
			return fmt.Errorf("drain-node: the daemon still answers 30s after its grace period ended: see its log")
		},
	}
}

// l4PrintBGP is the BGP part of `lb status` (nothing without a bgp section).
func l4PrintBGP(w io.Writer, b *api.BGPStatus) {
	if b == nil {
		return // no bgp section: today's status, unchanged
	}
	state := "ready: announcing the VIPs with healthy backends"
	switch {
	case b.Draining:
		state = fmt.Sprintf("DRAINING: everything withdrawn, detaching in %s", b.DrainLeft.Round(time.Second))
	case b.Depref:
		state = fmt.Sprintf("DE-PREFERRED (drain-node --depref): announcing with bgp.depref_med, then withdrawing; detaching in %s", b.DrainLeft.Round(time.Second))
	case !b.Ready:
		state = "not ready: announcing nothing"
	}
	fmt.Fprintf(w, "bgp\tasn %d, router id %s, %s\n", b.ASN, b.RouterID, state)
	fmt.Fprintf(w, "announced\t%s\n", l4Or(strings.Join(b.Announced, " "), "(nothing)"))
	fmt.Fprintln(w, "\nPEER\tASN\tSTATE\tUPTIME\tPREFIXES SENT\tUPDATES SENT\tHOLD\tBFD\tGRACEFUL RESTART")
	for _, s := range b.Sessions {
		up := "-"
		if s.Established {
			up = s.Uptime.String()
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%d\t%d\t%ds\t%s\t%s\n", s.Peer, s.ASN, s.State, up, s.PrefixesSent, s.UpdatesSent, s.HoldTime,
			l4BFD(s.BFD), l4GR(s))
		if !s.Established && s.LastDownReason != "" {
			fmt.Fprintf(w, "\t  last down: %s\n", s.LastDownReason)
		}
	}
	fmt.Fprintln(w, "\nVIP\tPREFIX\tANNOUNCEMENT\tWHY")
	for _, v := range b.VIPs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", v.VIP, v.Prefix, v.State, v.Reason)
		if v.Policy != "" {
			fmt.Fprintf(w, "\t  policy: %s\n", v.Policy)
		}
	}
}

// l4BFD is a session's BFD column: "up (300ms, 2 failures)", or "off".
func l4BFD(b *api.BGPBFD) string {
	if b == nil {
		return "off"
	}
	out := fmt.Sprintf("%s (detect %s", b.State, b.DetectTime)
	if b.Failures > 0 {
		out += fmt.Sprintf(", %d failures", b.Failures)
	}
	return out + ")"
}

// l4GR is a session's graceful restart column.
func l4GR(s api.BGPSession) string {
	switch {
	case s.RestartTime == 0:
		return "off"
	case s.GracefulRestart:
		return fmt.Sprintf("negotiated (%ds)", s.RestartTime)
	case s.Established:
		return fmt.Sprintf("not supported by the peer (%ds offered)", s.RestartTime)
	}
	return fmt.Sprintf("offered (%ds)", s.RestartTime)
}
