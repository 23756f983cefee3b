package namednetns

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// freshEnv marks the copy of the test binary that TestFreshMachine runs in a mount namespace of
// its own.
const freshEnv = "SWITCHYARD_NAMEDNETNS_FRESH"

// TestFreshMachine starts from a /run/netns that has never been mounted (a tmpfs over /run in a
// private mount namespace, as on a freshly booted machine), creates a namespace the project's way,
// then one with `ip netns add` (which binds /run/netns over itself when it is not a mount
// point yet), and checks that the first is still usable and that both can be removed. Making
// namespaces before /run/netns is a shared mount point hid the first under the second's bind:
// "device or resource busy" on removal, "invalid argument" on entering.
func TestFreshMachine(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount and network namespaces): run the tests as root, e.g. `sudo make test`")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip (apt-get install iproute2; `make deps` does)")
	}
	if os.Getenv(freshEnv) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFreshMachine$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), freshEnv+"=1")
		// Go makes the child's mount namespace private before exec: nothing it mounts leaks out,
		// and everything it mounts goes when it exits.
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestFreshMachine") {
			t.Fatalf("in a fresh mount namespace: %v\n%s", err, out)
		}
		return
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatalf("mount a fresh /run: %v", err)
	}
	if _, err := os.Stat(Dir); !os.IsNotExist(err) {
		t.Fatalf("%s exists on the fresh /run: %v", Dir, err)
	}
	const first, second = "sy-fresh-a", "sy-fresh-b"
	if err := Create(first); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "netns", "add", second).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", second, err, out)
	}
	host, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	err = DoNamed(first, func() error {
		cur, err := netns.Get()
		if err != nil {
			return err
		}
		defer cur.Close()
		if cur.Equal(host) {
			t.Errorf("entering %s left the thread in the host namespace", first)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("enter %s after `ip netns add %s`: %v", first, second, err)
	}
	if out, err := exec.Command("ip", "netns", "exec", first, "true").CombinedOutput(); err != nil {
		t.Fatalf("ip netns exec %s: %v: %s", first, err, out)
	}
	for _, name := range []string{first, second} {
		if err := Remove(name); err != nil {
			t.Fatal(err)
		}
	}
	if left, _ := List("sy-fresh-"); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// TestCreateIdempotentAndNames: a second Create keeps the namespace; bad names are refused.
func TestCreateIdempotentAndNames(t *testing.T) {
	for _, bad := range []string{"", ".", "..", "a/b"} {
		if err := Create(bad); err == nil {
			t.Errorf("Create(%q) accepted a name that is not one path element", bad)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for the rest (network namespaces)")
	}
	const name = "sy-nn-idem"
	t.Cleanup(func() { Remove(name) })
	if err := Create(name); err != nil {
		t.Fatal(err)
	}
	h1, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer h1.Close()
	if err := Create(name); err != nil {
		t.Fatalf("second Create: %v", err)
	}
	h2, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	if !h1.Equal(h2) {
		t.Fatal("a second Create replaced the namespace")
	}
	if err := Remove(name); err != nil || Exists(name) {
		t.Fatalf("Remove: %v (exists afterwards: %v)", err, Exists(name))
	}
}

// TestOneWayToMakeNamespaces: nothing else in the tree makes named namespaces (netns.NewNamed,
// `ip netns add`): a second way, run first on a fresh machine, hides this one's namespaces.
func TestOneWayToMakeNamespaces(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(root, "internal", "namednetns")
	patterns := []string{"netns." + "NewNamed(", `"netns", ` + `"add"`, "ip netns " + "add "}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == self || strings.HasPrefix(d.Name(), ".") || d.Name() == "vendor" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, ".sh") && d.Name() != "Makefile" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, pat := range patterns {
			if strings.Contains(string(b), pat) {
				rel, _ := filepath.Rel(root, p)
				t.Errorf("%s makes a named namespace with %s: use namednetns.Create (testutil.NamedNS in tests)", rel, pat)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
