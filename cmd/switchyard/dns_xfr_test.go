package main

import (
	"context"
	"strings"
	"testing"
)

// `dns check` prints what secondaries receive, and names the line and field of a bad transfer
// block.
func TestDnsCheckTransfers(t *testing.T) {
	cfg := "tsig_keys: [{name: xfr-key, secret: c3dpdGNoeWFyZC10cmFuc2Zlci10ZXN0LWtleS0zMmI=}]\n" +
		strings.Replace(dnsTestConfig, "    names:\n",
			"    transfer: {allow: [192.0.2.2], key: xfr-key, notify: ['192.0.2.2:53']}\n    names:\n", 1)
	out, _, err := runDNSCLI(t, context.Background(), "check", "--config", writeDNSConfig(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"transfer example.com.: serial 1, 3 records, allow [192.0.2.2], key xfr-key., notify [192.0.2.2:53]",
		"transfer app.example.com.: [198.51.100.6] (default for geolocation)"} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	bad := strings.Replace(cfg, "key: xfr-key,", "key: xfr-kye,", 1)
	_, _, err = runDNSCLI(t, context.Background(), "check", "--config", writeDNSConfig(t, bad))
	if err == nil || !strings.Contains(err.Error(), `line 9: zone example.com.: field transfer.key: "xfr-kye" is not among tsig_keys`) {
		t.Fatalf("bad key error %v, want line and field", err)
	}
}
