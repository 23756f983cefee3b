package edge

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// fleetEdge starts an edge with an admin API on adminAddr and fleet config fc.
func fleetEdge(t *testing.T, origin, adminAddr string, fc *FleetConfig) *Edge {
	return newEdge(t, origin, func(c *Config) {
		c.Admin = AdminConfig{Listen: adminAddr, Token: "tok", Fleet: fc}
	})
}

// waitFleet polls a fleet purge on e until it is done or 10 s passed.
func waitFleet(t *testing.T, e *Edge, job string) FleetPurgeStatus {
	t.Helper()
	c := AdminClient{Base: e.AdminAddr(), Token: "tok"}
	var st FleetPurgeStatus
	testutil.Eventually(t, 10*time.Second, func() bool {
		var err error
		st, err = c.FleetPurge(context.Background(), job)
		return err == nil && st.Done
	}, "fleet purge %s not done: %+v", job, func() any { return st })
	return st
}

// A purge with fleet on one edge reaches every member listed in admin.fleet.peers, and one that
// is down when it is sent gets it once it is back (retried with backoff); GET /purge/{id} says
// which members applied it.
func TestFleetPurgeReachesEveryPeer(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, "v")
	})
	bAddr, cAddr := testutil.FreeAddr(t), testutil.FreeAddr(t)
	a := fleetEdge(t, o.URL, testutil.FreeAddr(t), &FleetConfig{Peers: []PushPeer{{Admin: bAddr, Token: "tok"}, {Admin: cAddr, Token: "tok"}}})
	b := fleetEdge(t, o.URL, bAddr, nil)
	for _, e := range []*Edge{a, b} {
		get(t, e.URL()+"/x", "Host", "www.example.com")
	}
	res, err := AdminClient{Base: a.AdminAddr(), Token: "tok"}.Purge(context.Background(),
		PurgeRequest{URLs: []string{"http://www.example.com/x"}, Fleet: true})
	if err != nil || res.Job == "" || res.Purged != 1 {
		t.Fatalf("fleet purge: %+v %v", res, err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return !b.Fresh("http://www.example.com/x") }, "member b still holds the purged object")
	member := func(st FleetPurgeStatus, admin string) MemberStatus {
		for _, m := range st.Members {
			if m.Admin == admin {
				return m
			}
		}
		t.Fatalf("no member %s in %+v", admin, st)
		return MemberStatus{}
	}
	// The attempts run side by side and are recorded when they end: b may hold the purge before
	// a has its answer, and c's first attempt may end after b's.
	var st FleetPurgeStatus
	testutil.Eventually(t, 5*time.Second, func() bool {
		st, _ = AdminClient{Base: a.AdminAddr(), Token: "tok"}.FleetPurge(context.Background(), res.Job)
		return len(st.Members) == 2 && member(st, bAddr).State == "applied" && member(st, cAddr).Error != ""
	}, "with c down: %+v, want b applied and c's error", func() any { return st })
	if st.Done || member(st, cAddr).State != "pending" {
		t.Fatalf("with c down: %+v, want b applied and c pending with its error", st)
	}
	fleetEdge(t, o.URL, cAddr, nil) // c comes up: the retries reach it
	st = waitFleet(t, a, res.Job)
	for _, m := range st.Members {
		if m.State != "applied" {
			t.Errorf("member %s: %s (%s)", m.Admin, m.State, m.Error)
		}
	}
	if n := member(st, cAddr).Attempts; n < 2 {
		t.Errorf("c applied it in %d attempts, want a retry", n)
	}
	// Without a fleet the request says how to configure one.
	if _, err := (AdminClient{Base: b.AdminAddr(), Token: "tok"}).Purge(context.Background(), PurgeRequest{URLs: []string{"http://www.example.com/x"}, Fleet: true}); err == nil || !strings.Contains(err.Error(), "configure admin.fleet") {
		t.Errorf("fleet purge without a fleet: %v", err)
	}
}

// With admin.fleet.store, members find each other in etcd: a purge sent to one reaches the
// others that registered there.
func TestFleetPurgeMembersFromEtcd(t *testing.T) {
	et := testutil.StartEtcd(t)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, "v")
	})
	var edges []*Edge
	for range 3 {
		addr := testutil.FreeAddr(t)
		edges = append(edges, fleetEdge(t, o.URL, addr, &FleetConfig{Store: "etcd://" + et.Endpoint + "/sy", Advertise: addr, Token: "tok"}))
	}
	for _, e := range edges {
		get(t, e.URL()+"/x", "Host", "www.example.com")
	}
	testutil.Eventually(t, 10*time.Second, func() bool { // until all three have registered
		res, err := AdminClient{Base: edges[0].AdminAddr(), Token: "tok"}.Purge(context.Background(),
			PurgeRequest{URLs: []string{"http://www.example.com/x"}, Fleet: true})
		if err != nil {
			return false
		}
		return len(waitFleet(t, edges[0], res.Job).Members) == 2
	}, "the members did not find each other in etcd")
	for _, e := range edges[1:] {
		if e.Fresh("http://www.example.com/x") {
			t.Errorf("member %s still holds the purged object", e.AdminAddr())
		}
	}
}

// admin.fleet is checked: no members, a store without advertise or token.
func TestFleetConfigErrors(t *testing.T) {
	for fc, want := range map[*FleetConfig]string{
		{}:                                 "admin.fleet: has neither peers nor store",
		{Store: "etcd://127.0.0.1:2379/p"}: "admin.fleet.advertise: missing with store",
		{Store: "etcd://127.0.0.1:2379/p", Advertise: "a:1"}: "admin.fleet.token: missing with store",
		{Store: "http://x"}:                 "admin.fleet.store",
		{Peers: []PushPeer{{Admin: "a:1"}}}: "admin.fleet.peers.1.token",
	} {
		_, err := New(Config{Listen: "127.0.0.1:0", Origin: "http://127.0.0.1:1", Admin: AdminConfig{Listen: "127.0.0.1:0", Token: "t", Fleet: fc}})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %q", fc, err, want)
		}
	}
}
