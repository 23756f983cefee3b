// Package certstore keeps certmagic's ACME state (certificates, their keys, the ACME account,
// challenge tokens) in etcd, so that a fleet of stops shares it: one node orders a name's
// certificate while the others wait on its lock and then load what it stored, and any node
// answers a challenge another node started (certmagic's distributed solving reads the token
// from the storage). The DNS stop keeps its DNSSEC keys the same way in an area of its own
// (Options.Area "dnssec", dns/keystore).
//
// Key layout (PREFIX is the path of the store URL, e.g. /switchyard/prod; acme is the area):
//
//	PREFIX/acme/data/<key>            a certmagic key ("certificates/<issuer>/<name>/<name>.crt",
//	                                  ...), its value sealed with AES-256-GCM
//	PREFIX/acme/locks/<name>/<lease>  a certmagic lock (etcd's concurrency.Mutex), the name
//	                                  path-escaped, held while its lease is kept alive
//
// Values are encrypted because they hold private keys (the certificates' and the ACME
// account's) and etcd is readable by whoever may read the fleet's configuration. The 32-byte key
// comes from a file every node has the same copy of. A sealed value is
//
//	version (1 byte, 1) | modified (8 bytes, Unix ns, big endian) | nonce (12 bytes) | ciphertext
//
// with the version, the modified time and the certmagic key authenticated beside the value, so a
// value copied to another key or a forged time fails to open.
package certstore

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/switchyard/switchyard/control/store"
)

// ErrDecrypt is what reading a value fails with when it does not open with this storage's key:
// the key file differs from the one it was written with (or the value was changed in etcd).
var ErrDecrypt = errors.New("message authentication failed")

// Options tune a Storage; the zero value is what production runs.
type Options struct {
	// LockTTL is the lease of a held lock: a node that dies holding one (no Unlock, no
	// keepalive) releases it this long after its last keepalive. Default 30 s; etcd rounds it up
	// to whole seconds.
	LockTTL time.Duration
	// OpTimeout bounds each read and write (not Lock, which waits as long as its context):
	// certmagic calls the storage from contexts without deadlines, and a call to an unreachable
	// etcd would otherwise block its job for good. Default 10 s.
	OpTimeout time.Duration
	// Area is the key prefix under PREFIX that the values and locks live in, and what errors
	// call them. Default "acme".
	Area string
	// KeyField is the configuration field naming the key file, for errors. Default
	// "storage_key_file".
	KeyField string
}

// Storage is a certmagic.Storage (and certmagic.TryLocker) over etcd.
type Storage struct {
	st        *store.Store
	cli       *clientv3.Client
	area      string // acme (Options.Area)
	keyField  string // storage_key_file (Options.KeyField)
	data      string // PREFIX/acme/data/
	locks     string // PREFIX/acme/locks/
	aead      cipher.AEAD
	lockTTL   int // seconds
	opTimeout time.Duration

	mu   sync.Mutex
	held map[string]*heldLock
}

// heldLock is a lock this node holds: the session whose lease keeps it, and the mutex.
type heldLock struct {
	session *concurrency.Session
	mutex   *concurrency.Mutex
}

var (
	_ certmagic.Storage   = (*Storage)(nil)
	_ certmagic.TryLocker = (*Storage)(nil)
)

// IsURL reports whether storage names an etcd store rather than a directory.
func IsURL(storage string) bool { return strings.HasPrefix(storage, store.Scheme+"://") }

// Open makes a client of the etcd store at rawURL (etcd://HOST:PORT[,HOST:PORT...]/PREFIX)
// sealing values with the key in keyFile (see ReadKey). It does not wait for etcd: the client
// connects and reconnects by itself.
func Open(rawURL, keyFile string, o Options) (*Storage, error) {
	u, err := store.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if o.Area == "" {
		o.Area = "acme"
	}
	if o.KeyField == "" {
		o.KeyField = "storage_key_file"
	}
	key, err := readKey(keyFile, o.Area, o.KeyField)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("open %s storage: %w", o.Area, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("open %s storage: %w", o.Area, err)
	}
	st, err := store.Open(u, store.Options{})
	if err != nil {
		return nil, err
	}
	if o.LockTTL <= 0 {
		o.LockTTL = 30 * time.Second
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 10 * time.Second
	}
	return &Storage{
		st: st, cli: st.Client(), aead: aead, area: o.Area, keyField: o.KeyField,
		data: u.Prefix + "/" + o.Area + "/data/", locks: u.Prefix + "/" + o.Area + "/locks/",
		lockTTL:   int((o.LockTTL + time.Second - 1) / time.Second),
		opTimeout: o.OpTimeout,
		held:      map[string]*heldLock{},
	}, nil
}

