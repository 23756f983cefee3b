package dns

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/dnssec"
)

// signedZone writes a CSK for example. into a temporary directory and returns the YAML of a
// signed zone with static names, a CNAME, a wildcard, a delegation, MX glue, a large TXT set and
// three policy names, and the key.
func signedZone(t *testing.T) (string, *dnssec.Key) { return signedZoneB(t) }

func signedZoneB(t testing.TB) (string, *dnssec.Key) {
	t.Helper()
	dir := t.TempDir()
	k, err := dnssec.Generate("example.", dnssec.FlagsKSK, 3600)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "example.key")
	if err := os.WriteFile(path, k.File(time.Now()), 0o600); err != nil {
		t.Fatal(err)
	}
	var txt strings.Builder
	for i := 0; i < 30; i++ {
		txt.WriteString("      - 'big TXT \"record " + fmtInt(i) + " " + strings.Repeat("x", 60) + "\"'\n")
	}
	return `groups:
  g1: [10.1.0.0/16]
zones:
  - origin: example.
    dnssec: {key_file: ` + path + `}
    records:
      - "@ SOA ns1 hostmaster 7 3600 600 604800 60"
      - "@ NS ns1"
      - "@ MX 10 mail"
      - "ns1 A 127.0.0.1"
      - "mail A 192.0.2.25"
      - "www A 192.0.2.1"
      - "www AAAA 2001:db8::1"
      - "cdn CNAME www"
      - "dangling CNAME gone"
      - "*.wild A 192.0.2.9"
      - "sub NS ns.sub"
      - "ns.sub A 192.0.2.53"
      - "sec NS ns.sec"
      - "sec DS 4242 13 2 0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF"
      - "ns.sec A 192.0.2.54"
` + txt.String() + `    names:
      - name: app
        policy: weighted
        sites:
          - {name: a, addresses: [198.51.100.1], weight: 1}
          - {name: b, addresses: [198.51.100.2], weight: 1}
      - name: geo
        policy: geolocation
        geo: {g1: [a], default: [b]}
        sites:
          - {name: a, addresses: [198.51.100.1]}
          - {name: b, addresses: [198.51.100.2, "2001:db8::2"]}
      - name: fo
        policy: failover
        chain: [a, b]
        sites:
          - {name: a, addresses: [198.51.100.1]}
          - {name: b, addresses: [198.51.100.2]}
`, k
}

// anchorFile writes a delv trust anchor for key (a static key for example.).
func anchorFile(t *testing.T, key *dnssec.Key) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "anchor")
	a := `trust-anchors { example. static-key 257 3 13 "` + key.DNSKEY.PublicKey + `"; };` + "\n"
	if err := os.WriteFile(p, []byte(a), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// delv asks the real validator (BIND's delv) for name/type at srv, trusting the anchor file.
func delv(t *testing.T, srv *Server, anchor, name, qtype string) string {
	t.Helper()
	return delvRoot(t, srv, anchor, "example.", name, qtype)
}

// delvRoot is delv with the trust anchor's zone root as the validation's root.
func delvRoot(t *testing.T, srv *Server, anchor, root, name, qtype string) string {
	t.Helper()
	path, err := exec.LookPath("delv")
	if err != nil {
		t.Skip("delv not installed: apt-get install bind9-dnsutils (make deps)")
	}
	a := srv.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, path, "@"+a.Addr().String(), "-p", fmtInt(int(a.Port())), "-a", anchor,
		"+root="+root, "+nocrypto", name, qtype).CombinedOutput()
	return string(out)
}

