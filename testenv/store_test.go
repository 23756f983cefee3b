package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/store"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/topo"
)

// fleetLab is a lab of several `lb run --store` daemons on one etcd cluster.
type fleetLab struct {
	*lab.State
	t     *testing.T
	bin   string
	socks []string // per balancer, in order
}

func newFleetLab(t *testing.T, members, balancers int, noHealth bool) *fleetLab {
	t.Helper()
	return newFleetLabWith(t, lab.UpOptions{StoreMembers: members, NoHealth: noHealth}, balancers)
}

// newFleetLabWith is newFleetLab with the store and health options of o.
func newFleetLabWith(t *testing.T, o lab.UpOptions, balancers int) *fleetLab {
	t.Helper()
	testutil.RequireLab(t)
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Skip("etcd not installed: apt-get install etcd-server (make deps)")
	}
	bin := switchyardBin(t)
	s := lab.Spec{Prefix: uniquePrefix(), Clients: 1, Balancers: balancers, Backends: 3}
	t.Cleanup(func() {
		if t.Failed() {
			for i := 1; i <= balancers; i++ {
				b, _ := os.ReadFile(filepath.Join(lab.StateDir(s.Prefix), fmt.Sprintf("lb%d.log", i)))
				t.Logf("lb%d log:\n%s", i, b)
			}
		}
		if err := lab.Destroy(s.Prefix); err != nil {
			t.Errorf("destroy lab: %v", err)
		}
	})
	o.Spec, o.Exe, o.Balancer = s, bin, lab.ModeDaemon
	st, err := lab.Up(o)
	if err != nil {
		t.Fatal(err)
	}
	f := &fleetLab{State: st, t: t, bin: bin}
	for _, n := range st.Lab().Topo.ByRole(topo.Balancer) {
		f.socks = append(f.socks, st.Sockets[n.NS])
	}
	return f
}

func (f *fleetLab) status(i int) api.Status {
	f.t.Helper()
	var st api.Status
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := api.NewClient(f.socks[i]).Call(ctx, api.OpStatus, api.Empty{}, &st); err != nil {
		f.t.Fatalf("lb%d status: %v", i+1, err)
	}
	return st
}

// digest is the ring digest of a VIP on balancer i ("" when it has none).
func (f *fleetLab) digest(i int, vip string) string {
	for _, r := range f.status(i).Rings {
		if r.VIP == vip {
			return r.Digest
		}
	}
	return ""
}

// converged reports whether every balancer shows the same digest for vip, and returns it.
func (f *fleetLab) converged(vip string) (string, bool) {
	d0 := f.digest(0, vip)
	for i := 1; i < len(f.socks); i++ {
		if f.digest(i, vip) != d0 {
			return d0, false
		}
	}
	return d0, d0 != ""
}

// waitConverged waits until every node shows one digest for vip that differs from not.
func (f *fleetLab) waitConverged(what, vip, not string, timeout time.Duration) (string, time.Duration) {
	f.t.Helper()
	start := time.Now()
	var d string
	testutil.Eventually(f.t, timeout, func() bool {
		var ok bool
		d, ok = f.converged(vip)
		return ok && d != not
	}, "no %s", what)
	return d, time.Since(start)
}

