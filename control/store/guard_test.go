package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/internal/layout"
	"github.com/switchyard/switchyard/internal/testutil"
)

// TestGlobalGuardInStore: the global guard (PREFIX/guard) is seeded once, listed and watched at
// the VIPs' revision, changed through a guarded commit (a change computed before another
// writer's guard change conflicts, whether it edits the guard or a VIP), and kept in the node's
// cache. A hand-written bad guard (overlapping prefixes, a rate of 0, more rules than the maps
// hold, not YAML) makes the snapshot invalid with an error naming the key and the fix; a write
// to another key of the prefix (the node registry) delivers no snapshot.
func TestGlobalGuardInStore(t *testing.T) {
	e := testutil.StartEtcd(t)
	s := open(t, e, "/sy/guard")
	ctx := ctxT(t)
	if _, err := s.Seed(ctx, []config.VIP{web("198.18.3.1")}); err != nil {
		t.Fatal(err)
	}
	g := &config.Guard{Deny: []string{"203.0.113.0/24"}, PerSource: &config.SourceLimit{Limit: config.Limit{Rate: 50}, PrefixV4: 24}}
	if wrote, err := s.SeedGuard(ctx, g); err != nil || !wrote {
		t.Fatalf("seed guard: %v %v", wrote, err)
	}
	if wrote, err := s.SeedGuard(ctx, &config.Guard{Deny: []string{"198.51.100.0/24"}}); err != nil || wrote {
		t.Fatalf("seed guard twice: %v %v (a seed never overwrites)", wrote, err)
	}
	sn, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !sn.Guard.Equal(g) || sn.GuardRevision == 0 || sn.Err() != nil || len(sn.VIPs()) != 1 {
		t.Fatalf("listed guard %+v rev %d err %v", sn.Guard, sn.GuardRevision, sn.Err())
	}

	f := follow(t, s, sn)

	// A change of the global guard is delivered by the watch.
	next := g.Clone()
	next.Deny = append(next.Deny, "198.51.100.0/24")
	rev, err := s.Commit(ctx, sn, []Change{*DiffGuard(sn.Guard, next)})
	if err != nil {
		t.Fatal(err)
	}
	got := nextSnapshot(t, f, "the guard change", func(u Snapshot) bool { return u.Revision >= rev })
	if !got.Guard.Equal(next) || got.GuardRevision != rev {
		t.Fatalf("watched guard %+v rev %d", got.Guard, got.GuardRevision)
	}
	// From the old snapshot, a guard change and a VIP change both conflict: the rules are
	// checked together, so neither may pass a guard change it did not see.
	if _, err := s.Commit(ctx, sn, []Change{{Global: true}}); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale guard commit: want ErrConflict, got %v", err)
	}
	w := web("198.18.3.1", "198.18.3.2")
	if _, err := s.Commit(ctx, sn, []Change{{Name: "web", VIP: &w}}); !errors.Is(err, ErrConflict) {
		t.Fatalf("VIP commit on a stale guard: want ErrConflict, got %v", err)
	}
	if DiffGuard(next, next.Clone()) != nil || DiffGuard(nil, &config.Guard{}) != nil {
		t.Fatal("DiffGuard of equal guards is not nil")
	}

	// Another key of the prefix: no snapshot.
	if err := s.RegisterNode(ctx, config.Node{Name: "lb1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case u := <-f.Updates():
		t.Fatalf("a snapshot for the node registry: %+v", u)
	case <-time.After(time.Second):
	}

	// Bad guards written by hand.
	many := make([]string, layout.GuardRulesMax+1)
	for i := range many {
		many[i] = fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)
	}
	for _, tc := range []struct{ value, want string }{
		{"deny: [203.0.113.0/24, 203.0.113.128/25]", "guard.deny[1]: 203.0.113.128/25 overlaps 203.0.113.0/24"},
		{"per_vip: {rate: 0}", "guard.per_vip.rate: rate 0 is not a limit"},
		{"deny: [" + strings.Join(many, ", ") + "]", "4097 deny prefixes in all, the maps hold 4096"},
		{"deny: 203.0.113.0/24: x", "not a guard in YAML"},
	} {
		if _, err := s.Client().Put(ctx, s.GuardKey(), tc.value); err != nil {
			t.Fatal(err)
		}
		bad := nextSnapshot(t, f, "the bad guard", func(u Snapshot) bool { return u.Err() != nil && strings.Contains(u.Err().Error(), tc.want) })
		if msg := bad.Err().Error(); !strings.Contains(msg, "store key /sy/guard/guard: ") || !strings.Contains(msg, "fix it with `switchyard guard ...`") {
			t.Errorf("bad guard %q: %v, want the key and the fix", tc.value, msg)
		}
		if bad.Guard != nil || len(bad.VIPs()) != 1 {
			t.Errorf("bad guard: guard %+v, vips %d", bad.Guard, len(bad.VIPs()))
		}
	}

	// Deleted: no global guard.
	cur := f.Snapshot()
	if _, err := s.Commit(ctx, cur, []Change{{Global: true}}); err != nil {
		t.Fatal(err)
	}
	gone := nextSnapshot(t, f, "the guard deleted", func(u Snapshot) bool { return u.GuardRevision == 0 })
	if gone.Guard != nil || gone.Err() != nil {
		t.Fatalf("after delete: %+v %v", gone.Guard, gone.Err())
	}

	// The cache keeps the guard.
	path := t.TempDir() + "/lb.store.json"
	if err := s.SaveCache(path, got); err != nil {
		t.Fatal(err)
	}
	back, err := s.LoadCache(path)
	if err != nil || !back.Guard.Equal(next) || back.GuardRevision != got.GuardRevision {
		t.Fatalf("cached guard %+v rev %d: %v", back.Guard, back.GuardRevision, err)
	}
}