// TestDelvValidatesSignedAnswers has BIND's validator check static, CNAME, wildcard and policy
// answers, the DNSKEY RRset, and NODATA and NXDOMAIN by compact denial, against the zone's key.
func TestDelvValidatesSignedAnswers(t *testing.T) {
	yml, key := signedZone(t)
	srv := startServer(t, yml, Options{})
	anchor := anchorFile(t, key)
	for _, c := range []struct{ name, qtype, want string }{
		{"www.example.", "A", "www.example.\t\t300\tIN\tA\t192.0.2.1"},
		{"example.", "DNSKEY", "DNSKEY\t257 3 13"},
		{"example.", "MX", "MX\t10 mail.example."},
		{"cdn.example.", "A", "cdn.example.\t\t300\tIN\tCNAME\twww.example."},
		{"x.wild.example.", "A", "x.wild.example.\t\t300\tIN\tA\t192.0.2.9"},
		{"app.example.", "A", "app.example.\t\t60\tIN\tA\t198.51.100."},
		{"geo.example.", "AAAA", "geo.example.\t\t60\tIN\tAAAA\t2001:db8::2"},
		{"fo.example.", "A", "fo.example.\t\t60\tIN\tA\t198.51.100.1"},
		{"big.example.", "TXT", "big.example.\t\t300\tIN\tTXT\t\"record 29"}, // over TCP after TC
		{"www.example.", "NSEC", "www.example.\t\t60\tIN\tNSEC\t\\000.www.example. A AAAA RRSIG NSEC"},
		{"www.example.", "MX", "; negative response, fully validated"},                            // NODATA
		{"nope.example.", "A", "; negative response, fully validated"},                            // NXDOMAIN, compact
		{"app.example.", "MX", "; negative response, fully validated"},                            // policy NODATA
		{"a.b.wild.example.", "TXT", "; negative response, fully validated"},                      // wildcard NODATA
		{"dangling.example.", "A", "; gone.example. NSEC \\000.gone.example. RRSIG NSEC TYPE128"}, // CNAME to nothing
	} {
		out := delv(t, srv, anchor, c.name, c.qtype)
		if !strings.Contains(out, "fully validated") || !strings.Contains(out, c.want) {
			t.Errorf("delv %s %s: want %q, fully validated; got\n%s", c.name, c.qtype, c.want, out)
		}
	}
}

// TestDelvRejectsWrongAnchorAndExpiredSignatures: the same answers fail validation when the
// trust anchor is another key, and when the signatures' validity window has passed.
func TestDelvRejectsWrongAnchorAndExpiredSignatures(t *testing.T) {
	yml, key := signedZone(t)
	srv := startServer(t, yml, Options{})
	other, err := dnssec.Generate("example.", dnssec.FlagsKSK, 3600)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"www.example.", "app.example.", "nope.example."} {
		out := delv(t, srv, anchorFile(t, other), name, "A")
		if strings.Contains(out, "fully validated") || !strings.Contains(out, "resolution failed") {
			t.Errorf("wrong anchor, %s: validated or no failure:\n%s", name, out)
		}
	}
	// A server whose clock is 30 days behind makes signatures that expired long ago.
	old := newTestServer(t, yml, Options{})
	old.skew.Store(int64(-30 * 24 * time.Hour))
	startBuilt(t, old)
	out := delv(t, old, anchorFile(t, key), "www.example.", "A")
	if strings.Contains(out, "fully validated") || !strings.Contains(out, "resolution failed") {
		t.Errorf("expired signatures validated:\n%s", out)
	}
}

// exchange sends m to srv over UDP (or TCP) and returns the response.
func exchange(t *testing.T, srv *Server, m *mdns.Msg, tcp bool) *mdns.Msg {
	t.Helper()
	c := &mdns.Client{Net: "udp", Timeout: 5 * time.Second}
	if tcp {
		c.Net = "tcp"
	}
	r, _, err := c.Exchange(m, srv.Addr().String())
	if err != nil {
		t.Fatalf("exchange %v: %v", m.Question, err)
	}
	return r
}

func doQuery(name string, qtype uint16, co bool) *mdns.Msg {
	m := new(mdns.Msg)
	m.SetQuestion(name, qtype)
	m.SetEdns0(1232, true)
	if co {
		m.IsEdns0().SetCo(true)
	}
	return m
}

// sections renders a response's sections as "owner/TYPE" lists (RRSIGs as RRSIG:covered).
func sections(m *mdns.Msg) string {
	var parts []string
	for _, sec := range [][]mdns.RR{m.Answer, m.Ns} {
		var s []string
		for _, rr := range sec {
			h := rr.Header()
			t := mdns.TypeToString[h.Rrtype]
			if sig, ok := rr.(*mdns.RRSIG); ok {
				t += ":" + mdns.TypeToString[sig.TypeCovered]
			}
			s = append(s, h.Name+"/"+t)
		}
		parts = append(parts, strings.Join(s, " "))
	}
	return strings.Join(parts, " | ")
}

