package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	sydns "github.com/switchyard/switchyard/dns"
	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/testutil"
)

const dnsTestConfig = `listen: 127.0.0.1:0
groups:
  g1: [10.1.0.0/16]
zones:
  - origin: example.com.
    records:
      - "www A 192.0.2.1"
    names:
      - name: app
        ttl: 30
        policy: geolocation
        geo: {g1: [b34], default: [b06]}
        sites:
          - {name: b34, addresses: [198.51.100.34]}
          - {name: b06, addresses: [198.51.100.6]}
`

func runDNSCLI(t *testing.T, ctx context.Context, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut testutil.SyncBuffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &errOut
	err := app.RunContext(ctx, append([]string{"switchyard", "dns"}, args...))
	return out.String(), errOut.String(), err
}

func writeDNSConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "dns.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDnsCheck(t *testing.T) {
	out, _, err := runDNSCLI(t, context.Background(), "check", "--config", writeDNSConfig(t, dnsTestConfig))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"zone example.com.: 3 static records", "name app.example.com.: policy geolocation, ttl 30s", "configuration OK"} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	bad := strings.Replace(dnsTestConfig, "policy: geolocation", "policy: nearest", 1)
	_, _, err = runDNSCLI(t, context.Background(), "check", "--config", writeDNSConfig(t, bad))
	if err == nil || !strings.Contains(err.Error(), `line 9`) || !strings.Contains(err.Error(), `field policy: "nearest" is unknown`) {
		t.Fatalf("bad policy error %v, want line and field", err)
	}
}

func TestDnsRunServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // a wait that fails stops the server too
	var out, logs testutil.SyncBuffer
	done := make(chan error, 1)
	path := writeDNSConfig(t, dnsTestConfig)
	app := newApp()
	app.Writer, app.ErrWriter = &out, &logs
	go func() {
		done <- app.RunContext(ctx, []string{"switchyard", "dns", "run", "--config", path})
	}()
	re := regexp.MustCompile(`serving on (\S+)`)
	var addr string
	testutil.Eventually(t, 5*time.Second, func() bool {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	}, "server did not start: %s", func() any { return out.String() })
	resp, _, err := sydns.Query(context.Background(), addr, "app.example.com", mdns.TypeA, sydns.QueryOptions{Subnet: "10.1.2.0/24"})
	if err != nil || len(resp.Answer) != 1 || resp.Answer[0].(*mdns.A).A.String() != "198.51.100.34" {
		t.Errorf("query: %v %v", resp, err)
	}
	// SIGHUP reloads the file: a broken file keeps the old zones, a good one replaces them.
	os.WriteFile(path, []byte("zones: [oops"), 0o644)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	testutil.Eventually(t, 5*time.Second, func() bool { return strings.Contains(logs.String(), "dns reload failed") },
		"the broken reload was not logged:\n%s", func() any { return logs.String() })
	if got := wwwAnswer(t, addr); got != "192.0.2.1" {
		t.Errorf("after a broken reload www = %q, want the old 192.0.2.1", got)
	}
	os.WriteFile(path, []byte(strings.Replace(dnsTestConfig, "192.0.2.1", "192.0.2.77", 1)), 0o644)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	var www string
	testutil.Eventually(t, 5*time.Second, func() bool { www = wwwAnswer(t, addr); return www == "192.0.2.77" },
		"SIGHUP did not reload: www = %q", func() any { return www })
	stopRun(t, cancel, done)
}

// stopRun ends a `dns run` started with the context cancel ends, and checks that it returned
// nil (on done) within 5 s.
func stopRun(t *testing.T, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not stop on cancel")
	}
}

func wwwAnswer(t *testing.T, addr string) string {
	resp, _, err := sydns.Query(context.Background(), addr, "www.example.com", mdns.TypeA, sydns.QueryOptions{})
	if err != nil || len(resp.Answer) != 1 {
		return fmt.Sprint(err)
	}
	return resp.Answer[0].(*mdns.A).A.String()
}

func TestDnsQuery(t *testing.T) {
	cfg, err := config.Parse([]byte(dnsTestConfig))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sydns.NewServer(cfg, sydns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	out, _, err := runDNSCLI(t, context.Background(), "query", "--server", srv.Addr().String(), "--subnet", "10.1.0.0/24", "app.example.com", "A")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"status: NOERROR", "198.51.100.34", "SUBNET: 10.1.0.0/24/16", "round trip"} {
		if !strings.Contains(out, want) {
			t.Errorf("query output lacks %q:\n%s", want, out)
		}
	}
	out, _, err = runDNSCLI(t, context.Background(), "query", "--server", srv.Addr().String(), "--tcp", "missing.example.com")
	if err != nil || !strings.Contains(out, "status: NXDOMAIN") {
		t.Errorf("tcp NXDOMAIN query: %v\n%s", err, out)
	}
	if _, _, err := runDNSCLI(t, context.Background(), "query", "--server", srv.Addr().String(), "www.example.com", "BOGUS"); err == nil ||
		!strings.Contains(err.Error(), "unknown; use A, AAAA") {
		t.Errorf("bad type error: %v", err)
	}
}
