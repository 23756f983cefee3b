package certstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// keyFile writes content to a file of the test's own and returns its path.
func keyFile(t *testing.T, content []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "acme.key")
	if err := os.WriteFile(p, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func randomKey(t *testing.T) string {
	t.Helper()
	k := make([]byte, 32)
	rand.Read(k)
	return keyFile(t, k)
}

// open opens prefix on e, closed when the test ends.
func open(t *testing.T, e *testutil.Etcd, prefix, key string, o Options) *Storage {
	t.Helper()
	s, err := Open("etcd://"+e.Endpoint+prefix, key, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestReadKey(t *testing.T) {
	raw := make([]byte, 32)
	rand.Read(raw)
	if k, err := ReadKey(keyFile(t, raw)); err != nil || !bytes.Equal(k, raw) {
		t.Fatalf("raw key: %x, %v", k, err)
	}
	if k, err := ReadKey(keyFile(t, []byte(hex.EncodeToString(raw)+"\n"))); err != nil || !bytes.Equal(k, raw) {
		t.Fatalf("hex key: %x, %v", k, err)
	}
	for name, content := range map[string][]byte{
		"short":       raw[:31],
		"long":        append(raw, '\n'),
		"hex too few": []byte(hex.EncodeToString(raw[:31])),
		"not hex":     []byte(strings.Repeat("zz", 32)),
	} {
		if _, err := ReadKey(keyFile(t, content)); err == nil || !strings.Contains(err.Error(), "want exactly 32 raw bytes or 64 hex characters") ||
			!strings.Contains(err.Error(), "head -c 32 /dev/urandom > FILE") {
			t.Errorf("%s: want an error naming the fix, got %v", name, err)
		}
	}
	if _, err := ReadKey(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "head -c 32") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Open("etcd://127.0.0.1:1/x", "", Options{}); err == nil || !strings.Contains(err.Error(), "storage_key_file") {
		t.Errorf("no key file: %v", err)
	}
}

// TestRoundTrip: certmagic's operations on files and the directories their keys imply, as
// FileStorage answers them.
func TestRoundTrip(t *testing.T) {
	e := testutil.StartEtcd(t)
	s := open(t, e, "/sy/rt", randomKey(t), Options{})
	ctx := ctxT(t)
	crt := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	files := map[string][]byte{
		"certificates/ca/www.example.com/www.example.com.crt":  crt,
		"certificates/ca/www.example.com/www.example.com.json": []byte(`{"sans":["www.example.com"]}`),
		"certificates/ca/api.example.com/api.example.com.crt":  crt,
		"acme/ca/users/default/default.key":                    []byte("-----BEGIN EC PRIVATE KEY-----\n"),
		"last_clean.json":                                      {},
	}
	before := time.Now()
	for k, v := range files {
		if err := s.Store(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range files {
		if got, err := s.Load(ctx, k); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("load %s = %q, %v; want %q", k, got, err, v)
		}
	}
	if _, err := s.Load(ctx, "certificates/ca/www.example.com/nope.crt"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("load of a missing key: %v, want fs.ErrNotExist", err)
	}

	for k, want := range map[string]bool{
		"certificates": true, "certificates/ca": true, "certificates/ca/www.example.com/www.example.com.crt": true,
		"certificates/c": false, "certificates/ca/www": false, "nope": false,
	} {
		if got := s.Exists(ctx, k); got != want {
			t.Errorf("Exists(%q) = %v, want %v", k, got, want)
		}
	}

	fi, err := s.Stat(ctx, "certificates/ca/www.example.com/www.example.com.crt")
	if err != nil || !fi.IsTerminal || fi.Size != int64(len(crt)) || fi.Modified.Before(before.Add(-time.Second)) || fi.Modified.After(time.Now()) {
		t.Fatalf("stat of a file: %+v, %v", fi, err)
	}
	if fi, err := s.Stat(ctx, "certificates/ca"); err != nil || fi.IsTerminal || fi.Key != "certificates/ca" {
		t.Fatalf("stat of a directory: %+v, %v", fi, err)
	}
	if _, err := s.Stat(ctx, "certificates/nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat of a missing key: %v, want fs.ErrNotExist", err)
	}

	list := func(dir string, recursive bool, want ...string) {
		t.Helper()
		got, err := s.List(ctx, dir, recursive)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("List(%q, %v) = %q, %v; want %q", dir, recursive, got, err, want)
		}
	}
	list("certificates", false, "certificates/ca")
	list("certificates/ca", false, "certificates/ca/api.example.com", "certificates/ca/www.example.com")
	list("certificates/ca/www.example.com", false,
		"certificates/ca/www.example.com/www.example.com.crt", "certificates/ca/www.example.com/www.example.com.json")
	list("certificates", true, "certificates/ca",
		"certificates/ca/api.example.com", "certificates/ca/api.example.com/api.example.com.crt",
		"certificates/ca/www.example.com", "certificates/ca/www.example.com/www.example.com.crt",
		"certificates/ca/www.example.com/www.example.com.json")
	list("", false, "acme", "certificates", "last_clean.json")
	list("last_clean.json", false) // a file: nothing under it
	if _, err := s.List(ctx, "ocsp", false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("list of a missing directory: %v, want fs.ErrNotExist", err)
	}

	// Deleting a directory deletes what is under it, and only that.
	if err := s.Delete(ctx, "certificates/ca/www.example.com"); err != nil {
		t.Fatal(err)
	}
	if s.Exists(ctx, "certificates/ca/www.example.com") || s.Exists(ctx, "certificates/ca/www.example.com/www.example.com.crt") {
		t.Fatal("a deleted directory's file remains")
	}
	list("certificates/ca", false, "certificates/ca/api.example.com")
	if err := s.Delete(ctx, "certificates/ca/www.example.com"); err != nil {
		t.Fatalf("deleting a missing key: %v, want nil", err)
	}
	if err := s.Delete(ctx, "last_clean.json"); err != nil || s.Exists(ctx, "last_clean.json") {
		t.Fatalf("delete of a file: %v", err)
	}

	// Overwrite.
	if err := s.Store(ctx, "acme/ca/users/default/default.key", []byte("new")); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Load(ctx, "acme/ca/users/default/default.key"); string(got) != "new" {
		t.Fatalf("after overwrite: %q", got)
	}
}

// TestEncryptedAtRest: what etcd holds is not the plaintext, the same value sealed twice
// differs (a nonce per value), a value moved to another key fails to open, and a node with
// another key file gets a clear error rather than garbage.
func TestEncryptedAtRest(t *testing.T) {
	e := testutil.StartEtcd(t)
	s := open(t, e, "/sy/enc", randomKey(t), Options{})
	ctx := ctxT(t)
	pem := []byte("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEI\n-----END EC PRIVATE KEY-----\n")
	for _, k := range []string{"a/site.key", "b/site.key"} {
		if err := s.Store(ctx, k, pem); err != nil {
			t.Fatal(err)
		}
	}
	raw := func(k string) []byte {
		t.Helper()
		resp, err := s.Client().Get(ctx, "/sy/enc/acme/data/"+k)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("raw get %s: %v %v", k, resp, err)
		}
		return resp.Kvs[0].Value
	}
	a, b := raw("a/site.key"), raw("b/site.key")
	if bytes.Contains(a, []byte("BEGIN")) || bytes.Contains(a, []byte("PRIVATE KEY")) {
		t.Fatalf("etcd holds the plaintext: %q", a)
	}
	if bytes.Equal(a[headerLen:], b[headerLen:]) {
		t.Fatal("one value sealed twice came out the same: nonce reused")
	}

	// b's value copied over a's key: authenticated to b's key, it does not open as a's.
	if _, err := s.Client().Put(ctx, "/sy/enc/acme/data/a/site.key", string(b)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, "a/site.key"); err == nil || !strings.Contains(err.Error(), "decrypt acme key a/site.key") {
		t.Fatalf("a value moved to another key opened: %v", err)
	}
	if _, err := s.Client().Put(ctx, "/sy/enc/acme/data/a/site.key", string(a)); err != nil {
		t.Fatal(err)
	}

	other := open(t, e, "/sy/enc", randomKey(t), Options{})
	_, err := other.Load(ctx, "b/site.key")
	if err == nil || !strings.Contains(err.Error(), "storage_key_file is not the key it was written with") {
		t.Fatalf("load with the wrong key: %v, want an error naming the key file", err)
	}
	if !errors.Is(err, ErrDecrypt) || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("load with the wrong key: %v, want ErrDecrypt (not fs.ErrNotExist: certmagic would order anew)", err)
	}
	if err := other.Check(ctx); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("check with the wrong key: %v, want ErrDecrypt", err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("check with the right key: %v", err)
	}

	if _, err := s.Client().Put(ctx, "/sy/enc/acme/data/c", "hand-written"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, "c"); err == nil || !strings.Contains(err.Error(), "not a value switchyard sealed") {
		t.Fatalf("load of a hand-written value: %v", err)
	}
}

