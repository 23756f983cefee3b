package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/lab"
)

// The lab's balancer daemons keep their sockets in the lab's state directory
// (/run/switchyard/lab/<prefix>/<ns>.sock), not in /run/switchyard: when that has none (or
// --lab names a lab), `vip` and `backend` commands use a lab's.

func labSocketFlag() cli.Flag {
	return &cli.StringFlag{Name: "lab", EnvVars: []string{"SWITCHYARD_LAB"}, Usage: "use a daemon of the lab with this `PREFIX` (default: the lab that is up, when no socket is in /run/switchyard)"}
}

// labSocketPath picks a lab daemon's socket: the only one, or the first of a lab whose daemons
// share their VIPs through its store (any of them reads and changes the same VIPs).
func labSocketPath(prefix string) (string, error) {
	socks := lab.DaemonSockets(prefix)
	if len(socks) == 0 {
		if prefix != "" {
			return "", fmt.Errorf("daemon not running: lab %q has no balancer daemon socket: bring it up with `switchyard lab up --prefix %s`", prefix, prefix)
		}
		return "", errors.New("daemon not running: no control socket in /run/switchyard and no lab is up: start one with `switchyard lb run` or `switchyard lab up`, or give --socket")
	}
	labs := map[string]bool{}
	var paths []string
	for _, s := range socks {
		labs[s.Prefix] = true
		paths = append(paths, s.Path)
	}
	if len(labs) > 1 {
		return "", fmt.Errorf("several labs are up (%s): choose one with --lab PREFIX, or a daemon with --socket", strings.Join(paths, ", "))
	}
	if len(socks) == 1 || socks[0].Shared {
		return socks[0].Path, nil
	}
	return "", fmt.Errorf("lab %q runs several daemons without a store, each with its own VIPs (%s): choose one with --socket", socks[0].Prefix, strings.Join(paths, ", "))
}