// TestCompactDenialShapes checks the negative answers record by record: NXDOMAIN becomes
// NOERROR with an NXNAME NSEC (NXDOMAIN again with CO, RFC 9824 section 3.5), NODATA lists the
// name's types minus the asked one, a referral proves its delegation insecure with an unsigned
// NS set.
func TestCompactDenialShapes(t *testing.T) {
	yml, _ := signedZone(t)
	srv := startServer(t, yml, Options{})
	nsec := func(m *mdns.Msg) *mdns.NSEC {
		for _, rr := range m.Ns {
			if n, ok := rr.(*mdns.NSEC); ok {
				return n
			}
		}
		t.Fatalf("no NSEC in %v", m)
		return nil
	}
	bitmap := func(n *mdns.NSEC) string {
		var s []string
		for _, x := range n.TypeBitMap {
			s = append(s, mdns.TypeToString[x])
		}
		return strings.Join(s, " ")
	}
	nx := exchange(t, srv, doQuery("nope.example.", mdns.TypeA, false), false)
	if nx.Rcode != mdns.RcodeSuccess || sections(nx) != " | example./SOA example./RRSIG:SOA nope.example./NSEC nope.example./RRSIG:NSEC" ||
		bitmap(nsec(nx)) != "RRSIG NSEC NXNAME" || nsec(nx).NextDomain != `\000.nope.example.` || nsec(nx).Hdr.Ttl != 60 {
		t.Errorf("NXDOMAIN as compact denial: rcode %d, %s, %v", nx.Rcode, sections(nx), nsec(nx))
	}
	co := exchange(t, srv, doQuery("nope.example.", mdns.TypeA, true), false)
	if co.Rcode != mdns.RcodeNameError || !co.IsEdns0().Co() || bitmap(nsec(co)) != "RRSIG NSEC NXNAME" {
		t.Errorf("CO=1: rcode %d, CO echoed %v, NSEC %v", co.Rcode, co.IsEdns0().Co(), nsec(co))
	}
	nxname := exchange(t, srv, doQuery("www.example.", mdns.TypeNXNAME, false), false)
	if nxname.Rcode != mdns.RcodeFormatError {
		t.Errorf("explicit NXNAME query: rcode %d, want FORMERR (RFC 9824 3.5)", nxname.Rcode)
	}
	nodata := exchange(t, srv, doQuery("www.example.", mdns.TypeAAAA, false), false)
	if len(nodata.Answer) != 2 { // www has AAAA: answer and RRSIG
		t.Errorf("www AAAA: %s", sections(nodata))
	}
	nodata = exchange(t, srv, doQuery("www.example.", mdns.TypeMX, false), false)
	if nodata.Rcode != mdns.RcodeSuccess || bitmap(nsec(nodata)) != "A AAAA RRSIG NSEC" {
		t.Errorf("NODATA www MX: %s, NSEC %v", sections(nodata), nsec(nodata))
	}
	apex := exchange(t, srv, doQuery("example.", mdns.TypeTXT, false), false)
	if bitmap(nsec(apex)) != "NS SOA MX RRSIG NSEC DNSKEY" {
		t.Errorf("apex NODATA bitmap %s", bitmap(nsec(apex)))
	}
	dyn := exchange(t, srv, doQuery("geo.example.", mdns.TypeTXT, false), false)
	if bitmap(nsec(dyn)) != "A AAAA RRSIG NSEC" {
		t.Errorf("policy NODATA bitmap %s", bitmap(nsec(dyn)))
	}
	dynA := exchange(t, srv, doQuery("app.example.", mdns.TypeAAAA, false), false)
	if bitmap(nsec(dynA)) != "A RRSIG NSEC" {
		t.Errorf("policy name without AAAA: bitmap %s", bitmap(nsec(dynA)))
	}
	ref := exchange(t, srv, doQuery("host.sub.example.", mdns.TypeA, false), false)
	if ref.Authoritative || sections(ref) != " | sub.example./NS sub.example./NSEC sub.example./RRSIG:NSEC" ||
		bitmap(nsec(ref)) != "NS RRSIG NSEC" || len(ref.Extra) != 2 { // glue A unsigned, OPT
		t.Errorf("referral: %s, extra %v", sections(ref), ref.Extra)
	}
	secure := exchange(t, srv, doQuery("host.sec.example.", mdns.TypeA, false), false)
	if sections(secure) != " | sec.example./NS sec.example./DS sec.example./RRSIG:DS" {
		t.Errorf("secure referral: %s", sections(secure))
	}
}

