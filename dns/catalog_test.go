package dns

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/testutil"
)

// catalogPorts are the catalog tests' loopback ports.
var catalogPorts = &portRange{first: 23100, last: 23199}

// serves reports whether the server at addr answers SOA for origin authoritatively.
func serves(addr, origin string) bool {
	m, _, err := Query(context.Background(), addr, origin, mdns.TypeSOA, QueryOptions{Timeout: 300 * time.Millisecond})
	return err == nil && m.Rcode == mdns.RcodeSuccess && len(m.Answer) == 1
}

// runKnot runs knotd with conf (%[1]s: its directory, %[2]d: its port) and zone files.
func runKnot(t *testing.T, conf string, files map[string]string) *refServer {
	t.Helper()
	return runKnotOn(t, catalogPorts, conf, files)
}

// runKnotOn is runKnot on a port of ports.
func runKnotOn(t *testing.T, ports *portRange, conf string, files map[string]string) *refServer {
	t.Helper()
	bin := needBinary(t, "knotd", "knot")
	dir := t.TempDir()
	port := ports.free(t)
	for name, text := range files {
		os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644)
	}
	os.WriteFile(filepath.Join(dir, "knot.conf"), []byte(fmt.Sprintf(conf, dir, port)), 0o644)
	return runRef(t, "knot", bin, dir, port, "", false, "-c", filepath.Join(dir, "knot.conf"))
}

// runKnotInterpreting runs Knot on knotPort, taking switchyard's catalog.invalid. from syAddr
// (catalog-role: interpret) and its members by catalogTemplates (at least member: from
// syAddr, NOTIFY from it allowed); acls and templates are more entries of those lists ({dir}
// in templates: Knot's directory).
func runKnotInterpreting(t *testing.T, knotPort int, syAddr, acls, templates, catalogTemplates string) *refServer {
	t.Helper()
	bin := needBinary(t, "knotd", "knot")
	kdir := t.TempDir()
	os.WriteFile(filepath.Join(kdir, "knot.conf"), []byte(fmt.Sprintf(knotServer+`remote:
  - id: sy
    address: %[3]s
acl:
  - id: from-sy
    address: 127.0.0.1
    action: notify
%[4]stemplate:
  - id: default
    storage: "%[1]s"
    zonefile-sync: -1
  - id: member
    storage: "%[1]s"
    master: sy
    acl: from-sy
    zonefile-sync: -1
%[5]szone:
  - domain: catalog.invalid.
    master: sy
    acl: from-sy
    catalog-role: interpret
    catalog-template: %[6]s
`, kdir, knotPort, strings.Replace(syAddr, ":", "@", 1), acls, strings.ReplaceAll(templates, "{dir}", kdir), catalogTemplates)), 0o644)
	return runRef(t, "knot", bin, kdir, knotPort, "", false, "-c", filepath.Join(kdir, "knot.conf"))
}

// TestCatalogToKnot: switchyard produces a catalog of its zones; Knot (catalog-role: interpret)
// takes it and serves every member as its secondary, and a zone added to switchyard's
// configuration and reloaded reaches Knot by the catalog's NOTIFY, without Knot being told.
func TestCatalogToKnot(t *testing.T) {
	dir := t.TempDir()
	port := catalogPorts.free(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	knotPort := catalogPorts.free(t)
	zone := func(o string) string {
		return fmt.Sprintf("  - {origin: %s, records: [\"@ NS ns1.%s\", \"ns1 A 192.0.2.1\"], transfer: {allow: [127.0.0.1]}}\n", o, o)
	}
	write := func(zones ...string) {
		y := fmt.Sprintf("listen: %s\nstate_dir: %s\ncatalog: {zone: catalog.invalid., transfer: {allow: [127.0.0.1], notify: [\"127.0.0.1:%d\"]}}\nzones:\n", addr, dir, knotPort)
		for _, z := range zones {
			y += zone(z)
		}
		os.WriteFile(filepath.Join(dir, "dns.yaml"), []byte(y), 0o600)
	}
	write("a.test.", "b.test.")
	srv := updServer(t, dir)
	knot := runKnotInterpreting(t, knotPort, addr, "", "", "member")
	for _, z := range []string{"a.test.", "b.test."} {
		testutil.Eventually(t, 20*time.Second, func() bool { return serves(knot.addr, z) },
			"knot does not serve the catalog member %s:\n%s", z, func() any { return knot.log() })
	}
	write("a.test.", "c.test.")
	if err := srv.ReloadWith(func() (*config.Config, error) { return config.Load(filepath.Join(dir, "dns.yaml")) }); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, func() bool { return serves(knot.addr, "c.test.") && !serves(knot.addr, "b.test.") },
		"knot did not follow the catalog: c.test. added, b.test. removed:\n%s", func() any { return knot.log() })
}

