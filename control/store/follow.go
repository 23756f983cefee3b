package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// State is a follower's view of the store, for `lb status` and the metrics.
type State struct {
	URL string `json:"url"`
	// Connected is true while the store answers linearizable reads (a quorum is reachable).
	Connected bool `json:"connected"`
	// Since is when the current connected or disconnected state began.
	Since time.Time `json:"since"`
	// Revision is the revision of the last snapshot delivered (listed or watched).
	Revision int64 `json:"revision"`
	// StoreRevision is the store's revision at the last successful probe.
	StoreRevision int64 `json:"store_revision"`
	// LastError is the last error of a probe or of the watch.
	LastError string `json:"last_error,omitempty"`
	// Events counts watch events, Rewatches watches resumed from the last revision after an
	// error, Resyncs full re-lists (the watch's revision was compacted away).
	Events    uint64 `json:"events"`
	Rewatches uint64 `json:"rewatches"`
	Resyncs   uint64 `json:"resyncs"`
}

// Follower keeps a snapshot of the prefix current: it watches from the snapshot's revision,
// resumes from the last revision it saw after any error (events are replayed, none is missed),
// and re-lists only when that revision was compacted away. It never makes up a state: when the
// store is unreachable it delivers nothing, so a node keeps what it has.
type Follower struct {
	s   *Store
	out chan Snapshot

	mu   sync.Mutex
	st   State
	snap Snapshot
}

// NewFollower follows the store from first (a List result).
func (s *Store) NewFollower(first Snapshot) *Follower {
	return &Follower{s: s, out: make(chan Snapshot, 1), snap: first.clone(),
		st: State{URL: s.u.String(), Connected: true, Since: time.Now(), Revision: first.Revision, StoreRevision: first.Revision}}
}

// Disconnected marks the follower disconnected from the start (it was made from a cached
// snapshot because the store did not answer); the probe marks it connected once it does.
func (f *Follower) Disconnected(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st.Connected, f.st.Since, f.st.StoreRevision = false, time.Now(), 0
	if err != nil {
		f.st.LastError = err.Error()
	}
}

// Updates delivers each new snapshot; a slow reader gets the latest only.
func (f *Follower) Updates() <-chan Snapshot { return f.out }

// State is the current view.
func (f *Follower) State() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

// Snapshot is the latest snapshot.
func (f *Follower) Snapshot() Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snap.clone()
}

// Run watches and probes until ctx ends.
func (f *Follower) Run(ctx context.Context, probeEvery time.Duration) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.probe(ctx, probeEvery)
	}()
	f.watch(ctx)
	wg.Wait()
}

// probe reads the prefix (count only, linearizable: it needs a quorum) to tell connected from
// disconnected; the watch alone cannot, as the client retries silently.
func (f *Follower) probe(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := f.s.cli.Get(pctx, f.s.vipsPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if ctx.Err() != nil {
			return
		}
		f.mu.Lock()
		if err != nil {
			if f.st.Connected {
				f.st.Connected, f.st.Since = false, time.Now()
			}
			f.st.LastError = f.s.Explain(err).Error()
		} else {
			if !f.st.Connected {
				f.st.Connected, f.st.Since = true, time.Now()
			}
			f.st.StoreRevision = resp.Header.Revision
		}
		f.mu.Unlock()
	}
}

type compactedError struct{ rev int64 }

func (e compactedError) Error() string {
	return fmt.Sprintf("watch: revision compacted (now %d): re-listing", e.rev)
}

// watch runs one watch after another: each from the revision after the last one seen.
func (f *Follower) watch(ctx context.Context) {
	for ctx.Err() == nil {
		rev := f.Snapshot().Revision
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		// The whole prefix in one watch: the VIPs and the global guard move at one revision
		// (keys of the prefix that are neither are skipped in consume).
		wch := f.s.cli.Watch(wctx, f.s.u.Prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		err := f.consume(wch)
		cancel()
		if ctx.Err() != nil {
			return
		}
		f.noteErr(err)
		var ce compactedError
		if errors.As(err, &ce) {
			f.relist(ctx)
			continue
		}
		f.mu.Lock()
		f.st.Rewatches++
		f.mu.Unlock()
		sleep(ctx, 500*time.Millisecond)
	}
}

// consume applies the watch's events until it fails.
func (f *Follower) consume(wch clientv3.WatchChan) error {
	for resp := range wch {
		if resp.CompactRevision != 0 {
			return compactedError{resp.CompactRevision}
		}
		if err := resp.Err(); err != nil {
			return fmt.Errorf("watch %s: %w", f.s.u, f.s.Explain(err))
		}
		if len(resp.Events) == 0 {
			continue
		}
		f.mu.Lock()
		sn := f.snap.clone()
		ours := 0
		for _, ev := range resp.Events {
			value, modRev := ev.Kv.Value, ev.Kv.ModRevision
			if ev.Type == clientv3.EventTypeDelete {
				value, modRev = nil, 0
			}
			if f.s.apply(&sn, string(ev.Kv.Key), value, modRev) {
				ours++
			}
		}
		f.st.Events += uint64(ours)
		f.mu.Unlock()
		if ours == 0 { // another key of the prefix (the node registry): nothing to apply
			continue
		}
		sn.Revision = resp.Header.Revision
		f.deliver(sn)
	}
	return errors.New("watch closed")
}

// relist replaces the snapshot by a full listing, retrying until the store answers.
func (f *Follower) relist(ctx context.Context) {
	for ctx.Err() == nil {
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		sn, err := f.s.List(lctx)
		cancel()
		if err == nil {
			f.mu.Lock()
			f.st.Resyncs++
			f.mu.Unlock()
			f.deliver(sn)
			return
		}
		f.noteErr(err)
		sleep(ctx, time.Second)
	}
}

// deliver makes sn the latest snapshot and hands it to the reader (replacing one not read yet).
func (f *Follower) deliver(sn Snapshot) {
	f.mu.Lock()
	f.snap = sn
	f.st.Revision = sn.Revision
	if sn.Revision > f.st.StoreRevision {
		f.st.StoreRevision = sn.Revision
	}
	f.mu.Unlock()
	select {
	case <-f.out:
	default:
	}
	f.out <- sn.clone()
}

func (f *Follower) noteErr(err error) {
	f.mu.Lock()
	f.st.LastError = err.Error()
	f.mu.Unlock()
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
