package store

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/internal/yamlx"
)

// The global guard: PREFIX/guard holds the fleet's `guard:` block (allow and deny prefixes, and
// the limits every VIP without its own takes; docs/xdp.md "The guard") as YAML, the shape of
// lb.yaml's `guard:`. It travels with the VIPs: one listing and one watch read both at one
// revision, and every write compares the key, so a change of the global rules and one of a VIP's
// never pass each other (the rule count is checked over both).

// GuardKey is the key of the fleet's global guard.
func (s *Store) GuardKey() string { return s.u.Prefix + "/guard" }

// decodeGuard reads the global guard's value, checked as a file's `guard:` is (prefixes
// masked and not overlapping, rates above 0, no more rules than the maps hold).
func (s *Store) decodeGuard(value []byte) (*config.Guard, error) {
	var g config.Guard
	if err := yamlx.Decode(value, &g); err != nil {
		return nil, fmt.Errorf("store key %s: not a guard in YAML (%v): fix it with `switchyard guard ...` or `etcdctl put`, or delete it", s.GuardKey(), err)
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("store key %s: %w: fix it with `switchyard guard ...` or `etcdctl put`", s.GuardKey(), err)
	}
	if g.Empty() {
		return nil, nil
	}
	return &g, nil
}

// DiffGuard is the change that turns the global guard from into to, or nil when they are equal.
func DiffGuard(from, to *config.Guard) *Change {
	if from.Empty() && to.Empty() || from.Equal(to) {
		return nil
	}
	if to.Empty() {
		return &Change{Global: true}
	}
	return &Change{Global: true, Guard: to.Clone()}
}

// guardOp is the write of a global guard change.
func (s *Store) guardOp(c Change) (clientv3.Op, error) {
	if c.Guard == nil {
		return clientv3.OpDelete(s.GuardKey()), nil
	}
	b, err := encodeYAML(c.Guard)
	if err != nil {
		return clientv3.Op{}, fmt.Errorf("encode global guard: %w", err)
	}
	return clientv3.OpPut(s.GuardKey(), string(b)), nil
}

// SeedGuard writes the global guard g when the store holds none; it reports whether it wrote.
func (s *Store) SeedGuard(ctx context.Context, g *config.Guard) (bool, error) {
	if g.Empty() {
		return false, nil
	}
	op, err := s.guardOp(Change{Global: true, Guard: g})
	if err != nil {
		return false, err
	}
	k := s.GuardKey()
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(op).Commit()
	if err != nil {
		return false, fmt.Errorf("seed %s: %w", s.u, s.Explain(err))
	}
	return resp.Succeeded, nil
}
