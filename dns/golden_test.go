package dns

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
)

// richZone has a record of most types the zone parser knows, in mixed case, with duplicates
// and an RRset of mixed TTLs, and every kind of name a lookup distinguishes.
const richZone = `$ORIGIN rich.test.
$TTL 300
@ IN SOA ns1 hostmaster 5 3600 600 604800 120
@ IN NS ns1
@ IN NS Ns2.Rich.Test.
ns1 IN A 192.0.2.1
ns2 IN A 192.0.2.2
ns2 IN AAAA 2001:db8::2
@ IN MX 10 Mail
@ IN MX 20 mail2.elsewhere.test.
mail IN A 192.0.2.25
www 60 IN A 192.0.2.10
www 120 IN A 192.0.2.11
www IN A 192.0.2.10
www IN AAAA 2001:db8::10
alias IN CNAME WWW
chain1 IN CNAME chain2
chain2 IN CNAME alias
ext IN CNAME target.elsewhere.test.
txt IN TXT "hello world" "second \"quoted\" string" "semi\;colon" "\065\066"
txt IN TXT "x"
_sip._udp IN SRV 10 60 5060 Mail
ptr IN PTR www.rich.test.
caa IN CAA 0 issue "ca.example.net"
caa IN CAA 128 tbs "Unknown"
naptr IN NAPTR 100 10 "U" "E2U+sip" "!^.*$!sip:info@example.com!" .
sshfp IN SSHFP 4 2 123456789abcdef67890123456789abcdef67890123456789abcdef123456789
tlsa IN TLSA 3 1 1 0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF
svc IN HTTPS 1 . alpn=h2,h3 ipv4hint=192.0.2.10
svc2 IN SVCB 2 svc.rich.test. port=8443
hinfo IN HINFO "PC" "Linux"
loc IN LOC 52 22 23.000 N 4 53 32.000 E -2.00m 0.00m 10000m 10m
uri IN URI 10 1 "https://example.com/"
gen IN TYPE65534 \# 4 01020304
dname IN DNAME other.test.
a.b.deep IN A 192.0.2.77
*.wild IN A 192.0.2.42
*.wild IN TXT "wild"
*.wc IN CNAME www
exists.wild IN A 192.0.2.43
sub IN NS ns.sub
sub IN NS ns.elsewhere.test.
ns.sub IN A 192.0.2.99
sec IN NS ns.sec
sec IN DS 4242 13 2 0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF
ns.sec IN A 192.0.2.54
loop1 IN CNAME loop2
loop2 IN CNAME loop1
upper IN A 192.0.2.88
`

