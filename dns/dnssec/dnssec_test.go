package dnssec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
)

// writeKey generates a key for zone and writes its file into dir.
func writeKey(t *testing.T, dir, name, zone string, flags uint16) *Key {
	t.Helper()
	k, err := Generate(zone, flags, 3600)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), k.File(time.Now()), 0o600); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKeyFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	k := writeKey(t, dir, "csk", "example.", FlagsKSK)
	got, err := LoadKey(filepath.Join(dir, "csk"), "example.")
	if err != nil {
		t.Fatal(err)
	}
	if got.Tag != k.Tag || got.DNSKEY.PublicKey != k.DNSKEY.PublicKey || !got.SEP() {
		t.Fatalf("loaded %v, wrote %v", got.DNSKEY, k.DNSKEY)
	}
	ds := got.DS()
	if ds.DigestType != dns.SHA256 || ds.KeyTag != k.Tag || len(ds.Digest) != 64 {
		t.Fatalf("DS %v", ds)
	}
}

func TestBadKeyFilesNameTheProblem(t *testing.T) {
	dir := t.TempDir()
	k := writeKey(t, dir, "good", "example.", FlagsKSK)
	writeKey(t, dir, "other", "example.", FlagsKSK)
	b, _ := os.ReadFile(filepath.Join(dir, "good"))
	// The private key of another key under this DNSKEY: a mixed-up file.
	ob, _ := os.ReadFile(filepath.Join(dir, "other"))
	mixed := strings.Replace(string(b), privLine(string(b)), privLine(string(ob)), 1)
	os.WriteFile(filepath.Join(dir, "mixed"), []byte(mixed), 0o600)
	os.WriteFile(filepath.Join(dir, "nokey"), []byte(strings.Split(string(b), "Private-key-format")[0]), 0o600)
	os.WriteFile(filepath.Join(dir, "nodnskey"), []byte(k.DNSKEY.PrivateKeyString(k.priv)), 0o600)
	rsa := strings.Replace(string(b), "257 3 13 ", "257 3 8 ", 1)
	os.WriteFile(filepath.Join(dir, "rsa"), []byte(rsa), 0o600)
	dsa := strings.Replace(string(b), "257 3 13 ", "257 3 3 ", 1)
	os.WriteFile(filepath.Join(dir, "dsa"), []byte(dsa), 0o600)
	for _, c := range []struct{ file, zone, want string }{
		{"missing", "example.", "no such file"},
		{"mixed", "example.", "does not match the DNSKEY"},
		{"nokey", "example.", "read the private key"},
		{"nodnskey", "example.", "no DNSKEY record"},
		{"rsa", "example.", "the RSA public key has"},
		{"dsa", "example.", "algorithm 3 is not supported"},
		{"good", "example.com.", "belongs to example., not to zone example.com."},
	} {
		_, err := LoadKey(filepath.Join(dir, c.file), c.zone)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.file, err, c.want)
		}
	}
}

func privLine(file string) string {
	for _, l := range strings.Split(file, "\n") {
		if strings.HasPrefix(l, "PrivateKey:") {
			return l
		}
	}
	return ""
}

