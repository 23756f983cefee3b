package pebble

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestPrepare: the configuration names Pebble's addresses, ports and a certificate for its
// address (an IP here), the command line its resolver; a second Prepare keeps the certificate,
// so a Pebble already running stays trusted.
func TestPrepare(t *testing.T) {
	dir := t.TempDir()
	o := Options{Listen: "198.18.4.53:14000", Mgmt: "198.18.4.53:15000", HTTPPort: 80, TLSPort: 443, DNSServer: "198.18.4.53:53"}
	s, err := Prepare("/usr/bin/pebble", dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if s.Directory != "https://198.18.4.53:14000/dir" || s.Argv[0] != "/usr/bin/pebble" || s.Argv[len(s.Argv)-1] != "198.18.4.53:53" {
		t.Fatalf("server %+v", s)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "pebble.json"))
	var conf struct {
		Pebble struct {
			ListenAddress, ManagementListenAddress, Certificate string
			HTTPPort, TLSPort                                   int
		}
	}
	if err := json.Unmarshal(b, &conf); err != nil || conf.Pebble.ListenAddress != o.Listen || conf.Pebble.ManagementListenAddress != o.Mgmt ||
		conf.Pebble.HTTPPort != 80 || conf.Pebble.TLSPort != 443 || conf.Pebble.Certificate != s.CARoot {
		t.Fatalf("pebble.json %s (%v)", b, err)
	}
	first, _ := os.ReadFile(s.CARoot)
	blk, _ := pem.Decode(first)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil || len(cert.IPAddresses) != 1 || !cert.IPAddresses[0].Equal(net.ParseIP("198.18.4.53")) || cert.VerifyHostname("198.18.4.53") != nil {
		t.Fatalf("https certificate for %v (%v)", cert.IPAddresses, err)
	}
	if _, err := Prepare("/usr/bin/pebble", dir, o); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(s.CARoot); string(again) != string(first) {
		t.Fatal("a second Prepare replaced the https certificate")
	}
	if _, err := Prepare("/usr/bin/pebble", t.TempDir(), Options{Listen: "no-port", Mgmt: o.Mgmt}); err == nil {
		t.Fatal("an address without a port was taken")
	}
}
