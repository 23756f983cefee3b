package dns

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/testutil"
)

// newTestServer builds a server for the YAML config (zone files from testdata) without binding.
func newTestServer(tb testing.TB, yml string, opt Options) *Server {
	tb.Helper()
	cfg, err := config.Parse([]byte(yml))
	if err != nil {
		tb.Fatalf("parse config: %v", err)
	}
	cfg.Listen = "127.0.0.1:0"
	cfg.Dir = "testdata"
	srv, err := NewServer(cfg, opt)
	if err != nil {
		tb.Fatalf("new server: %v", err)
	}
	return srv
}

// startServer starts a server for the YAML config on 127.0.0.1:0 and stops it when the test ends.
func startServer(tb testing.TB, yml string, opt Options) *Server {
	tb.Helper()
	srv := newTestServer(tb, yml, opt)
	startBuilt(tb, srv)
	return srv
}

// startConfig builds a server for cfg and starts it until the test ends (startBuilt).
func startConfig(tb testing.TB, cfg *config.Config, opt Options) *Server {
	tb.Helper()
	srv, err := NewServer(cfg, opt)
	if err != nil {
		tb.Fatalf("new server: %v", err)
	}
	startBuilt(tb, srv)
	return srv
}

// startBuilt starts srv and stops it when the test ends; stop stops it earlier (for a restart
// on the same files).
func startBuilt(tb testing.TB, srv *Server) (stop func()) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
		cancel()
		tb.Fatalf("start: %v", err)
	}
	stop = func() { cancel(); srv.Close() }
	tb.Cleanup(stop)
	return stop
}

