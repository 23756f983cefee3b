// Command switchyard is the one binary of the switchyard traffic layer: a subcommand per stop
// (lb, vip, backend, l7, edge, dns, lab). It only parses arguments and prints results; the work is
// done by the packages it calls.
package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/urfave/cli/v2"
)

// commands holds the top-level subcommands. Each stop registers its own from an init function in
// its own file (dns.go, edge.go, l7.go, lb.go, lab.go), so the stops stay independent of each other.
var commands []*cli.Command

// register adds a top-level subcommand; called from init functions.
func register(c *cli.Command) { commands = append(commands, c) }

// newApp builds the CLI application. Tests run commands through it with captured output.
func newApp() *cli.App {
	sort.Slice(commands, func(i, j int) bool { return commands[i].Name < commands[j].Name })
	addNotFound(commands)
	return &cli.App{
		Name:                 "switchyard",
		Version:              version,
		Action:               appNotFound,
		Usage:                "a traffic layer for Linux: DNS, edge cache, XDP L4 balancer, L7 proxy",
		EnableBashCompletion: true,
		Commands:             commands,
		Description: `switchyard provides the four stops a request passes on its way to an application:
   dns      authoritative DNS with geolocation, latency and weighted policies
   edge     an RFC 9111 HTTP cache with collapsing, stale serving, purge and push
   lb       the XDP L4 balancer (Maglev + connection table, IPIP/IP6IP6 DSR); vip/backend manage it
   l7       a content-aware HTTP proxy tier behind the L4 VIPs
   lab      a network-namespace lab that runs every stop and its experiments`,
	}
}

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "switchyard:", err)
		os.Exit(1)
	}
}
