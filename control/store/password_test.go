package store

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/internal/testutil"
)

// passwordURL is the etcds:// URL of prefix on e for a password user.
func passwordURL(e *testutil.Etcd, prefix, user, file string) string {
	q := url.Values{"ca": {e.TLS().CA}}
	if user != "" {
		q.Set("user", user)
		q.Set("password_file", file)
	}
	return "etcds://" + e.Endpoint + prefix + "?" + q.Encode()
}

// TestPasswordStore: an etcd over TLS with auth and password users (no client certificates).
// The fleet's user, its password from a file, lists, writes, registers and follows. A store
// client opens while etcd is unreachable (a node starts from its cache then). Each wrong setup
// is an error naming the fix: a wrong password, a user of another prefix, no user, a missing
// password file. The user's password changed under a running follower: it says disconnected,
// naming the password, keeps its snapshot; the file fixed, it follows again without a restart.
func TestPasswordStore(t *testing.T) {
	const prefix = "/switchyard/prod"
	e := testutil.StartEtcdPasswords(t, map[string]string{"lb": prefix, "other": "/other"})
	tl := e.TLS()
	pw := tl.PasswordFile(t, "lb")
	s := openURL(t, passwordURL(e, prefix, "lb", pw))
	if _, err := s.Seed(ctxT(t), []config.VIP{web("198.18.3.1")}); err != nil {
		t.Fatalf("seed as the fleet's password user: %v", err)
	}
	sn, err := s.List(ctxT(t))
	if err != nil || len(sn.VIPs()) != 1 {
		t.Fatalf("list: %v %+v", err, sn)
	}
	if err := s.RegisterNode(ctxT(t), config.Node{Name: "lb1"}); err != nil {
		t.Fatalf("register: %v", err)
	}

	down := openURL(t, "etcds://127.0.0.1:1"+prefix+"?ca="+tl.CA+"&user=lb&password_file="+pw)
	dctx, dcancel := context.WithTimeout(context.Background(), time.Second)
	if _, err := down.List(dctx); err == nil {
		t.Error("a list from an unreachable etcd succeeded")
	}
	dcancel()

	dir := t.TempDir()
	wrong := filepath.Join(dir, "wrong")
	if err := os.WriteFile(wrong, []byte("not-the-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	listErrors(t, []listCase{
		{"wrong password", passwordURL(e, prefix, "lb", wrong), "etcd refused user lb with the password in " + wrong + ": write the user's password on the file's first line"},
		{"user of another prefix", passwordURL(e, prefix, "other", tl.PasswordFile(t, "other")), "the store's user other lacks permission on /switchyard/prod/: grant it a role with readwrite on that prefix"},
		{"no user", passwordURL(e, prefix, "", ""), "this client sent no user"},
		{"no password file", passwordURL(e, prefix, "lb", filepath.Join(dir, "absent")), "read the password of etcd user lb"},
	})

	// The password changed under a running follower, then its file fixed.
	f := follow(t, s, sn)
	root := openURL(t, passwordURL(e, "/x", "root", tl.PasswordFile(t, "root")))
	if _, err := root.Client().UserChangePassword(ctxT(t), "lb", "rotated"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		st := f.State()
		return !st.Connected && strings.Contains(st.LastError, "etcd refused user lb with the password in "+pw)
	}, "the follower did not say the password is refused: %+v", func() any { return f.State() })
	if got := f.Snapshot(); got.Revision != sn.Revision || len(got.VIPs()) != 1 {
		t.Errorf("the follower's snapshot changed without the store: %+v", got)
	}
	t.Logf("password changed: %s", f.State().LastError)
	if err := os.WriteFile(pw, []byte("rotated\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return f.State().Connected }, "not connected with the fixed password file: %+v", func() any { return f.State() })
	rev, err := addBackend(ctxT(t), s, "198.18.3.2")
	if err != nil {
		t.Fatal(err)
	}
	nextSnapshot(t, f, "the change after the password was fixed", func(u Snapshot) bool { return u.Revision >= rev })
}
