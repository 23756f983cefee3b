package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/control/store"
)

// storeLink is the daemon's side of the fleet store (`lb run --store`): the VIPs and the global
// guard come from the store's snapshots, through the same switchToLocked path a file reload takes, and CLI changes
// are written to the store and applied when the watch delivers them, like every other node's.
type storeLink struct {
	s *store.Store
	f *store.Follower

	// Guarded by the daemon's mu.
	applied     int64  // revision of the VIPs in effect
	appliedSlot int    // slots written by the apply of that revision
	refused     string // why the last snapshot delivered was not applied
	refusedRev  int64
	refusals    uint64
	cache       string // the snapshot cache file

	mu                        sync.Mutex // guards the write counters
	writes, conflicts, errors uint64
}

// checkStoreOptions refuses a store with VIPs or a global guard in the file: with a store, the
// fleet's VIPs and guard rules live there only, so that no node can serve a VIP the others do
// not know, nor drop what the others let through.
func checkStoreOptions(opt Options) error {
	if opt.Store == "" {
		return nil
	}
	if _, err := store.ParseURL(opt.Store); err != nil {
		return err
	}
	if n := len(opt.Config.VIPs); n > 0 {
		return fmt.Errorf("vips: %d VIPs in the configuration file, but the daemon runs with --store %s: the fleet's VIPs live in the store; write them there once with `switchyard lb store seed --store URL FILE`, then remove vips: from this node's file", n, opt.Store)
	}
	if !opt.Config.Guard.Empty() {
		return fmt.Errorf("guard: a global guard in the configuration file, but the daemon runs with --store %s: the fleet's guard rules live in the store; write them there once with `switchyard lb store seed --store URL FILE` (or `switchyard guard ...`), then remove guard: from this node's file", opt.Store)
	}
	return nil
}

// openStore lists the store before the first reconcile, waiting (and saying so) while it is
// unreachable: a forwarder adopted from the pins keeps forwarding with its last state meanwhile,
// and a fresh one is not attached on maps that a later listing would have to fill.
func (d *Daemon) openStore(ctx context.Context) error {
	if d.opt.Store == "" {
		return nil
	}
	u, _ := store.ParseURL(d.opt.Store)
	s, err := store.Open(u, store.Options{})
	if err != nil {
		return err
	}
	sn, listErr, err := d.firstSnapshot(ctx, s)
	if err != nil {
		s.Close()
		return err
	}
	next, err := d.fromSnapshot(sn)
	if err != nil {
		s.Close()
		return fmt.Errorf("the store's state at revision %d is refused: %w: fix it in the store (a pinned forwarder keeps its last state meanwhile)", sn.Revision, err)
	}
	d.cfg.VIPs, d.cfg.Guard = next.VIPs, next.Guard // in place: Run holds d.cfg
	d.store = &storeLink{s: s, f: s.NewFollower(sn), applied: sn.Revision, cache: cachePath(d.cfg)}
	if listErr != nil {
		d.store.f.Disconnected(listErr)
		d.log.Warn("store unreachable: starting from the snapshot this node applied last; the watch resumes from it when the store answers",
			"store", u.String(), "revision", sn.Revision, "cache", d.store.cache, "err", listErr)
		return nil
	}
	d.saveCacheLocked(sn)
	d.log.Info("store listed", "store", u.String(), "revision", sn.Revision, "vips", len(next.VIPs))
	d.registerNode(ctx, s)
	return nil
}

// registerNode writes this node's name and labels into the store's node registry, which VIP
// changes naming nodes (announce_from, overrides) are checked against. A failure is logged: the
// node forwards and announces without it, and registers at its next start.
func (d *Daemon) registerNode(ctx context.Context, s *store.Store) {
	if d.cfg.BGP == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n := d.cfg.BGP.NodeID()
	if err := s.RegisterNode(ctx, n); err != nil {
		d.log.Warn("store: node not registered: VIP changes naming it in announce_from are refused until it is (restart lb run once the store answers)", "node", n.Name, "err", err)
		return
	}
	d.log.Info("store: node registered", "node", n.Name, "labels", n.Labels)
}

// checkNodes refuses a change whose VIPs name (in announce_from or overrides) a node or label
// that neither this node nor the store's registry has, unless base named it already.
func (d *Daemon) checkNodes(s *store.Store, base, next *config.Config) error {
	if len(next.NodeRefs()) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes, err := s.Nodes(ctx)
	if err != nil {
		return &api.Error{Status: http.StatusServiceUnavailable, Msg: fmt.Sprintf("%v: the change was NOT made (its announce_from cannot be checked); retry once `lb status` shows the store connected", err)}
	}
	if d.cfg.BGP != nil {
		nodes = append(nodes, d.cfg.BGP.NodeID())
	}
	if err := next.CheckNodes(nodes, base); err != nil {
		return &api.Error{Status: http.StatusBadRequest, Msg: err.Error() + "; the change was NOT made"}
	}
	return nil
}

