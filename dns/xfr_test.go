package dns

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/testutil"
)

// xfrSecret is the TSIG key of the transfer tests (base64 of 32 bytes).
const xfrSecret = "c3dpdGNoeWFyZC10cmFuc2Zlci10ZXN0LWtleS0zMmI="

// xfrZoneText is the primary's zone at a serial; later serials change www, drop old and add new.
func xfrZoneText(serial int) string {
	z := fmt.Sprintf(`$ORIGIN example.com.
$TTL 300
@     IN SOA ns1 hostmaster %d 3600 600 604800 120
@     IN NS  ns1
ns1   IN A   127.0.0.1
alias IN CNAME www
@     IN MX  10 mail
mail  IN A   192.0.2.25
@     IN TXT "v=spf1 -all"
`, serial)
	// Enough records that a full transfer takes several messages (TSIG chains across them).
	for i := range xfrFiller {
		z += fmt.Sprintf("h%d IN A 10.0.%d.%d\n", i, i/250, i%250+1)
	}
	if serial == 1 {
		return z + "www IN A 192.0.2.1\nold IN A 192.0.2.7\n"
	}
	return z + "www IN A 192.0.2.2\nwww IN AAAA 2001:db8::2\nnew IN TXT \"serial " + fmt.Sprint(serial) + "\"\n"
}

// xfrFiller is the number of filler records: about 34 KB, three transfer messages.
const xfrFiller = 1000

// xfrYAML configures the zone with a transfer block for secondaries at notify (address:port)
// and two dynamic names: one with an explicit transfer_fallback, one with the default.
func xfrYAML(notify string) string {
	return `tsig_keys:
  - {name: xfr-key, algorithm: hmac-sha256, secret: "` + xfrSecret + `"}
groups:
  g1: [10.1.0.0/16]
zones:
  - origin: example.com.
    file: zone
    transfer:
      allow: [127.0.0.0/8]
      key: xfr-key
      notify: [` + notify + `]
      journal: 10
    names:
      - name: app
        ttl: 30
        policy: geolocation
        geo: {g1: [b34], default: [b06]}
        transfer_fallback: [198.51.100.99]
        sites:
          - {name: b34, addresses: [198.51.100.34]}
          - {name: b06, addresses: [198.51.100.6]}
      - name: w
        ttl: 60
        policy: weighted
        sites:
          - {name: b34, addresses: [198.51.100.34], weight: 1}
          - {name: b35, addresses: [198.51.100.35, "2001:db8::35"], weight: 5}
`
}

// xfrPrimary serves the zone at serial with switchyard; reload(serial) rewrites and reloads it.
func xfrPrimary(t *testing.T, notify string) (*Server, func(serial int)) {
	t.Helper()
	return xfrPrimaryWith(t, notify, "127.0.0.1:0", "")
}

