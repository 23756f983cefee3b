// Package store keeps a fleet's desired L4 state in etcd: every VIP, with its backends and
// health check, under one key of a prefix. Balancers list the prefix, watch it from the listed
// revision and feed each new snapshot into the same desired-state → reconcile path that a YAML
// file feeds on a single node. Writes are transactions that fail when the prefix changed since
// the snapshot they were computed from, so concurrent changes from several nodes or operators
// never overwrite each other.
//
// Key layout (PREFIX is the path of the store URL, e.g. /switchyard/prod):
//
//	PREFIX/vips/<name>   the VIP as YAML, the shape of one entry of lb.yaml's `vips:`
//	                     (name, address, port, protocol, hash, health, backends), name
//	                     path-escaped in the key
//	PREFIX/guard         the global guard as YAML, the shape of lb.yaml's `guard:` (guard.go)
//
// One key per VIP, not per backend: a VIP's backend set is what its Maglev table is built from,
// and one key makes every change to it (several backends added at once, a drain and a weight)
// atomic on every node.
package store

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"gopkg.in/yaml.v3"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/internal/yamlx"
)

// Scheme is the URL scheme of an etcd store.
const Scheme = "etcd"

// URL is a parsed store address: etcd://HOST:PORT[,HOST:PORT...]/PREFIX, or
// etcds://HOST:PORT[,...]/PREFIX?ca=FILE&cert=FILE&key=FILE over TLS (or
// ?ca=FILE&user=NAME&password_file=FILE for a password user).
type URL struct {
	Endpoints []string
	// Prefix starts with / and has no trailing /.
	Prefix string
	// TLS is set for etcds:// (tls.go).
	TLS *TLS
}

// String renders the URL back.
func (u URL) String() string {
	if u.TLS != nil {
		return SecureScheme + "://" + strings.Join(u.Endpoints, ",") + u.Prefix + u.TLS.query()
	}
	return Scheme + "://" + strings.Join(u.Endpoints, ",") + u.Prefix
}

// ParseURL reads etcd://HOST:PORT[,HOST:PORT...]/PREFIX or
// etcds://HOST:PORT[,...]/PREFIX[?ca=FILE&cert=FILE&key=FILE|&user=NAME&password_file=FILE].
func ParseURL(s string) (URL, error) {
	bad := func(why string) (URL, error) {
		return URL{}, fmt.Errorf("invalid store %q: %s: use etcd://HOST:PORT[,HOST:PORT...]/PREFIX, e.g. etcd://10.0.0.1:2379,10.0.0.2:2379/switchyard/prod, or etcds://...?ca=CA.pem&cert=NODE.pem&key=NODE-key.pem over TLS (?ca=CA.pem&user=NAME&password_file=FILE for a password user)", s, why)
	}
	var u URL
	rest, ok := strings.CutPrefix(s, Scheme+"://")
	if !ok {
		if rest, ok = strings.CutPrefix(s, SecureScheme+"://"); !ok {
			return bad("not an etcd:// or etcds:// URL")
		}
		var query string
		rest, query, _ = strings.Cut(rest, "?")
		t, err := parseTLS(query)
		if err != nil {
			return bad(err.Error())
		}
		u.TLS = t
	} else if strings.Contains(rest, "?") {
		return bad("parameters (ca, cert, key, user, password_file) need etcds://: a password over plain etcd:// would cross the network in clear")
	}
	hosts, path, _ := strings.Cut(rest, "/")
	path = strings.Trim(path, "/")
	if path == "" {
		return bad("no prefix")
	}
	if strings.Contains(path, "//") {
		return bad("empty path segment in the prefix")
	}
	for _, h := range strings.Split(hosts, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" || port == "" {
			return bad(fmt.Sprintf("endpoint %q is not HOST:PORT", h))
		}
		u.Endpoints = append(u.Endpoints, net.JoinHostPort(host, port))
	}
	u.Prefix = "/" + path
	return u, nil
}

// Options configure a client.
type Options struct {
	// Dial, when set, makes the connections (the lab dials from inside a namespace).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// DialTimeout bounds the first connection; default 3s.
	DialTimeout time.Duration
}

// Store is a client of one prefix.
type Store struct {
	u   URL
	cli *clientv3.Client
	tls *tlsFiles // etcds:// only
	// dial is how the client connects (Options.Dial, else TCP), for the diagnosis of errors.
	dial func(ctx context.Context, addr string) (net.Conn, error)
}