// firstSnapshot lists the store. When it does not answer, it takes the cached snapshot of the
// last run and returns the listing's error as fromCache, or waits while there is none.
func (d *Daemon) firstSnapshot(ctx context.Context, s *store.Store) (sn store.Snapshot, fromCache, err error) {
	for attempt := 1; ; attempt++ {
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		sn, err := s.List(lctx)
		cancel()
		if err == nil {
			return sn, nil, nil
		}
		if ctx.Err() != nil {
			return store.Snapshot{}, nil, fmt.Errorf("wait for store %s: %w", s.URL(), ctx.Err())
		}
		if attempt == 1 {
			if c, cerr := s.LoadCache(cachePath(d.cfg)); cerr == nil {
				return c, err, nil
			} else if !errors.Is(cerr, os.ErrNotExist) {
				d.log.Warn("store cache not used", "err", cerr)
			}
		}
		d.log.Warn("waiting for the store; a pinned forwarder keeps forwarding with its last state meanwhile", "store", s.URL().String(), "err", err)
		sleepCtx(ctx, time.Second)
	}
}

// cachePath is where the last applied snapshot is kept: beside the control socket, in /run, so
// that it lives as long as the pinned maps.
func cachePath(c *config.Config) string {
	return strings.TrimSuffix(c.Socket, ".sock") + ".store.json"
}

// saveCacheLocked keeps sn as the snapshot in effect, for a restart while the store is down.
func (d *Daemon) saveCacheLocked(sn store.Snapshot) {
	if err := d.store.s.SaveCache(d.store.cache, sn); err != nil {
		d.log.Warn("keep the store snapshot for a restart", "err", err)
	}
}

// fromSnapshot is the running configuration with the snapshot's VIPs and global guard, validated.
func (d *Daemon) fromSnapshot(sn store.Snapshot) (*config.Config, error) {
	if err := sn.Err(); err != nil {
		return nil, err
	}
	next := d.cfg.Clone()
	next.VIPs, next.Guard = sn.VIPs(), sn.Guard.Clone()
	if err := next.Validate(); err != nil {
		return nil, err
	}
	return next, nil
}

// followStore runs the watch until ctx ends.
func (d *Daemon) followStore(ctx context.Context, wg *sync.WaitGroup) {
	if d.store == nil {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.store.f.Run(ctx, time.Second)
	}()
}

func (d *Daemon) closeStore() {
	if d.store != nil {
		d.store.s.Close()
	}
}

// storeUpdates delivers the store's snapshots (never, without a store).
func (d *Daemon) storeUpdates() <-chan store.Snapshot {
	if d.store == nil {
		return nil
	}
	return d.store.f.Updates()
}

// onStoreSnapshot applies a snapshot the watch delivered. An invalid one, or one the maps
// refuse, changes nothing: the node keeps forwarding with what it has and says why.
func (d *Daemon) onStoreSnapshot(sn store.Snapshot) {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.store
	refuse := func(err error) {
		l.refused, l.refusedRev = err.Error(), sn.Revision
		l.refusals++
		d.log.Error("store snapshot refused; the running state stays", "revision", sn.Revision, "err", err)
	}
	next, err := d.fromSnapshot(sn)
	if err != nil {
		refuse(err)
		return
	}
	res, err := d.switchToLocked(next)
	if err != nil {
		refuse(err)
		return
	}
	l.applied, l.appliedSlot, l.refused = sn.Revision, res.SlotsWritten, ""
	d.saveCacheLocked(sn)
	d.log.Info("store snapshot applied", "revision", sn.Revision, "vips", len(next.VIPs), "slots_written", res.SlotsWritten)
}