// xfrPrimaryWith is xfrPrimary listening on listen, extra added to its configuration.
func xfrPrimaryWith(t *testing.T, notify, listen, extra string) (*Server, func(serial int)) {
	t.Helper()
	dir := t.TempDir()
	load := func(serial int) *config.Config {
		if err := os.WriteFile(filepath.Join(dir, "zone"), []byte(xfrZoneText(serial)), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Parse([]byte(xfrYAML(notify) + extra))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Listen, cfg.Dir = listen, dir
		return cfg
	}
	srv := startConfig(t, load(1), Options{Logger: testLogger(t)})
	return srv, func(serial int) {
		if err := srv.Reload(load(serial)); err != nil {
			t.Fatal(err)
		}
	}
}

// xfrQuestions are compared between primary and secondary.
var xfrQuestions = []struct {
	name  string
	qtype uint16
}{
	{"example.com.", mdns.TypeSOA}, {"example.com.", mdns.TypeNS}, {"example.com.", mdns.TypeMX},
	{"example.com.", mdns.TypeTXT}, {"www.example.com.", mdns.TypeA}, {"www.example.com.", mdns.TypeAAAA},
	{"alias.example.com.", mdns.TypeA}, {"old.example.com.", mdns.TypeA}, {"new.example.com.", mdns.TypeTXT},
	{"missing.example.com.", mdns.TypeA}, {"mail.example.com.", mdns.TypeA},
}

// sameAnswers asks both servers every question and reports the first difference in rcode, AA
// or answer section.
func sameAnswers(primary, secondary string) error {
	for _, x := range xfrQuestions {
		a, _, err := Query(context.Background(), primary, x.name, x.qtype, QueryOptions{})
		if err != nil {
			return err
		}
		b, _, err := Query(context.Background(), secondary, x.name, x.qtype, QueryOptions{})
		if err != nil {
			return err
		}
		if a.Rcode != b.Rcode || a.Authoritative != b.Authoritative || answerSet(a) != answerSet(b) {
			return fmt.Errorf("%s %s: primary %s aa=%v [%s], secondary %s aa=%v [%s]", x.name, mdns.TypeToString[x.qtype],
				mdns.RcodeToString[a.Rcode], a.Authoritative, answerSet(a), mdns.RcodeToString[b.Rcode], b.Authoritative, answerSet(b))
		}
	}
	return nil
}

func soaSerial(addr string) (uint32, error) {
	m, _, err := Query(context.Background(), addr, "example.com.", mdns.TypeSOA, QueryOptions{Timeout: 500 * time.Millisecond})
	if err != nil {
		return 0, err
	}
	if len(m.Answer) != 1 {
		return 0, fmt.Errorf("SOA answer %v", m.Answer)
	}
	return m.Answer[0].(*mdns.SOA).Serial, nil
}

func fallbackCheck(secondary string) error {
	for name, want := range map[string]string{
		"app.example.com.": "app.example.com.\t30\tin\ta\t198.51.100.99", // transfer_fallback
		"w.example.com.":   "w.example.com.\t60\tin\ta\t198.51.100.35",   // default: the heaviest site
	} {
		m, _, err := Query(context.Background(), secondary, name, mdns.TypeA, QueryOptions{})
		if err != nil {
			return err
		}
		if got := answerSet(m); got != want {
			return fmt.Errorf("secondary %s A: [%s], want the fallback [%s]", name, got, want)
		}
	}
	return nil
}

// secondaryStarter starts a real secondary on port that transfers example.com from primary.
type secondaryStarter func(t *testing.T, port int, primary netip.AddrPort) *refServer

// testSecondary runs a real secondary against switchyard: it bootstraps by AXFR with TSIG,
// follows a change by NOTIFY and IXFR, and answers the same as the primary; the policy names
// arrive as their static fallback.
func testSecondary(t *testing.T, bin, pkg string, start secondaryStarter) {
	needBinary(t, bin, pkg)
	port := refPort(t)
	srv, reload := xfrPrimary(t, fmt.Sprintf("127.0.0.1:%d", port))
	primary := srv.Addr().String()
	sec := start(t, port, srv.Addr())
	var last error // the last poll's, for the failure message
	hasSerial := func(want uint32) func() bool {
		return func() bool {
			s, err := soaSerial(sec.addr)
			if err == nil && s != want {
				err = fmt.Errorf("serial %d", s)
			}
			last = err
			return err == nil
		}
	}
	lastErr := func() any { return last }
	// A secondary that loaded a transfer may answer some queries from before it for a moment
	// (NSD's old server process serves on until the new one has taken over): every answer must
	// agree with the primary's in one pass within a few seconds.
	sameSoon := func(after string) {
		t.Helper()
		same := func() bool {
			last = sameAnswers(primary, sec.addr)
			if last == nil {
				last = fallbackCheck(sec.addr)
			}
			return last == nil
		}
		testutil.Eventually(t, 5*time.Second, same, "%s: %s answers differ from the primary's: %v\n%s",
			after, sec.name, lastErr, func() any { return sec.log() })
	}
	testutil.Eventually(t, 30*time.Second, hasSerial(1), "%s did not load the zone by AXFR: %v", sec.name, lastErr)
	sameSoon("after AXFR")
	reload(2)
	testutil.Eventually(t, 30*time.Second, hasSerial(2), "%s did not follow serial 2 after NOTIFY: %v", sec.name, lastErr)
	sameSoon("after IXFR")
	if n := counterValue(srv.ops.transfers.WithLabelValues("example.com.", "IXFR", "ok")); n < 1 {
		t.Errorf("no incremental transfer served (IXFR ok = %v)\n%s", n, sec.log())
	}
	if n := counterValue(srv.ops.notifies.WithLabelValues("example.com.", sec.addr, "ok")); n < 1 {
		t.Errorf("no NOTIFY answered by %s\n%s", sec.name, sec.log())
	}
}

// TestTransferToKnotSecondary configures a real Knot as secondary.
func TestTransferToKnotSecondary(t *testing.T) {
	testSecondary(t, "knotd", "knot", func(t *testing.T, port int, primary netip.AddrPort) *refServer {
		top := fmt.Sprintf(`key:
  - id: xfr-key
    algorithm: hmac-sha256
    secret: %s
remote:
  - id: primary
    address: %s@%d
    key: xfr-key
acl:
  - id: notify_from_primary
    address: 127.0.0.1
    key: xfr-key
    action: notify
`, xfrSecret, primary.Addr(), primary.Port())
		knot := startKnotOn(t, port, "example.com", "", top, "    master: primary\n    acl: notify_from_primary\n")
		t.Cleanup(func() {
			if !t.Failed() && !strings.Contains(knot.log(), "IXFR, incoming") {
				t.Errorf("knot's log shows no incoming IXFR:\n%s", knot.log())
			}
		})
		return knot
	})
}

// TestTransferToNSDSecondary configures a real NSD as secondary.
func TestTransferToNSDSecondary(t *testing.T) {
	testSecondary(t, "nsd", "nsd", func(t *testing.T, port int, primary netip.AddrPort) *refServer {
		top := fmt.Sprintf("key:\n  name: xfr-key\n  algorithm: hmac-sha256\n  secret: \"%s\"\n", xfrSecret)
		zone := fmt.Sprintf("  request-xfr: %s@%d xfr-key\n  allow-notify: 127.0.0.1 xfr-key\n", primary.Addr(), primary.Port())
		return startNSDOn(t, port, "example.com", "", top, zone)
	})
}

// testLogger sends the server's log to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, nil))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// counterValue reads a counter's current value.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	c.Write(&m)
	return m.GetCounter().GetValue()
}