// TestCatalogFromKnot: switchyard consumes a catalog Knot generates (catalog-role: generate):
// every member is served as a secondary zone of Knot; a member Knot adds and one it removes
// are added and removed here by the catalog's transfer, without a restart; and a restart
// serves the members of the saved catalog at once.
func TestCatalogFromKnot(t *testing.T) {
	port := catalogPorts.free(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	member := func(o string) string {
		return fmt.Sprintf("  - domain: %s\n    file: %szone\n    catalog-role: member\n    catalog-zone: catalog.example.\n    acl: xfr\n    notify: sy\n", o, o)
	}
	files := map[string]string{}
	for _, o := range []string{"x.test.", "y.test.", "z.test."} {
		files[o+"zone"] = fmt.Sprintf("$ORIGIN %s\n@ 300 SOA ns1 hostmaster 1 3600 600 604800 60\n@ 300 NS ns1\nns1 300 A 192.0.2.9\n", o)
	}
	conf := func(members ...string) string {
		c := knotServer + fmt.Sprintf(`remote:
  - id: sy
    address: 127.0.0.1@%d
acl:
  - id: xfr
    address: 127.0.0.1
    action: transfer
template:
  - id: default
    storage: "%%[1]s"
    zonefile-sync: -1
zone:
  - domain: catalog.example.
    catalog-role: generate
    acl: xfr
    notify: sy
`, port)
		for _, m := range members {
			c += member(m)
		}
		return c
	}
	knot := runKnot(t, conf("x.test.", "y.test."), files)
	testutil.Eventually(t, 20*time.Second, func() bool { return serves(knot.addr, "x.test.") }, "knot did not start:\n%s", func() any { return knot.log() })
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "dns.yaml"), []byte(fmt.Sprintf("listen: %s\nstate_dir: %s\ncatalogs: [{zone: catalog.example., primaries: [\"%s\"]}]\n", addr, dir, knot.addr)), 0o600)
	srv := updServer(t, dir)
	for _, z := range []string{"x.test.", "y.test."} {
		testutil.Eventually(t, 20*time.Second, func() bool { return serves(addr, z) }, "switchyard does not serve the catalog member %s", z)
	}
	// Knot's catalog changes: z.test. added, y.test. removed.
	kport, _ := strconv.Atoi(strings.TrimPrefix(knot.addr, "127.0.0.1:"))
	os.WriteFile(filepath.Join(knot.dir, "knot.conf"), []byte(fmt.Sprintf(conf("x.test.", "z.test."), knot.dir, kport)), 0o644)
	knot.reload(t)
	testutil.Eventually(t, 20*time.Second, func() bool { return serves(addr, "z.test.") && !serves(addr, "y.test.") },
		"switchyard did not follow the catalog: z.test. added, y.test. removed:\n%s", func() any { return knot.log() })
	// A restart serves the saved catalog's members at once.
	srv.Close()
	knot.cmd.Process.Kill()
	updServer(t, dir)
	testutil.Eventually(t, 5*time.Second, func() bool { return serves(addr, "x.test.") && serves(addr, "z.test.") },
		"after a restart with the primary down, the saved catalog's members are not served")
}