// TestLock: a lock excludes every other locker, of another node or of the same, until it is
// unlocked; a lock of a node that died (its client closed, no Unlock) is free once its lease
// runs out.
func TestLock(t *testing.T) {
	e := testutil.StartEtcd(t)
	key := randomKey(t)
	n1 := open(t, e, "/sy/lock", key, Options{})
	n2 := open(t, e, "/sy/lock", key, Options{})
	ctx := ctxT(t)

	if err := n1.Lock(ctx, "issue_cert_www.example.com"); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- n2.Lock(ctx, "issue_cert_www.example.com") }()
	select {
	case err := <-got:
		t.Fatalf("a second node took a held lock: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if ok, err := n1.TryLock(ctx, "issue_cert_www.example.com"); ok || err != nil {
		t.Fatalf("TryLock of a lock held (by the same node) = %v, %v; want false", ok, err)
	}
	// Another name, and a name the held one is a prefix of, are other locks.
	if ok, err := n1.TryLock(ctx, "issue_cert_www.example.com/x"); !ok || err != nil {
		t.Fatalf("TryLock of another name = %v, %v", ok, err)
	}
	if err := n1.Unlock(ctx, "issue_cert_www.example.com/x"); err != nil {
		t.Fatal(err)
	}
	if err := n1.Unlock(ctx, "issue_cert_www.example.com"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting node did not get the lock within 10s of its Unlock")
	}
	if err := n2.Unlock(ctx, "issue_cert_www.example.com"); err != nil {
		t.Fatal(err)
	}
	if err := n2.Unlock(ctx, "issue_cert_www.example.com"); err == nil || !strings.Contains(err.Error(), "not held") {
		t.Fatalf("unlock of a lock not held: %v", err)
	}

	// A waiter gives up when its context ends, and leaves no trace in the queue.
	if err := n1.Lock(ctx, "renew"); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := n2.Lock(short, "renew"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lock with an ending context: %v, want its deadline", err)
	}
	if err := n1.Unlock(ctx, "renew"); err != nil {
		t.Fatal(err)
	}
	if ok, err := n2.TryLock(ctx, "renew"); !ok || err != nil {
		t.Fatalf("TryLock after the waiter gave up and the holder unlocked = %v, %v", ok, err)
	}
	n2.Unlock(ctx, "renew")

	// A crashed node: its client closes with the lock held; the lock frees with the lease.
	crashed := open(t, e, "/sy/lock", key, Options{LockTTL: 2 * time.Second})
	if err := crashed.Lock(ctx, "ari"); err != nil {
		t.Fatal(err)
	}
	crashed.Close()
	if ok, err := n2.TryLock(ctx, "ari"); ok || err != nil {
		t.Fatalf("TryLock right after the holder died = %v, %v; want false until its lease runs out", ok, err)
	}
	start := time.Now()
	if err := n2.Lock(ctx, "ari"); err != nil {
		t.Fatalf("the lock of a dead node was not freed by its lease: %v", err)
	}
	t.Logf("a dead node's lock was free after %v", time.Since(start))
	n2.Unlock(ctx, "ari")
}
