package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	lbconfig "github.com/switchyard/switchyard/control/config"
	dnsconfig "github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/edge"
	"github.com/switchyard/switchyard/l7"
)

var units = []string{"switchyard-lb.service", "switchyard-l7@.service", "switchyard-edge@.service", "switchyard-dns.service"}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestInstall: `make install PREFIX=... SYSCONFDIR=...` puts the binary, the four units (with
// the binary's path), the example configurations and both completions in place; the units pass
// systemd-analyze verify and carry the hardening; every example loads with its stop's loader.
func TestInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary: not with -short")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	root := t.TempDir()
	run(t, "make", "install", "PREFIX="+root, "SYSCONFDIR="+root+"/etc")
	for _, f := range []string{"bin/switchyard", "etc/switchyard/lb.yaml", "etc/switchyard/l7/default.yaml",
		"etc/switchyard/edge/default.yaml", "etc/switchyard/dns.yaml",
		"share/bash-completion/completions/switchyard", "share/zsh/vendor-completions/_switchyard"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("make install did not install %s: %v", f, err)
		}
	}
	unitDir := filepath.Join(root, "lib/systemd/system")
	for _, u := range units {
		b, err := os.ReadFile(filepath.Join(unitDir, u))
		if err != nil {
			t.Fatalf("unit %s: %v", u, err)
		}
		checkUnit(t, u, string(b), root+"/bin/switchyard")
	}
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Log("systemd-analyze not installed: the units are not verified (apt-get install systemd)")
	} else {
		var paths []string
		for _, u := range units {
			paths = append(paths, filepath.Join(unitDir, u))
		}
		out, err := exec.Command("systemd-analyze", append([]string{"verify"}, paths...)...).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
	}
	checkExamples(t, filepath.Join(root, "etc/switchyard"))
	// A second install keeps the configurations an operator edited.
	lb := filepath.Join(root, "etc/switchyard/lb.yaml")
	os.WriteFile(lb, []byte("interface: mine\n"), 0o644)
	if out := run(t, "make", "install", "PREFIX="+root, "SYSCONFDIR="+root+"/etc"); !strings.Contains(out, "kept "+lb) {
		t.Errorf("second install does not say it kept %s:\n%s", lb, out)
	}
	if b, _ := os.ReadFile(lb); string(b) != "interface: mine\n" {
		t.Errorf("second install overwrote the edited %s: %q", lb, b)
	}
}

// checkUnit asserts what every unit must have: the installed binary, the reload (SIGHUP for the
// L4 daemon, which replaces itself hitlessly through its pinned maps; a hitless upgrade through
// the control socket for the others, with the successor allowed to notify systemd), and the
// hardening.
func checkUnit(t *testing.T, name, text, bin string) {
	t.Helper()
	want := []string{"ExecStart=" + bin + " ", "CapabilityBoundingSet=", "ProtectSystem=strict", "NoNewPrivileges=yes",
		"ProtectHome=yes", "PrivateTmp=yes", "ProtectKernelModules=yes", "RestrictAddressFamilies=", "UMask=0077"}
	if name == "switchyard-lb.service" {
		want = append(want, "ExecReload=/bin/kill -HUP $MAINPID")
	} else {
		stop := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(name, "switchyard-"), ".service"), "@")
		want = append(want, "Type=notify\n", "NotifyAccess=all\n", "RuntimeDirectoryMode=0700\n", " --control /run/switchyard-",
			"ExecReload="+bin+" "+stop+" upgrade --control /run/switchyard-")
	}
	switch name {
	case "switchyard-edge@.service", "switchyard-l7@.service":
		// CAP_BPF: QUIC connections kept across an upgrade (TestUpgrade, l7-unit-capabilities).
		want = append(want, "DynamicUser=yes", "CapabilityBoundingSet=CAP_NET_BIND_SERVICE CAP_BPF\n",
			"AmbientCapabilities=CAP_NET_BIND_SERVICE CAP_BPF\n", "ProtectKernelTunables=yes")
	case "switchyard-lb.service":
		want = append(want, "CapabilityBoundingSet=CAP_BPF CAP_PERFMON CAP_NET_ADMIN CAP_NET_BIND_SERVICE\n", "LimitMEMLOCK=infinity", "ReadWritePaths=/etc/switchyard /sys/fs/bpf")
	default:
		want = append(want, "DynamicUser=yes", "CapabilityBoundingSet=CAP_NET_BIND_SERVICE\n", "ProtectKernelTunables=yes")
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("%s lacks %q", name, w)
		}
	}
	if strings.Contains(text, "@BINDIR@") {
		t.Errorf("%s still has @BINDIR@", name)
	}
}