// TestDO0AnswersUnchanged: without the DO bit a signed zone answers byte for byte as the same
// zone unsigned (the apex DNSKEY RRset aside).
func TestDO0AnswersUnchanged(t *testing.T) {
	yml, _ := signedZone(t)
	unsignedYML := strings.Join(strings.FieldsFunc(yml, func(r rune) bool { return r == '\n' }), "\n")
	var lines []string
	for _, l := range strings.Split(unsignedYML, "\n") {
		if !strings.Contains(l, "dnssec:") {
			lines = append(lines, l)
		}
	}
	signed := newTestServer(t, yml, Options{})
	plain := newTestServer(t, strings.Join(lines, "\n")+"\n", Options{})
	src := netip.MustParseAddr("127.0.0.1")
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"www.example.", mdns.TypeA}, {"nope.example.", mdns.TypeA}, {"www.example.", mdns.TypeMX},
		{"fo.example.", mdns.TypeA}, {"geo.example.", mdns.TypeAAAA}, {"host.sub.example.", mdns.TypeA},
		{"example.", mdns.TypeMX}, {"x.wild.example.", mdns.TypeA}, {"big.example.", mdns.TypeTXT}} {
		for _, edns := range []bool{false, true} {
			m := new(mdns.Msg)
			m.SetQuestion(q.name, q.qtype)
			if edns {
				m.SetEdns0(1232, false)
			}
			raw, _ := m.Pack()
			a, b := signed.Respond(raw, src, false), plain.Respond(raw, src, false)
			if string(a) != string(b) {
				t.Errorf("%s %d edns=%v: signed zone answers differently with DO=0", q.name, q.qtype, edns)
			}
		}
	}
	m := new(mdns.Msg)
	m.SetQuestion("nope.example.", mdns.TypeA)
	m.SetEdns0(1232, false)
	raw, _ := m.Pack()
	var r mdns.Msg
	if err := r.Unpack(signed.Respond(raw, src, false)); err != nil || r.Rcode != mdns.RcodeNameError {
		t.Fatalf("DO=0 NXDOMAIN: rcode %d err %v", r.Rcode, err)
	}
}

// TestSignedTruncation: a signed RRset too large for the UDP buffer is not split: TC with an
// empty answer, and the whole set with its RRSIG over TCP.
func TestSignedTruncation(t *testing.T) {
	yml, key := signedZone(t)
	srv := startServer(t, yml, Options{})
	udp := exchange(t, srv, doQuery("big.example.", mdns.TypeTXT, false), false)
	if !udp.Truncated || len(udp.Answer) != 0 || len(udp.Ns) != 0 {
		t.Errorf("udp: TC %v, answer %d, authority %d", udp.Truncated, len(udp.Answer), len(udp.Ns))
	}
	tcp := exchange(t, srv, doQuery("big.example.", mdns.TypeTXT, false), true)
	if tcp.Truncated || len(tcp.Answer) != 31 {
		t.Fatalf("tcp: TC %v, %d records, want 30 TXT and an RRSIG", tcp.Truncated, len(tcp.Answer))
	}
	sig := tcp.Answer[30].(*mdns.RRSIG)
	if err := sig.Verify(key.DNSKEY, tcp.Answer[:30]); err != nil {
		t.Fatalf("verify the TCP answer: %v", err)
	}
	// An additional section that does not fit loses whole RRsets with their signatures.
	resp := new(mdns.Msg)
	resp.Authoritative = true
	mx := &mdns.MX{Hdr: mdns.RR_Header{Name: "example.", Rrtype: mdns.TypeMX, Class: mdns.ClassINET, Ttl: 60}, Mx: "mail.example."}
	resp.Answer = []mdns.RR{mx}
	for i := 0; i < 20; i++ {
		a := &mdns.A{Hdr: mdns.RR_Header{Name: "mail" + fmtInt(i) + ".example.", Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 60},
			A: netip.MustParseAddr("192.0.2.1").AsSlice()}
		sig := &mdns.RRSIG{Hdr: mdns.RR_Header{Name: a.Hdr.Name, Rrtype: mdns.TypeRRSIG, Class: mdns.ClassINET, Ttl: 60},
			TypeCovered: mdns.TypeA, Algorithm: 13, SignerName: "example.", Signature: strings.Repeat("A", 88)}
		resp.Extra = append(resp.Extra, a, sig)
	}
	truncate(resp, 512)
	if resp.Truncated || len(resp.Extra)%2 != 0 || len(resp.Extra) == 0 {
		t.Fatalf("additional cut: TC %v, %d records (an A without its RRSIG?)", resp.Truncated, len(resp.Extra))
	}
	last := resp.Extra[len(resp.Extra)-1]
	if _, ok := last.(*mdns.RRSIG); !ok {
		t.Fatalf("additional section ends with %v, not a signature", last)
	}
}