// tcpExchangeRaw sends one framed message over TCP and returns the first answer.
func tcpExchangeRaw(t *testing.T, addr string, raw []byte) *mdns.Msg {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write(append([]byte{byte(len(raw) >> 8), byte(len(raw))}, raw...)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, int(l[0])<<8|int(l[1]))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	m := new(mdns.Msg)
	if err := m.Unpack(buf); err != nil {
		t.Fatal(err)
	}
	return m
}

// xfrQuery packs an AXFR (since < 0) or IXFR query, signed with secret when it is not empty.
func xfrQuery(t testing.TB, since int, secret string) []byte {
	t.Helper()
	m := new(mdns.Msg)
	if since < 0 {
		m.SetAxfr("example.com.")
	} else {
		m.SetIxfr("example.com.", uint32(since), "ns1.example.com.", "hostmaster.example.com.")
	}
	m.SetEdns0(1232, false)
	if secret == "" {
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	m.SetTsig("xfr-key.", mdns.HmacSHA256, 300, time.Now().Unix())
	b, _, err := mdns.TsigGenerate(m, secret, "", false)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// transferIn runs a signed transfer with miekg/dns's client, which checks the TSIG of every
// message, and returns the records and the number of messages.
func transferIn(t *testing.T, addr string, since int) ([]mdns.RR, int) {
	t.Helper()
	m := new(mdns.Msg)
	if since < 0 {
		m.SetAxfr("example.com.")
	} else {
		m.SetIxfr("example.com.", uint32(since), "ns1.example.com.", "hostmaster.example.com.")
	}
	m.SetTsig("xfr-key.", mdns.HmacSHA256, 300, time.Now().Unix())
	tr := &mdns.Transfer{TsigSecret: map[string]string{"xfr-key.": xfrSecret}}
	ch, err := tr.In(m, addr)
	if err != nil {
		t.Fatal(err)
	}
	var rrs []mdns.RR
	n := 0
	for env := range ch {
		if env.Error != nil {
			t.Fatalf("transfer message %d: %v", n, env.Error)
		}
		rrs = append(rrs, env.RR...)
		n++
	}
	return rrs, n
}

func edeCodes(m *mdns.Msg) string {
	var s []string
	if o := m.IsEdns0(); o != nil {
		for _, e := range o.Option {
			if ede, ok := e.(*mdns.EDNS0_EDE); ok {
				s = append(s, fmt.Sprint(ede.InfoCode))
			}
		}
	}
	return strings.Join(s, ",")
}

func hasRecord(rrs []mdns.RR, text string) bool {
	for _, rr := range rrs {
		if strings.EqualFold(strings.ReplaceAll(rr.String(), "\t", " "), text) {
			return true
		}
	}
	return false
}

// Transfers need the key and an allowed address; a full transfer spans several signed messages
// and carries the policy names' fallback; an IXFR after a reload carries just the change.
func TestTransferACLTSIGAndJournal(t *testing.T) {
	srv, reload := xfrPrimary(t, fmt.Sprintf("127.0.0.1:%d", refPort(t)))
	addr := srv.Addr().String()

	if m := tcpExchangeRaw(t, addr, xfrQuery(t, -1, "")); m.Rcode != mdns.RcodeRefused || edeCodes(m) != "18" || len(m.Answer) != 0 {
		t.Errorf("unsigned AXFR: %s ede [%s] answers %d, want REFUSED with EDE 18", mdns.RcodeToString[m.Rcode], edeCodes(m), len(m.Answer))
	}
	wrong := "d3Jvbmctc2VjcmV0LXdyb25nLXNlY3JldC13cm9uZyE="
	if m := tcpExchangeRaw(t, addr, xfrQuery(t, -1, wrong)); m.Rcode != mdns.RcodeNotAuth || m.IsTsig() == nil || m.IsTsig().Error != mdns.RcodeBadSig {
		t.Errorf("AXFR with a wrong secret: %s, want NOTAUTH with TSIG error BADSIG: %v", mdns.RcodeToString[m.Rcode], m)
	}

	rrs, msgs := transferIn(t, addr, -1)
	if len(rrs) != xfrFiller+13 || msgs < 2 {
		t.Errorf("AXFR: %d records in %d messages, want %d in several", len(rrs), msgs, xfrFiller+13)
	}
	if soa, ok := rrs[0].(*mdns.SOA); !ok || soa.Serial != 1 || rrs[len(rrs)-1].String() != rrs[0].String() {
		t.Errorf("AXFR does not start and end with the SOA of serial 1: %v ... %v", rrs[0], rrs[len(rrs)-1])
	}
	for _, want := range []string{"app.example.com. 30 IN A 198.51.100.99", "w.example.com. 60 IN A 198.51.100.35",
		"w.example.com. 60 IN AAAA 2001:db8::35", "old.example.com. 300 IN A 192.0.2.7"} {
		if !hasRecord(rrs, want) {
			t.Errorf("AXFR lacks %q", want)
		}
	}
	if hasRecord(rrs, "app.example.com. 30 IN A 198.51.100.6") {
		t.Error("AXFR carries a policy answer instead of the fallback")
	}

	reload(2)
	rrs, _ = transferIn(t, addr, 1)
	if len(rrs) < 4 || rrs[0].(*mdns.SOA).Serial != 2 || rrs[1].(*mdns.SOA).Serial != 1 {
		t.Fatalf("IXFR from 1: not incremental: %v", rrs)
	}
	if len(rrs) > 12 || !hasRecord(rrs, "old.example.com. 300 IN A 192.0.2.7") || !hasRecord(rrs, `new.example.com. 300 IN TXT "serial 2"`) {
		t.Errorf("IXFR from 1 does not carry exactly the change (%d records): %v", len(rrs), rrs)
	}
	if rrs, _ := transferIn(t, addr, 2); len(rrs) != 1 {
		t.Errorf("IXFR from the current serial: %d records, want the SOA alone", len(rrs))
	}
	if rrs, _ := transferIn(t, addr, 0); len(rrs) != xfrFiller+14 {
		t.Errorf("IXFR from a serial outside the journal: %d records, want the full zone (%d)", len(rrs), xfrFiller+14)
	}
	// Over UDP an IXFR gets the current SOA, signed: the secondary comes back over TCP.
	c := &mdns.Client{Net: "udp", TsigSecret: map[string]string{"xfr-key.": xfrSecret}}
	m := new(mdns.Msg)
	m.SetIxfr("example.com.", 1, "ns1.example.com.", "hostmaster.example.com.")
	m.SetTsig("xfr-key.", mdns.HmacSHA256, 300, time.Now().Unix())
	resp, _, err := c.Exchange(m, addr)
	if err != nil || len(resp.Answer) != 1 || resp.Answer[0].(*mdns.SOA).Serial != 2 {
		t.Errorf("UDP IXFR: %v %v, want the SOA of serial 2", err, resp)
	}
}

// A signed ordinary query (a secondary's SOA check) gets a signed answer that the client
// verifies; a bad signature gets NOTAUTH.
func TestSignedQueryGetsSignedAnswer(t *testing.T) {
	srv, _ := xfrPrimary(t, fmt.Sprintf("127.0.0.1:%d", refPort(t)))
	for _, network := range []string{"udp", "tcp"} {
		c := &mdns.Client{Net: network, TsigSecret: map[string]string{"xfr-key.": xfrSecret}}
		m := new(mdns.Msg)
		m.SetQuestion("example.com.", mdns.TypeSOA)
		m.SetTsig("xfr-key.", mdns.HmacSHA256, 300, time.Now().Unix())
		resp, _, err := c.Exchange(m, srv.Addr().String()) // verifies the answer's TSIG
		if err != nil || resp.IsTsig() == nil || len(resp.Answer) != 1 {
			t.Errorf("%s: signed SOA query: %v %v", network, err, resp)
		}
	}
	raw := xfrQuery(t, -1, "d3Jvbmctc2VjcmV0LXdyb25nLXNlY3JldC13cm9uZyE=")
	var m mdns.Msg
	m.Unpack(raw)
	m.Question[0].Qtype = mdns.TypeSOA
	m.Extra = m.Extra[:1] // keep the OPT, sign again with the wrong secret
	m.SetTsig("xfr-key.", mdns.HmacSHA256, 300, time.Now().Unix())
	raw, _, _ = mdns.TsigGenerate(&m, "d3Jvbmctc2VjcmV0LXdyb25nLXNlY3JldC13cm9uZyE=", "", false)
	out := srv.Respond(raw, netip.MustParseAddr("127.0.0.1"), false)
	var resp mdns.Msg
	if err := resp.Unpack(out); err != nil || resp.Rcode != mdns.RcodeNotAuth || len(resp.Answer) != 0 {
		t.Errorf("SOA query with a bad signature: %v %v, want NOTAUTH", err, &resp)
	}
}

// notifyCatcher is a secondary's UDP socket that records the NOTIFY messages it gets and
// answers them unless told to stay silent.
type notifyCatcher struct {
	pc     net.PacketConn
	got    chan *mdns.Msg
	silent atomic.Int32 // how many NOTIFYs to leave unanswered
}

func newNotifyCatcher(t *testing.T) *notifyCatcher {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &notifyCatcher{pc: pc, got: make(chan *mdns.Msg, 16)}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65535)
		for {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			m := new(mdns.Msg)
			if m.Unpack(buf[:k]) != nil {
				continue
			}
			if err := mdns.TsigVerify(buf[:k], xfrSecret, "", false); err != nil {
				m.Rcode = -1 // marks a bad signature for the test
			}
			n.got <- m
			if n.silent.Add(-1) >= 0 {
				continue
			}
			r := new(mdns.Msg)
			r.SetReply(m)
			b, _ := r.Pack()
			pc.WriteTo(b, from)
		}
	}()
	return n
}

