package dns

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/internal/testutil"
)

// startDoTServer starts the test zones with a tls listener on 127.0.0.1:0 (certificate for
// dns.test) and returns the server, the certificate's path and a client configuration trusting it.
func startDoTServer(t *testing.T, extra string) (*Server, string, *tls.Config) {
	t.Helper()
	dir := t.TempDir()
	certPath, keyPath, cert := testutil.WriteCert(t, dir, "dns.test")
	yml := testConfig(t) + "tls: {listen: \"127.0.0.1:0\", certificates: [{cert: " + certPath + ", key: " + keyPath + "}]" + extra + "}\n"
	srv := startServer(t, yml, Options{})
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return srv, certPath, &tls.Config{RootCAs: roots, ServerName: "dns.test", NextProtos: []string{"dot"}}
}

func writeFramed(t *testing.T, c io.Writer, msgs ...*mdns.Msg) {
	t.Helper()
	var all []byte
	for _, m := range msgs {
		b := mustPack(t, m)
		all = binary.BigEndian.AppendUint16(all, uint16(len(b)))
		all = append(all, b...)
	}
	if _, err := c.Write(all); err != nil { // one write: the queries are pipelined
		t.Fatal(err)
	}
}

func readFramed(t *testing.T, c io.Reader) []byte {
	t.Helper()
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		t.Fatalf("read answer: %v", err)
	}
	b := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// DNS over TLS: TLS 1.3 with ALPN dot, three pipelined queries on one connection all answered
// (matched by ID, in whatever order), the padded query's answer padded to a 468-byte block and
// the others not; TLS 1.2 is refused; an idle connection is closed after idle_timeout.
func TestDoTPipeliningPaddingIdle(t *testing.T) {
	srv, _, tc := startDoTServer(t, ", idle_timeout: 400ms")
	c, err := tls.Dial("tcp", srv.TLSAddr().String(), tc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if st := c.ConnectionState(); st.Version != tls.VersionTLS13 || st.NegotiatedProtocol != "dot" {
		t.Errorf("version %x alpn %q, want TLS 1.3 and dot", st.Version, st.NegotiatedProtocol)
	}
	qs := map[uint16]string{1: "www.example.com.", 2: "app.example.com.", 3: "mail.example.com."}
	var msgs []*mdns.Msg
	for id := uint16(1); id <= 3; id++ {
		m := new(mdns.Msg)
		m.SetQuestion(qs[id], mdns.TypeA)
		m.Id = id
		m.SetEdns0(1232, false)
		if id == 2 {
			m.IsEdns0().Option = append(m.IsEdns0().Option, &mdns.EDNS0_PADDING{Padding: make([]byte, 100)})
		}
		msgs = append(msgs, m)
	}
	c.SetDeadline(time.Now().Add(3 * time.Second))
	writeFramed(t, c, msgs...)
	seen := map[uint16]bool{}
	for i := 0; i < 3; i++ {
		raw := readFramed(t, c)
		r := new(mdns.Msg)
		if err := r.Unpack(raw); err != nil {
			t.Fatal(err)
		}
		if seen[r.Id] || qs[r.Id] == "" || r.Question[0].Name != qs[r.Id] || len(r.Answer) == 0 {
			t.Fatalf("answer %d: id %d %v", i, r.Id, r)
		}
		seen[r.Id] = true
		padded := hasPadding(r)
		if r.Id == 2 && (!padded || len(raw)%dotPadBlock != 0) {
			t.Errorf("padded query's answer: %d bytes, padding %v; want a multiple of %d", len(raw), padded, dotPadBlock)
		}
		if r.Id != 2 && padded {
			t.Errorf("answer %d padded though its query was not (RFC 8467)", r.Id)
		}
	}
	if got := gatherCounter(t, srv, "switchyard_dns_tls_padded_total"); got != 1 {
		t.Errorf("padded_total %v, want 1", got)
	}
	// Idle: closed by the server after 400 ms without a query.
	c.SetDeadline(time.Now().Add(3 * time.Second))
	start := time.Now()
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data on an idle connection")
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 2*time.Second {
		t.Errorf("idle connection closed after %v, want about 400ms", d)
	}

	old := tc.Clone()
	old.MaxVersion = tls.VersionTLS12
	if c, err := tls.Dial("tcp", srv.TLSAddr().String(), old); err == nil {
		c.Close()
		t.Error("a TLS 1.2 client was accepted")
	}
}

// kdig (Knot's dig) over TLS, verifying the certificate, with EDNS padding.
func TestDoTKdig(t *testing.T) {
	kdig, err := exec.LookPath("kdig")
	if err != nil {
		t.Skip("kdig not installed: apt-get install knot-dnsutils")
	}
	srv, certPath, _ := startDoTServer(t, "")
	a := srv.TLSAddr()
	out, err := exec.Command(kdig, "@"+a.Addr().String(), "-p", fmtInt(int(a.Port())), "+tls-ca="+certPath,
		"+tls-hostname=dns.test", "+padding", "+time=2", "+retry=0", "www.example.com", "A").CombinedOutput()
	if err != nil {
		t.Fatalf("kdig: %v\n%s", err, out)
	}
	s := string(out)
	t.Logf("kdig:\n%s", s)
	for _, w := range []string{"TLS1.3", "status: NOERROR", "www.example.com.", "192.0.2.1", "PADDING", "Received 468 B"} {
		if !strings.Contains(s, w) {
			t.Errorf("kdig output lacks %q:\n%s", w, s)
		}
	}
	// A wrong name in the certificate check fails: kdig really verifies what the listener serves.
	out, err = exec.Command(kdig, "@"+a.Addr().String(), "-p", fmtInt(int(a.Port())), "+tls-ca="+certPath,
		"+tls-hostname=other.test", "+time=2", "+retry=0", "www.example.com", "A").CombinedOutput()
	if err == nil && strings.Contains(string(out), "192.0.2.1") {
		t.Errorf("kdig accepted a certificate for another name:\n%s", out)
	}
}