// TestSignaturesCachedAcrossQueries: repeated DO=1 queries for static and policy names reuse
// the signatures (a handful of signing operations, not one per query), and the cached answer
// carries the same RRSIG bytes.
func TestSignaturesCachedAcrossQueries(t *testing.T) {
	yml, _ := signedZone(t)
	srv := startServer(t, yml, Options{})
	first := exchange(t, srv, doQuery("www.example.", mdns.TypeA, false), false)
	for i := 0; i < 50; i++ {
		for _, name := range []string{"www.example.", "app.example.", "geo.example.", "nope.example."} {
			r := exchange(t, srv, doQuery(name, mdns.TypeA, false), false)
			if len(r.Answer) == 0 && len(r.Ns) == 0 || r.Rcode != mdns.RcodeSuccess {
				t.Fatalf("%s: %v", name, r)
			}
		}
	}
	again := exchange(t, srv, doQuery("www.example.", mdns.TypeA, false), false)
	if again.Answer[1].String() != first.Answer[1].String() {
		t.Errorf("signature changed between queries:\n%v\n%v", first.Answer[1], again.Answer[1])
	}
	// www A, app A (two sites), geo A, nope's SOA and NSEC: six RRsets.
	if n := srv.state.Load().signers["example."].Len(); n > 6 {
		t.Errorf("%d signature sets after 200 queries, want at most 6", n)
	}
	if made, hits := srv.sigStats.Signed.Load(), srv.sigStats.Hits.Load(); made > 6 || hits < 45 {
		t.Errorf("signatures made %d (want <= 6), cache hits %d (want >= 45: geolocation without ECS is decided, and its RRset looked up, each time)", made, hits)
	}
	// A compact NXDOMAIN is answered from the answer cache after the first time: the signer is
	// not asked again.
	exchange(t, srv, doQuery("other.example.", mdns.TypeA, false), false)
	before := srv.sigStats.Hits.Load() + srv.sigStats.Signed.Load()
	for i := 0; i < 10; i++ {
		if r := exchange(t, srv, doQuery("other.example.", mdns.TypeA, false), false); len(r.Ns) != 4 {
			t.Fatalf("cached NXDOMAIN: %s", sections(r))
		}
	}
	if after := srv.sigStats.Hits.Load() + srv.sigStats.Signed.Load(); after != before {
		t.Errorf("10 repeated NXDOMAIN queries reached the signer %d times, want 0 (answer cache)", after-before)
	}
}

