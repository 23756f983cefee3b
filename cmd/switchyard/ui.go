package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/internal/adminauth"
	"github.com/switchyard/switchyard/internal/handover"
	"github.com/switchyard/switchyard/internal/webui"
)

// Every stop's opt-in live web view (internal/webui): `--ui ADDR` serves the page fed from the
// stop's own Prometheus endpoint, and each `--ui-target STOP:NAME=URL` adds another stop's, so
// one stop's page can show the whole path.

// uiFlags are the stops' --ui and --ui-target flags.
func uiFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "ui", Usage: "serve the live web view on `ADDR:PORT` (\":8080\" is loopback), fed from this stop's own /metrics"},
		uiPublicFlag(),
		&cli.StringSliceFlag{Name: "ui-target", Usage: "also show another stop on the web view: `STOP:NAME=URL` with STOP dns, edge, l4, l7 or app, e.g. l7:l7a=http://127.0.0.1:9901/metrics (repeatable)"},
	}
}

// uiPublicFlag lets the web view listen on an address other hosts reach.
func uiPublicFlag() cli.Flag {
	return &cli.BoolFlag{Name: "ui-public", Usage: "let the web view listen on an address other hosts reach: it shows (and relays) metrics otherwise served on loopback only"}
}

// checkUIListen refuses a web view address other hosts reach (0.0.0.0, a public address) unless
// --ui-public is given: the page republishes the stops' metrics, which may be listening on
// loopback only, so serving it widely is a choice to make explicitly. flag names the address's
// flag in the message.
func checkUIListen(c *cli.Context, flag, addr string) error {
	if addr == "" || c.Bool("ui-public") || adminauth.IsLoopback(adminauth.Loopback(addr)) {
		return nil
	}
	return fmt.Errorf("refuse --%s %s: other hosts could reach it, and the web view republishes metrics served on loopback only; listen on 127.0.0.1 (e.g. --%s 127.0.0.1:8080), or add --ui-public to serve it to other hosts", flag, addr, flag)
}

// startUI serves the web view when --ui is given, until ctx ends. self is this stop's kind and
// metrics the address of its /metrics listener (empty: it has none, which --ui needs: need says
// which flag or setting to give).
func startUI(ctx context.Context, c *cli.Context, self, metrics, need string) error {
	return startUIOn(ctx, c, nil, self, metrics, need)
}

// startUIOn is startUI listening through sk (internal/handover: an upgrade passes the web view's
// listener to the new process like the stop's own).
func startUIOn(ctx context.Context, c *cli.Context, sk *handover.Sockets, self, metrics, need string) error {
	addr := c.String("ui")
	if addr == "" {
		if len(c.StringSlice("ui-target")) > 0 {
			return errors.New("--ui-target needs --ui ADDR:PORT: the address of the web view")
		}
		return nil
	}
	if err := checkUIListen(c, "ui", addr); err != nil {
		return err
	}
	if metrics == "" {
		return fmt.Errorf("--ui: the web view reads this stop's own /metrics: give %s", need)
	}
	targets := []webui.Target{{Stop: self, Name: self, URL: "http://" + dialable(adminauth.Loopback(metrics)) + "/metrics"}}
	for _, s := range c.StringSlice("ui-target") {
		t, err := parseUITarget(s)
		if err != nil {
			return err
		}
		targets = append(targets, t)
	}
	ln, err := sk.Listen("tcp", adminauth.Loopback(addr))
	if err != nil {
		return fmt.Errorf("--ui: listen on %s: %w (is the port in use?)", addr, err)
	}
	col := webui.NewCollector(targets, webui.Options{Title: "switchyard " + self})
	go col.Run(ctx)
	srv := &http.Server{Handler: col.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	go func() {
		<-ctx.Done()
		srv.Close() // event streams do not end by themselves
	}()
	fmt.Fprintf(c.App.ErrWriter, "live web view on http://%s/\n", ln.Addr())
	return nil
}

// dialable turns a wildcard listen address into one to connect to.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	switch host {
	case "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

func parseUITarget(s string) (webui.Target, error) {
	kind, rest, ok1 := strings.Cut(s, ":")
	name, url, ok2 := strings.Cut(rest, "=")
	bad := func(why string) (webui.Target, error) {
		return webui.Target{}, fmt.Errorf("--ui-target %q: %s: use STOP:NAME=URL, e.g. l7:l7a=http://127.0.0.1:9901/metrics", s, why)
	}
	if !ok1 || !ok2 || name == "" {
		return bad("not STOP:NAME=URL")
	}
	switch kind {
	case webui.StopDNS, webui.StopEdge, webui.StopL4, webui.StopL7, webui.StopApp:
	default:
		return bad("STOP must be dns, edge, l4, l7 or app")
	}
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		return bad("the URL must start with http:// or https://")
	}
	return webui.Target{Stop: kind, Name: name, URL: url}, nil
}
