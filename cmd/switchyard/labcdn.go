package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/cdn"
)

// cdnFlag makes `lab up` bring up the Mini-CDN topology instead of the XDP lab.
var cdnFlag = &cli.BoolFlag{Name: "cdn", Usage: "bring up the Mini-CDN topology of its own instead (seed 004): an l7 router with a consistent-hash ring over 3 edges in front of a file origin, in namespace PREFIX-cdn; the sizing flags do not apply"}

// labUpCDN is `lab up --cdn`.
func labUpCDN(c *cli.Context) error {
	p := c.String("prefix")
	exe, err := lab.Binary()
	if err != nil {
		return err
	}
	if _, err := lab.UpCDN(p, exe); err != nil {
		return fmt.Errorf("%w (clean up with `switchyard lab down --prefix %s`)", err, p)
	}
	st, err := lab.GetStatus(p)
	if err != nil {
		return err
	}
	return printStatus(c, st)
}

// labOriginCommand is the Mini-CDN's origin (hidden; `lab up --cdn` runs it in the CDN
// namespace): the files it writes at start, served as the mini-cdn experiment's origin serves them.
func labOriginCommand() *cli.Command {
	return &cli.Command{
		Name:   "origin",
		Hidden: true,
		Usage:  "the Mini-CDN's file origin (runs inside the lab's CDN namespace)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8090", Usage: "HTTP listen address"},
			&cli.StringFlag{Name: "dir", Required: true, Usage: "directory the files are written to and served from"},
			&cli.IntFlag{Name: "files", Value: lab.CDNFiles, Usage: "number of files (/files/f0.bin ...)"},
			&cli.IntFlag{Name: "bytes", Value: lab.CDNFileBytes, Usage: "size of each file"},
			&cli.DurationFlag{Name: "delay", Value: lab.CDNOriginDelay, Usage: "added to every file answer (the origin is far away)"},
			&cli.DurationFlag{Name: "slow-delay", Value: lab.CDNSlowDelay, Usage: "added to every /slow/... answer (uncacheable)"},
		},
		Action: func(c *cli.Context) error {
			if c.Int("files") < 1 || c.Int("bytes") < 0 {
				return errors.New("lab origin: --files must be at least 1 and --bytes at least 0")
			}
			if err := cdn.WriteFiles(c.String("dir"), c.Int("files"), c.Int("bytes")); err != nil {
				return fmt.Errorf("lab origin: %w", err)
			}
			ln, err := net.Listen("tcp", c.String("listen"))
			if err != nil {
				return fmt.Errorf("lab origin: listen on %s: %w", c.String("listen"), err)
			}
			var requests atomic.Int64
			srv := &http.Server{Handler: cdn.OriginHandler(c.String("dir"), c.Duration("delay"), c.Duration("slow-delay"), &requests),
				ReadHeaderTimeout: 10 * time.Second}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go func() {
				<-ctx.Done()
				srv.Close()
			}()
			fmt.Fprintf(c.App.ErrWriter, "origin: %d files of %d B in %s, http on %s\n", c.Int("files"), c.Int("bytes"), c.String("dir"), ln.Addr())
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("lab origin: %w", err)
			}
			return nil
		},
	}
}
