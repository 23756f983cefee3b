package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/internal/editdist"
)

// A command that only groups subcommands (`vip`, `lb store`) gets notFound as its action: with
// no argument it shows its help, with an unknown one it fails naming the nearest subcommand
// (`vip lst` → `vip list`) instead of urfave/cli's "No help topic".
func addNotFound(cmds []*cli.Command) {
	for _, c := range cmds {
		if len(c.Subcommands) > 0 {
			if c.Action == nil {
				c.Action = notFound
			}
			addNotFound(c.Subcommands)
		}
	}
}

func notFound(c *cli.Context) error {
	if c.NArg() == 0 {
		return cli.ShowSubcommandHelp(c)
	}
	return unknownCommand(commandPath(c), c.Command.Subcommands, c.Args().First())
}

// commandPath is "switchyard vip" for the context of `vip`, from the context lineage
// (urfave/cli's HelpName grows each time a test builds the app again from the same commands).
func commandPath(c *cli.Context) string {
	var names []string
	for _, x := range c.Lineage() { // the app's root command is named after it
		if x.Command != nil && x.Command.Name != "" && x.Command.Name != c.App.Name && (len(names) == 0 || names[0] != x.Command.Name) {
			names = append([]string{x.Command.Name}, names...)
		}
	}
	return strings.Join(append([]string{c.App.Name}, names...), " ")
}

// appNotFound is the top-level version of notFound.
func appNotFound(c *cli.Context) error {
	if c.NArg() == 0 {
		return cli.ShowAppHelp(c)
	}
	return unknownCommand(c.App.Name, c.App.Commands, c.Args().First())
}

func unknownCommand(parent string, cmds []*cli.Command, got string) error {
	if s := nearest(cmds, got); s != "" {
		return fmt.Errorf("unknown command %q: did you mean `%s %s`? (see `%s --help`)", got, parent, s, parent)
	}
	return fmt.Errorf("unknown command %q: see `%s --help` for the commands", got, parent)
}

// nearest is the visible command name (or alias) closest to got by edit distance, when it is
// close enough to be a typo (at most a third of the name wrong, at least one letter right), or
// when got is a prefix of exactly one name.
func nearest(cmds []*cli.Command, got string) string {
	best, bestD := "", 1<<30
	var prefixed []string
	for _, c := range cmds {
		if c.Hidden {
			continue
		}
		for _, n := range c.Names() {
			if strings.HasPrefix(n, got) {
				prefixed = append(prefixed, c.Name)
			}
			if d := editdist.Distance(got, n); d < bestD {
				best, bestD = c.Name, d
			}
		}
	}
	if bestD <= max(1, len(got)/3) && bestD < len(got) {
		return best
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}