func testSigner(t *testing.T, cfg config.DNSSEC) (*Signer, string) {
	t.Helper()
	dir := t.TempDir()
	if cfg.KeyFile == "" && cfg.KSKFile == "" {
		writeKey(t, dir, "csk", "example.", FlagsKSK)
		cfg.KeyFile = "csk"
	}
	if cfg.Validity == 0 {
		cfg.Validity, cfg.Refresh, cfg.DNSKEYTTL = config.Duration(7*24*time.Hour), config.Duration(24*time.Hour), 3600
	}
	s, err := New("example.", &cfg, dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

func aSet(addrs ...string) []dns.RR {
	var out []dns.RR
	for _, a := range addrs {
		rr, _ := dns.NewRR("www.example. 300 IN A " + a)
		out = append(out, rr)
	}
	return out
}

// TestSignaturesVerifyAndAreCached checks the signatures against the DNSKEY (miekg's verifier),
// their window, and that the same RRset within the window reuses them while another RRset and a
// later window get new ones.
func TestSignaturesVerifyAndAreCached(t *testing.T) {
	s, _ := testSigner(t, config.DNSSEC{})
	now := time.Unix(1_800_000_000, 0)
	s.Now = func() time.Time { return now }
	set := aSet("192.0.2.1", "192.0.2.2")
	sigs, until, err := s.Sign(set)
	if err != nil || len(sigs) != 1 {
		t.Fatalf("sign: %v %v", sigs, err)
	}
	sig := sigs[0].(*dns.RRSIG)
	key := s.DNSKEYs()[0].(*dns.DNSKEY)
	if err := sig.Verify(key, set); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if !sig.ValidityPeriod(now) || int64(sig.Inception) > now.Unix()-3600 || int64(sig.Expiration) < now.Unix()+6*24*3600 {
		t.Fatalf("window %d..%d around %d", sig.Inception, sig.Expiration, now.Unix())
	}
	if until <= now.Unix() || until > now.Unix()+24*3600 {
		t.Fatalf("until %d, now %d", until, now.Unix())
	}
	again, _, _ := s.Sign(aSet("192.0.2.1", "192.0.2.2"))
	if again[0] != sigs[0] {
		t.Fatal("the same RRset in the same window was signed again")
	}
	other, _, _ := s.Sign(aSet("192.0.2.3"))
	if other[0] == sigs[0] || s.Len() != 2 {
		t.Fatalf("another RRset: same signature or cache len %d", s.Len())
	}
	now = time.Unix(until, 0)
	renewed, until2, _ := s.Sign(set)
	if renewed[0] == sigs[0] || until2 != until+24*3600 {
		t.Fatalf("next window: renewed %v, until %d (was %d)", renewed[0] != sigs[0], until2, until)
	}
	if r := renewed[0].(*dns.RRSIG); r.Expiration <= sig.Expiration || r.Verify(key, set) != nil {
		t.Fatalf("renewed signature %v", r)
	}
}

// TestKSKSignsOnlyDNSKEY: with split keys the DNSKEY RRset is signed by the KSK and data by the ZSK.
func TestKSKSignsOnlyDNSKEY(t *testing.T) {
	dir := t.TempDir()
	ksk := writeKey(t, dir, "ksk", "example.", FlagsKSK)
	zsk := writeKey(t, dir, "zsk", "example.", FlagsZSK)
	s, err := New("example.", &config.DNSSEC{KSKFile: "ksk", ZSKFile: "zsk", Validity: config.Duration(48 * time.Hour),
		Refresh: config.Duration(time.Hour), DNSKEYTTL: 60}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.DNSKEYs()) != 2 {
		t.Fatalf("DNSKEY RRset %v", s.DNSKEYs())
	}
	sigs, _, _ := s.Sign(s.DNSKEYs())
	if len(sigs) != 1 || sigs[0].(*dns.RRSIG).KeyTag != ksk.Tag {
		t.Fatalf("DNSKEY signed by %v, want the KSK %d", sigs, ksk.Tag)
	}
	sigs, _, _ = s.Sign(aSet("192.0.2.1"))
	if len(sigs) != 1 || sigs[0].(*dns.RRSIG).KeyTag != zsk.Tag {
		t.Fatalf("A signed by %v, want the ZSK %d", sigs, zsk.Tag)
	}
	// Swapped roles are refused with the fix named.
	_, err = New("example.", &config.DNSSEC{KSKFile: "zsk", ZSKFile: "ksk", Validity: config.Duration(48 * time.Hour),
		Refresh: config.Duration(time.Hour)}, dir)
	if err == nil || !strings.Contains(err.Error(), "want 257 and 256") {
		t.Fatalf("swapped keys: %v", err)
	}
}

func TestSignSectionKeepsSetsTogether(t *testing.T) {
	s, _ := testSigner(t, config.DNSSEC{})
	mx, _ := dns.NewRR("example. 300 IN MX 10 mail.example.")
	a1, _ := dns.NewRR("mail.example. 300 IN A 192.0.2.25")
	a2, _ := dns.NewRR("mail.example. 300 IN A 192.0.2.26")
	opt := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
	out, _, err := s.SignSection([]dns.RR{a1, opt, mx, a2, dns.Copy(a1)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rr := range out {
		h := rr.Header()
		got = append(got, h.Name+"/"+dns.TypeToString[h.Rrtype])
	}
	want := "mail.example./A mail.example./A mail.example./RRSIG ./OPT example./MX example./RRSIG"
	if strings.Join(got, " ") != want {
		t.Fatalf("section %s\nwant    %s", strings.Join(got, " "), want)
	}
	if err := out[2].(*dns.RRSIG).Verify(s.DNSKEYs()[0].(*dns.DNSKEY), []dns.RR{a1, a2}); err != nil {
		t.Fatalf("gathered set: %v", err)
	}
}

func TestCompactDenialNSEC(t *testing.T) {
	n := NSEC("nope.example.", 60, []uint16{dns.TypeNXNAME})
	if n.NextDomain != `\000.nope.example.` || len(n.TypeBitMap) != 3 || n.TypeBitMap[2] != dns.TypeNXNAME {
		t.Fatalf("NXNAME NSEC %v", n)
	}
	// The next name packs as a label holding one zero octet.
	if _, err := dns.PackRR(n, make([]byte, 512), 0, nil, false); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 60) + "." + strings.Repeat("d", 61) + ".example."
	if n := NSEC(long, 60, nil); !strings.HasPrefix(n.NextDomain, strings.Repeat("a", 59)+"b.") {
		t.Fatalf("full-length successor %s", n.NextDomain)
	}
}

// TestRSAKeyFiles: an RSA/SHA-256 key (algorithm 8) of 2048 bits round-trips through its file,
// a file whose private key is another RSA key's is refused, and so are keys under 2048 bits.
func TestRSAKeyFiles(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for i := range 2 {
		k, err := GenerateAlgorithm("example.", dns.RSASHA256, 0, FlagsKSK, 3600)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, string(k.File(time.Now())))
		p := filepath.Join(dir, fmt.Sprint(i))
		if err := os.WriteFile(p, k.File(time.Now()), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := LoadKey(p, "example.")
		if err != nil || got.Tag != k.Tag || got.DNSKEY.Algorithm != dns.RSASHA256 {
			t.Fatalf("round trip: %v, %+v", err, got)
		}
	}
	// The DNSKEY line of the first key over the private key of the second.
	dnskey := func(f string) string { return strings.SplitN(f, "Private-key-format", 2)[0] }
	mixed := dnskey(files[0]) + "Private-key-format" + strings.SplitN(files[1], "Private-key-format", 2)[1]
	os.WriteFile(filepath.Join(dir, "mixed"), []byte(mixed), 0o600)
	if _, err := LoadKey(filepath.Join(dir, "mixed"), "example."); err == nil || !strings.Contains(err.Error(), "does not match the DNSKEY") {
		t.Errorf("mixed RSA key: %v", err)
	}
	if _, err := GenerateAlgorithm("example.", dns.RSASHA256, 1024, FlagsKSK, 3600); err == nil || !strings.Contains(err.Error(), "want 2048 to 4096") {
		t.Errorf("1024-bit RSA key: %v", err)
	}
}