func (n *notifyCatcher) next(t *testing.T, within time.Duration) *mdns.Msg {
	t.Helper()
	select {
	case m := <-n.got:
		return m
	case <-time.After(within):
		return nil
	}
}

// A NOTIFY is sent, signed, at start and on every new serial, retried until answered, and not
// sent for a reload that changes nothing.
func TestNotifyOnSerialChange(t *testing.T) {
	sec := newNotifyCatcher(t)
	_, reload := xfrPrimary(t, sec.pc.LocalAddr().String())
	check := func(m *mdns.Msg, serial uint32) {
		t.Helper()
		if m == nil {
			t.Fatalf("no NOTIFY for serial %d", serial)
		}
		if m.Opcode != mdns.OpcodeNotify || !m.Authoritative || m.Rcode == -1 || m.Question[0].Name != "example.com." ||
			m.Question[0].Qtype != mdns.TypeSOA || len(m.Answer) != 1 || m.Answer[0].(*mdns.SOA).Serial != serial {
			t.Fatalf("NOTIFY for serial %d: bad message (rcode -1 = bad TSIG):\n%v", serial, m)
		}
	}
	check(sec.next(t, 5*time.Second), 1)
	reload(1)
	if m := sec.next(t, 1500*time.Millisecond); m != nil {
		t.Fatalf("NOTIFY after a reload that changed nothing: %v", m)
	}
	sec.silent.Store(1)
	reload(2)
	check(sec.next(t, 5*time.Second), 2)
	check(sec.next(t, 5*time.Second), 2) // the first went unanswered: retried
	if m := sec.next(t, 2500*time.Millisecond); m != nil {
		t.Fatalf("NOTIFY retried after it was answered: %v", m)
	}
}