// checkExamples loads every example configuration with its stop's own loader. The token files
// the examples name are credentials systemd provides at run time: a temporary one stands in.
func checkExamples(t *testing.T, etc string) {
	t.Helper()
	token := filepath.Join(t.TempDir(), "admin.token")
	os.WriteFile(token, []byte("t\n"), 0o600)
	withToken := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		for _, stop := range []string{"l7", "edge"} {
			s = strings.ReplaceAll(s, "/run/credentials/switchyard-"+stop+"@default.service/admin.token", token)
		}
		return []byte(s)
	}
	if _, err := lbconfig.Load(filepath.Join(etc, "lb.yaml")); err != nil {
		t.Errorf("lb.yaml: %v", err)
	}
	if _, err := l7.ParseConfig(withToken(filepath.Join(etc, "l7/default.yaml"))); err != nil {
		t.Errorf("l7/default.yaml: %v", err)
	}
	if _, err := edge.ParseConfig(withToken(filepath.Join(etc, "edge/default.yaml"))); err != nil {
		t.Errorf("edge/default.yaml: %v", err)
	}
	if _, err := dnsconfig.Load(filepath.Join(etc, "dns.yaml")); err != nil {
		t.Errorf("dns.yaml: %v", err)
	}
}

// TestDeb: `make deb` builds a package with the units, the configurations as conffiles and the
// completions; dpkg installs it into a scratch root (maintainer scripts run with DPKG_ROOT), where
// postinst created the example instances' admin tokens (0600) and the binary runs.
func TestDeb(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and a package: not with -short")
	}
	for _, c := range []string{"make", "dpkg-deb"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("%s not installed (apt-get install dpkg)", c)
		}
	}
	dir := t.TempDir()
	deb := filepath.Join(dir, "switchyard.deb")
	run(t, "make", "deb", "DEB_OUT="+deb)
	info := run(t, "dpkg-deb", "--info", deb)
	for _, w := range []string{"Package: switchyard", "Version: 0.0~git", "conffiles", "postinst"} {
		if !strings.Contains(info, w) {
			t.Errorf("dpkg-deb --info lacks %q:\n%s", w, info)
		}
	}
	if cf := run(t, "dpkg-deb", "--info", deb, "conffiles"); !strings.Contains(cf, "/etc/switchyard/lb.yaml\n") || !strings.Contains(cf, "/etc/switchyard/l7/default.yaml\n") {
		t.Errorf("conffiles lack the example configurations:\n%s", cf)
	}
	contents := run(t, "dpkg-deb", "--contents", deb)
	for _, w := range []string{"./usr/bin/switchyard", "./lib/systemd/system/switchyard-lb.service", "./lib/systemd/system/switchyard-l7@.service",
		"./etc/switchyard/lb.yaml", "./usr/share/bash-completion/completions/switchyard", "./usr/share/zsh/vendor-completions/_switchyard"} {
		if !strings.Contains(contents, w) {
			t.Errorf("the package lacks %s", w)
		}
	}
	root := filepath.Join(dir, "root")
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Log("dpkg not installed: unpacking with dpkg-deb -x (no maintainer scripts)")
		run(t, "dpkg-deb", "-x", deb, root)
	} else {
		for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates"} {
			os.MkdirAll(filepath.Join(root, d), 0o755)
		}
		os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), nil, 0o644)
		run(t, "dpkg", "--root="+root, "--log=/dev/null", "--force-script-chrootless", "--force-depends", "--force-not-root", "-i", deb)
		if st := run(t, "dpkg", "--root="+root, "-s", "switchyard"); !strings.Contains(st, "Status: install ok installed") {
			t.Errorf("dpkg -s in the scratch root:\n%s", st)
		}
		for _, stop := range []string{"l7", "edge"} {
			fi, err := os.Stat(filepath.Join(root, "etc/switchyard", stop, "default.token"))
			if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() < 32 {
				t.Errorf("postinst did not create the %s admin token (0600, random): %v %v", stop, err, fi)
			}
		}
		for _, u := range units {
			b, _ := os.ReadFile(filepath.Join(root, "lib/systemd/system", u))
			if !strings.Contains(string(b), "ExecStart=/usr/bin/switchyard ") {
				t.Errorf("%s in the package does not run /usr/bin/switchyard:\n%s", u, b)
			}
		}
	}
	out, err := exec.Command(filepath.Join(root, "usr/bin/switchyard"), "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "switchyard ") || strings.Contains(string(out), "commit unknown") {
		t.Errorf("the packaged binary --version: %v %s", err, out)
	}
}