// cli runs switchyard against balancer i's socket.
func (f *fleetLab) cli(i int, args ...string) (string, error) {
	cmd := exec.Command(f.bin, args...)
	cmd.Env = append(os.Environ(), "SWITCHYARD_SOCKET="+f.socks[i])
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (f *fleetLab) backendWeight(i int, vip, addr string) uint32 {
	f.t.Helper()
	var bs []api.BackendInfo
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := api.NewClient(f.socks[i]).Call(ctx, api.OpBackendList, api.VIPRef{VIP: vip}, &bs); err != nil {
		f.t.Fatal(err)
	}
	for _, b := range bs {
		if b.Address == addr {
			return b.Weight
		}
	}
	return 0
}

func (f *fleetLab) waitStore(i int, connected bool, timeout time.Duration) {
	f.t.Helper()
	testutil.Eventually(f.t, timeout, func() bool {
		st := f.status(i).Store
		return st != nil && st.Connected == connected
	}, "lb%d's store connected is not %v", i+1, connected)
}

// writeDirect changes a backend's weight in the store itself (as an operator with etcdctl, or
// another node, would), retrying while the store comes back.
func (f *fleetLab) writeDirect(vip, addr string, w uint32) int64 {
	f.t.Helper()
	s, err := lab.OpenStore(f.State)
	if err != nil {
		f.t.Fatal(err)
	}
	defer s.Close()
	var rev int64
	testutil.Eventually(f.t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		rev, err = func() (int64, error) {
			sn, err := s.List(ctx)
			if err != nil {
				return 0, err
			}
			vs := sn.VIPs()
			for i := range vs {
				if vs[i].Name != vip {
					continue
				}
				for j := range vs[i].Backends {
					if vs[i].Backends[j].Address == addr {
						vs[i].Backends[j].Weight = w
					}
				}
			}
			ch, err := store.Diff(sn.VIPs(), vs)
			if err != nil {
				return 0, err
			}
			return s.Commit(ctx, sn, ch)
		}()
		cancel()
		return err == nil
	}, "write to the store: %v", func() any { return err })
	return rev
}

// restartDaemon stops balancer i's daemon (SIGTERM: program and maps stay) and starts it again
// with the same command line, waiting until its socket answers.
func (f *fleetLab) restartDaemon(i int) {
	f.t.Helper()
	n := f.Lab().Topo.ByRole(topo.Balancer)[i]
	var argv []string
	for _, p := range f.Procs {
		if p.Name == n.Name {
			argv = p.Argv
		}
	}
	if err := lab.StopProcess(f.Prefix, n.Name, 10*time.Second); err != nil {
		f.t.Fatal(err)
	}
	if _, err := lab.StartProcess(f.Prefix, n.Name, n.NS, argv...); err != nil {
		f.t.Fatal(err)
	}
	testutil.Eventually(f.t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return api.NewClient(f.socks[i]).Call(ctx, api.OpStatus, api.Empty{}, nil) == nil
	}, "%s not answering after its restart", n.Name)
}

// cutStore drops balancer i's traffic to and from etcd (its watch is cut, its process runs).
func (f *fleetLab) cutStore(i int, cut bool) {
	f.t.Helper()
	if err := lab.CutStore(f.Lab().Topo.ByRole(topo.Balancer)[i], cut); err != nil {
		f.t.Fatal(err)
	}
}