// Open makes a client. It does not wait for the store: etcd may be down, and the client
// reconnects by itself.
func Open(u URL, o Options) (*Store, error) {
	if o.DialTimeout == 0 {
		o.DialTimeout = 3 * time.Second
	}
	scheme := "http://"
	var tlsCfg *tls.Config
	var files *tlsFiles
	if u.TLS != nil {
		files = newTLSFiles(u.TLS)
		var err error
		if tlsCfg, err = files.current(); err != nil { // bad files fail at start
			return nil, fmt.Errorf("open store %s: %w", u, err)
		}
		scheme = "https://"
	}
	eps := make([]string, len(u.Endpoints))
	for i, e := range u.Endpoints {
		eps[i] = scheme + e
	}
	// Reconnect quickly once etcd is back (gRPC's default backoff grows to two minutes), and
	// detect a silently dead connection (a cut link) by keepalive within seconds.
	dialOpts := []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
		MinConnectTimeout: 2 * time.Second,
	})}
	if o.Dial != nil {
		dialOpts = append(dialOpts, grpc.WithContextDialer(o.Dial))
	}
	if files != nil {
		// After etcd's client's own credentials, so these are the ones used (tlsreload.go).
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(files.credentials()))
	}
	if u.TLS != nil && u.TLS.User != "" {
		dialOpts = append(dialOpts, newPasswordAuth(u.TLS).dialOptions()...)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: eps, DialTimeout: o.DialTimeout, DialOptions: dialOpts, TLS: tlsCfg,
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second,
		PermitWithoutStream: true, Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", u, err)
	}
	dial := o.Dial
	if dial == nil {
		d := &net.Dialer{}
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	return &Store{u: u, cli: cli, tls: files, dial: dial}, nil
}

// Close ends the client.
func (s *Store) Close() error { return s.cli.Close() }

// URL is the store's address.
func (s *Store) URL() URL { return s.u }

// Client is the etcd client (for tests and tools that read other keys).
func (s *Store) Client() *clientv3.Client { return s.cli }

func (s *Store) vipsPrefix() string { return s.u.Prefix + "/vips/" }

// VIPKey is the key of a VIP.
func (s *Store) VIPKey(name string) string { return s.vipsPrefix() + url.PathEscape(name) }

// Entry is one VIP key as read.
type Entry struct {
	VIP config.VIP
	// ModRevision is the revision of the key's last change.
	ModRevision int64
	// Err is set when the value is not a valid VIP (written by hand with etcdctl); VIP is then
	// empty but for its name.
	Err error
}

// Snapshot is the fleet's desired VIPs and global guard at a revision of the store.
type Snapshot struct {
	// Revision is the store revision the snapshot reflects.
	Revision int64
	// Entries by VIP name.
	Entries map[string]Entry
	// Guard is the global guard (nil: none, or GuardErr); GuardRevision the mod revision of its
	// key (0: absent).
	Guard         *config.Guard
	GuardRevision int64
	// GuardErr is set when the guard's value is invalid (written by hand with etcdctl).
	GuardErr error
}

// VIPs lists the valid VIPs in name order, so that every node sees the same list.
func (sn Snapshot) VIPs() []config.VIP {
	names := make([]string, 0, len(sn.Entries))
	for n, e := range sn.Entries {
		if e.Err == nil {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := make([]config.VIP, 0, len(names))
	for _, n := range names {
		out = append(out, copyVIP(sn.Entries[n].VIP))
	}
	return out
}

// copyVIP is a deep copy: callers change the VIPs they get, never the snapshot's.
func copyVIP(v config.VIP) config.VIP { return v.Clone() }

// Err reports an invalid global guard, else the first invalid entry (in name order), or nil.
func (sn Snapshot) Err() error {
	if sn.GuardErr != nil {
		return sn.GuardErr
	}
	names := make([]string, 0, len(sn.Entries))
	for n := range sn.Entries {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := sn.Entries[n].Err; err != nil {
			return err
		}
	}
	return nil
}

// clone copies the entry map, so that a snapshot handed out never changes.
func (sn Snapshot) clone() Snapshot {
	out := sn
	out.Entries = make(map[string]Entry, len(sn.Entries))
	for k, v := range sn.Entries {
		out.Entries[k] = v
	}
	return out
}

// decode reads one key: the name comes from the key, and must match the value's name.
func (s *Store) decode(key string, value []byte, modRev int64) (string, Entry) {
	esc := strings.TrimPrefix(key, s.vipsPrefix())
	name, err := url.PathUnescape(esc)
	if err != nil {
		name = esc
	}
	e := Entry{ModRevision: modRev}
	bad := func(format string, args ...any) (string, Entry) {
		e.VIP = config.VIP{Name: name}
		e.Err = fmt.Errorf("store key %s: %s", key, fmt.Sprintf(format, args...))
		return name, e
	}
	if err := yamlx.Decode(value, &e.VIP); err != nil { // line, field and fix (internal/yamlx)
		return bad("not a VIP in YAML (%v): fix it with `etcdctl put` or delete it", err)
	}
	if e.VIP.Name != name {
		return bad("name %q differs from the key's %q: a VIP's key is PREFIX/vips/<its name>", e.VIP.Name, name)
	}
	return name, e
}

// Encode is the value of a VIP's key.
func Encode(v config.VIP) ([]byte, error) {
	b, err := encodeYAML(v)
	if err != nil {
		return nil, fmt.Errorf("encode vip %s: %w", v.Name, err)
	}
	return b, nil
}

func encodeYAML(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// List reads every VIP and the global guard at one revision.
func (s *Store) List(ctx context.Context) (Snapshot, error) {
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.vipsPrefix(), clientv3.WithPrefix()), clientv3.OpGet(s.GuardKey())).Commit()
	if err != nil {
		return Snapshot{}, fmt.Errorf("list %s: %w", s.u, s.Explain(err))
	}
	sn := Snapshot{Revision: resp.Header.Revision, Entries: map[string]Entry{}}
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			s.apply(&sn, string(kv.Key), kv.Value, kv.ModRevision)
		}
	}
	return sn, nil
}