// ReadKey reads a 32-byte AES-256 key from file: exactly 32 raw bytes, or 64 hex characters
// (surrounding white space allowed).
func ReadKey(file string) ([]byte, error) { return readKey(file, "acme", "storage_key_file") }

// readKey is ReadKey for the storage of area (named in errors).
func readKey(file, area, field string) ([]byte, error) {
	const fix = "make one with `head -c 32 /dev/urandom > FILE` and give every node of the fleet the same copy"
	if file == "" {
		return nil, fmt.Errorf("read %s storage key: no %s given; %s", area, field, fix)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read %s storage key: %w (%s)", area, err, fix)
	}
	if len(b) == 32 {
		return b, nil
	}
	if h := bytes.TrimSpace(b); len(h) == 64 {
		if key, err := hex.DecodeString(string(h)); err == nil {
			return key, nil
		}
	}
	return nil, fmt.Errorf("read %s storage key %s: %d bytes, want exactly 32 raw bytes or 64 hex characters; %s", area, file, len(b), fix)
}

// Close ends the client. Locks still held are released when their leases run out.
func (s *Storage) Close() error { return s.st.Close() }

// String names the storage in certmagic's logs (and keeps the key out of them).
func (s *Storage) String() string { return s.st.URL().String() + "/" + s.area }

// Client is the etcd client (for tests that read the raw keys).
func (s *Storage) Client() *clientv3.Client { return s.cli }

// etcdKey is where key's value lives.
func (s *Storage) etcdKey(key string) string { return s.data + key }

// dirPrefix is the etcd prefix of the keys under key taken as a directory ("" is the root).
func (s *Storage) dirPrefix(key string) string {
	if key == "" {
		return s.data
	}
	return s.data + key + "/"
}

// clean makes key the shape certmagic promises (no leading or trailing slash).
func clean(key string) string { return strings.Trim(key, "/") }

func (s *Storage) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opTimeout)
}

// Store puts value at key, sealed.
func (s *Storage) Store(ctx context.Context, key string, value []byte) error {
	key = clean(key)
	if key == "" {
		return fmt.Errorf("store %s key: empty key", s.area)
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	if _, err := s.cli.Put(ctx, s.etcdKey(key), string(s.seal(key, value, time.Now()))); err != nil {
		return fmt.Errorf("store %s key %s in etcd: %w", s.area, key, err)
	}
	return nil
}

// Load reads key's value; a missing key is an fs.ErrNotExist.
func (s *Storage) Load(ctx context.Context, key string) ([]byte, error) {
	key = clean(key)
	v, _, err := s.get(ctx, key)
	return v, err
}

// get reads and opens key's value.
func (s *Storage) get(ctx context.Context, key string) ([]byte, time.Time, error) {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.etcdKey(key))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("load %s key %s from etcd: %w", s.area, key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, time.Time{}, fmt.Errorf("load %s key %s: %w", s.area, key, fs.ErrNotExist)
	}
	return s.open(key, resp.Kvs[0].Value)
}

// Check reports whether etcd answers and the key opens what it holds (one value, if any).
func (s *Storage) Check(ctx context.Context) error {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.data, clientv3.WithPrefix(), clientv3.WithLimit(1))
	if err != nil {
		return fmt.Errorf("read %s storage %s: %w", s.area, s, err)
	}
	for _, kv := range resp.Kvs {
		if _, _, err := s.open(strings.TrimPrefix(string(kv.Key), s.data), kv.Value); err != nil {
			return err
		}
	}
	return nil
}

// Delete removes key and, as with a directory, every key under it; a missing key is no error.
func (s *Storage) Delete(ctx context.Context, key string) error {
	key = clean(key)
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	ops := []clientv3.Op{clientv3.OpDelete(s.dirPrefix(key), clientv3.WithPrefix())}
	if key != "" {
		ops = append(ops, clientv3.OpDelete(s.etcdKey(key)))
	}
	if _, err := s.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
		return fmt.Errorf("delete %s key %s in etcd: %w", s.area, key, err)
	}
	return nil
}

