package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/internal/handover"
)

// upgradeFlags are the run commands' flags for hitless upgrades (internal/handover).
func upgradeFlags(stop string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "control", Usage: "serve the upgrade control socket at `PATH` (owner-only), e.g. /run/switchyard/" + stop + ".sock; `switchyard " + stop + " upgrade`, systemctl reload and SIGUSR2 then replace the process without dropping a request"},
		&cli.StringFlag{Name: "upgrade-from", EnvVars: []string{handover.EnvFrom}, Usage: "take the listening sockets from the process serving the control socket `PATH` (set by an upgrade; start a new binary by hand with it)"},
		&cli.DurationFlag{Name: "upgrade-timeout", Value: time.Minute, Usage: "how long a new process may take to become ready before the upgrade is abandoned"},
	}
}

// startGeneration begins this process's part in upgrades: it takes over the sockets of the
// process it replaces (--upgrade-from) or binds the control socket (--control).
func startGeneration(c *cli.Context, stop string, log *slog.Logger) (*handover.Process, error) {
	return handover.Start(handover.Options{Stop: stop, Control: c.String("control"), From: c.String("upgrade-from"),
		Timeout: c.Duration("upgrade-timeout"), Log: log})
}

// untilUpgraded is ctx, also ended when a successor has taken over.
func untilUpgraded(ctx context.Context, gen *handover.Process) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-ctx.Done():
		case <-gen.Upgraded():
			cancel()
		}
	}()
	return ctx, cancel
}

// upgradeCommand is `switchyard <stop> upgrade`.
func upgradeCommand(stop string) *cli.Command {
	return &cli.Command{
		Name:  "upgrade",
		Usage: "replace a running " + stop + " with the binary now installed (and its configuration), dropping no request",
		Description: `The running process starts the binary at its path again with the same arguments and passes
   it every listening socket. The new process loads its configuration and serves; only then does
   the old one stop accepting, finish what it has in flight and exit. If the new process fails
   (a bad configuration, a crash) the old one keeps serving and this command fails with its error.
   systemctl reload does the same (ExecReload); SIGUSR2 to the process too.

   Example:
     switchyard ` + stop + ` upgrade --control /run/switchyard/` + stop + `.sock`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "control", Required: true, Usage: "control socket `PATH` of the running process (its --control)"},
			&cli.DurationFlag{Name: "timeout", Value: 2 * time.Minute, Usage: "how long to wait for the answer"},
		},
		Action: func(c *cli.Context) error {
			pid, old, err := handover.Upgrade(stop, c.String("control"), c.Duration("timeout"))
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "upgraded: pid %d serves; pid %d finishes its requests and exits\n", pid, old)
			return nil
		},
	}
}