func testConfig(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dig runs the real dig against srv and returns its output.
func dig(t *testing.T, srv *Server, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("dig")
	if err != nil {
		t.Skip("dig not installed: apt-get install dnsutils (make deps)")
	}
	a := srv.Addr()
	full := append([]string{"@" + a.Addr().String(), "-p", fmtInt(int(a.Port())), "+norec", "+time=2", "+tries=1"}, args...)
	out, err := exec.Command(path, full...).CombinedOutput()
	if err != nil {
		t.Fatalf("dig %v: %v\n%s", full, err, out)
	}
	return string(out)
}

func fmtInt(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func mustContain(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func q(t *testing.T, srv *Server, name string, qtype uint16, o QueryOptions) *mdns.Msg {
	t.Helper()
	resp, _, err := Query(context.Background(), srv.Addr().String(), name, qtype, o)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestDigStaticRecords(t *testing.T) {
	srv := startServer(t, testConfig(t), Options{})
	out := dig(t, srv, "www.example.com", "A")
	mustContain(t, out, "status: NOERROR", "flags: qr aa;", "www.example.com.\t300\tIN\tA\t192.0.2.1")
	mustContain(t, dig(t, srv, "www.example.com", "AAAA", "+short"), "2001:db8::1")
	mustContain(t, dig(t, srv, "alias.example.com", "A"), "alias.example.com.\t300\tIN\tCNAME\twww.example.com.", "192.0.2.1")
	mustContain(t, dig(t, srv, "example.com", "MX"), "10 mail.example.com.", "ADDITIONAL SECTION", "192.0.2.25")
	mustContain(t, dig(t, srv, "_http._tcp.example.com", "SRV", "+short"), "10 5 80 www.example.com.")
	mustContain(t, dig(t, srv, "example.com", "TXT", "+short"), `"v=spf1 -all"`)
	mustContain(t, dig(t, srv, "example.com", "CAA", "+short"), `0 issue "letsencrypt.org"`)
	mustContain(t, dig(t, srv, "example.com", "NS"), "example.com.\t\t300\tIN\tNS\tns1.example.com.", "192.0.2.53")
	mustContain(t, dig(t, srv, "example.com", "SOA", "+short"), "ns1.example.com. hostmaster.example.com. 7 3600 600 604800 120")
	// Wildcards synthesise the asked name (RFC 4592).
	mustContain(t, dig(t, srv, "anything.wild.example.com", "A"), "anything.wild.example.com. 300\tIN\tA\t192.0.2.42", "flags: qr aa;")
	// From an RFC 1035 zone file.
	mustContain(t, dig(t, srv, "www.example.org", "AAAA", "+short"), "2001:db8::80")
	mustContain(t, dig(t, srv, "alias.example.org", "A"), "alias.example.org.\t3600\tIN\tCNAME\twww.example.org.")
}

func TestDigNegativeAnswers(t *testing.T) {
	srv := startServer(t, testConfig(t), Options{})
	// NXDOMAIN and NODATA carry the SOA with TTL = min(SOA TTL, minimum) for negative caching.
	nx := dig(t, srv, "nope.example.com", "A")
	mustContain(t, nx, "status: NXDOMAIN", "flags: qr aa;", "AUTHORITY: 1", "example.com.\t\t120\tIN\tSOA")
	nodata := dig(t, srv, "www.example.com", "MX")
	mustContain(t, nodata, "status: NOERROR", "ANSWER: 0", "AUTHORITY: 1", "SOA")
	// An empty non-terminal is NODATA, not NXDOMAIN (RFC 8020).
	mustContain(t, dig(t, srv, "ent.example.com", "A"), "status: NOERROR", "ANSWER: 0")
	// No recursion: REFUSED outside the zones, and RA is never set.
	ref := dig(t, srv, "www.google.com", "A")
	mustContain(t, ref, "status: REFUSED")
	if strings.Contains(dig(t, srv, "+rec", "www.example.com"), " ra") {
		t.Error("RA set: the server does no recursion")
	}
	// A delegation is a referral without AA, with glue.
	refl := dig(t, srv, "host.sub.example.com", "A")
	mustContain(t, refl, "status: NOERROR", "flags: qr;", "sub.example.com.\t300\tIN\tNS\tns.sub.example.com.", "192.0.2.99")
}

func TestDigEDNS(t *testing.T) {
	srv := startServer(t, testConfig(t), Options{})
	// RFC 6891: BADVERS for version 1 with an OPT of version 0; dig retries with version 0, so
	// ask it not to and look at the first answer.
	mustContain(t, dig(t, srv, "+edns=1", "+noednsnegotiation", "www.example.com"), "status: BADVERS", "EDNS: version: 0")
	// The DO bit is echoed; unknown options are ignored (RFC 8906 checks these).
	mustContain(t, dig(t, srv, "+dnssec", "www.example.com"), "flags: do;", "status: NOERROR")
	mustContain(t, dig(t, srv, "+ednsopt=65001:abcdef", "www.example.com"), "status: NOERROR", "192.0.2.1")
	// Without EDNS the answer has no OPT.
	if strings.Contains(dig(t, srv, "+noedns", "www.example.com"), "OPT PSEUDOSECTION") {
		t.Error("OPT in the answer to a query without EDNS")
	}
	// An EDNS query with an unknown class is REFUSED with EDE 21 (as NSD); an unknown opcode NOTIMP.
	mustContain(t, dig(t, srv, "www.example.com", "A", "-c", "CLASS77"), "status: REFUSED", "EDE: 21")
	mustContain(t, dig(t, srv, "+opcode=2", "www.example.com"), "status: NOTIMP")
	mustContain(t, dig(t, srv, "example.com", "AXFR"), "Transfer failed")
}

// bigConfig adds a name with many TXT records, larger than 512 and 1232 bytes.
func bigConfig(t *testing.T) string {
	var b strings.Builder
	b.WriteString("zones:\n  - origin: big.test.\n    records:\n")
	for i := 0; i < 40; i++ {
		b.WriteString("      - 'txt TXT \"record " + fmtInt(i) + " " + strings.Repeat("x", 60) + "\"'\n")
	}
	return b.String()
}

func TestTruncationAndTCPFallback(t *testing.T) {
	srv := startServer(t, bigConfig(t), Options{})
	// +ignore shows the truncated UDP answer; the response must fit the advertised buffer.
	for _, size := range []int{512, 1232} {
		out := dig(t, srv, "+ignore", "+bufsize="+fmtInt(size), "txt.big.test", "TXT")
		mustContain(t, out, "flags: qr aa tc;")
		msg := q(t, srv, "txt.big.test", mdns.TypeTXT, QueryOptions{BufSize: uint16(size)})
		msg.Compress = true // Len then measures the wire size the server sent
		if !msg.Truncated || msg.Len() > size {
			t.Errorf("bufsize %d: truncated=%v len=%d", size, msg.Truncated, msg.Len())
		}
	}
	noedns := q(t, srv, "txt.big.test", mdns.TypeTXT, QueryOptions{NoEDNS: true})
	noedns.Compress = true
	if !noedns.Truncated || noedns.Len() > 512 {
		t.Errorf("no EDNS: truncated=%v len=%d, want TC within 512", noedns.Truncated, noedns.Len())
	}
	// dig follows TC over TCP and gets all 40 records.
	out := dig(t, srv, "+bufsize=512", "txt.big.test", "TXT")
	mustContain(t, out, "Truncated, retrying in TCP mode", "ANSWER: 40")
	tcp := q(t, srv, "txt.big.test", mdns.TypeTXT, QueryOptions{TCP: true})
	if tcp.Truncated || len(tcp.Answer) != 40 {
		t.Errorf("tcp: truncated=%v answers=%d, want 40", tcp.Truncated, len(tcp.Answer))
	}
}

func TestANYIsMinimal(t *testing.T) {
	srv := startServer(t, testConfig(t), Options{})
	msg := q(t, srv, "example.com", mdns.TypeANY, QueryOptions{})
	types := map[uint16]bool{}
	for _, rr := range msg.Answer {
		types[rr.Header().Rrtype] = true
	}
	if len(types) != 1 {
		t.Fatalf("ANY answered %d RRsets, RFC 8482 wants one: %v", len(types), msg.Answer)
	}
}

func TestGeolocationECSAndResolverAddress(t *testing.T) {
	srv := startServer(t, testConfig(t), Options{})
	// ECS inside g2 (10.2/16): b35, with scope /16 (the matched group prefix).
	out := dig(t, srv, "+subnet=10.2.3.0/24", "app.example.com")
	mustContain(t, out, "CLIENT-SUBNET: 10.2.3.0/24/16", "app.example.com.\t30\tIN\tA\t198.51.100.35")
	// ECS outside every group: the default chain (b06), scope = source prefix.
	mustContain(t, dig(t, srv, "+subnet=192.0.2.0/24", "app.example.com"), "CLIENT-SUBNET: 192.0.2.0/24/24", "198.51.100.6")
	// No ECS: the resolver's address decides (127.0.11.1 is in g1 -> b34).
	mustContain(t, dig(t, srv, "-b", "127.0.11.1", "+short", "app.example.com"), "198.51.100.34")
	mustContain(t, dig(t, srv, "-b", "127.0.12.1", "+short", "app.example.com"), "198.51.100.35")
	mustContain(t, dig(t, srv, "+short", "app.example.com"), "198.51.100.6")
	mustContain(t, dig(t, srv, "+short", "app.example.com", "AAAA"), "2001:db8::6")
	// A weighted name does not depend on the client: scope 0.
	mustContain(t, dig(t, srv, "+subnet=10.2.3.0/24", "static.example.com"), "CLIENT-SUBNET: 10.2.3.0/24/0")
	// Per-name TTLs: the application name 30 s, the content name 3600 s.
	mustContain(t, dig(t, srv, "static.example.com"), "static.example.com.\t3600\tIN\tA")
	// Other types at a dynamic name: NODATA with the SOA, TTL capped by the name's TTL.
	mustContain(t, dig(t, srv, "app.example.com", "MX"), "status: NOERROR", "ANSWER: 0", "example.com.\t\t30\tIN\tSOA")
}

func TestWeightedSharesFollowTargets(t *testing.T) {
	srv := startServer(t, testConfig(t), Options{})
	count := map[string]int{}
	for i := 0; i < 100; i++ {
		msg := q(t, srv, "static.example.com", mdns.TypeA, QueryOptions{})
		if len(msg.Answer) != 1 {
			t.Fatalf("answers %d, want 1", len(msg.Answer))
		}
		count[msg.Answer[0].(*mdns.A).A.String()]++
	}
	want := map[string]int{"198.51.100.34": 50, "198.51.100.35": 30, "198.51.100.6": 20}
	for a, n := range want {
		if count[a] != n {
			t.Errorf("%s answered %d of 100, want %d (smooth weighted round robin is exact per window)", a, count[a], n)
		}
	}
}

const healthYAML = `
zones:
  - origin: hc.test.
    names:
      - name: app
        ttl: 5
        policy: failover
        all_down: ALLDOWN
        chain: [primary, secondary]
        sites:
          - name: primary
            addresses: [192.0.2.1]
            check: {type: CHECKTYPE, target: "PRIMARY", interval: 50ms, timeout: 40ms, fall: 3, rise: 2}
          - name: secondary
            addresses: [192.0.2.2]
            check: {type: tcp, target: "SECONDARY", interval: 50ms, timeout: 40ms, fall: 3, rise: 2}
`

// flipListener is a real TCP (or HTTP) target that can be stopped and restarted on its port.
type flipListener struct {
	t    *testing.T
	addr string
	http bool
	mu   sync.Mutex
	ln   net.Listener
}

func newFlip(t *testing.T, http bool) *flipListener {
	f := &flipListener{t: t, http: http}
	f.start("127.0.0.1:0")
	t.Cleanup(f.stop)
	return f
}

func (f *flipListener) start(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ln net.Listener
	var err error
	// The port may linger briefly after a stop.
	testutil.Eventually(f.t, time.Second, func() bool { ln, err = net.Listen("tcp", addr); return err == nil },
		"listen %s: %v", addr, func() any { return err })
	f.ln, f.addr = ln, ln.Addr().String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if f.http {
				buf := make([]byte, 1024)
				c.SetReadDeadline(time.Now().Add(time.Second))
				c.Read(buf)
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"))
			}
			c.Close()
		}
	}()
}

func (f *flipListener) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != nil {
		f.ln.Close()
		f.ln = nil
	}
}

func answerOf(t *testing.T, srv *Server) string {
	msg := q(t, srv, "app.hc.test", mdns.TypeA, QueryOptions{})
	var out []string
	for _, rr := range msg.Answer {
		out = append(out, rr.(*mdns.A).A.String())
	}
	return strings.Join(out, ",")
}

// waitAnswer waits until srv answers want and returns how long that took.
func waitAnswer(t *testing.T, srv *Server, want string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var got string
	testutil.Eventually(t, within, func() bool { got = answerOf(t, srv); return got == want },
		"answer still %q, want %q", func() any { return got }, want)
	return time.Since(start)
}

func healthServer(t *testing.T, checkType, allDown string, primary, secondary *flipListener) *Server {
	y := strings.NewReplacer("CHECKTYPE", checkType, "ALLDOWN", allDown, "PRIMARY", primary.addr,
		"SECONDARY", secondary.addr).Replace(healthYAML)
	return startServer(t, y, Options{})
}

func TestFailoverFollowsHealthChecks(t *testing.T) {
	for _, typ := range []string{"tcp", "http"} {
		t.Run(typ, func(t *testing.T) {
			primary, secondary := newFlip(t, typ == "http"), newFlip(t, false)
			srv := healthServer(t, typ, "fail-closed", primary, secondary)
			waitAnswer(t, srv, "192.0.2.1", time.Second)
			primary.stop()
			// Leaves after fall (3) x interval (50 ms), well within 2 s. The exact count of
			// failures is the state machine's (dns/health tests it deterministically); here, on
			// a loaded machine a probe may time out before the stop, so only check that the
			// answer did not change before a probe could see the stop.
			took := waitAnswer(t, srv, "192.0.2.2", 2*time.Second)
			if took < 40*time.Millisecond {
				t.Errorf("primary left after %s, before a probe could have seen it down", took)
			}
			primary.start(primary.addr)
			waitAnswer(t, srv, "192.0.2.1", 2*time.Second)
			// All down, fail closed: NODATA with the SOA.
			primary.stop()
			secondary.stop()
			waitAnswer(t, srv, "", 2*time.Second)
			msg := q(t, srv, "app.hc.test", mdns.TypeA, QueryOptions{})
			if msg.Rcode != mdns.RcodeSuccess || len(msg.Ns) != 1 {
				t.Errorf("fail-closed: rcode %d ns %v, want NOERROR with SOA", msg.Rcode, msg.Ns)
			}
		})
	}
}

func TestAllDownAnswerAll(t *testing.T) {
	primary, secondary := newFlip(t, false), newFlip(t, false)
	srv := healthServer(t, "tcp", "answer-all", primary, secondary)
	primary.stop()
	secondary.stop()
	waitAnswer(t, srv, "192.0.2.1,192.0.2.2", 2*time.Second)
}

func TestReloadKeepsOldZonesOnError(t *testing.T) {
	srv := startServer(t, testConfig(t), Options{})
	// Queries run during the reloads: none may fail.
	var failures, total atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				msg, _, err := Query(context.Background(), srv.Addr().String(), "www.example.com", mdns.TypeA, QueryOptions{Timeout: time.Second})
				total.Add(1)
				if err != nil || msg.Rcode != mdns.RcodeSuccess || len(msg.Answer) != 1 {
					failures.Add(1)
				}
			}
		}()
	}
	bad, _ := config.Parse([]byte("zones:\n  - origin: example.com.\n    records: ['www A 192.0.2.1']\n"))
	bad.Zones[0].Records = []string{"www A not-an-address"}
	for i := 0; i < 20; i++ {
		if err := srv.Reload(bad); err == nil {
			t.Fatal("reload with a bad record succeeded")
		}
		cfg, err := config.Parse([]byte(testConfig(t)))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Dir = "testdata"
		if err := srv.Reload(cfg); err != nil {
			t.Fatalf("reload good config: %v", err)
		}
	}
	// Queries after the last reload too, then stop.
	after := total.Load()
	testutil.Eventually(t, 5*time.Second, func() bool { return total.Load() >= after+20 }, "no queries answered after the last reload")
	close(stop)
	wg.Wait()
	if failures.Load() != 0 || total.Load() == 0 {
		t.Errorf("%d of %d queries failed during reloads", failures.Load(), total.Load())
	}
	// A new config takes effect.
	cfg, _ := config.Parse([]byte("zones:\n  - origin: new.test.\n    records: ['www A 192.0.2.7']\n"))
	if err := srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if msg := q(t, srv, "www.new.test", mdns.TypeA, QueryOptions{}); len(msg.Answer) != 1 {
		t.Errorf("new zone not served after reload: %v", msg)
	}
	if msg := q(t, srv, "www.example.com", mdns.TypeA, QueryOptions{}); msg.Rcode != mdns.RcodeRefused {
		t.Errorf("old zone still served after reload: rcode %d", msg.Rcode)
	}
}

