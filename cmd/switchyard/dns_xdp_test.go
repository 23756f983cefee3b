package main

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// TestDNSXDPUpgrade: `dns run` with udp.xdp: generic in a namespace of the test's own answers from
// the program; `dns upgrade` to a file that changes the answer hands the attachment over, and no
// answer after the upgrade is the old one, the successor's program answering the new one; when the
// successor exits the program is detached.
func TestDNSXDPUpgrade(t *testing.T) {
	testutil.RequireLab(t)
	testutil.RequireKernel(t, testutil.XDP)
	for _, tool := range []string{"dig", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (make deps)", tool)
		}
	}
	ns := fmt.Sprintf("sydnsxdpup-%d", rand.Int63()%1e9)
	testutil.NamedNS(t, ns)
	inNS := func(args ...string) (string, error) {
		out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := inNS("ip", "link", "set", "lo", "up"); err != nil {
		t.Fatalf("lo up: %v: %s", err, out)
	}
	dir := t.TempDir()
	bin := copyBinary(t, buildLabBinary(t, "switchyard"), dir)
	wrapper := filepath.Join(dir, "switchyard-in-ns")
	os.WriteFile(wrapper, []byte(fmt.Sprintf("#!/bin/sh\nexec ip netns exec %s %s \"$@\"\n", ns, bin)), 0o755)
	cfg := strings.Replace(dnsTestConfig, "listen: 127.0.0.1:0\n", "listen: 127.0.0.1:0\nudp: {xdp: generic}\n", 1)
	path := filepath.Join(dir, "dns.yaml")
	os.WriteFile(path, []byte(cfg), 0o600)
	const metrics = "127.0.0.1:27501" // inside the namespace: no host port is taken
	p := startStopProc(t, wrapper, dir, "dns", "--config", path, "--metrics", metrics)
	addr := p.waitLog(t, `serving on (\S+) \(udp\+tcp\)`)
	host, port, _ := strings.Cut(addr, ":")
	ask := func() string {
		out, err := inNS("dig", "+short", "+nocookie", "+tries=1", "+time=2", "@"+host, "-p", port, "www.example.com", "A")
		if err != nil {
			t.Fatalf("dig: %v: %s", err, out)
		}
		return strings.TrimSpace(out)
	}
	xdpAnswers := func() int {
		out, _ := inNS("curl", "-s", "--max-time", "2", "http://"+metrics+"/metrics")
		m := regexp.MustCompile(`(?m)^switchyard_dns_xdp_answers_total\{rcode="NOERROR"\} (\d+)`).FindStringSubmatch(out)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	attached := func() bool {
		out, _ := inNS("ip", "link", "show", "lo")
		return strings.Contains(out, "prog/xdp")
	}
	if !attached() {
		t.Fatal("no XDP program on the namespace's lo after start")
	}
	for i := 0; i < 3; i++ {
		if got := ask(); got != "192.0.2.1" {
			t.Fatalf("before the upgrade: www A = %q, want 192.0.2.1", got)
		}
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return xdpAnswers() >= 2 }, "the program answered %d queries, want 2 of 3", func() any { return xdpAnswers() })
	os.WriteFile(path, []byte(strings.Replace(cfg, "www A 192.0.2.1", "www A 192.0.2.77", 1)), 0o600)
	pid, _, err := upgradeStop(t, wrapper, "dns", p.ctl)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if got := ask(); got != "192.0.2.77" {
			t.Fatalf("answer %d after the upgrade: www A = %q, want the new 192.0.2.77", i, got)
		}
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the old dns process did not exit after the upgrade")
	}
	for i := 0; i < 3; i++ {
		if got := ask(); got != "192.0.2.77" {
			t.Fatalf("after the old process exited: www A = %q, want 192.0.2.77", got)
		}
	}
	if !attached() {
		t.Fatal("no XDP program on lo once the old process exited: the successor lost the attachment")
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return xdpAnswers() >= 2 }, "the successor's program answered %d queries, want most of 8", func() any { return xdpAnswers() })
	stopPID(pid)
	if attached() {
		t.Fatal("an XDP program is still on lo after the server exited")
	}
}
