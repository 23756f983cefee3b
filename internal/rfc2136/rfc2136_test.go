package rfc2136_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/libdns/libdns"
	mdns "github.com/miekg/dns"

	sydns "github.com/switchyard/switchyard/dns"
	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/rfc2136"
)

const secret = "YWNtZS1rZXktc3dpdGNoeWFyZC10ZXN0cy0zMi1ieXRlcw=="

// The provider puts an ACME challenge's TXT records into a zone of switchyard's DNS server and
// takes them out again, through the server's update path; a wrong key changes nothing.
func TestProviderAgainstSwitchyard(t *testing.T) {
	cfg, err := config.Parse([]byte(`listen: 127.0.0.1:0
tsig_keys: [{name: acme, algorithm: hmac-sha512, secret: "` + secret + `"}]
zones:
  - origin: example.com.
    records: ["www A 192.0.2.1"]
    update:
      journal: ` + t.TempDir() + `/j
      allow: [{key: acme, names: [_acme-challenge, "*._acme-challenge"], types: [TXT]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sydns.NewServer(cfg, sydns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	p := &rfc2136.Provider{Server: srv.Addr().String(), KeyName: "acme", KeyAlgorithm: "hmac-sha512", Secret: secret}
	txt := func() []string {
		m, _, err := sydns.Query(ctx, srv.Addr().String(), "_acme-challenge.example.com.", mdns.TypeTXT, sydns.QueryOptions{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, rr := range m.Answer {
			out = append(out, strings.Join(rr.(*mdns.TXT).Txt, ""))
		}
		return out
	}
	long := strings.Repeat("k", 300) // two character-strings on the wire
	recs := []libdns.Record{libdns.TXT{Name: "_acme-challenge", TTL: 60 * time.Second, Text: "token-a"},
		libdns.TXT{Name: "_acme-challenge", TTL: 60 * time.Second, Text: long}}
	got, err := p.AppendRecords(ctx, "example.com.", recs)
	if err != nil || len(got) != 2 {
		t.Fatalf("append: %v %v", got, err)
	}
	if _, ok := got[0].(libdns.TXT); !ok {
		t.Errorf("append returned %T, want libdns.TXT", got[0])
	}
	if v := txt(); len(v) != 2 || !strings.Contains(strings.Join(v, ","), "token-a") || !strings.Contains(strings.Join(v, ","), long) {
		t.Fatalf("TXT after append: %q", v)
	}
	if _, err := p.DeleteRecords(ctx, "example.com.", recs[:1]); err != nil {
		t.Fatal(err)
	}
	if v := txt(); len(v) != 1 || v[0] != long {
		t.Fatalf("TXT after deleting one: %q", v)
	}
	// Refused by the allow-list, and a wrong key: errors, nothing changed.
	if _, err := p.AppendRecords(ctx, "example.com.", []libdns.Record{libdns.TXT{Name: "www", TTL: time.Minute, Text: "x"}}); err == nil || !strings.Contains(err.Error(), "REFUSED") {
		t.Errorf("append outside the allow-list: %v, want REFUSED", err)
	}
	bad := *p
	bad.Secret = "d3Jvbmctc2VjcmV0LXN3aXRjaHlhcmQtdGVzdHMtMzJi"
	if _, err := bad.DeleteRecords(ctx, "example.com.", []libdns.Record{libdns.RR{Name: "_acme-challenge", Type: "TXT"}}); err == nil {
		t.Error("delete with a wrong key succeeded")
	}
	if v := txt(); len(v) != 1 {
		t.Fatalf("TXT after refused updates: %q", v)
	}
	if _, err := p.DeleteRecords(ctx, "example.com", []libdns.Record{libdns.RR{Name: "_acme-challenge", Type: "TXT"}}); err != nil {
		t.Fatal(err)
	}
	if v := txt(); len(v) != 0 {
		t.Fatalf("TXT after deleting the RRset: %q", v)
	}
}