// writeKey writes a new key of zone example. with flags to path and returns path.
func writeKey(t *testing.T, path string, flags uint16) string {
	t.Helper()
	k, err := dnssec.Generate("example.", flags, 3600)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, k.File(time.Now()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSignaturesKeptAcrossReload: a reload that leaves the signing keys as they were (here a
// key added to the DNSKEY RRset, as a rollover's publication step does) keeps the signatures
// made: the next answer for www signs nothing and carries the same RRSIG. A reload with another
// key signs anew with it.
func TestSignaturesKeptAcrossReload(t *testing.T) {
	yml, _ := signedZone(t)
	srv := startServer(t, yml, Options{})
	first := exchange(t, srv, doQuery("www.example.", mdns.TypeA, false), false)
	dir := t.TempDir()
	reload := func(dnssecBlock string) {
		t.Helper()
		i := strings.Index(yml, "dnssec: {")
		cfg, err := config.Parse([]byte(yml[:i] + dnssecBlock + yml[i+strings.IndexByte(yml[i:], '\n'):]))
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Reload(cfg); err != nil {
			t.Fatal(err)
		}
	}
	keyFile := func(name string, flags uint16) string { return writeKey(t, filepath.Join(dir, name), flags) }
	cur := yml[strings.Index(yml, "dnssec: {"):]
	cur = cur[:strings.IndexByte(cur, '\n')]
	reload(strings.TrimSuffix(cur, "}") + ", publish: [" + keyFile("next.key", dnssec.FlagsZSK) + "]}")
	made := srv.sigStats.Signed.Load()
	again := exchange(t, srv, doQuery("www.example.", mdns.TypeA, false), false)
	if got := srv.sigStats.Signed.Load() - made; got != 0 || again.Answer[1].String() != first.Answer[1].String() {
		t.Errorf("after a reload with the same signing keys: %d signatures made for www (want 0, the cached one)\n%v\n%v", got, first.Answer[1], again.Answer[1])
	}
	reload("dnssec: {key_file: " + keyFile("new.key", dnssec.FlagsKSK) + "}")
	made = srv.sigStats.Signed.Load()
	other := exchange(t, srv, doQuery("www.example.", mdns.TypeA, false), false)
	if srv.sigStats.Signed.Load() == made || other.Answer[1].(*mdns.RRSIG).KeyTag == first.Answer[1].(*mdns.RRSIG).KeyTag {
		t.Errorf("after a reload with a new key, www's signature was not made with it: %v", other.Answer[1])
	}
}

// TestBadKeysFailTheReload: a missing or mismatched key file is named in the error and the old
// zones keep serving signed answers.
func TestBadKeysFailTheReload(t *testing.T) {
	yml, _ := signedZone(t)
	srv := startServer(t, yml, Options{})
	dir := t.TempDir()
	other, _ := dnssec.Generate("example.org.", dnssec.FlagsKSK, 3600)
	os.WriteFile(filepath.Join(dir, "org.key"), other.File(time.Now()), 0o600)
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "absent.key"), "read dnssec key"},
		{filepath.Join(dir, "org.key"), "belongs to example.org., not to zone example."},
	} {
		i := strings.Index(yml, "key_file: ") + len("key_file: ")
		bad := yml[:i] + c.path + yml[i+strings.IndexByte(yml[i:], '}'):]
		cfg, err := config.Parse([]byte(bad))
		if err != nil {
			t.Fatal(err)
		}
		err = srv.Reload(cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "field dnssec") {
			t.Errorf("reload with %s: %v, want %q", c.path, err, c.want)
		}
	}
	r := exchange(t, srv, doQuery("www.example.", mdns.TypeA, false), false)
	if len(r.Answer) != 2 {
		t.Fatalf("after failed reloads: %s", sections(r))
	}
}

// BenchmarkRespondSigned: DO=1 answers from a signed zone: a cached static answer, a policy
// answer decided each time (geolocation without ECS: the signature comes from the signature
// cache), a compact NXDOMAIN, and a policy answer signed afresh every time (the signature cache
// emptied first: the cost of one ECDSA P-256 signature and the path around it).
func BenchmarkRespondSigned(b *testing.B) {
	yml, _ := signedZoneB(b)
	srv := newTestServer(b, yml, Options{})
	srv.coarse.Store(time.Now().Unix()) // as a started server's clock goroutine keeps it
	src := netip.MustParseAddr("127.0.11.1")
	pack := func(name string, qtype uint16) []byte {
		raw, err := doQuery(name, qtype, false).Pack()
		if err != nil {
			b.Fatal(err)
		}
		return raw
	}
	for _, c := range []struct {
		name  string
		raw   []byte
		fresh bool
	}{
		{"static", pack("www.example.", mdns.TypeA), false},
		{"geo", pack("geo.example.", mdns.TypeA), false},
		{"nxdomain", pack("nope.example.", mdns.TypeA), false},
		{"geo-ecs", packECS(b, "geo.example."), false},
		{"weighted", pack("app.example.", mdns.TypeA), false},
		{"geo-sign-each", pack("geo.example.", mdns.TypeA), true},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			sg := srv.state.Load().signers["example."]
			dst := make([]byte, 0, cacheWireMax) // as the UDP workers call it
			for i := 0; i < b.N; i++ {
				if c.fresh {
					sg.ResetCache()
				}
				if srv.respondTo(dst, c.raw, src, false) == nil {
					b.Fatal("no answer")
				}
			}
		})
	}
}

