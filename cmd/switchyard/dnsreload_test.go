package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// `dns reload --zone` makes a running `dns run` read that zone's file again, through POST
// /reload on its metrics listener with the admin token; without --zone it reloads the whole
// configuration. A wrong or missing token, an unknown zone and a broken file are refused with
// the reason, and the old data keeps serving.
func TestDnsReloadCommand(t *testing.T) {
	dir := t.TempDir()
	zoneText := func(serial int, www string) string {
		return fmt.Sprintf("$ORIGIN example.com.\n$TTL 300\n@ IN SOA ns1 hostmaster %d 3600 600 604800 60\n@ IN NS ns1\nns1 IN A 192.0.2.53\nwww IN A %s\n", serial, www)
	}
	port := freePortIn(t, 47150, 47199) // this test's range
	listen, metrics := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", freePortIn(t, port+1, 47199))
	files := map[string]string{"example.zone": zoneText(1, "192.0.2.1"), "token": "s3cret\n", "wrong": "guess\n",
		"dns.yaml": "listen: " + listen + "\nzones:\n  - origin: example.com.\n    file: example.zone\n"}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, logs testutil.SyncBuffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &logs
	done := make(chan error, 1)
	go func() {
		done <- app.RunContext(ctx, []string{"switchyard", "dns", "run", "--config", filepath.Join(dir, "dns.yaml"),
			"--metrics", metrics, "--token-file", filepath.Join(dir, "token")})
	}()
	testutil.Eventually(t, 10*time.Second, func() bool { return strings.Contains(out.String(), "serving on") },
		"dns run did not start:\n%s", func() any {
			select {
			case err := <-done:
				return fmt.Sprint(err, logs.String())
			default:
				return logs.String()
			}
		})
	reload := func(args ...string) (string, error) {
		o, _, err := runDNSCLI(t, context.Background(), append([]string{"reload", "--metrics", metrics}, args...)...)
		return o, err
	}
	tok, wrong := "--token-file="+filepath.Join(dir, "token"), "--token-file="+filepath.Join(dir, "wrong")

	os.WriteFile(filepath.Join(dir, "example.zone"), []byte(zoneText(2, "192.0.2.2")), 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{wrong, "--zone", "example.com"}, "unauthorized"},
		{[]string{"--zone", "example.com"}, "no admin token: pass --token-file"},
		{[]string{tok, "--zone", "nosuch.test"}, "no such zone"},
	} {
		if o, err := reload(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("reload %v: %v (%s), want an error naming %q", c.args, err, o, c.want)
		}
	}
	if got := wwwAnswer(t, listen); got != "192.0.2.1" {
		t.Fatalf("www after refused reloads = %s, want the old 192.0.2.1", got)
	}
	o, err := reload(tok, "--zone", "example.com")
	if err != nil || !strings.Contains(o, "zone example.com. reloaded: serial 1 -> 2") {
		t.Fatalf("reload --zone: %v\n%s", err, o)
	}
	if got := wwwAnswer(t, listen); got != "192.0.2.2" {
		t.Errorf("www after reload --zone = %s, want 192.0.2.2", got)
	}
	os.WriteFile(filepath.Join(dir, "example.zone"), []byte(zoneText(3, "192.0.2.300")), 0o600)
	if o, err := reload(tok, "--zone", "example.com."); err == nil || !strings.Contains(err.Error(), "example.zone") ||
		!strings.Contains(err.Error(), "the old zone keeps serving") {
		t.Errorf("reload of a broken file: %v (%s), want the file named and the old zone kept", err, o)
	}
	os.WriteFile(filepath.Join(dir, "example.zone"), []byte(zoneText(3, "192.0.2.3")), 0o600)
	if o, err := reload(tok); err != nil || !strings.Contains(o, "configuration reloaded: 1 zones") {
		t.Fatalf("reload of the configuration: %v\n%s", err, o)
	}
	if got := wwwAnswer(t, listen); got != "192.0.2.3" {
		t.Errorf("www after the configuration reload = %s, want 192.0.2.3", got)
	}
	stopRun(t, cancel, done)
}
