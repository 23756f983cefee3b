package store

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/internal/pki"
	"github.com/switchyard/switchyard/internal/testutil"
)

func TestParseSecureURL(t *testing.T) {
	u, err := ParseURL("etcds://10.0.0.1:2379/switchyard/prod?ca=/etc/sy/ca.pem&cert=/etc/sy/lb1.pem&key=/etc/sy/lb1-key.pem")
	if err != nil {
		t.Fatal(err)
	}
	if u.TLS == nil || u.TLS.CA != "/etc/sy/ca.pem" || u.TLS.Key != "/etc/sy/lb1-key.pem" || u.Prefix != "/switchyard/prod" {
		t.Fatalf("parsed %+v %+v", u, u.TLS)
	}
	if back, err := ParseURL(u.String()); err != nil || back.TLS.Cert != u.TLS.Cert {
		t.Errorf("round trip %s: %v", u, err)
	}
	for bad, want := range map[string]string{
		"etcds://10.0.0.1:2379/x?cert=a.pem":                           "cert and key go together",
		"etcds://10.0.0.1:2379/x?ca=a.pem&usr=lb":                      `unknown parameter "usr"`,
		"etcd://10.0.0.1:2379/x?ca=a.pem":                              "parameters (ca, cert, key, user, password_file) need etcds://",
		"etcd://10.0.0.1:2379/x?user=lb&password_file=p":               "a password over plain etcd:// would cross the network in clear",
		"etcds://10.0.0.1:2379/x?user=lb&password=hunter2":             "a password is never given in the URL",
		"etcds://10.0.0.1:2379/x?user=lb":                              "user and password_file go together",
		"etcds://10.0.0.1:2379/x?user=lb&password_file=p&cert=c&key=k": "give either cert and key, or user and password_file",
	} {
		if _, err := ParseURL(bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", bad, err, want)
		}
	}
}

// secureURL is the etcds:// URL of prefix on e for the client certificate given.
func secureURL(e *testutil.Etcd, prefix, ca, cert, key string) string {
	q := url.Values{}
	for k, v := range map[string]string{"ca": ca, "cert": cert, "key": key} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return "etcds://" + e.Endpoint + prefix + "?" + q.Encode()
}