func TestMetricsCountQueriesAndDecisions(t *testing.T) {
	srv := startServer(t, testConfig(t), Options{})
	got := countedQueries(t, srv)
	for k, v := range map[string]float64{
		"switchyard_dns_queries_total,name=example.com.,qtype=A,rcode=NOERROR":                                   3,
		"switchyard_dns_queries_total,name=app.example.com.,qtype=A,rcode=NOERROR":                               3,
		"switchyard_dns_queries_total,name=example.com.,qtype=A,rcode=NXDOMAIN":                                  1,
		"switchyard_dns_policy_decisions_total,name=app.example.com.,policy=geolocation,reason=primary,site=b34": 3,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// TestMetricsZoneLimit: past query_metrics_zones zones, static zones' queries are counted
// under name "*" (no series per zone), dynamic names keep theirs.
func TestMetricsZoneLimit(t *testing.T) {
	srv := startServer(t, "query_metrics_zones: 1\n"+testConfig(t)+"  - {origin: other.test., records: [\"www A 192.0.2.9\"]}\n", Options{})
	q(t, srv, "www.other.test", mdns.TypeA, QueryOptions{})
	got := countedQueries(t, srv)
	for k, v := range map[string]float64{
		"switchyard_dns_queries_total,name=*,qtype=A,rcode=NOERROR":                3 + 1,
		"switchyard_dns_queries_total,name=app.example.com.,qtype=A,rcode=NOERROR": 3,
		"switchyard_dns_queries_total,name=*,qtype=A,rcode=NXDOMAIN":               1,
		"switchyard_dns_queries_total,name=example.com.,qtype=A,rcode=NOERROR":     0,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// countedQueries sends srv three static and three dynamic queries and one for a missing name,
// and returns its counters by name and labels.
func countedQueries(t *testing.T, srv *Server) map[string]float64 {
	t.Helper()
	for i := 0; i < 3; i++ {
		q(t, srv, "www.example.com", mdns.TypeA, QueryOptions{})
		q(t, srv, "app.example.com", mdns.TypeA, QueryOptions{Subnet: "10.1.0.0/24"})
	}
	q(t, srv, "nope.example.com", mdns.TypeA, QueryOptions{})
	mfs, err := srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			if m.Counter != nil {
				got[key] = m.Counter.GetValue()
			}
		}
	}
	return got
}

func TestIPv6Loopback(t *testing.T) {
	cfg, err := config.Parse([]byte(testConfig(t)))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.Dir = "[::1]:0", "testdata"
	srv, err := NewServer(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	defer srv.Close()
	if srv.Addr().Addr() != netip.MustParseAddr("::1") {
		t.Fatalf("bound %s", srv.Addr())
	}
	mustContain(t, dig(t, srv, "+short", "www.example.com"), "192.0.2.1")
}

func TestResponseRateLimit(t *testing.T) {
	srv := startServer(t, "rate_limit: {responses_per_second: 5, slip: 2}\n"+testConfig(t), Options{})
	answered, truncated, lost := 0, 0, 0
	for i := 0; i < 30; i++ {
		msg, _, err := Query(context.Background(), srv.Addr().String(), "www.example.com", mdns.TypeA, QueryOptions{Timeout: 100 * time.Millisecond})
		switch {
		case err != nil:
			lost++
		case msg.Truncated:
			truncated++
		default:
			answered++
		}
	}
	// 5 allowed at once (plus what refills during the loop), then every 2nd limited query slips
	// with TC=1 and the others are dropped.
	if answered < 5 || answered > 12 || truncated == 0 || lost == 0 {
		t.Fatalf("answered %d truncated %d lost %d, want ~5 answered and the rest slipped or dropped", answered, truncated, lost)
	}
	// TCP is not limited: a client told to retry over TCP gets its answer.
	if msg := q(t, srv, "www.example.com", mdns.TypeA, QueryOptions{TCP: true}); len(msg.Answer) != 1 {
		t.Fatalf("tcp answer under rate limit: %v", msg)
	}
}

func TestQueryLog(t *testing.T) {
	var buf syncBuf
	srv := startServer(t, "query_log: true\n"+testConfig(t), Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	q(t, srv, "app.example.com", mdns.TypeA, QueryOptions{Subnet: "10.1.0.0/24"})
	mustContain(t, buf.String(), "dns query", "qname=app.example.com.", "qtype=A", "rcode=NOERROR", "decision=primary", "sites=b34")
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
