package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns"
	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/testutil"
)

// freeTCPPort returns a loopback TCP port of 22150-22199 (this test's range) free now.
func freeTCPPort(t *testing.T) int { return freePortIn(t, 22150, 22199) }

// freePortIn returns a port of first-last free now for both TCP and UDP on 127.0.0.1.
func freePortIn(t *testing.T, first, last int) int {
	t.Helper()
	for p := first; p <= last; p++ {
		if testutil.PortFree(p) {
			return p
		}
	}
	t.Fatalf("no free port in %d-%d", first, last)
	return 0
}

// `dns status` shows each zone's serial and the updates it took, read from a running server's
// metrics; `dns check` lists the update rules and the journal.
func TestDnsStatusShowsSerialsAndUpdates(t *testing.T) {
	const secret = "dXBkYXRlLWtleS1zd2l0Y2h5YXJkLXRlc3RzLTMyYnl0ZXM="
	dir := t.TempDir()
	path := filepath.Join(dir, "dns.yaml")
	os.WriteFile(path, []byte(`listen: 127.0.0.1:0
tsig_keys: [{name: upd, secret: "`+secret+`"}]
zones:
  - origin: example.com.
    soa: {serial: 41}
    records: ["www A 192.0.2.1"]
    update: {allow: [{key: upd, names: [www], types: [A]}]}
  - origin: other.test.
`), 0o644)
	out, _, err := runDNSCLI(t, context.Background(), "check", "--config", path)
	if err != nil || !strings.Contains(out, "update example.com.: serial 41, journal "+filepath.Join(dir, "example.com.updates")+" (0 updates)") ||
		!strings.Contains(out, "update example.com.: key upd may change names [www.example.com.], types [A]") {
		t.Fatalf("check: %v\n%s", err, out)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, logs testutil.SyncBuffer
	metrics := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	app := newApp()
	app.Writer, app.ErrWriter = &stdout, &logs
	go app.RunContext(ctx, []string{"switchyard", "dns", "run", "--config", path, "--metrics", metrics})
	re := regexp.MustCompile(`serving on (\S+)`)
	var addr string
	testutil.Eventually(t, 5*time.Second, func() bool {
		if m := re.FindStringSubmatch(stdout.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	}, "server did not start: %s", func() any { return logs.String() })

	send := func(rr string) int {
		m := new(mdns.Msg)
		m.SetUpdate("example.com.")
		r, _ := mdns.NewRR(rr)
		m.Insert([]mdns.RR{r})
		m.SetTsig("upd.", mdns.HmacSHA256, 300, time.Now().Unix())
		c := &mdns.Client{TsigSecret: map[string]string{"upd.": secret}, Timeout: 2 * time.Second}
		resp, _, err := c.Exchange(m, addr)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Rcode
	}
	if rc := send("www.example.com. 60 A 192.0.2.2"); rc != mdns.RcodeSuccess {
		t.Fatalf("update: %s", mdns.RcodeToString[rc])
	}
	if rc := send("mail.example.com. 60 A 192.0.2.2"); rc != mdns.RcodeRefused {
		t.Fatalf("update of a name the key may not change: %s", mdns.RcodeToString[rc])
	}
	out, _, err = runDNSCLI(t, context.Background(), "status", "--metrics", metrics)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []*regexp.Regexp{
		regexp.MustCompile(`^ZONE\s+ROLE\s+SERIAL\s+PRIMARY\s+LAST TRANSFER\s+NEXT REFRESH\s+UPDATES APPLIED\s+UNCHANGED\s+NOT APPLIED$`),
		regexp.MustCompile(`^example\.com\.\s+primary\s+42\s+-\s+-\s+-\s+1\s+0\s+1 \(refused 1\)$`),
		regexp.MustCompile(`^other\.test\.\s+primary\s+1\s+-\s+-\s+-\s+0\s+0\s+0$`),
	}
	if len(lines) != len(want) {
		t.Fatalf("status:\n%s", out)
	}
	for i, re := range want {
		if !re.MatchString(lines[i]) {
			t.Errorf("status line %d %q does not match %s", i, lines[i], re)
		}
	}
	if _, _, err := runDNSCLI(t, context.Background(), "status", "--metrics", "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "is `switchyard dns run --metrics") {
		t.Errorf("status without a server: %v", err)
	}
}

// `dns status` shows a secondary zone's role, the primary it came from, its last transfer and
// next refresh.
func TestDnsStatusShowsSecondary(t *testing.T) {
	const secret = "dXBkYXRlLWtleS1zd2l0Y2h5YXJkLXRlc3RzLTMyYnl0ZXM="
	pcfg, err := config.Parse([]byte(`listen: 127.0.0.1:0
tsig_keys: [{name: xfr, secret: "` + secret + `"}]
zones:
  - origin: example.com.
    soa: {serial: 7}
    records: ["www A 192.0.2.1"]
    transfer: {key: xfr}
`))
	if err != nil {
		t.Fatal(err)
	}
	primary, err := dns.NewServer(pcfg, dns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := primary.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer primary.Close()

	dir := t.TempDir()
	path := filepath.Join(dir, "dns.yaml")
	os.WriteFile(path, []byte(`listen: 127.0.0.1:0
tsig_keys: [{name: xfr, secret: "`+secret+`"}]
zones:
  - origin: example.com.
    secondary: {primaries: [`+primary.Addr().String()+`], tsig: xfr}
`), 0o644)
	var stdout, logs testutil.SyncBuffer
	metrics := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	app := newApp()
	app.Writer, app.ErrWriter = &stdout, &logs
	go app.RunContext(ctx, []string{"switchyard", "dns", "run", "--config", path, "--metrics", metrics})
	re := regexp.MustCompile(`(?m)^example\.com\.\s+secondary\s+7\s+` + regexp.QuoteMeta(primary.Addr().String()) +
		`\s+AXFR \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s+0\s+0\s+0$`)
	var out string
	testutil.Eventually(t, 10*time.Second, func() bool {
		out, _, _ = runDNSCLI(t, context.Background(), "status", "--metrics", metrics)
		return re.MatchString(out)
	}, "status does not show the secondary zone: %s\n%s", func() any { return out }, func() any { return logs.String() })
}
