package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchyard/switchyard/control/store"
	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/topo"
)

// TestFleetStoreSecured: the lab's store is etcds:// with auth by default. With the balancers'
// permission on the fleet's prefix taken away, each node says DISCONNECTED with the fix (grant
// the role readwrite on the prefix), keeps forwarding on its last state (a connection made before
// and one made during the cut both answer), and refuses CLI changes naming the fix; with the
// permission back, the nodes reconnect and a change goes through.
func TestFleetStoreSecured(t *testing.T) {
	f := newFleetLab(t, 1, 2, true)
	be1 := f.Lab().Topo.ByRole(topo.Backend)[0].Addr4.String()
	st := f.status(0).Store
	if st == nil || !strings.HasPrefix(st.URL, "etcds://") {
		t.Fatalf("the lab's store is not etcds://: %+v", st)
	}
	before := f.keepAlive()

	root, err := lab.StoreRoot(f.State)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	key := lab.StorePrefix(f.Prefix) + "/"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := root.Client().RoleRevokePermission(ctx, lab.StoreEtcdRole(), key, clientv3.GetPrefixRangeEnd(key)); err != nil {
		t.Fatal(err)
	}
	f.storeRefused(before, be1, "lacks permission on "+key+": grant it a role with readwrite on that prefix")

	if _, err := root.Client().RoleGrantPermission(ctx, lab.StoreEtcdRole(), key, clientv3.GetPrefixRangeEnd(key), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	f.storeBack(be1, 3)
}

// keepAlive is a keep-alive connection from client 1 to the web VIP that has answered once.
func (f *fleetLab) keepAlive() *keepAliveConn {
	f.t.Helper()
	k, err := dialKeepAlive(f.Lab().Client(1).NS, net.JoinHostPort(lab.WebVIP4.String(), "80"))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { k.c.Close() })
	if _, err := k.do("/before"); err != nil {
		f.t.Fatal(err)
	}
	return k
}

// storeRefused checks both nodes while the store refuses them: each says DISCONNECTED with want
// in its error, the connection made before and a new one answer, and a CLI change (backend be1's
// weight) is refused naming want.
func (f *fleetLab) storeRefused(before *keepAliveConn, be1, want string) {
	f.t.Helper()
	f.waitStore(0, false, 10*time.Second)
	f.waitStore(1, false, 10*time.Second)
	why := f.status(0).Store.LastError
	f.t.Logf("lb1's store error: %s", why)
	if !strings.Contains(why, want) {
		f.t.Errorf("lb1's store error does not name the fix %q: %q", want, why)
	}
	if _, err := before.do("/during"); err != nil {
		f.t.Errorf("an established connection broke while the store refused: %v", err)
	}
	during := f.keepAlive()
	if _, err := during.do("/new"); err != nil {
		f.t.Errorf("a new connection failed while the store refused: %v", err)
	}
	out, err := f.cli(0, "backend", "weight", "web", be1, "3")
	if err == nil || !strings.Contains(out, "the change was NOT made") || !strings.Contains(out, want) {
		f.t.Errorf("a change while the store refused: %v: %s", err, out)
	}
}

// storeBack waits until both nodes are connected again and a change through lb1 (backend be1's
// weight to w) reaches lb2.
func (f *fleetLab) storeBack(be1 string, w uint32) {
	f.t.Helper()
	f.waitStore(0, true, 10*time.Second)
	f.waitStore(1, true, 10*time.Second)
	var out string
	var err error
	testutil.Eventually(f.t, 30*time.Second, func() bool {
		out, err = f.cli(0, "backend", "weight", "web", be1, fmt.Sprint(w))
		return err == nil
	}, "no change through lb1 once the store took the nodes back: %s", func() any { return out })
	testutil.Eventually(f.t, 10*time.Second, func() bool { return f.backendWeight(1, "web", be1) == w }, "lb2 did not apply the change")
}

// TestFleetStorePasswords: a lab whose store's users authenticate by password (from a file, no
// client certificates). Both nodes follow and take CLI changes; the balancers' password changed
// in etcd behind their back, each node says DISCONNECTED naming the user and the file, keeps
// forwarding (an old and a new connection answer) and refuses CLI changes; with the file fixed,
// both reconnect without a restart and a change goes through.
func TestFleetStorePasswords(t *testing.T) {
	f := newFleetLabWith(t, lab.UpOptions{StoreMembers: 1, NoHealth: true, StorePasswords: true}, 2)
	be1 := f.Lab().Topo.ByRole(topo.Backend)[0].Addr4.String()
	pwFile := lab.StorePasswordFile(f.State)
	st := f.status(0).Store
	if st == nil || !strings.Contains(st.URL, "user="+lab.StoreUser) || !strings.Contains(st.URL, "password_file="+pwFile) || strings.Contains(st.URL, "cert=") {
		t.Fatalf("the lab's store is not a password user's: %+v", st)
	}
	if out, err := f.cli(0, "backend", "weight", "web", be1, "2"); err != nil {
		t.Fatalf("a change as the password user: %v: %s", err, out)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return f.backendWeight(1, "web", be1) == 2 }, "lb2 did not apply the change")
	before := f.keepAlive()

	root, err := lab.StoreRoot(f.State)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const changed = "changed-behind-the-nodes-back"
	if _, err := root.Client().UserChangePassword(ctx, lab.StoreUser, changed); err != nil {
		t.Fatal(err)
	}
	f.storeRefused(before, be1, "etcd refused user "+lab.StoreUser+" with the password in "+pwFile)

	if err := os.WriteFile(pwFile, []byte(changed+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.storeBack(be1, 3)
}

// TestFleetStoreRotation: the lab store's CA and every certificate replaced on disk and its
// member restarted trusting the new CA only: both daemons, not restarted, reconnect with their
// new files and keep syncing (a change through lb1 reaches lb2), connections answer throughout,
// and the balancers' old certificate is refused.
func TestFleetStoreRotation(t *testing.T) {
	f := newFleetLab(t, 1, 2, true)
	be1 := f.Lab().Topo.ByRole(topo.Backend)[0].Addr4.String()
	_, cert, key := lab.StoreClientFiles(f.State)
	old := t.TempDir()
	oldCert, oldKey := filepath.Join(old, "lb.pem"), filepath.Join(old, "lb-key.pem")
	for src, dst := range map[string]string{cert: oldCert, key: oldKey} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	before := f.keepAlive()
	started := [2]time.Time{f.status(0).Started, f.status(1).Started}

	if err := lab.RotateStorePKI(f.State); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	f.storeBack(be1, 4)
	t.Logf("a change through lb1 applied on lb2 %v after the rotation", time.Since(start).Round(time.Millisecond))
	for i := range 2 {
		if got := f.status(i).Started; !got.Equal(started[i]) {
			t.Errorf("lb%d restarted: started %v, then %v", i+1, started[i], got)
		}
	}
	if _, err := before.do("/after"); err != nil {
		t.Errorf("an established connection broke across the rotation: %v", err)
	}

	u, err := store.ParseURL(f.Store.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.TLS.Cert, u.TLS.Key = oldCert, oldKey
	dial := namednetns.Dialer(f.Store.NS, &net.Dialer{Timeout: 2 * time.Second})
	stale, err := store.Open(u, store.Options{Dial: func(ctx context.Context, addr string) (net.Conn, error) { return dial(ctx, "tcp", addr) }})
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := stale.List(ctx); err == nil || !strings.Contains(err.Error(), "refused this node's client certificate") {
		t.Errorf("the balancers' old certificate after the rotation: %v, want refused", err)
	}
}