// TestFleetStoreConverges: two balancers on one etcd build identical Maglev tables; a change
// through the CLI of one node and a backend failing both give equal ring digests on every node
// within a bounded time; etcd killed: both keep forwarding with the last state and say
// disconnected; a change written while they were cut off is applied when their watch returns.
func TestFleetStoreConverges(t *testing.T) {
	f := newFleetLab(t, 1, 2, false)
	be1, be2, be3 := f.Lab().Topo.ByRole(topo.Backend)[0], f.Lab().Topo.ByRole(topo.Backend)[1], f.Lab().Topo.ByRole(topo.Backend)[2]
	d0, _ := f.waitConverged("equal digests at start", "web", "", 20*time.Second)
	testutil.Eventually(t, 20*time.Second, func() bool {
		for i := range f.socks {
			for _, r := range f.status(i).Rings {
				if r.VIP == "web" && r.InRing != 3 {
					return false
				}
			}
		}
		return true
	}, "not every backend healthy on every node")

	// 1. A change through the CLI of lb1 reaches lb2 through the store.
	out, err := f.cli(0, "backend", "weight", "web", be1.Addr4.String(), "3")
	if err != nil || !strings.Contains(out, "revision") {
		t.Fatalf("backend weight: %v: %s", err, out)
	}
	d1, took := f.waitConverged("equal digests after the CLI change", "web", d0, 10*time.Second)
	t.Logf("CLI change: every node's web digest %s after %s", d1, took.Round(time.Millisecond))
	if w := f.backendWeight(1, "web", be1.Addr4.String()); w != 3 {
		t.Fatalf("lb2 sees weight %d, want 3", w)
	}
	// Both applied the same sequence of tables: the second-chance previous ring is the first
	// table on both.
	for i := range f.socks {
		for _, r := range f.status(i).Rings {
			if r.VIP == "web" && r.Previous != d0 {
				t.Fatalf("lb%d: previous ring %q after one change, want the first table %s", i+1, r.Previous, d0)
			}
		}
	}
	// Bad input is refused with the same error as without a store, and nothing is written.
	if out, err := f.cli(0, "backend", "add", "web", be2.Addr4.String()); err == nil || !strings.Contains(out, "already in vip web") {
		t.Fatalf("duplicate backend: %v: %s", err, out)
	}

	// 2. A backend fails its health checks: every node takes it out, the tables stay equal.
	c1 := lab.HTTPClient(f.Lab().Client(1), false, 5*time.Second)
	if code, _, body, err := get(c1, fmt.Sprintf("http://%s/admin/fail?on=1", be2.Addr4)); err != nil || code != 200 {
		t.Fatalf("fail be2: %d %q %v", code, body, err)
	}
	start := time.Now()
	d2, _ := f.waitConverged("equal digests after be2 failed", "web", d1, 30*time.Second)
	testutil.Eventually(t, 20*time.Second, func() bool {
		for i := range f.socks {
			for _, r := range f.status(i).Rings {
				if r.VIP == "web" && r.InRing != 2 {
					return false
				}
			}
		}
		d, ok := f.converged("web")
		return ok && d == d2
	}, "be2 not out of every node's ring")
	t.Logf("backend failure: every node's web digest %s after %s", d2, time.Since(start).Round(time.Millisecond))

	// 3. etcd killed: both nodes keep forwarding with the last state and say disconnected.
	if err := lab.StopStoreMember(f.State, 1); err != nil {
		t.Fatal(err)
	}
	f.waitStore(0, false, 15*time.Second)
	f.waitStore(1, false, 15*time.Second)
	for i := 0; i < 20; i++ {
		if code, _, _, err := get(c1, fmt.Sprintf("http://%s/", lab.WebVIP4)); err != nil || code != 200 {
			t.Fatalf("request %d through the VIP with etcd down: %d %v", i, code, err)
		}
	}
	for i := range f.socks {
		if d := f.digest(i, "web"); d != d2 {
			t.Fatalf("lb%d's table changed with etcd down: %s, was %s", i+1, d, d2)
		}
		if st := f.status(i); st.VIPs != 3 {
			t.Fatalf("lb%d lost VIPs with etcd down: %d", i+1, st.VIPs)
		}
	}
	if out, err := f.cli(1, "backend", "weight", "web", be3.Addr4.String(), "2"); err == nil || !strings.Contains(out, "NOT made") {
		t.Fatalf("a change with etcd down: want a refusal, got %v: %s", err, out)
	}
	// lb2's daemon restarts while etcd is down: it starts from the snapshot it applied last
	// (its cache), adopts its maps and says disconnected. A restarted daemon starts with every
	// backend healthy (it must not empty rings before its probes return), so the failed be2 is
	// back in its ring until its probes fail again (fall x interval): then the tables agree.
	revBefore := f.status(1).Store.Revision
	f.restartDaemon(1)
	st := f.status(1)
	if st.Store == nil || st.Store.Connected || st.Store.Revision != revBefore || !st.Adopted || st.VIPs != 3 {
		t.Fatalf("lb2 restarted with etcd down: store %+v adopted %v VIPs %d, want disconnected at revision %d, adopted, 3 VIPs", st.Store, st.Adopted, st.VIPs, revBefore)
	}
	restarted := time.Now()
	testutil.Eventually(t, 20*time.Second, func() bool {
		return f.digest(1, "web") == d2
	}, "lb2's table not equal to lb1's after its restart with etcd down")
	t.Logf("lb2 restarted with etcd down: from its cached revision %d, table equal again after %s (its probes)", revBefore, time.Since(restarted).Round(time.Millisecond))

	// 4. etcd back with its data dir; a change written straight into the store before the
	// nodes are back is applied by both when their watch returns.
	if err := lab.StartStoreMember(f.State, 1); err != nil {
		t.Fatal(err)
	}
	rev := f.writeDirect("web", be3.Addr4.String(), 2)
	d3, took := f.waitConverged("equal digests after etcd returned", "web", d2, 30*time.Second)
	t.Logf("etcd restart: change at revision %d applied on every node after %s (digest %s)", rev, took.Round(time.Millisecond), d3)
	for i := range f.socks {
		f.waitStore(i, true, 15*time.Second)
		if w := f.backendWeight(i, "web", be3.Addr4.String()); w != 2 {
			t.Fatalf("lb%d: weight %d after the watch returned, want 2", i+1, w)
		}
	}

	// 5. One node's watch cut (its process and program run on): it keeps forwarding, misses a
	// change made through the other node meanwhile, and catches up when the watch returns.
	f.cutStore(1, true)
	f.waitStore(1, false, 20*time.Second)
	if out, err := f.cli(0, "backend", "weight", "web", be1.Addr4.String(), "1"); err != nil {
		t.Fatalf("change through lb1 while lb2 is cut off: %v: %s", err, out)
	}
	if w := f.backendWeight(1, "web", be1.Addr4.String()); w != 3 {
		t.Fatalf("lb2 cut off from etcd applied a change: weight %d", w)
	}
	if d := f.digest(1, "web"); d != d3 {
		t.Fatalf("lb2's table changed while cut off: %s, was %s", d, d3)
	}
	f.cutStore(1, false)
	d4, took := f.waitConverged("lb2 caught up after its watch returned", "web", d3, 60*time.Second)
	t.Logf("watch cut: lb2 caught up %s after the cut ended (digest %s)", took.Round(time.Millisecond), d4)
	if w := f.backendWeight(1, "web", be1.Addr4.String()); w != 1 {
		t.Fatalf("lb2 after catching up: weight %d, want 1", w)
	}
}

