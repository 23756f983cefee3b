package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/app"
	"github.com/switchyard/switchyard/lab/fwd"
)

// uniquePrefix names a test's namespaces so that they never collide with a running lab
// (prefix "sy") or with another test: "t" and six hex digits. SWITCHYARD_TEST_LAB_PREFIX (one
// or two characters) replaces the "t", so that the runs of several people on one machine can
// tell their namespaces, pins and state apart (and clean up their own).
func uniquePrefix() string {
	b := make([]byte, 3)
	rand.Read(b)
	p := os.Getenv("SWITCHYARD_TEST_LAB_PREFIX")
	if p == "" || len(p) > 2 {
		p = "t" // the lab's prefixes are at most 8 characters (lab/topo)
	}
	return p + hex.EncodeToString(b)
}

// testLab builds a lab with a unique prefix and removes everything it made when the test ends,
// passed or failed.
func testLab(t *testing.T, backends int) *lab.Lab {
	t.Helper()
	return testLabSpec(t, lab.Spec{Clients: 2, Balancers: 1, Backends: backends})
}

// testLabSpec is testLab for any size of lab (its prefix is made unique here).
func testLabSpec(t *testing.T, s lab.Spec) *lab.Lab {
	t.Helper()
	testutil.RequireLab(t)
	s.Prefix = uniquePrefix()
	l, err := lab.Plan(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Destroy(s.Prefix); err != nil {
			t.Errorf("destroy lab: %v", err)
		}
	})
	if err := l.Build(); err != nil {
		t.Fatal(err)
	}
	return l
}

// withApps runs the backends' app servers in-process for the test.
func withApps(t *testing.T, l *lab.Lab) map[string]*app.Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	apps, err := l.StartApps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return apps
}

// withForwarder loads the forwarder directly on the lab's balancer.
func withForwarder(t *testing.T, l *lab.Lab) *fwd.Forwarder {
	t.Helper()
	f, err := l.StartForwarder(l.Balancer(), 4099)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// get does one request and returns the status, the backend's name and the body.
func get(c *http.Client, url string) (int, string, string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get(app.Header), string(b), err
}

// fmtSscanf is fmt.Sscanf after squeezing runs of spaces, so that table columns parse.
func fmtSscanf(line, format string, args ...any) (int, error) {
	return fmt.Sscanf(strings.Join(strings.Fields(line), " "), format, args...)
}