// TestSignedAnswersConcurrently: query goroutines share the zone's records and the signature
// cache; every answer's signature still verifies (run with -race: packing for the cache key
// must not write to the shared records). The query log is on, which bypasses the answer cache,
// so every query signs or looks up the static records themselves.
func TestSignedAnswersConcurrently(t *testing.T) {
	yml, key := signedZone(t)
	srv := newTestServer(t, "query_log: true\n"+yml, Options{})
	names := []string{"www.example.", "app.example.", "geo.example.", "fo.example.", "x.wild.example."}
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func(g int) {
			src := netip.AddrFrom4([4]byte{127, 0, 0, byte(g + 1)})
			for i := 0; i < 50; i++ {
				raw, _ := doQuery(names[(g+i)%len(names)], mdns.TypeA, false).Pack()
				var r mdns.Msg
				if err := r.Unpack(srv.Respond(raw, src, false)); err != nil || len(r.Answer) != 2 {
					errs <- fmt.Errorf("%s: %v %v", names[(g+i)%len(names)], err, r.Answer)
					return
				}
				if err := r.Answer[1].(*mdns.RRSIG).Verify(key.DNSKEY, r.Answer[:1]); err != nil {
					errs <- fmt.Errorf("verify %s: %w", r.Answer[0], err)
					return
				}
			}
			errs <- nil
		}(g)
	}
	for g := 0; g < 8; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestSignaturesRenewedAfterTheirWindow: a cached signed answer is served until its signing
// window ends; a day later (the clock moved) the answer carries a new signature, valid now.
func TestSignaturesRenewedAfterTheirWindow(t *testing.T) {
	yml, key := signedZone(t)
	srv := startServer(t, yml, Options{})
	sigOf := func() *mdns.RRSIG {
		r := exchange(t, srv, doQuery("www.example.", mdns.TypeA, false), false)
		sig := r.Answer[1].(*mdns.RRSIG)
		if err := sig.Verify(key.DNSKEY, r.Answer[:1]); err != nil || !sig.ValidityPeriod(srv.now()) {
			t.Fatalf("signature %v at %v: %v", sig, srv.now(), err)
		}
		return sig
	}
	first := sigOf()
	if again := sigOf(); again.Signature != first.Signature {
		t.Fatal("a second query within the window was signed again")
	}
	srv.skew.Store(int64(25 * time.Hour))
	later := sigOf()
	if later.Signature == first.Signature || later.Inception <= first.Inception || later.Expiration <= first.Expiration {
		t.Fatalf("after the window: %v, before: %v", later, first)
	}
}

func packECS(b testing.TB, name string) []byte {
	m := doQuery(name, mdns.TypeA, false)
	m.IsEdns0().Option = append(m.IsEdns0().Option, &mdns.EDNS0_SUBNET{Code: mdns.EDNS0SUBNET,
		Family: 1, SourceNetmask: 24, Address: []byte{10, 1, 0, 0}})
	raw, err := m.Pack()
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

// FuzzRespondSigned drives the message path of a signed zone: every response parses and fits
// the limit, a cached answer is what the full path produced, and a query without DO never gets
// a DNSSEC record it did not ask for.
func FuzzRespondSigned(f *testing.F) {
	for _, c := range badPackets(f) {
		f.Add(c.raw)
	}
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"www.example.", mdns.TypeA}, {"nope.example.", mdns.TypeA}, {"www.example.", mdns.TypeMX},
		{"app.example.", mdns.TypeA}, {"example.", mdns.TypeDNSKEY}, {"host.sub.example.", mdns.TypeA},
		{"big.example.", mdns.TypeTXT}, {"cdn.example.", mdns.TypeA}, {"www.example.", mdns.TypeNSEC}} {
		for _, co := range []bool{false, true} {
			raw, _ := doQuery(q.name, q.qtype, co).Pack()
			f.Add(raw)
		}
		f.Add(packQuery(f, q.name, q.qtype, true))
	}
	yml, _ := signedZoneB(f)
	srv := newTestServer(f, yml, Options{})
	src := netip.MustParseAddr("127.0.11.1")
	f.Fuzz(func(t *testing.T, raw []byte) {
		out := srv.Respond(raw, src, false)
		if out == nil {
			return
		}
		var scratch [cacheKeyMax]byte
		if key := cacheKey(scratch[:0], raw, false); key != nil {
			if e := srv.state.Load().cache.get(key); e != nil && e.rotate == nil {
				if got := e.response(nil, raw); string(got) != string(out) {
					t.Fatalf("cached answer differs:\n%x\n%x", got, out)
				}
			}
		}
		var m, req mdns.Msg
		if err := m.Unpack(out); err != nil {
			if len(out) > 12 {
				t.Fatalf("unparsable response: %v", err)
			}
			return
		}
		if len(out) > 1232 {
			t.Fatalf("response of %d bytes over UDP", len(out))
		}
		if req.Unpack(raw) != nil || len(req.Question) != 1 {
			return
		}
		if opt := req.IsEdns0(); opt == nil || !opt.Do() {
			for _, rr := range append(append(m.Answer, m.Ns...), m.Extra...) {
				if typ := rr.Header().Rrtype; typ == mdns.TypeRRSIG || typ == mdns.TypeNSEC {
					t.Fatalf("DNSSEC record %s in an answer to a query without DO", rr)
				}
			}
		}
	})
}

