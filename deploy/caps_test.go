package deploy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/loader"
)

// TestLBUnitCapabilities runs the balancer daemon with exactly the capabilities
// switchyard-lb.service bounds it to (setpriv --bounding-set), on a veth in a scratch namespace:
// it attaches the forwarder, writes the ring and serves its socket; stopped and started again it
// adopts the pinned link. A capability the daemon needs and the unit lacks fails here.
func TestLBUnitCapabilities(t *testing.T) {
	testutil.RequireLab(t)
	for _, c := range []string{"setpriv", "nsenter", "ip"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("%s not installed (util-linux, iproute2)", c)
		}
	}
	unit, err := os.ReadFile("systemd/switchyard-lb.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CapabilityBoundingSet=(.*)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatal("switchyard-lb.service has no CapabilityBoundingSet")
	}
	set := "-all"
	for _, c := range strings.Fields(string(m[1])) {
		set += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "switchyard")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/switchyard").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	b := make([]byte, 3)
	rand.Read(b)
	ns := "cap" + hex.EncodeToString(b)
	pin := "/sys/fs/bpf/switchyard/test/" + ns
	testutil.NamedNS(t, ns)
	t.Cleanup(func() { _ = loader.Detach(pin) })
	for _, args := range [][]string{{"-n", ns, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1"},
		{"-n", ns, "addr", "add", "10.99.0.1/24", "dev", "veth0"}, {"-n", ns, "link", "set", "veth0", "up"}, {"-n", ns, "link", "set", "veth1", "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	sock := filepath.Join(dir, "lb.sock")
	cfg := filepath.Join(dir, "lb.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("interface: veth0\nxdp_mode: generic\npin_dir: %s\nsocket: %s\nnext_hop: 10.99.0.2\n"+
		"vips:\n  - {name: web, address: 198.18.100.1, port: 80, backends: [{address: 10.99.0.2}]}\n", pin, sock)), 0o600)
	for round, wantAdopted := range []bool{false, true} {
		cmd := exec.Command("nsenter", "--net=/run/netns/"+ns, "--", "setpriv", "--bounding-set", set, "--inh-caps=-all", bin, "lb", "run", "--config", cfg)
		logf := filepath.Join(dir, fmt.Sprintf("lb%d.log", round))
		lf, _ := os.Create(logf)
		cmd.Stdout, cmd.Stderr = lf, lf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() }) // a failed wait leaves no daemon behind
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var st api.Status
		testutil.Eventually(t, 30*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := api.NewClient(sock).Call(ctx, api.OpStatus, api.Empty{}, &st)
			cancel()
			if err == nil {
				return true
			}
			select {
			case err := <-done:
				b, _ := os.ReadFile(logf)
				t.Fatalf("round %d: the daemon exited with the unit's capabilities (%s): %v\n%s", round, set, err, b)
			default:
			}
			return false
		}, "round %d: no answer on %s:\n%s", round, sock, func() any { b, _ := os.ReadFile(logf); return b })
		var vs []api.VIPInfo
		if err := api.NewClient(sock).Call(context.Background(), api.OpVIPList, api.Empty{}, &vs); err != nil || len(vs) != 1 || vs[0].InRing != 1 {
			t.Errorf("round %d: vip list: %v %+v", round, err, vs)
		}
		b, _ := os.ReadFile(logf)
		if !strings.Contains(string(b), fmt.Sprintf("adopted=%v", wantAdopted)) {
			t.Errorf("round %d: want adopted=%v in the log:\n%s", round, wantAdopted, b)
		}
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("round %d: the daemon did not stop on SIGINT", round)
		}
		lf.Close()
	}
}
