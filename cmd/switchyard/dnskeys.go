package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/keyroll"
)

func dnsKeysCmd() *cli.Command {
	return &cli.Command{
		Name:  "keys",
		Usage: "show the keys of the zones with a DNSSEC key policy: states, timestamps, next transition",
		Description: `Reads each policy zone's key state in its key_dir (nothing is generated or
   changed; the server does that). See docs/dns.md "Key policy".

   Example:
     switchyard dns keys --config dns.yaml`,
		Flags: []cli.Flag{dnsConfigFlag},
		Action: func(c *cli.Context) error {
			cfg, err := config.Load(c.String("config"))
			if err != nil {
				return err
			}
			cfg.ApplyDefaults()
			if err := cfg.Validate(); err != nil {
				return err
			}
			n := 0
			for _, z := range cfg.Zones {
				if z.DNSSEC == nil || z.DNSSEC.Policy == nil {
					continue
				}
				lines, err := keyroll.Describe(z.Origin, z.DNSSEC, cfg.Dir, time.Now())
				if err != nil {
					return fmt.Errorf("keys: zone %s: %w", z.Origin, err)
				}
				for _, l := range lines {
					fmt.Fprintln(c.App.Writer, l)
				}
				n++
			}
			if n == 0 {
				fmt.Fprintln(c.App.Writer, "no zone has a dnssec policy")
			}
			return nil
		},
	}
}
