package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	sydns "github.com/switchyard/switchyard/dns"
	"github.com/switchyard/switchyard/internal/adminauth"
)

// dnsTokenEnv is the environment variable that may hold the DNS server's admin token.
const dnsTokenEnv = "SWITCHYARD_DNS_TOKEN"

// dnsReloadCmd asks a running server to reload, through POST /reload on its metrics listener
// (dns.Server.ReloadHandler), with the admin token `dns run --token-file` was given.
func dnsReloadCmd() *cli.Command {
	return &cli.Command{
		Name:  "reload",
		Usage: "make a running server read one zone's file again (--zone), or its whole configuration",
		Description: `With --zone, only that zone's file is read and only that zone is replaced: the
   configuration and the other zones are not touched (a zone added to or changed in the
   configuration file needs the reload without --zone, as SIGHUP does). On error the old data
   keeps serving and the command fails with the reason.

   Examples:
     switchyard dns reload --metrics 127.0.0.1:9153 --token-file dns.token --zone example.com.
     SWITCHYARD_DNS_TOKEN=... switchyard dns reload --metrics 127.0.0.1:9153`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "metrics", Value: "127.0.0.1:9153", Usage: "the server's metrics `ADDR:PORT` (dns run --metrics)"},
			&cli.StringFlag{Name: "zone", Usage: "reload only zone `NAME`"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "how long to wait for the reload"},
		}, tokenFlags(dnsTokenEnv, "the running server's admin token (its dns run --token-file)")...),
		Action: dnsReload,
	}
}

func dnsReload(c *cli.Context) error {
	token, err := adminToken(c, dnsTokenEnv)
	if err != nil {
		return err
	}
	if token == "" {
		return fmt.Errorf("dns reload: no admin token: pass --token-file FILE (the file given to dns run --token-file) or set %s", dnsTokenEnv)
	}
	addr := adminauth.Loopback(c.String("metrics"))
	u := "http://" + addr + "/reload"
	if z := c.String("zone"); z != "" {
		u += "?" + url.Values{"zone": {z}}.Encode()
	}
	status, body, err := adminRequest(c, dnsTokenEnv, http.MethodPost, u, c.Duration("timeout"))
	if err != nil {
		return fmt.Errorf("dns reload: %w; is `switchyard dns run --metrics %s --token-file FILE` running?", err, addr)
	}
	switch status {
	case http.StatusOK:
	case http.StatusUnauthorized:
		return fmt.Errorf("dns reload: unauthorized: the token differs from the one the server was started with (dns run --token-file)")
	case http.StatusForbidden:
		return fmt.Errorf("dns reload: the server was started without an admin token: restart it with dns run --token-file FILE (or %s), or send it SIGHUP", dnsTokenEnv)
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		if !strings.Contains(string(body), "reload") {
			return fmt.Errorf("dns reload: %s has no reload endpoint: is it a switchyard dns server of this version?", addr)
		}
		fallthrough
	default:
		return fmt.Errorf("dns reload: %s", strings.TrimSpace(string(body)))
	}
	if err := printDNSReload(c.App.Writer, c.String("zone") != "", body); err != nil {
		// A server of a version without /reload answers it with its metrics.
		return fmt.Errorf("dns reload: %w; is %s a switchyard dns server of this version (with /reload)?", err, addr)
	}
	return nil
}

// printDNSReload prints the server's answer to a reload.
func printDNSReload(w io.Writer, zone bool, body []byte) error {
	if !zone {
		var r sydns.ConfigReload
		if err := json.Unmarshal(body, &r); err != nil {
			return fmt.Errorf("decode the answer: %w", err)
		}
		fmt.Fprintf(w, "configuration reloaded: %d zones\n", r.Zones)
		return nil
	}
	var r sydns.ZoneReload
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("dns reload: decode the answer: %w", err)
	}
	if !r.Changed {
		fmt.Fprintf(w, "zone %s unchanged (serial %d): its file and keys are as served\n", r.Zone, r.Serial)
		return nil
	}
	fmt.Fprintf(w, "zone %s reloaded: serial %d -> %d\n", r.Zone, r.OldSerial, r.Serial)
	return nil
}