// Exists reports whether key is a file or a directory (a prefix of files).
func (s *Storage) Exists(ctx context.Context, key string) bool {
	isFile, isDir, err := s.kind(ctx, clean(key))
	return err == nil && (isFile || isDir)
}

// kind reports whether key has a value and whether keys live under it, in one request.
func (s *Storage) kind(ctx context.Context, key string) (isFile, isDir bool, err error) {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.etcdKey(key), clientv3.WithCountOnly()),
		clientv3.OpGet(s.dirPrefix(key), clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return false, false, fmt.Errorf("stat %s key %s in etcd: %w", s.area, key, err)
	}
	return key != "" && resp.Responses[0].GetResponseRange().Count > 0, resp.Responses[1].GetResponseRange().Count > 0, nil
}

// List returns the keys under dir as certmagic's FileStorage does: without recursive, its
// children (files and directories) only; with it, every file and directory below it. A dir with
// nothing under it is an fs.ErrNotExist unless it is a file (then the list is empty).
func (s *Storage) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	dir = clean(dir)
	lctx, cancel := s.opCtx(ctx)
	defer cancel()
	pfx := s.dirPrefix(dir)
	resp, err := s.cli.Get(lctx, pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("list %s keys under %s in etcd: %w", s.area, dir, err)
	}
	if len(resp.Kvs) == 0 {
		if isFile, _, err := s.kind(ctx, dir); err != nil || isFile {
			return nil, err
		}
		return nil, fmt.Errorf("list %s keys under %s: %w", s.area, dir, fs.ErrNotExist)
	}
	seen := map[string]bool{}
	var keys []string
	add := func(rel string) {
		if k := path.Join(dir, rel); !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	for _, kv := range resp.Kvs {
		rel := strings.TrimPrefix(string(kv.Key), pfx)
		if !recursive {
			first, _, _ := strings.Cut(rel, "/")
			add(first)
			continue
		}
		// The directories leading to the file, then the file.
		for i := range len(rel) {
			if rel[i] == '/' {
				add(rel[:i])
			}
		}
		add(rel)
	}
	sort.Strings(keys)
	return keys, nil
}

// Stat describes key: a file (its size and when it was stored) or a directory.
func (s *Storage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	key = clean(key)
	v, modified, err := s.get(ctx, key)
	if err == nil {
		return certmagic.KeyInfo{Key: key, Modified: modified, Size: int64(len(v)), IsTerminal: true}, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return certmagic.KeyInfo{}, err
	}
	_, isDir, kerr := s.kind(ctx, key)
	if kerr != nil {
		return certmagic.KeyInfo{}, kerr
	}
	if !isDir {
		return certmagic.KeyInfo{}, fmt.Errorf("stat %s key %s: %w", s.area, key, fs.ErrNotExist)
	}
	return certmagic.KeyInfo{Key: key, IsTerminal: false}, nil
}

// sealed value layout: version | modified | nonce | ciphertext (see the package comment).
const (
	sealVersion = 1
	headerLen   = 1 + 8
	nonceLen    = 12
)

// seal encrypts value for key, stored at modified.
func (s *Storage) seal(key string, value []byte, modified time.Time) []byte {
	out := make([]byte, headerLen+nonceLen, headerLen+nonceLen+len(value)+s.aead.Overhead())
	out[0] = sealVersion
	binary.BigEndian.PutUint64(out[1:headerLen], uint64(modified.UnixNano()))
	nonce := out[headerLen:]
	rand.Read(nonce) // never fails: since Go 1.24 it crashes the program rather than return an error
	return s.aead.Seal(out, nonce, value, s.additional(out[:headerLen], key))
}