// storeChange makes a CLI change through the store: computed and validated on the latest
// snapshot exactly as a file change is (same errors, nothing written on bad input), written in a
// transaction that fails if the store moved meanwhile (then recomputed on a fresh listing), and
// applied on this node when its watch delivers it, as on every other node.
func (d *Daemon) storeChange(mut func(c *config.Config) (string, error)) (api.ChangeResult, error) {
	l := d.store
	sn := l.f.Snapshot()
	for attempt := 1; ; attempt++ {
		d.mu.Lock()
		base := d.cfg.Clone()
		d.mu.Unlock()
		base.VIPs, base.Guard = sn.VIPs(), sn.Guard.Clone()
		_ = base.Validate() // fills the defaults of hand-written VIPs, so that only real changes differ
		next := base.Clone()
		msg, err := mut(next)
		if err != nil {
			return api.ChangeResult{}, err
		}
		if err := next.Validate(); err != nil {
			return api.ChangeResult{}, &api.Error{Status: http.StatusBadRequest, Msg: err.Error()}
		}
		if err := d.checkNodes(l.s, base, next); err != nil {
			return api.ChangeResult{}, err
		}
		changes, err := store.Diff(base.VIPs, next.VIPs)
		if err != nil {
			return api.ChangeResult{}, err
		}
		if g := store.DiffGuard(base.Guard, next.Guard); g != nil {
			changes = append(changes, *g)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rev, err := l.s.Commit(ctx, sn, changes)
		if errors.Is(err, store.ErrConflict) && attempt < 5 {
			l.count(&l.conflicts)
			sn, err = l.s.List(ctx)
			cancel()
			if err == nil {
				continue
			}
		} else {
			cancel()
		}
		if err != nil {
			l.count(&l.errors)
			return api.ChangeResult{}, &api.Error{Status: http.StatusServiceUnavailable, Msg: fmt.Sprintf("%v: the change was NOT made; every node keeps forwarding with its last state: retry once `lb status` shows the store connected", err)}
		}
		l.count(&l.writes)
		out := api.ChangeResult{Message: msg, Saved: fmt.Sprintf("%s (revision %d)", l.s.URL(), rev)}
		slots, applied, why := d.waitApplied(rev, 5*time.Second)
		out.SlotsWritten = slots
		switch {
		case why != "":
			out.Message += fmt.Sprintf(" (stored, but this node refused the store's state: %s)", why)
		case !applied:
			out.Message += fmt.Sprintf(" (stored; this node applies it when its watch delivers revision %d)", rev)
		}
		d.log.Info("change stored", "change", msg, "revision", rev, "applied", applied)
		return out, nil
	}
}

func (l *storeLink) count(n *uint64) {
	l.mu.Lock()
	*n++
	l.mu.Unlock()
}

// waitApplied waits until the VIPs in effect are those of revision rev or later.
func (d *Daemon) waitApplied(rev int64, timeout time.Duration) (slots int, applied bool, refused string) {
	deadline := time.Now().Add(timeout)
	for {
		d.mu.Lock()
		l := d.store
		a, s, r, rr := l.applied, l.appliedSlot, l.refused, l.refusedRev
		d.mu.Unlock()
		if a >= rev {
			return s, true, ""
		}
		if r != "" && rr >= rev {
			return 0, false, r
		}
		if time.Now().After(deadline) {
			return 0, false, ""
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// storeReload keeps the store's VIPs and global guard across a reload of the node's file, which
// must hold neither.
func (d *Daemon) storeReload(next *config.Config) error {
	if d.store == nil {
		return nil
	}
	if len(next.VIPs) > 0 {
		return fmt.Errorf("vips: %d VIPs in the file, but the daemon runs with --store: the fleet's VIPs live in the store; remove vips: from the file", len(next.VIPs))
	}
	if !next.Guard.Empty() {
		return errors.New("guard: a global guard in the file, but the daemon runs with --store: the fleet's guard rules live in the store; set them with `switchyard guard ...` and remove guard: from the file")
	}
	cur := d.cfg.Clone()
	next.VIPs, next.Guard = cur.VIPs, cur.Guard
	return nil
}

// nodeConfigLocked is what `lb config save` writes: with a store, the node's own settings only
// (no VIP, no global guard).
func (d *Daemon) nodeConfigLocked() *config.Config {
	if d.store == nil {
		return d.cfg
	}
	c := d.cfg.Clone()
	c.VIPs, c.Guard = nil, nil
	return c
}

// storeStatusLocked is the store part of `lb status` (nil without a store).
func (d *Daemon) storeStatusLocked() *api.StoreStatus {
	l := d.store
	if l == nil {
		return nil
	}
	fs := l.f.State()
	st := &api.StoreStatus{URL: fs.URL, Connected: fs.Connected, Since: fs.Since, Revision: l.applied,
		WatchedRevision: fs.Revision, StoreRevision: fs.StoreRevision, Refused: l.refused, LastError: fs.LastError,
		Events: fs.Events, Rewatches: fs.Rewatches, Resyncs: fs.Resyncs, Refusals: l.refusals}
	l.mu.Lock()
	st.Writes, st.WriteConflicts, st.WriteErrors = l.writes, l.conflicts, l.errors
	l.mu.Unlock()
	return st
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