// TestFleetStoreThreeMembersLoseOne: a 3-member cluster that loses a member keeps serving the
// fleet (changes through the CLI reach every node); losing a second loses the quorum: the nodes
// say disconnected and keep their tables.
func TestFleetStoreThreeMembersLoseOne(t *testing.T) {
	f := newFleetLab(t, 3, 2, true)
	be1 := f.Lab().Topo.ByRole(topo.Backend)[0]
	f.waitConverged("equal digests at start", "web", "", 20*time.Second)

	// Concurrent changes through both nodes: each is a read-modify-write of the same VIP key,
	// and the transaction guard makes the losers recompute, so none is lost.
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for i := range f.socks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 1; j <= 5; j++ {
				addr := fmt.Sprintf("198.18.3.%d", 100+10*i+j)
				if out, err := f.cli(i, "backend", "add", "web", addr); err != nil {
					errs <- fmt.Errorf("lb%d: backend add %s: %v: %s", i+1, addr, err, out)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	d0, _ := f.waitConverged("equal digests after concurrent changes", "web", "", 15*time.Second)
	conflicts := uint64(0)
	for i := range f.socks {
		st := f.status(i)
		conflicts += st.Store.WriteConflicts
		for _, r := range st.Rings {
			if r.VIP == "web" && r.InRing != 13 {
				t.Fatalf("lb%d: %d backends in web's ring after 10 concurrent adds to 3, want 13 (a lost update)", i+1, r.InRing)
			}
		}
	}
	t.Logf("10 concurrent adds through 2 nodes: all applied, %d write conflicts recomputed", conflicts)
	if err := lab.StopStoreMember(f.State, 1); err != nil {
		t.Fatal(err)
	}
	var out string
	var err error
	testutil.Eventually(t, 20*time.Second, func() bool {
		out, err = f.cli(1, "backend", "weight", "web", be1.Addr4.String(), "4")
		return err == nil
	}, "no change accepted with one member down")
	d1, took := f.waitConverged("equal digests after the change", "web", d0, 15*time.Second)
	t.Logf("one member down: change applied on every node after %s (%s)", took.Round(time.Millisecond), strings.TrimSpace(out))
	for i := range f.socks {
		f.waitStore(i, true, 15*time.Second)
	}
	if err := lab.StopStoreMember(f.State, 2); err != nil {
		t.Fatal(err)
	}
	for i := range f.socks {
		f.waitStore(i, false, 20*time.Second)
		if d := f.digest(i, "web"); d != d1 {
			t.Fatalf("lb%d's table changed without a quorum: %s, was %s", i+1, d, d1)
		}
	}
}
