package main

import (
	_ "embed"
	"fmt"

	"github.com/urfave/cli/v2"
)

var (
	//go:embed completion/switchyard.bash
	bashCompletion string
	//go:embed completion/_switchyard
	zshCompletion string
)

func init() {
	register(&cli.Command{
		Name:      "completion",
		Usage:     "print the shell completion script for bash or zsh",
		ArgsUsage: "bash|zsh",
		Description: `The script asks the binary itself what comes next (commands, flags, and VIP names of the
   running daemon), so it always matches the installed version. ` + "`make install`" + ` installs both.

   Examples:
     source <(switchyard completion bash)
     switchyard completion bash > /usr/share/bash-completion/completions/switchyard
     switchyard completion zsh > /usr/share/zsh/vendor-completions/_switchyard`,
		BashComplete: func(c *cli.Context) { fmt.Fprintln(c.App.Writer, "bash\nzsh") },
		Action: func(c *cli.Context) error {
			switch c.Args().First() {
			case "bash":
				_, err := fmt.Fprint(c.App.Writer, bashCompletion)
				return err
			case "zsh":
				_, err := fmt.Fprint(c.App.Writer, zshCompletion)
				return err
			}
			return fmt.Errorf("completion: give the shell, bash or zsh (got %q): e.g. `source <(switchyard completion bash)`", c.Args().First())
		},
	})
}