// open decrypts a value sealed for key and returns it with its modified time.
func (s *Storage) open(key string, sealed []byte) ([]byte, time.Time, error) {
	if len(sealed) < headerLen+nonceLen+s.aead.Overhead() || sealed[0] != sealVersion {
		return nil, time.Time{}, fmt.Errorf("decrypt %s key %s: not a value switchyard sealed (written by hand or another tool?); delete it to have it made again", s.area, key)
	}
	header, nonce, ct := sealed[:headerLen], sealed[headerLen:headerLen+nonceLen], sealed[headerLen+nonceLen:]
	v, err := s.aead.Open(nil, nonce, ct, s.additional(header, key))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("decrypt %s key %s: %w: the %s is not the key it was written with (give every node of the fleet the same key file)", s.area, key, ErrDecrypt, s.keyField)
	}
	return v, time.Unix(0, int64(binary.BigEndian.Uint64(header[1:]))), nil
}

// Seal encrypts value as the store does for key, for a copy kept outside etcd (a node's cache
// of what it read); Unseal reads such a copy back, refusing one sealed for another key or with
// another key file.
func (s *Storage) Seal(key string, value []byte) []byte { return s.seal(key, value, time.Now()) }

// Unseal decrypts a copy Seal made for key.
func (s *Storage) Unseal(key string, sealed []byte) ([]byte, error) {
	v, _, err := s.open(key, sealed)
	return v, err
}

// additional is the data authenticated beside a value: its header and its key.
func (s *Storage) additional(header []byte, key string) []byte {
	return append(append([]byte(nil), header...), key...)
}

// lockPrefix is the etcd prefix of name's lock; the name is escaped so that no lock's prefix
// holds another's ("a" and "a/b").
func (s *Storage) lockPrefix(name string) string { return s.locks + url.PathEscape(name) }

// Lock takes the named lock, waiting until it is free or ctx is done. The lock lives on a lease
// of its own, kept alive while held: a node that dies holding it releases it within LockTTL.
func (s *Storage) Lock(ctx context.Context, name string) error {
	return s.lock(ctx, name, false)
}

// TryLock takes the named lock if it is free and reports whether it did.
func (s *Storage) TryLock(ctx context.Context, name string) (bool, error) {
	err := s.lock(ctx, name, true)
	if errors.Is(err, concurrency.ErrLocked) {
		return false, nil
	}
	return err == nil, err
}

func (s *Storage) lock(ctx context.Context, name string, try bool) error {
	// A lease of each lock's own: two locks of one name in this process (certmagic may run two
	// jobs for a name) must be two waiters, and one session's mutexes share one key.
	gctx, cancel := s.opCtx(ctx)
	lease, err := s.cli.Grant(gctx, int64(s.lockTTL))
	cancel()
	if err != nil {
		return fmt.Errorf("lock %s %s: grant lease in etcd: %w", s.area, name, err)
	}
	session, err := concurrency.NewSession(s.cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(s.lockTTL))
	if err != nil {
		return fmt.Errorf("lock %s %s: keep lease alive in etcd: %w", s.area, name, err)
	}
	m := concurrency.NewMutex(session, s.lockPrefix(name))
	if try {
		err = m.TryLock(ctx)
	} else {
		err = m.Lock(ctx)
	}
	if err != nil {
		session.Close() // revokes the lease: our waiting key goes with it
		if errors.Is(err, concurrency.ErrLocked) {
			return err
		}
		return fmt.Errorf("lock %s %s in etcd: %w", s.area, name, err)
	}
	s.mu.Lock()
	s.held[name] = &heldLock{session: session, mutex: m}
	s.mu.Unlock()
	return nil
}

// Unlock releases the named lock this node took.
func (s *Storage) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	h := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("unlock %s %s: not held by this node", s.area, name)
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	err := h.mutex.Unlock(ctx)
	// Revoking the lease also deletes the lock key, should the delete above have failed; if the
	// revoke fails too, the lease runs out within LockTTL.
	if cerr := h.session.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("unlock %s %s in etcd: %w (the lock expires with its lease)", s.area, name, err)
	}
	return nil
}

// Watch calls changed with the key of each value stored or deleted in the area, until ctx
// ends, and with "" whenever the watch had to start again (etcd unreachable, history
// compacted): then any value may have changed unseen. The client reconnects by itself.
func (s *Storage) Watch(ctx context.Context, changed func(key string)) {
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			changed("")
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range s.cli.Watch(wctx, s.data, clientv3.WithPrefix()) {
			if resp.Err() != nil {
				break
			}
			for _, ev := range resp.Events {
				changed(strings.TrimPrefix(string(ev.Kv.Key), s.data))
			}
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
