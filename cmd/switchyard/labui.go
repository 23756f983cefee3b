package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/lab"
)

// `switchyard lab ui`: the lab's web view (lab/observe.go), which `lab up` and `lab demo`
// start in the host namespace. It is added to the lab command registered in lab.go (whose init
// runs first: files initialise in name order).
func init() {
	for _, c := range commands {
		if c.Name != "lab" {
			continue
		}
		c.Subcommands = append(c.Subcommands, &cli.Command{
			Name:  "ui",
			Usage: "serve the lab's live web view (started by `lab up`; run it by hand on another address)",
			Description: `One page shows the request path live: DNS answers by policy and zone, edge hits, misses,
stale and hit ratio, the XDP balancer's packets, flows and drops per VIP and backend, the L7
pools' requests/s and p99, and the requests each app backend answers. One collector scrapes
every stop's own Prometheus endpoint inside its namespace each second; the page gets the
numbers over server-sent events. It also relays each stop's metrics at /targets/NAME/metrics
for the lab's Prometheus.

Examples:
   switchyard lab ui --listen 127.0.0.1:8080     # then open http://127.0.0.1:8080/`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "prefix", Value: "sy", Usage: "the lab's name prefix"},
				&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8080", Usage: "`ADDR:PORT` of the page"},
				uiPublicFlag(),
			},
			Action: func(c *cli.Context) error {
				if err := needRoot("lab ui"); err != nil {
					return err
				}
				if err := checkUIListen(c, "listen", c.String("listen")); err != nil {
					return err
				}
				ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
				defer stop()
				return lab.ServeUI(ctx, c.String("prefix"), c.String("listen"))
			},
		})
		return
	}
	panic("labui.go: the lab command is not registered yet (lab.go's init must run first)")
}

// observeFlags are `lab up`'s and `lab demo`'s flags of the web view and Prometheus.
func observeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "ui", Value: lab.Auto, Usage: "`ADDR:PORT` of the live web view (auto: a free loopback port; off: none)"},
		&cli.StringFlag{Name: "prometheus", Value: lab.Auto, Usage: "`ADDR:PORT` of a Prometheus scraping every stop (auto: a free loopback port when prometheus is installed; off: none)"},
		uiPublicFlag(),
	}
}

// checkObserveFlags refuses a web view or Prometheus address other hosts reach without
// --ui-public: both show every stop's metrics. It runs before anything is built.
func checkObserveFlags(c *cli.Context) error {
	for _, f := range []string{"ui", "prometheus"} {
		if a := c.String(f); a != lab.Auto && a != "off" {
			if err := checkUIListen(c, f, a); err != nil {
				return err
			}
		}
	}
	return nil
}

// observeOptions fills the UpOptions of the web view and Prometheus from the flags.
func observeOptions(c *cli.Context, o *lab.UpOptions) {
	o.UI, o.Prometheus = c.String("ui"), c.String("prometheus")
	if o.UI == "off" {
		o.UI = ""
	}
	if o.Prometheus == "off" {
		o.Prometheus = ""
	}
	if o.Prometheus != "" && o.UI == "" {
		o.UI = lab.Auto // Prometheus scrapes the stops through the web view's relay
	}
}