// goldenServer serves testdata/test.yaml plus rich.test. (richZone, transferred) and big.test.
// (sets too large for 512 bytes) and returns it with the names to ask.
func goldenServer(t *testing.T) (*Server, []string) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "rich.zone"), []byte(richZone), 0o644)
	var big strings.Builder
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&big, "big IN TXT \"record %d %s\"\n", i, strings.Repeat("y", 50))
		fmt.Fprintf(&big, "many IN A 10.0.0.%d\n", i+1)
	}
	os.WriteFile(filepath.Join(dir, "big.zone"), []byte("$ORIGIN big.test.\n$TTL 30\n@ IN SOA ns1 h 1 1 1 1 1\n"+big.String()), 0o644)
	b, _ := os.ReadFile("testdata/test.yaml")
	yml := string(b) + "  - origin: rich.test.\n    file: " + filepath.Join(dir, "rich.zone") + "\n" +
		"    transfer: {allow: [127.0.0.0/8]}\n" +
		"  - origin: big.test.\n    file: " + filepath.Join(dir, "big.zone") + "\n"
	cfg, err := config.Parse([]byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen = "127.0.0.1:0"
	cfg.Dir = "testdata"
	srv, err := NewServer(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range strings.Split(richZone, "\n") {
		if f := strings.Fields(l); len(f) > 0 && !strings.HasPrefix(l, "$") {
			n := f[0]
			if n == "@" {
				names = append(names, "rich.test.")
			} else {
				names = append(names, n+".rich.test.")
			}
		}
	}
	names = append(names, "x.wild.rich.test.", "y.x.wild.rich.test.", "q.wc.rich.test.", "below.exists.wild.rich.test.",
		"b.deep.rich.test.", "deep.rich.test.", "nope.rich.test.", "x.sub.rich.test.", "x.sec.rich.test.", "UPPER.rich.TEST.",
		"www.example.com.", "alias.example.com.", "example.com.", "mail.example.com.", "_http._tcp.example.com.",
		"ent.example.com.", "deep.ent.example.com.", "x.wild.example.com.", "app.example.com.", "static.example.com.",
		"x.sub.example.com.", "nope.example.com.", "example.org.", "www.example.org.", "big.test.", "big.big.test.", "many.big.test.")
	return srv, names
}

// goldenTypes are asked of every golden name.
var goldenTypes = []uint16{mdns.TypeA, mdns.TypeAAAA, mdns.TypeNS, mdns.TypeMX, mdns.TypeTXT, mdns.TypeSOA,
	mdns.TypeCNAME, mdns.TypeSRV, mdns.TypeANY, mdns.TypeDS, mdns.TypeCAA, mdns.TypePTR, mdns.TypeHTTPS,
	mdns.TypeSVCB, 65534, mdns.TypeDNAME, mdns.TypeNAPTR}

// goldenAnswers asks srv every golden type of every name, without EDNS (512 bytes: the big
// sets truncate), with EDNS and over TCP, and transfers rich.test.; it returns, by name, the
// SHA-256 of all those answers' bytes (the transfer's in wire form: the text of some types,
// TLSA's hex, keeps the zone file's case only until it is packed).
func goldenAnswers(t *testing.T, srv *Server, names []string) map[string]string {
	sums := map[string][]byte{}
	src := netip.MustParseAddr("127.0.0.1")
	for _, n := range names {
		for _, qt := range goldenTypes {
			for _, mode := range []string{"plain", "edns", "tcp"} {
				m := new(mdns.Msg)
				m.SetQuestion(n, qt)
				m.Id = 4242
				if mode != "plain" {
					m.SetEdns0(1232, false)
				}
				raw, _ := m.Pack()
				out := srv.Respond(raw, src, mode == "tcp")
				sums[n] = append(sums[n], fmt.Sprintf("%d/%s %x", qt, mode, out)...)
			}
		}
	}
	rrs := srv.state.Load().xfr.AXFR("rich.test.")
	if rrs == nil {
		t.Fatal("rich.test. is not served to secondaries")
	}
	axfr := []byte("AXFR")
	for _, rr := range rrs {
		buf := make([]byte, mdns.Len(rr)+64)
		n, err := mdns.PackRR(rr, buf, 0, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		axfr = append(axfr, "\n"+hex.EncodeToString(buf[:n])...)
	}
	sums["axfr/rich.test."] = axfr
	got := map[string]string{}
	for k, v := range sums {
		got[k] = fmt.Sprintf("%x", sha256.Sum256(v))
	}
	return got
}

// The answers are byte for byte those of the zone form before the packed one (a map of maps of
// parsed miekg/dns records), which wrote testdata/answers.golden.json: every type of record the
// zone parser knows that a zone holds, wildcards, CNAME chains and loops, delegations with glue,
// DS at a cut, empty non-terminals, duplicates, mixed TTLs, truncation and a zone transfer.
// SWITCHYARD_DNS_GOLDEN=write rewrites the file (only for a deliberate change of answers).
func TestAnswersGolden(t *testing.T) {
	srv, names := goldenServer(t)
	got := goldenAnswers(t, srv, names)
	path := filepath.Join("testdata", "answers.golden.json")
	if os.Getenv("SWITCHYARD_DNS_GOLDEN") == "write" {
		b, _ := json.MarshalIndent(got, "", " ")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]string
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("the answers for %s differ from the golden ones", k)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d names answered, the golden file has %d", len(got), len(want))
	}
}
