package main

import (
	"context"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/urfave/cli/v2"

	sydns "github.com/switchyard/switchyard/dns"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/internal/webui/browser"
	"github.com/switchyard/switchyard/internal/webui/webuitest"
)

// TestStopUI: `dns run --metrics ... --ui ...` serves the live page from the server's own
// metrics; in headless Chromium its DNS panel moves with the queries (zone and policy charts
// drawn) and nothing reaches the console as an error.
func TestStopUI(t *testing.T) {
	if _, err := browser.Find(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var out, errOut testutil.SyncBuffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &errOut
	done := make(chan error, 1)
	go func() {
		done <- app.RunContext(ctx, []string{"switchyard", "dns", "run", "--config", writeDNSConfig(t, dnsTestConfig),
			"--metrics", "127.0.0.1:0", "--ui", "127.0.0.1:0"})
	}()
	defer func() { cancel(); <-done }()
	serving, ui := regexp.MustCompile(`serving on (\S+)`), regexp.MustCompile(`live web view on (\S+)`)
	var addr, page string
	for addr == "" || page == "" {
		if m := serving.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
		}
		if m := ui.FindStringSubmatch(errOut.String()); m != nil {
			page = m[1]
		}
		select {
		case <-ctx.Done():
			t.Fatalf("dns run --ui did not start: %s %s", out.String(), errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	go func() { // queries at a changing rate, static and by policy
		for i := 0; ctx.Err() == nil; i++ {
			sydns.Query(ctx, addr, "www.example.com", mdns.TypeA, sydns.QueryOptions{})
			sydns.Query(ctx, addr, "app.example.com", mdns.TypeA, sydns.QueryOptions{Subnet: "10.1.2.0/24"})
			time.Sleep(time.Duration(5+i%20) * time.Millisecond)
		}
	}()
	webuitest.CheckPage(ctx, t, webuitest.Check{URL: page, Live: []string{"dns"}, Charts: 2})
}

// TestStopUIFlags: --ui needs the stop's metrics, --ui-target its shape and --ui.
func TestStopUIFlags(t *testing.T) {
	path := writeDNSConfig(t, dnsTestConfig)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--ui", "127.0.0.1:0"}, "give --metrics"},
		{[]string{"--metrics", "127.0.0.1:0", "--ui-target", "l7:a=http://x/metrics"}, "--ui-target needs --ui"},
		{[]string{"--metrics", "127.0.0.1:0", "--ui", "127.0.0.1:0", "--ui-target", "l9:a=http://x/metrics"}, "STOP must be dns, edge, l4, l7 or app"},
		{[]string{"--metrics", "127.0.0.1:0", "--ui", "127.0.0.1:0", "--ui-target", "l7:a"}, "not STOP:NAME=URL"},
		{[]string{"--metrics", "127.0.0.1:0", "--ui", "127.0.0.1:0", "--ui-target", "l7:a=x/metrics"}, "must start with http://"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, err := runDNSCLI(t, ctx, append([]string{"run", "--config", path, "--listen", "127.0.0.1:0"}, c.args...)...)
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("dns run %v: %v, want an error with %q", c.args, err, c.want)
		}
	}
}

// The web view (a stop's --ui, lab up's --ui and --prometheus, lab ui's --listen) republishes
// metrics that may be served on loopback only: an address other hosts reach is refused unless
// --ui-public is given, and the error names the flag.
func TestUIPublicAddressNeedsFlag(t *testing.T) {
	path := writeDNSConfig(t, dnsTestConfig)
	for _, ui := range []string{"0.0.0.0:0", "[::]:0", "192.0.2.1:8080"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, err := runDNSCLI(t, ctx, "run", "--config", path, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--ui", ui)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "refuse --ui "+ui) || !strings.Contains(err.Error(), "--ui-public") {
			t.Errorf("dns run --ui %s: %v; want it refused, naming --ui-public", ui, err)
		}
	}
	// The check itself: loopback (and a hostless address, bound to loopback) pass; anything
	// else passes only with --ui-public.
	for _, c := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--ui", "127.0.0.1:8080"}, true},
		{[]string{"--ui", ":8080"}, true},
		{[]string{"--ui", "localhost:8080"}, true},
		{[]string{"--ui", "0.0.0.0:8080"}, false},
		{[]string{"--ui", "0.0.0.0:8080", "--ui-public"}, true},
	} {
		var err error
		app := &cli.App{Flags: uiFlags(), Action: func(c *cli.Context) error { err = checkUIListen(c, "ui", c.String("ui")); return nil }}
		if rerr := app.Run(append([]string{"x"}, c.args...)); rerr != nil {
			t.Fatal(rerr)
		}
		if (err == nil) != c.ok {
			t.Errorf("%v: %v; want ok=%v", c.args, err, c.ok)
		}
	}
	if os.Geteuid() != 0 {
		t.Log("lab up and lab ui need root: not run")
		return
	}
	t.Setenv("SWITCHYARD_BIN", "") // were the check missing, lab up could not start a lab
	for _, args := range [][]string{
		{"lab", "up", "--prefix", "syuit", "--ui", "0.0.0.0:8080"},
		{"lab", "up", "--prefix", "syuit", "--ui", "off", "--prometheus", "0.0.0.0:9090"},
		{"lab", "ui", "--prefix", "syuit", "--listen", "0.0.0.0:8080"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		app := newApp()
		app.Writer, app.ErrWriter = io.Discard, io.Discard
		err := app.RunContext(ctx, append([]string{"switchyard"}, args...))
		cancel()
		if err == nil || !strings.Contains(err.Error(), "refuse --") || !strings.Contains(err.Error(), "--ui-public") {
			t.Errorf("%s: %v; want it refused, naming --ui-public", strings.Join(args, " "), err)
		}
	}
}
