package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/yamlx"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/internal/testutil"
)

func TestParseURL(t *testing.T) {
	u, err := ParseURL("etcd://10.0.0.1:2379,[fd00::1]:2379/switchyard/prod/")
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Endpoints) != 2 || u.Endpoints[1] != "[fd00::1]:2379" || u.Prefix != "/switchyard/prod" {
		t.Fatalf("parsed %+v", u)
	}
	if u.String() != "etcd://10.0.0.1:2379,[fd00::1]:2379/switchyard/prod" {
		t.Fatalf("string %s", u)
	}
	for _, bad := range []string{"http://10.0.0.1:2379/x", "etcd://10.0.0.1:2379", "etcd://10.0.0.1/x", "etcd://:2379/x", "etcd://10.0.0.1:2379/a//b"} {
		if _, err := ParseURL(bad); err == nil || !strings.Contains(err.Error(), "etcd://HOST:PORT") {
			t.Errorf("%s: want a clear error, got %v", bad, err)
		}
	}
}

// etcdURL is the store URL of prefix on e.
func etcdURL(e *testutil.Etcd, prefix string) URL {
	return URL{Endpoints: []string{e.Endpoint}, Prefix: prefix}
}

func open(t *testing.T, e *testutil.Etcd, prefix string) *Store {
	t.Helper()
	s, err := Open(etcdURL(e, prefix), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func web(backends ...string) config.VIP {
	v := config.VIP{Name: "web", Address: "198.18.100.1", Port: 80}
	for _, b := range backends {
		v.Backends = append(v.Backends, config.Backend{Address: b, Weight: 1})
	}
	v.ApplyDefaults()
	return v
}

// addBackend adds a backend to the first VIP of the store's current listing and returns the
// revision written.
func addBackend(ctx context.Context, s *Store, addr string) (int64, error) {
	cur, err := s.List(ctx)
	if err != nil {
		return 0, err
	}
	vs := cur.VIPs()
	vs[0].Backends = append(vs[0].Backends, config.Backend{Address: addr, Weight: 1})
	ch, err := Diff(cur.VIPs(), vs)
	if err != nil {
		return 0, err
	}
	return s.Commit(ctx, cur, ch)
}

// follow runs a follower of s from sn until the test ends.
func follow(t *testing.T, s *Store, sn Snapshot) *Follower {
	f := s.NewFollower(sn)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.Run(ctx, 200*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

// nextSnapshot reads f's updates until one satisfies ok and returns it, failing the test when
// none does within 15 s.
func nextSnapshot(t *testing.T, f *Follower, what string, ok func(Snapshot) bool) Snapshot {
	t.Helper()
	var got Snapshot
	testutil.Eventually(t, 15*time.Second, func() bool {
		for {
			select {
			case sn := <-f.Updates():
				if ok(sn) {
					got = sn
					return true
				}
			default: // nothing queued: poll again later
				return false
			}
		}
	}, "no update with %s (state %+v)", what, func() any { return f.State() })
	return got
}

func TestRoundTripWatchAndConflict(t *testing.T) {
	e := testutil.StartEtcd(t)
	s := open(t, e, "/sy/test")
	ctx := ctxT(t)
	added, err := s.Seed(ctx, []config.VIP{web("198.18.3.1", "198.18.3.2")})
	if err != nil || len(added) != 1 {
		t.Fatalf("seed: %v %v", added, err)
	}
	if again, err := s.Seed(ctx, []config.VIP{web("198.18.3.9")}); err != nil || len(again) != 0 {
		t.Fatalf("seed twice: %v %v (a seed never overwrites)", again, err)
	}
	sn, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	vs := sn.VIPs()
	if len(vs) != 1 || vs[0].Name != "web" || len(vs[0].Backends) != 2 || vs[0].Backends[1].Address != "198.18.3.2" || sn.Err() != nil {
		t.Fatalf("listed %+v err %v", vs, sn.Err())
	}

	f := s.NewFollower(sn)
	fctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.Run(fctx, 200*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	// A change computed from sn is written and delivered by the watch.
	next := web("198.18.3.1", "198.18.3.2", "198.18.3.3")
	ch, err := Diff(sn.VIPs(), []config.VIP{next})
	if err != nil || len(ch) != 1 {
		t.Fatalf("diff %v %v", ch, err)
	}
	rev, err := s.Commit(ctx, sn, ch)
	if err != nil {
		t.Fatal(err)
	}
	got := nextSnapshot(t, f, "the added backend", func(u Snapshot) bool { return u.Revision >= rev })
	if b := got.VIPs()[0].Backends; len(b) != 3 || b[2].Address != "198.18.3.3" {
		t.Fatalf("watched %+v", b)
	}
	// The same change again from the old snapshot would lose the first: refused.
	other := web("198.18.3.1", "198.18.3.4")
	ch2, _ := Diff(sn.VIPs(), []config.VIP{other})
	if _, err := s.Commit(ctx, sn, ch2); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale commit: want ErrConflict, got %v", err)
	}
	// A VIP created by another writer after the snapshot also conflicts with an add of it.
	api := config.VIP{Name: "api", Address: "198.18.100.2", Port: 80}
	if _, err := s.Commit(ctx, got, []Change{{Name: "api", VIP: &api}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, got, []Change{{Name: "api", VIP: &api}}); !errors.Is(err, ErrConflict) {
		t.Fatalf("add twice from one snapshot: want ErrConflict, got %v", err)
	}
	// A hand-written bad value is reported, the other VIPs stay.
	if _, err := s.Client().Put(ctx, s.VIPKey("bad"), "address: [not yaml"); err != nil {
		t.Fatal(err)
	}
	bad := nextSnapshot(t, f, "the bad key", func(u Snapshot) bool { return u.Err() != nil })
	if !strings.Contains(bad.Err().Error(), "/sy/test/vips/bad") || len(bad.VIPs()) != 2 {
		t.Fatalf("bad entry: %v, vips %d", bad.Err(), len(bad.VIPs()))
	}
	// Deletes are delivered.
	cur := f.Snapshot()
	if _, err := s.Commit(ctx, cur, []Change{{Name: "api"}, {Name: "bad"}}); err != nil {
		t.Fatal(err)
	}
	after := nextSnapshot(t, f, "the deletes", func(u Snapshot) bool { return len(u.Entries) == 1 })
	if after.Err() != nil || after.VIPs()[0].Name != "web" {
		t.Fatalf("after deletes: %+v", after)
	}
	if st := f.State(); !st.Connected || st.Events < 4 {
		t.Fatalf("state %+v", st)
	}
}

// TestFollowerResumesFromLastRevision: a follower started from an old snapshot gets every
// change made since, from the watch (no re-list).
func TestFollowerResumesFromLastRevision(t *testing.T) {
	e := testutil.StartEtcd(t)
	s := open(t, e, "/sy/resume")
	ctx := ctxT(t)
	if _, err := s.Seed(ctx, []config.VIP{web("198.18.3.1")}); err != nil {
		t.Fatal(err)
	}
	old, _ := s.List(ctx)
	cur := old
	for _, b := range []string{"198.18.3.2", "198.18.3.3"} {
		vs := cur.VIPs()
		vs[0].Backends = append(vs[0].Backends, config.Backend{Address: b, Weight: 1})
		ch, _ := Diff(cur.VIPs(), vs)
		if _, err := s.Commit(ctx, cur, ch); err != nil {
			t.Fatal(err)
		}
		cur, _ = s.List(ctx)
	}
	f := s.NewFollower(old)
	fctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.Run(fctx, 200*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()
	sn := nextSnapshot(t, f, "the changes since the old snapshot", func(u Snapshot) bool { return u.Revision >= cur.Revision })
	if len(sn.VIPs()[0].Backends) != 3 {
		t.Fatalf("resumed to %+v", sn.VIPs())
	}
	if st := f.State(); st.Resyncs != 0 {
		t.Fatalf("resumed with a re-list: %+v", st)
	}
}

// TestFollowerRelistsAfterCompaction: when the revision to resume from is compacted away, the
// follower lists the prefix again and delivers the current state.
func TestFollowerRelistsAfterCompaction(t *testing.T) {
	e := testutil.StartEtcd(t)
	s := open(t, e, "/sy/compact")
	ctx := ctxT(t)
	if _, err := s.Seed(ctx, []config.VIP{web("198.18.3.1")}); err != nil {
		t.Fatal(err)
	}
	old, _ := s.List(ctx)
	vs := old.VIPs()
	vs[0].Backends[0].Weight = 5
	ch, _ := Diff(old.VIPs(), vs)
	rev, err := s.Commit(ctx, old, ch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Put(ctx, "/sy/other", "x"); err != nil { // a later revision to compact to
		t.Fatal(err)
	}
	if _, err := s.Client().Compact(ctx, rev+1, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	f := s.NewFollower(old)
	fctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.Run(fctx, 200*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()
	sn := nextSnapshot(t, f, "the re-list", func(u Snapshot) bool { return u.Revision > rev })
	if sn.VIPs()[0].Backends[0].Weight != 5 {
		t.Fatalf("re-listed %+v", sn.VIPs())
	}
	if st := f.State(); st.Resyncs != 1 {
		t.Fatalf("want one re-list, state %+v", st)
	}
}

// TestFollowerAcrossRestart: etcd killed, the follower says disconnected and delivers nothing;
// etcd back with its data dir, a change written then arrives.
func TestFollowerAcrossRestart(t *testing.T) {
	e := testutil.StartEtcd(t)
	s := open(t, e, "/sy/restart")
	ctx := ctxT(t)
	if _, err := s.Seed(ctx, []config.VIP{web("198.18.3.1")}); err != nil {
		t.Fatal(err)
	}
	first, _ := s.List(ctx)
	f := s.NewFollower(first)
	fctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.Run(fctx, 200*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()

	e.Stop()
	testutil.Eventually(t, 10*time.Second, func() bool { return !f.State().Connected }, "still connected after etcd was killed")
	select {
	case sn := <-f.Updates():
		t.Fatalf("a snapshot delivered while etcd is down: %+v", sn)
	case <-time.After(time.Second):
	}
	if vs := f.Snapshot().VIPs(); len(vs) != 1 {
		t.Fatalf("state lost while disconnected: %+v", vs)
	}
	e.Start(t)
	w := open(t, e, "/sy/restart")
	rev, err := addBackend(ctxT(t), w, "198.18.3.2")
	if err != nil {
		t.Fatal(err)
	}
	sn := nextSnapshot(t, f, "the change made after the restart", func(u Snapshot) bool { return u.Revision >= rev })
	if len(sn.VIPs()[0].Backends) != 2 {
		t.Fatalf("after restart %+v", sn.VIPs())
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return f.State().Connected }, "not connected again after etcd came back")
}

// TestCacheRoundTrip: the snapshot a node applied survives in its cache file, with the mod
// revisions the write guards need; a cache of another store is refused.
func TestCacheRoundTrip(t *testing.T) {
	s, err := Open(URL{Endpoints: []string{"127.0.0.1:1"}, Prefix: "/sy/cache"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v := web("198.18.3.1", "198.18.3.2")
	sn := Snapshot{Revision: 42, Entries: map[string]Entry{"web": {VIP: v, ModRevision: 40}, "bad": {Err: errors.New("x")}}}
	path := t.TempDir() + "/lb.store.json"
	if err := s.SaveCache(path, sn); err != nil {
		t.Fatal(err)
	}
	got, err := s.LoadCache(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Revision != 42 || len(got.Entries) != 1 || got.Entries["web"].ModRevision != 40 || len(got.VIPs()[0].Backends) != 2 {
		t.Fatalf("loaded %+v", got)
	}
	other, _ := Open(URL{Endpoints: []string{"127.0.0.1:1"}, Prefix: "/sy/other"}, Options{})
	defer other.Close()
	if _, err := other.LoadCache(path); err == nil || !strings.Contains(err.Error(), "not etcd://127.0.0.1:1/sy/other") {
		t.Fatalf("cache of another store: %v", err)
	}
}

// TestGuardTravelsWithVIP: a VIP's guard is part of its key's value, so a change of the guard is
// a change of the VIP for Diff, and it decodes as it was written.
func TestGuardTravelsWithVIP(t *testing.T) {
	v := config.VIP{Name: "web", Address: "198.18.100.1", Port: 80, Protocol: "tcp",
		Guard: &config.Guard{Deny: []string{"203.0.113.0/24"}, PerSource: &config.SourceLimit{Limit: config.Limit{Rate: 10}, PrefixV4: 24}}}
	b, err := Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	var back config.VIP
	if err := yamlx.Decode(b, &back); err != nil {
		t.Fatal(err)
	}
	if !back.Guard.Equal(v.Guard) {
		t.Fatalf("decoded guard %+v, want %+v:\n%s", back.Guard, v.Guard, b)
	}
	w := v.Clone()
	w.Guard.Deny = append(w.Guard.Deny, "198.51.100.0/24")
	changes, err := Diff([]config.VIP{v}, []config.VIP{w})
	if err != nil || len(changes) != 1 || changes[0].VIP == nil {
		t.Fatalf("a guard change: %v %+v, want one put", err, changes)
	}
}