// apply sets the key's value (nil value and modRev 0: deleted) in sn; it reports whether the
// key is one of the snapshot's (a VIP or the global guard), not another key of the prefix.
func (s *Store) apply(sn *Snapshot, key string, value []byte, modRev int64) bool {
	switch {
	case key == s.GuardKey():
		sn.Guard, sn.GuardErr, sn.GuardRevision = nil, nil, modRev
		if modRev != 0 {
			sn.Guard, sn.GuardErr = s.decodeGuard(value)
		}
	case strings.HasPrefix(key, s.vipsPrefix()):
		name, e := s.decode(key, value, modRev)
		if modRev == 0 {
			delete(sn.Entries, name)
		} else {
			sn.Entries[name] = e
		}
	default:
		return false
	}
	return true
}

// ErrConflict is returned by Commit when the store changed since the base snapshot.
var ErrConflict = errors.New("the store changed since this node's snapshot (another node or operator wrote meanwhile)")

// Change puts (VIP set) or deletes (VIP nil) the VIP Name; with Global, it puts (Guard set) or
// deletes (Guard nil) the global guard instead (DiffGuard).
type Change struct {
	Name string
	VIP  *config.VIP
	// Global marks a change of the global guard.
	Global bool
	Guard  *config.Guard
}

// Commit writes changes computed from base in one transaction. It fails with ErrConflict when
// any VIP key changed after base.Revision, when a changed key is not as base saw it (deleted,
// or created meanwhile), or when the global guard is not as base saw it: no update is ever
// lost, and rules checked together (the guard's count with the VIPs') are written together. It
// returns the new revision.
func (s *Store) Commit(ctx context.Context, base Snapshot, changes []Change) (int64, error) {
	if len(changes) == 0 {
		return base.Revision, nil
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.vipsPrefix()).WithPrefix(), "<", base.Revision+1),
		clientv3.Compare(clientv3.ModRevision(s.GuardKey()), "=", base.GuardRevision)}
	var ops []clientv3.Op
	for _, c := range changes {
		if c.Global {
			op, err := s.guardOp(c)
			if err != nil {
				return 0, err
			}
			ops = append(ops, op)
			continue
		}
		k := s.VIPKey(c.Name)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", base.Entries[c.Name].ModRevision))
		if c.VIP == nil {
			ops = append(ops, clientv3.OpDelete(k))
			continue
		}
		b, err := Encode(*c.VIP)
		if err != nil {
			return 0, err
		}
		ops = append(ops, clientv3.OpPut(k, string(b)))
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", s.u, s.Explain(err))
	}
	if !resp.Succeeded {
		return 0, ErrConflict
	}
	return resp.Header.Revision, nil
}

// Diff lists the changes that turn the VIPs of from into those of to (by name).
func Diff(from, to []config.VIP) ([]Change, error) {
	old := map[string][]byte{}
	for _, v := range from {
		b, err := Encode(v)
		if err != nil {
			return nil, err
		}
		old[v.Name] = b
	}
	var out []Change
	seen := map[string]bool{}
	for i := range to {
		v := to[i]
		seen[v.Name] = true
		b, err := Encode(v)
		if err != nil {
			return nil, err
		}
		if ob, ok := old[v.Name]; !ok || !bytes.Equal(ob, b) {
			out = append(out, Change{Name: v.Name, VIP: &v})
		}
	}
	for _, v := range from {
		if !seen[v.Name] {
			out = append(out, Change{Name: v.Name})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Seed writes the VIPs that the store does not hold yet (by name), each only if its key is
// still absent; it returns the names written. It is how a fleet starts from a node's file.
func (s *Store) Seed(ctx context.Context, vips []config.VIP) ([]string, error) {
	var added []string
	for _, v := range vips {
		b, err := Encode(v)
		if err != nil {
			return added, err
		}
		k := s.VIPKey(v.Name)
		resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, string(b))).Commit()
		if err != nil {
			return added, fmt.Errorf("seed %s: %w", s.u, s.Explain(err))
		}
		if resp.Succeeded {
			added = append(added, v.Name)
		}
	}
	return added, nil
}
