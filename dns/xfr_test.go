package dns

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard/switchyard/dns/config"
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
	dir := t.TempDir()
	load := func(serial int) *config.Config {
		if err := os.WriteFile(filepath.Join(dir, "zone"), []byte(xfrZoneText(serial)), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Parse([]byte(xfrYAML(notify)))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Listen, cfg.Dir = "127.0.0.1:0", dir
		return cfg
	}
	srv, err := NewServer(load(1), Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); srv.Close() })
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

// waitFor polls cond until it returns nil or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s within %v: %v", what, within, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
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

// TestTransferToKnotSecondary configures a real Knot as secondary: it bootstraps by AXFR with
// TSIG, follows a change by NOTIFY and IXFR, and answers the same as the primary; the policy
// names arrive as their static fallback.
func TestTransferToKnotSecondary(t *testing.T) {
	needBinary(t, "knotd", "knot")
	knotPort := refPort(t)
	srv, reload := xfrPrimary(t, fmt.Sprintf("127.0.0.1:%d", knotPort))
	primary := srv.Addr().String()
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
`, xfrSecret, srv.Addr().Addr(), srv.Addr().Port())
	knot := startKnotOn(t, knotPort, "example.com", "", top, "    master: primary\n    acl: notify_from_primary\n")
	waitFor(t, 20*time.Second, "knot loads the zone by AXFR", func() error {
		s, err := soaSerial(knot.addr)
		if err == nil && s != 1 {
			err = fmt.Errorf("serial %d", s)
		}
		return err
	})
	if err := sameAnswers(primary, knot.addr); err != nil {
		t.Fatalf("after AXFR: %v\n%s", err, knot.log())
	}
	if err := fallbackCheck(knot.addr); err != nil {
		t.Fatal(err)
	}
	reload(2)
	waitFor(t, 20*time.Second, "knot follows serial 2 after NOTIFY", func() error {
		s, err := soaSerial(knot.addr)
		if err == nil && s != 2 {
			err = fmt.Errorf("serial %d", s)
		}
		return err
	})
	if err := sameAnswers(primary, knot.addr); err != nil {
		t.Fatalf("after IXFR: %v\n%s", err, knot.log())
	}
	if err := fallbackCheck(knot.addr); err != nil {
		t.Fatal(err)
	}
	if n := counterValue(srv.ops.transfers.WithLabelValues("example.com.", "IXFR", "ok")); n < 1 {
		t.Errorf("no incremental transfer served (IXFR ok = %v)\n%s", n, knot.log())
	}
	if n := counterValue(srv.ops.notifies.WithLabelValues("example.com.", knot.addr, "ok")); n < 1 {
		t.Errorf("no NOTIFY answered by knot\n%s", knot.log())
	}
	if !strings.Contains(knot.log(), "IXFR, incoming") {
		t.Errorf("knot's log shows no incoming IXFR:\n%s", knot.log())
	}
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
