package dns

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/testutil"
)

// catalogOwnerPorts are TestCatalogOwnerSurvivesRestart's loopback ports.
var catalogOwnerPorts = &portRange{first: 47140, last: 47149}

// TestCatalogOwnerSurvivesRestart: a consumer of two switchyard catalogs serves m.test. from
// cat2, the first to list it; cat1, first in the configuration, lists it too later and changes
// nothing (RFC 9432 5.4). After a restart m.test. is still cat2's: its owner was saved, so a
// change at cat2's primary reaches it (a consumer that knew no owners would give it to cat1,
// whose primary has the old serial).
func TestCatalogOwnerSurvivesRestart(t *testing.T) {
	consumer := fmt.Sprintf("127.0.0.1:%d", catalogOwnerPorts.free(t))
	// A member at serial, ns1 at addr, notifying the consumer of its changes.
	zone := func(origin, addr string, serial int) string {
		return catalogMember(origin, addr, consumer, fmt.Sprintf(", soa: {serial: %d}", serial))
	}
	p1 := newCatalogProducer(t, catalogOwnerPorts, "cat1.invalid.", consumer)
	p2 := newCatalogProducer(t, catalogOwnerPorts, "cat2.invalid.", consumer)
	p1.write(t, zone("other.test.", "192.0.2.1", 1))
	p2.write(t, zone("m.test.", "192.0.2.2", 1))
	p1.srv, p2.srv = updServer(t, p1.dir), updServer(t, p2.dir)

	cdir := t.TempDir()
	writeCatalogConsumer(t, cdir, consumer, p1, p2)
	start := func() (*Server, func()) {
		cfg, err := config.Load(filepath.Join(cdir, "dns.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		srv, err := NewServer(cfg, Options{Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return srv, startBuilt(t, srv)
	}
	_, stop := start()
	ns1 := func() string { return memberNS1(t, consumer) }
	testutil.Eventually(t, 20*time.Second, func() bool { return ns1() == "192.0.2.2" }, "the consumer does not serve m.test. from cat2's primary")
	// cat1 lists m.test. too (and new.test., to see that its new copy was taken).
	p1.write(t, zone("other.test.", "192.0.2.1", 1)+zone("m.test.", "192.0.2.1", 1)+zone("new.test.", "192.0.2.1", 1))
	testutil.Eventually(t, 20*time.Second, func() bool { return serves(consumer, "new.test.") }, "the consumer did not take cat1's new copy")
	if got := ns1(); got != "192.0.2.2" {
		t.Fatalf("m.test. listed by a second catalog: served %q, want its owner cat2's 192.0.2.2", got)
	}

	stop()
	srv, _ := start()
	testutil.Eventually(t, 20*time.Second, func() bool { return serves(consumer, "new.test.") }, "the restarted consumer does not serve cat1's members")
	srv.mu.Lock()
	owner := srv.catalogOwner["m.test."]
	srv.mu.Unlock()
	if owner != "cat2.invalid." {
		t.Errorf("after the restart m.test. belongs to %q, want cat2.invalid.", owner)
	}
	p2.write(t, zone("m.test.", "192.0.2.3", 2)) // a new serial at cat2's primary, notified
	testutil.Eventually(t, 20*time.Second, func() bool { return ns1() == "192.0.2.3" },
		"after the restart m.test. does not follow cat2's primary (served %q)", func() any { return ns1() })
}
