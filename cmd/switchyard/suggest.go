package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
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
			if d := editDistance(got, n); d < bestD {
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

// editDistance is the Damerau-Levenshtein distance (optimal string alignment): insertions,
// deletions, substitutions and swaps of two adjacent letters cost one each.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range rb {
		d[0][j+1] = j + 1
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