func openURL(t *testing.T, s string) *Store {
	t.Helper()
	u, err := ParseURL(s)
	if err != nil {
		t.Fatal(err)
	}
	st, err := Open(u, Options{DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestSecureStore: an etcd over TLS with client certificates and auth, the fleet's user limited
// to its prefix. The fleet's certificate lists, writes, registers and follows; every wrong setup
// fails with an error naming the fix: the CA left out (etcd's certificate not trusted), a client
// certificate etcd does not trust, a user without permission on the prefix, plain etcd:// against
// TLS. A permission revoked while a follower runs makes it disconnected with the fix, and it keeps
// its last snapshot.
func TestSecureStore(t *testing.T) {
	const prefix = "/switchyard/prod"
	e := testutil.StartEtcdTLS(t, map[string]string{"lb": prefix, "other": "/other"})
	tl := e.TLS()
	cert, key := tl.ClientCert(t, "lb")
	s := openURL(t, secureURL(e, prefix, tl.CA, cert, key))
	if _, err := s.Seed(ctxT(t), []config.VIP{web("198.18.3.1")}); err != nil {
		t.Fatalf("seed with the fleet's certificate: %v", err)
	}
	sn, err := s.List(ctxT(t))
	if err != nil || len(sn.VIPs()) != 1 {
		t.Fatalf("list: %v %+v", err, sn)
	}
	if err := s.RegisterNode(ctxT(t), config.Node{Name: "lb1", Labels: []string{"eu"}}); err != nil {
		t.Fatalf("register: %v", err)
	}
	if ns, err := s.Nodes(ctxT(t)); err != nil || len(ns) != 1 || ns[0].Name != "lb1" {
		t.Fatalf("nodes: %v %+v", err, ns)
	}

	otherCA, err := pki.NewCA("not etcd's ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rogue, err := otherCA.Issue("lb", nil, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rogueCert, rogueKey, err := rogue.Write(t.TempDir(), "rogue")
	if err != nil {
		t.Fatal(err)
	}
	otherCert, otherKey := tl.ClientCert(t, "other")
	listErrors(t, []listCase{
		{"no ca", secureURL(e, prefix, "", cert, key), "etcd's certificate is not trusted: give the CA that signed it as ?ca=FILE"},
		{"client certificate from another ca", secureURL(e, prefix, tl.CA, rogueCert, rogueKey), "refused this node's client certificate"},
		{"no client certificate", secureURL(e, prefix, tl.CA, "", ""), "refused this node's client certificate"},
		{"user of another prefix", secureURL(e, prefix, tl.CA, otherCert, otherKey), "lacks permission on /switchyard/prod/: grant it a role with readwrite on that prefix"},
		{"plain etcd:// against TLS", "etcd://" + e.Endpoint + prefix, "speaks TLS: use etcds://HOST:PORT/PREFIX?ca=FILE&cert=FILE&key=FILE"},
	})

	// A permission revoked under a running follower.
	f := s.NewFollower(sn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.Run(ctx, 200*time.Millisecond)
	root := rootClient(t, e)
	if _, err := root.RoleRevokePermission(ctxT(t), "lb-fleet", prefix+"/", clientv3.GetPrefixRangeEnd(prefix+"/")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		st := f.State()
		return !st.Connected && strings.Contains(st.LastError, "lacks permission on /switchyard/prod/")
	}, "the follower did not say the permission is missing")
	if got := f.Snapshot(); got.Revision != sn.Revision || len(got.VIPs()) != 1 {
		t.Errorf("the follower's snapshot changed without the store: %+v", got)
	}
	t.Logf("revoked: %s", f.State().LastError)
}

// listCase is a store URL whose listing fails with an error holding want.
type listCase struct{ name, url, want string }

// listErrors lists each case's store and checks its error.
func listErrors(t *testing.T, cases []listCase) {
	t.Helper()
	for _, tc := range cases {
		st := openURL(t, tc.url)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := st.List(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v\nwant %q", tc.name, err, tc.want)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
}

// rootClient connects to e as root.
func rootClient(t *testing.T, e *testutil.Etcd) *clientv3.Client {
	t.Helper()
	cert, key := e.TLS().ClientCert(t, "root")
	u, _ := ParseURL(secureURL(e, "/x", e.TLS().CA, cert, key))
	s, err := Open(u, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.Client()
}

// TestSecureStoreRotation: the node's CA, certificate and key files are replaced on disk and
// etcd is restarted trusting the new CA only; without a restart of the client, its follower
// reconnects with the new files and keeps following (a change written after arrives), its
// writes go through, and a client with the old certificate is refused (the old trust is gone).
func TestSecureStoreRotation(t *testing.T) {
	const prefix = "/switchyard/prod"
	e := testutil.StartEtcdTLS(t, map[string]string{"lb": prefix})
	tl := e.TLS()
	cert, key := tl.ClientCert(t, "lb")
	old := t.TempDir()
	oldCert, oldKey := copyFile(t, cert, old), copyFile(t, key, old)
	s := openURL(t, secureURL(e, prefix, tl.CA, cert, key))
	if _, err := s.Seed(ctxT(t), []config.VIP{web("198.18.3.1")}); err != nil {
		t.Fatal(err)
	}
	sn, err := s.List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	f := follow(t, s, sn)

	tl.Rotate(t)                                               // the CA file now holds the new CA only, etcd's certificate is the new CA's
	if c, k := tl.ClientCert(t, "lb"); c != cert || k != key { // the node's files, rewritten
		t.Fatalf("rotated certificate in %s %s, not the node's files", c, k)
	}
	e.Stop()
	e.Start(t)

	var rev int64
	testutil.Eventually(t, 20*time.Second, func() bool {
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer ccancel()
		var err error
		if rev, err = addBackend(cctx, s, "198.18.3.2"); err != nil {
			t.Logf("write after the rotation: %v", err)
		}
		return err == nil
	}, "no write with the rotated files")
	got := nextSnapshot(t, f, "the change after the rotation", func(u Snapshot) bool { return u.Revision >= rev })
	if len(got.VIPs()[0].Backends) != 2 {
		t.Fatalf("after the rotation: %+v", got.VIPs())
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return f.State().Connected }, "the follower is not connected after the rotation: %+v", func() any { return f.State() })

	stale := openURL(t, secureURL(e, prefix, tl.CA, oldCert, oldKey))
	lctx, lcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer lcancel()
	if _, err := stale.List(lctx); err == nil || !strings.Contains(err.Error(), "refused this node's client certificate") {
		t.Errorf("the old certificate after the rotation: %v, want refused", err)
	}
}

// TestTLSFilesKeepLastGood: a rotation half done (a certificate whose key is not written yet)
// keeps the files loaded before; once both are there, the new pair is taken.
func TestTLSFilesKeepLastGood(t *testing.T) {
	ca, err := pki.NewCA("ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile, err := ca.WriteCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name string) pki.Pair {
		p, err := ca.Issue(name, nil, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := issue("lb")
	cert, key, err := first.Write(dir, "lb")
	if err != nil {
		t.Fatal(err)
	}
	files := newTLSFiles(&TLS{CA: caFile, Cert: cert, Key: key})
	leaf := func() string {
		t.Helper()
		c, err := files.current()
		if err != nil {
			t.Fatal(err)
		}
		return string(c.Certificates[0].Certificate[0])
	}
	a := leaf()
	second := issue("lb")
	if err := os.WriteFile(cert, second.CertPEM, 0o644); err != nil { // the key still the first's
		t.Fatal(err)
	}
	if leaf() != a || files.last == nil || !strings.Contains(files.last.Error(), "load store client certificate") {
		t.Fatalf("a certificate without its key was taken (last error %v)", files.last)
	}
	if err := os.WriteFile(key, second.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if leaf() == a || files.last != nil {
		t.Fatalf("the new pair was not taken (last error %v)", files.last)
	}
}

func copyFile(t *testing.T, src, dir string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}
