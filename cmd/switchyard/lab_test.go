package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab"
)

// runLab runs a switchyard command with captured output.
func runLab(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &out
	app.ExitErrHandler = func(*cli.Context, error) {}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := app.RunContext(ctx, append([]string{"switchyard"}, args...))
	return out.String(), err
}

func TestLabExperimentList(t *testing.T) {
	out, err := runLab(t, "lab", "experiment", "list")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"l4-skew", "health-check", "l4-flood"} {
		if !strings.Contains(out, name) {
			t.Errorf("experiment list lacks %s:\n%s", name, out)
		}
	}
	out, err = runLab(t, "lab", "experiment", "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) < 2 {
		t.Fatalf("experiment list --json: %v: %s", err, out)
	}
}

func TestLabBadInput(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"lab", "experiment", "run", "no-such"}, "no such experiment"},
		{[]string{"lab", "experiment", "run"}, "exactly one experiment name"},
		{[]string{"lab", "experiment", "run", "l4-skew", "--fast"}, "unknown flag --fast"},
		{[]string{"lab", "app", "--name", "x", "--listen", "127.0.0.1:0", "--udp", "nonsense"}, "use ADDR:PORT"},
	}
	if os.Geteuid() == 0 {
		cases = append(cases,
			struct {
				args []string
				want string
			}{[]string{"lab", "demo", "--prefix", "tq", "--duration", "2h"}, "out of range"},
			struct {
				args []string
				want string
			}{[]string{"lab", "up", "--prefix", "has space"}, "prefix"},
			struct {
				args []string
				want string
			}{[]string{"lab", "up", "--prefix", "tq", "--balancer", "magic"}, "use auto, daemon or direct"},
		)
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, err := runLab(t, c.args...)
			if err == nil || !strings.Contains(err.Error()+out, c.want) {
				t.Errorf("%v: err %v, output %q; want an error with %q", c.args, err, out, c.want)
			}
		})
	}
}

// TestLabUpStatusDown drives the lab through the CLI: up (direct balancer, no stops beside L4),
// status --json, traffic through the VIP from a client namespace, down.
func TestLabUpStatusDown(t *testing.T) {
	testutil.RequireLab(t)
	bin := buildLabBinary(t, "switchyard")
	t.Setenv("SWITCHYARD_BIN", bin)
	prefix := labPrefix(t, "u")
	out, err := runLab(t, "lab", "up", "--prefix", prefix, "--balancers", "1", "--backends", "2", "--l7", "0", "--no-dns", "--no-edge", "--balancer", "direct")
	if err != nil {
		t.Fatalf("lab up: %v\n%s", err, out)
	}
	if !strings.Contains(out, prefix+"-be2") || !strings.Contains(out, "198.18.100.1:80") {
		t.Errorf("lab up output lacks the backends or the VIP:\n%s", out)
	}
	// Idempotent: a second up changes nothing and succeeds.
	if out, err := runLab(t, "lab", "up", "--prefix", prefix, "--balancers", "1", "--backends", "2", "--l7", "0", "--no-dns", "--no-edge", "--balancer", "direct"); err != nil {
		t.Fatalf("second lab up: %v\n%s", err, out)
	}
	out, err = runLab(t, "lab", "status", "--prefix", prefix, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var st lab.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if !st.Up || len(st.Namespaces) != 6 || len(st.VIPs) != 3 {
		t.Fatalf("status: up %v, %d namespaces, %d VIPs; want up, 6 (rt, c1, c2, lb1, be1, be2), 3 VIPs\n%s", st.Up, len(st.Namespaces), len(st.VIPs), out)
	}
	for _, ns := range st.Namespaces {
		if ns.Role == "backend" && ns.Processes[ns.Host] == 0 {
			t.Errorf("backend %s has no running app server: %+v", ns.Name, ns)
		}
	}
	// The app servers run as processes in the backends: reach them through the VIP.
	seen := map[string]bool{}
	for i := 0; i < 40 && len(seen) < 2; i++ {
		out, err := exec.Command("nsenter", "--net=/run/netns/"+prefix+"-c1", "--", "curl", "-s", "-m", "5", "http://198.18.100.1/cli").Output()
		if err != nil {
			t.Fatalf("curl through the VIP: %v", err)
		}
		seen[strings.Fields(string(out))[0]] = true
	}
	if !seen["be1"] || !seen["be2"] {
		t.Errorf("curl through the VIP reached %v, want be1 and be2", seen)
	}
	if out, err := runLab(t, "lab", "down", "--prefix", prefix); err != nil {
		t.Fatalf("lab down: %v\n%s", err, out)
	}
	if ents, _ := filepath.Glob("/run/netns/" + prefix + "-*"); len(ents) != 0 {
		t.Errorf("lab down left namespaces: %v", ents)
	}
	if ents, _ := filepath.Glob(lab.PinRoot + "/" + prefix + "-*"); len(ents) != 0 {
		t.Errorf("lab down left pins: %v", ents)
	}
	out, _ = runLab(t, "lab", "status", "--prefix", prefix)
	if !strings.Contains(out, "is down") {
		t.Errorf("status after down: %q", out)
	}
}

// TestLabDemoNonInteractive: `lab demo` without a terminal brings a lab up, prints a line per
// interval with every backend's rate, and tears the lab down at the end of --duration.
func TestLabDemoNonInteractive(t *testing.T) {
	testutil.RequireLab(t)
	bin := buildLabBinary(t, "switchyard")
	t.Setenv("SWITCHYARD_BIN", bin)
	prefix := labPrefix(t, "d")
	out, err := runLab(t, "lab", "demo", "--prefix", prefix, "--duration", "4s", "--rate", "60",
		"--backends", "2", "--l7", "0", "--no-dns", "--no-edge", "--balancer", "direct")
	if err != nil {
		t.Fatalf("lab demo: %v\n%s", err, out)
	}
	lines := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "t=") && strings.Contains(l, "be1") && strings.Contains(l, "be2") {
			lines++
		}
	}
	if lines < 3 || !strings.Contains(out, "web ok=") || strings.Contains(out, "\033[") {
		t.Errorf("want >= 3 plain periodic lines with both backends and the clients' counts:\n%s", out)
	}
	if !strings.Contains(out, "tearing lab") {
		t.Errorf("the demo did not tear its lab down:\n%s", out)
	}
	if !strings.Contains(out, "sending 60 requests/s in total") || !strings.Contains(out, "\nsummary after ") || !strings.Contains(out, "app servers (requests during the demo): be1 ") {
		t.Errorf("the demo does not say the rate is the total or prints no summary at the end:\n%s", out)
	}
	if ents, _ := filepath.Glob("/run/netns/" + prefix + "-*"); len(ents) != 0 {
		t.Errorf("namespaces left after the demo: %v", ents)
	}
}

// buildLabBinary builds this command as name in a temporary directory, for the lab tests that
// run it as the lab's child processes (a test binary cannot be the lab's daemons).
func buildLabBinary(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// labPrefix returns a fresh lab prefix starting with letter, whose lab is destroyed when the
// test ends, failed or not.
func labPrefix(t *testing.T, letter string) string {
	t.Helper()
	b := make([]byte, 3)
	rand.Read(b)
	prefix := letter + hex.EncodeToString(b)
	t.Cleanup(func() { lab.Destroy(prefix) })
	return prefix
}
