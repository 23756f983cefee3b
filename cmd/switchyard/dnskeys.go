package main

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/keyroll"
	"github.com/switchyard/switchyard/dns/keystore"
)

func dnsKeysCmd() *cli.Command {
	return &cli.Command{
		Name:  "keys",
		Usage: "show the keys of the zones with a DNSSEC key policy: states, timestamps, next transition",
		Description: `Reads each policy zone's key state in its key_dir, or in the fleet's etcd store
   with store: (nothing is generated or changed; the server does that). See docs/dns.md "Key
   policy".

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
			var fleet *keystore.Store
			if cfg.Store != "" {
				if fleet, err = keystore.Open(cfg.Store, cfg.StoreKeyPath(), slog.New(slog.DiscardHandler), keystore.Options{}); err != nil {
					return err
				}
				defer fleet.Close()
			}
			n := 0
			for _, z := range cfg.Zones {
				if z.DNSSEC == nil || z.DNSSEC.Policy == nil {
					continue
				}
				var keys keyroll.Store = keyroll.DirStore(keyroll.Dir(z.DNSSEC, cfg.Dir))
				if fleet != nil {
					keys = fleet
				}
				lines, err := keyroll.Describe(z.Origin, z.DNSSEC, keys, time.Now())
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
