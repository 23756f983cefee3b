package topo

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"

	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/internal/testutil"
)

// TestBuildRouterSkipsBridgeNetfilter: the router namespace forwards bridged frames without the
// br_netfilter hooks (the host may have them on for its containers), on a real topology.
func TestBuildRouterSkipsBridgeNetfilter(t *testing.T) {
	testutil.RequireRoot(t)
	b := make([]byte, 3)
	rand.Read(b)
	top, err := Plan(Spec{Prefix: "tt" + hex.EncodeToString(b), Clients: 1, Balancers: 1, Backends: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Destroy(top.Prefix); err != nil {
			t.Error(err)
		}
	})
	if err := top.Build(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"bridge/bridge-nf-call-iptables", "bridge/bridge-nf-call-ip6tables", "bridge/bridge-nf-call-arptables"} {
		v, err := namednetns.In(top.RouterNS, func() ([]byte, error) { return os.ReadFile("/proc/sys/net/" + k) })
		if errors.Is(err, os.ErrNotExist) {
			t.Logf("%s: no br_netfilter in this kernel", k)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if string(v) != "0\n" {
			t.Errorf("net.%s = %q in the router namespace, want 0", k, v)
		}
	}
	// Building again (lab up is idempotent) keeps the setting and fails on nothing.
	if err := top.Build(); err != nil {
		t.Fatalf("second build: %v", err)
	}
}
