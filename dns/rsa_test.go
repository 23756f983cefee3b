package dns

import (
	"encoding/base64"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"
)

// rsaZone is a policy zone signed with RSA/SHA-256 (algorithm 8) keys of the default size,
// with transfers allowed to the test (kzonecheckServed).
func rsaZone(dir string) string {
	return `zones:
  - origin: example.org.
    transfer: {allow: [127.0.0.1]}
    dnssec:
      key_dir: ` + dir + `
      policy: {algorithm: 8, scheme: ksk_zsk}
    records:
      - "@ SOA ns1 hostmaster 1 3600 600 604800 60"
      - "@ NS ns1"
      - "@ MX 10 mail"
      - "ns1 A 127.0.0.1"
      - "mail A 192.0.2.25"
      - "www 300 A 192.0.2.1"
      - "*.wild TXT wildcard"
`
}

// TestRSAPolicyValidates: a key policy of algorithm 8 makes 2048-bit RSA keys, delv validates
// positive, wildcard and negative answers from the KSK's DS, and kzonecheck every RRSIG of the
// zone as transferred and served.
func TestRSAPolicyValidates(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, rsaZone(dir), Options{})
	keys := exchange(t, srv, doQuery("example.org.", mdns.TypeDNSKEY, false), true)
	var ds *mdns.DS
	n := 0
	for _, rr := range keys.Answer {
		k, ok := rr.(*mdns.DNSKEY)
		if !ok {
			continue
		}
		n++
		if k.Algorithm != mdns.RSASHA256 || rsaBits(t, k) != 2048 {
			t.Errorf("DNSKEY %d: algorithm %d of %d bits, want 8 of 2048", k.KeyTag(), k.Algorithm, rsaBits(t, k))
		}
		if k.Flags == 257 {
			ds = k.ToDS(mdns.SHA256)
		}
	}
	if n != 2 || ds == nil {
		t.Fatalf("DNSKEY RRset %v: want a KSK and a ZSK", keys.Answer)
	}
	anchor := dsAnchor(t, ds)
	for _, q := range [][3]string{
		{"www.example.org.", "A", "192.0.2.1"},
		{"example.org.", "MX", "10 mail.example.org."},
		{"x.wild.example.org.", "TXT", "wildcard"},
		{"nope.example.org.", "A", "; negative response, fully validated"},
		{"www.example.org.", "MX", "; negative response, fully validated"},
	} {
		out := delvRoot(t, srv, anchor, "example.org.", q[0], q[1])
		if !strings.Contains(out, "fully validated") || !strings.Contains(out, q[2]) {
			t.Errorf("delv %s %s: want %q, fully validated; got\n%s", q[0], q[1], q[2], out)
		}
	}
	kzonecheckServed(t, srv, "example.org.")
}

// rsaBits is the modulus size of an RSA DNSKEY.
func rsaBits(t *testing.T, k *mdns.DNSKEY) int {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(k.PublicKey)
	if err != nil || len(b) < 4 || b[0] == 0 {
		t.Fatalf("DNSKEY %d: public key %q is not RFC 3110 with a short exponent", k.KeyTag(), k.PublicKey)
	}
	return new(big.Int).SetBytes(b[1+int(b[0]):]).BitLen()
}

// kzonecheckServed has Knot's kzonecheck validate zone as switchyard serves it: the records of
// an AXFR (by kdig), each RRset with the RRSIGs a DO=1 query gets, and the signed DNSKEY RRset.
// Online signing keeps no NSEC chain (its denial is made per answer), and kzonecheck checks
// signatures only in a zone that has one, so the test adds the chain over the transferred
// owners (in the AXFR's canonical order), signed by the server's own signer.
func kzonecheckServed(t *testing.T, srv *Server, zone string) {
	t.Helper()
	// Missing tools leave out this validator only, not the test that calls it.
	kzc, err := exec.LookPath("kzonecheck")
	if err != nil {
		t.Log("kzonecheck not installed, not validated by it: apt-get install knot-dnssecutils (make deps)")
		return
	}
	kdig, err := exec.LookPath("kdig")
	if err != nil {
		t.Log("kdig not installed, not validated by kzonecheck: apt-get install knot-dnsutils (make deps)")
		return
	}
	a := srv.Addr()
	axfr, err := exec.Command(kdig, "@"+a.Addr().String(), "-p", fmtInt(int(a.Port())), "AXFR", zone, "+nocomments", "+nostats").CombinedOutput()
	if err != nil {
		t.Fatalf("kdig AXFR %s: %v\n%s", zone, err, axfr)
	}
	var owners []string
	types := map[string][]uint16{}
	zp := mdns.NewZoneParser(strings.NewReader(string(axfr)), zone, "axfr")
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		h := rr.Header()
		if _, ok := types[h.Name]; !ok {
			owners = append(owners, h.Name)
		}
		if !slices.Contains(types[h.Name], h.Rrtype) {
			types[h.Name] = append(types[h.Name], h.Rrtype)
		}
	}
	if err := zp.Err(); err != nil || len(owners) < 2 {
		t.Fatalf("kdig AXFR %s: %v; %d owners:\n%s", zone, err, len(owners), axfr)
	}
	types[zone] = append(types[zone], mdns.TypeDNSKEY)
	var text strings.Builder
	for _, o := range owners {
		for _, qt := range types[o] {
			for _, rr := range exchange(t, srv, doQuery(o, qt, false), true).Answer {
				text.WriteString(rr.String() + "\n")
			}
		}
	}
	sg := srv.state.Load().signers[zone]
	for i, o := range owners {
		bitmap := append(slices.Clone(types[o]), mdns.TypeRRSIG, mdns.TypeNSEC)
		slices.Sort(bitmap)
		nsec := &mdns.NSEC{Hdr: mdns.RR_Header{Name: o, Rrtype: mdns.TypeNSEC, Class: mdns.ClassINET, Ttl: 60},
			NextDomain: owners[(i+1)%len(owners)], TypeBitMap: bitmap}
		sigs, _, err := sg.Sign([]mdns.RR{nsec})
		if err != nil {
			t.Fatal(err)
		}
		for _, rr := range append([]mdns.RR{nsec}, sigs...) {
			text.WriteString(rr.String() + "\n")
		}
	}
	path := filepath.Join(t.TempDir(), "signed.zone")
	if err := os.WriteFile(path, []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// At the server's clock: a test may have moved it on (a rollover's walk).
	at := fmtInt(int(srv.now().Unix()))
	if out, err := exec.Command(kzc, "-o", zone, "-d", "on", "-t", at, path).CombinedOutput(); err != nil {
		t.Errorf("kzonecheck -d on of %s as served: %v\n%s\nzone:\n%s", zone, err, out, text.String())
	}
}
