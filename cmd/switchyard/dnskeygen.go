package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/dns/dnssec"
)

func dnsKeygenCmd() *cli.Command {
	return &cli.Command{
		Name:  "keygen",
		Usage: "create a DNSSEC key file and print its DNSKEY and the DS record for the parent",
		Description: `Writes the key (DNSKEY record and private key, mode 0600) to --out, by default
   K<zone>+<alg>+<tag>.private in the current directory, and prints the DNSKEY, the DS record
   (SHA-256) to give to the parent zone, and the trust anchor for a validator. A CSK (the default)
   signs everything; --type ksk and --type zsk make the two keys of a split scheme. The algorithm
   is 13 (ECDSA P-256, the default), 15 (Ed25519) or 8 (RSA/SHA-256 of --bits). See docs/dns.md.

   Examples:
     switchyard dns keygen --zone example.com.
     switchyard dns keygen --zone example.com. --type ksk --out /etc/switchyard/example.ksk
     switchyard dns keygen --zone example.com. --algorithm 8 --bits 2048`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "zone", Usage: "zone `ORIGIN`, e.g. example.com.", Required: true},
			&cli.StringFlag{Name: "type", Value: "csk", Usage: "key `TYPE`: csk (flags 257, signs all), ksk (257) or zsk (256)"},
			&cli.StringFlag{Name: "out", Usage: "key `FILE` to write (refused when it exists, unless --force)"},
			&cli.UintFlag{Name: "ttl", Value: 3600, Usage: "`TTL` of the printed DNSKEY and DS records"},
			&cli.UintFlag{Name: "algorithm", Value: 13, Usage: "`ALG`: 13 (ECDSA P-256), 15 (Ed25519) or 8 (RSA/SHA-256)"},
			&cli.UintFlag{Name: "bits", Usage: "RSA key size in `BITS` (algorithm 8: 2048 to 4096, default 2048)"},
			&cli.BoolFlag{Name: "force", Usage: "overwrite --out when it exists"},
		},
		Action: func(c *cli.Context) error {
			zone := strings.ToLower(c.String("zone"))
			if !strings.HasSuffix(zone, ".") {
				zone += "."
			}
			flags := map[string]uint16{"csk": dnssec.FlagsKSK, "ksk": dnssec.FlagsKSK, "zsk": dnssec.FlagsZSK}[c.String("type")]
			if flags == 0 {
				return fmt.Errorf("keygen: --type %q is unknown; use csk, ksk or zsk", c.String("type"))
			}
			if c.Uint("algorithm") > 255 {
				return fmt.Errorf("keygen: --algorithm %d is unknown; use 13, 15 or 8", c.Uint("algorithm"))
			}
			k, err := dnssec.GenerateAlgorithm(zone, uint8(c.Uint("algorithm")), int(c.Uint("bits")), flags, uint32(c.Uint("ttl")))
			if err != nil {
				return fmt.Errorf("keygen: %w", err)
			}
			out := c.String("out")
			if out == "" {
				out = fmt.Sprintf("K%s+%03d+%05d.private", zone, k.DNSKEY.Algorithm, k.Tag)
			}
			mode := os.O_WRONLY | os.O_CREATE | os.O_EXCL
			if c.Bool("force") {
				mode = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
			}
			f, err := os.OpenFile(out, mode, 0o600)
			if errors.Is(err, os.ErrExist) {
				return fmt.Errorf("keygen: %s exists; choose another --out or pass --force to replace the key", out)
			}
			if err != nil {
				return fmt.Errorf("keygen: create key file: %w", err)
			}
			if err := f.Chmod(0o600); err != nil { // an existing file replaced with --force keeps its mode otherwise
				f.Close()
				return fmt.Errorf("keygen: chmod key file: %w", err)
			}
			if _, err := f.Write(k.File(time.Now())); err != nil {
				f.Close()
				return fmt.Errorf("keygen: write key file: %w", err)
			}
			if err := f.Close(); err != nil {
				return fmt.Errorf("keygen: write key file: %w", err)
			}
			w := c.App.Writer
			fmt.Fprintf(w, "; wrote %s (mode 0600), key tag %d, flags %d\n", out, k.Tag, k.DNSKEY.Flags)
			fmt.Fprintln(w, k.DNSKEY.String())
			if k.SEP() {
				fmt.Fprintln(w, "; DS record for the parent zone (SHA-256):")
				fmt.Fprintln(w, k.DS().String())
				fmt.Fprintf(w, "; trust anchor (delv -a FILE +root=%s):\n", zone)
				fmt.Fprintf(w, "; trust-anchors { %s static-key %d %d %d \"%s\"; };\n", zone, k.DNSKEY.Flags,
					k.DNSKEY.Protocol, k.DNSKEY.Algorithm, k.DNSKEY.PublicKey)
			}
			return nil
		},
	}
}