// TestDelvValidatesNSEC3: with denial: nsec3, BIND's validator accepts NXDOMAIN, NODATA,
// wildcard NODATA, wildcard answers, policy NODATA and an insecure delegation proven by NSEC3
// records made per answer, and the apex publishes NSEC3PARAM.
func TestDelvValidatesNSEC3(t *testing.T) {
	yml, key := signedZone(t)
	yml = strings.Replace(yml, "dnssec: {key_file: ", "dnssec: {denial: nsec3, key_file: ", 1)
	srv := startServer(t, yml, Options{})
	anchor := anchorFile(t, key)
	for _, c := range []struct{ name, qtype, want string }{
		{"www.example.", "A", "www.example.\t\t300\tIN\tA\t192.0.2.1"},
		{"example.", "NSEC3PARAM", "NSEC3PARAM 1 0 0 -"},
		{"x.wild.example.", "A", "x.wild.example.\t\t300\tIN\tA\t192.0.2.9"}, // wildcard: next closer covered
		{"www.example.", "MX", "; negative response, fully validated"},       // NODATA
		{"nope.example.", "A", "; negative response, fully validated"},       // NXDOMAIN
		{"a.b.nope.example.", "A", "; negative response, fully validated"},   // NXDOMAIN, deeper
		{"app.example.", "MX", "; negative response, fully validated"},       // policy NODATA
		{"a.b.wild.example.", "TXT", "; negative response, fully validated"}, // wildcard NODATA
		{"sub.example.", "DS", "; negative response, fully validated"},       // an insecure delegation: no DS
	} {
		out := delv(t, srv, anchor, c.name, c.qtype)
		if !strings.Contains(out, c.want) || strings.Contains(out, "resolution failed") && !strings.Contains(out, "ncache") {
			t.Errorf("delv %s %s: want %q; got\n%s", c.name, c.qtype, c.want, out)
		}
	}
	// A referral to the insecure sub.example.: the NSEC3 of the cut lists NS and not DS.
	m := new(mdns.Msg)
	m.SetQuestion("x.sub.example.", mdns.TypeA)
	m.SetEdns0(1232, true)
	r, err := mdns.Exchange(m, srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, rr := range r.Ns {
		if n3, ok := rr.(*mdns.NSEC3); ok {
			found = true
			if !strings.HasPrefix(strings.ToLower(n3.Hdr.Name), strings.ToLower(mdns.HashName("sub.example.", mdns.SHA1, 0, ""))) ||
				!slices.Contains(n3.TypeBitMap, mdns.TypeNS) || slices.Contains(n3.TypeBitMap, mdns.TypeDS) {
				t.Errorf("referral NSEC3 %v: want the cut's hash, NS and no DS", n3)
			}
		}
	}
	if !found {
		t.Errorf("a referral to an insecure delegation carries no NSEC3: %v", r.Ns)
	}
}
