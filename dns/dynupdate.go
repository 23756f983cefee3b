package dns

import (
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/internal/wire"
	"github.com/switchyard/switchyard/dns/update"
	"github.com/switchyard/switchyard/dns/xfr"
	"github.com/switchyard/switchyard/dns/zone"
	"github.com/switchyard/switchyard/internal/lowprio"
)

// answerUpdate answers an RFC 2136 UPDATE (over UDP or TCP): the TSIG checked by the transfer
// keys (xfr.Set.VerifyTSIG), the zone found and its update block read, the change decided by
// package update, written to the zone's journal, then swapped in as a new state, the way a
// reload is: the answer cache starts empty, the IXFR journal gains the step and the
// secondaries get a NOTIFY. A refused update changes nothing.
func (s *Server) answerUpdate(req *mdns.Msg, raw []byte, src netip.Addr) []byte {
	var u updateOutcome
	s.updates.do(s.log, func() { u = s.update(req, raw) })
	s.ops.updates.WithLabelValues(u.origin, u.result()).Inc()
	keyName := "-"
	if u.key != nil {
		keyName = u.key.Name()
	}
	if u.serial != 0 {
		s.log.Info("dns update applied", "zone", u.origin, "serial", u.serial, "key", keyName,
			"client", src.String(), "changes", u.reason)
	} else {
		s.log.Info("dns update not applied", "zone", u.origin, "result", u.result(), "key", keyName,
			"client", src.String(), "reason", u.reason)
	}
	if u.tsigRefusal != nil {
		b, _ := u.tsigRefusal.Pack()
		return b
	}
	resp := new(mdns.Msg)
	resp.Id, resp.Response, resp.Opcode, resp.Question = req.Id, true, req.Opcode, req.Question
	resp.Rcode = u.rcode
	var b []byte
	var err error
	if t := req.IsTsig(); t != nil && u.key != nil {
		b, err = u.key.Sign(resp, t.MAC) // RFC 8945 5.3: a signed request gets a signed answer
	} else {
		b, err = resp.Pack()
	}
	if err != nil {
		s.log.Warn("pack dns update answer", "err", err)
		return wire.HeaderOnly(raw, mdns.RcodeServerFailure)
	}
	return b
}

// updateNice is how much lower than the answers' the scheduling priority of the updates'
// thread is: a burst of updates (a zone rebuild and a journal sync each) takes the CPU the
// answers leave rather than delaying them (an update burst doubled the answers' p99).
const updateNice = 10

// updateThread runs the updates on one thread of lower priority (lowprio), started by the
// first update and stopped by Close (after the connections that send updates are done). With
// one P (GOMAXPROCS=1) updates run on the caller's thread: a niced thread the kernel puts aside
// would hold the only P, and no answer would run until it got the CPU back.
type updateThread struct {
	mu      sync.Mutex
	t       *lowprio.Thread
	stopped bool
	busy    sync.WaitGroup // calls of do on t
}

// do runs f on the thread; after stop, on the caller's.
func (u *updateThread) do(log *slog.Logger, f func()) {
	u.mu.Lock()
	if u.t == nil && !u.stopped && runtime.GOMAXPROCS(0) > 1 {
		u.t = lowprio.Start(updateNice)
		if u.t.Err != nil {
			log.Warn("dns updates run at the answers' priority", "err", u.t.Err)
		}
	}
	t := u.t
	if t != nil {
		u.busy.Add(1)
	}
	u.mu.Unlock()
	if t == nil {
		f()
		return
	}
	defer u.busy.Done()
	t.Do(f)
}

// stop ends the thread once the updates given to it are done.
func (u *updateThread) stop() {
	u.mu.Lock()
	t := u.t
	u.t, u.stopped = nil, true
	u.mu.Unlock()
	u.busy.Wait()
	if t != nil {
		t.Stop()
	}
}

// updateOutcome is what became of one update.
type updateOutcome struct {
	origin string   // the zone, "-" when the message names none of ours
	key    *xfr.Key // the TSIG key that verified; nil for none
	// tsigRefusal is the NOTAUTH answer to a bad signature or an unknown key.
	tsigRefusal *mdns.Msg
	rcode       int
	reason      string // what was changed, or why nothing was
	serial      uint32 // the new serial; 0 when nothing changed
}

// result is the metric label: ok (applied), unchanged (accepted, nothing to change), or the
// rcode in lower case (refused, notauth, notzone, formerr, yxdomain, nxdomain, yxrrset,
// nxrrset, servfail).
func (u *updateOutcome) result() string {
	switch {
	case u.rcode == mdns.RcodeSuccess && u.serial != 0:
		return "ok"
	case u.rcode == mdns.RcodeSuccess:
		return "unchanged"
	}
	return strings.ToLower(mdns.RcodeToString[u.rcode])
}

// update checks and applies req.
func (s *Server) update(req *mdns.Msg, raw []byte) updateOutcome {
	u := updateOutcome{origin: "-"}
	fail := func(rcode int, reason string) updateOutcome {
		u.rcode, u.reason = rcode, reason
		return u
	}
	st := s.state.Load()
	if len(req.Question) != 1 || req.Question[0].Qtype != mdns.TypeSOA || wire.CountsLie(raw, req) {
		return fail(mdns.RcodeFormatError, "the zone section must hold one SOA question naming the zone")
	}
	origin := strings.ToLower(req.Question[0].Name)
	z := st.store.Find(origin)
	ours := z != nil && z.Origin == origin && req.Question[0].Qclass == mdns.ClassINET
	if ours {
		u.origin = origin // a bounded label: only our zones
	}
	if t := req.IsTsig(); t != nil {
		u.key, u.tsigRefusal = st.xfr.VerifyTSIG(req, raw, t)
		if u.tsigRefusal != nil {
			code := u.tsigRefusal.Extra[len(u.tsigRefusal.Extra)-1].(*mdns.TSIG).Error
			return fail(mdns.RcodeNotAuth, "TSIG "+mdns.RcodeToString[int(code)]+" for key "+t.Hdr.Name)
		}
	}
	if !ours {
		return fail(mdns.RcodeNotAuth, "not authoritative for zone "+origin)
	}
	if zc := zoneConfig(st.cfg, origin); zc.Update == nil {
		return fail(mdns.RcodeRefused, "the zone takes no updates (no update block)")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st = s.state.Load() // updates and reloads are serialised by s.mu: this is the state to change
	zc := zoneConfig(st.cfg, origin)
	z = st.store.Find(origin)
	if zc == nil || zc.Update == nil || z == nil || z.Origin != origin {
		return fail(mdns.RcodeRefused, "the zone stopped taking updates (reload)")
	}
	p := update.Policy{Origin: origin, Rules: zc.Update.Allow, Signed: st.signers[origin] != nil}
	if u.key != nil {
		p.Key = u.key.Name()
	}
	ch, refusal := update.Process(z, z.SOA, req, p)
	switch {
	case refusal != nil:
		return fail(refusal.Rcode, refusal.Reason)
	case ch == nil:
		return fail(mdns.RcodeSuccess, "nothing to change")
	}
	if err := s.commitUpdate(st, zc, z, ch, p.Key); err != nil {
		s.log.Error("dns update failed; nothing changed", "zone", origin, "err", err)
		return fail(mdns.RcodeServerFailure, err.Error())
	}
	u.serial = ch.To
	return fail(mdns.RcodeSuccess, fmt.Sprintf("%d deleted, %d added", len(ch.Del)-1, len(ch.Add)-1))
}

// commitUpdate builds the changed zone, appends the change to the zone's journal (synced) and
// swaps in a state with the zone. The caller holds s.mu.
func (s *Server) commitUpdate(st *state, zc *config.Zone, z *zone.Zone, ch *update.Change, key string) error {
	nz, err := z.Apply(ch.Del, ch.Add)
	if err != nil {
		return fmt.Errorf("apply update: %w", err)
	}
	path := zc.Update.JournalPath(zc, st.cfg.Dir)
	j := s.journals[path]
	if j == nil {
		j = update.NewJournal(path)
		s.journals[path] = j
	}
	if err := j.Append(ch, key, time.Now()); err != nil {
		return err
	}
	next := *st
	next.store = st.store.With(nz)
	s.swapState(st, &next, z)
	return nil
}

// swapState serves next, a copy of st with changed zones (an update, a secondary's transfer
// or expiry, a one-zone reload): the transfer data is rebuilt (the IXFR journal gains the step)
// and the changed zones' secondaries get a NOTIFY. When the only change is replaced, zones next
// serves a newer copy of (same origins, nothing else), the answer cache is kept and replaced's
// entries go stale (those an update left alone are carried: cacheEntry.carry); otherwise (a zone
// added, removed or down) it starts empty. The caller holds s.mu.
func (s *Server) swapState(st, next *state, replaced ...*zone.Zone) {
	if len(replaced) > 0 && !slices.Contains(replaced, nil) {
		next.cache = st.cache
		for _, z := range replaced {
			z.Retire()
		}
	} else {
		next.cache = newAnswerCache()
	}
	next.xfr = xfr.Build(next.cfg, next.store, st.xfr, s.log)
	next.xdpGen = 0
	if s.xdp != nil {
		s.xdp.advance(next) // before the zone serves: no answer of the old data from here on
	}
	s.state.Store(next)
	s.notifyAll(next)
}

// zoneConfig returns the configuration of the zone origin, or nil.
func zoneConfig(cfg *config.Config, origin string) *config.Zone {
	for i := range cfg.Zones {
		if cfg.Zones[i].Origin == origin {
			return &cfg.Zones[i]
		}
	}
	return nil
}

// replayUpdates applies each updatable zone's journal to the zone its file built (not to a
// zone carried over from prev, as it was or with new keys, which holds its updates already).
func (s *Server) replayUpdates(cfg *config.Config, store, prev *zone.Store) (*zone.Store, error) {
	for i := range cfg.Zones {
		zc := &cfg.Zones[i]
		if zc.Update == nil {
			continue
		}
		z := store.Find(zc.Origin)
		if prev != nil && z.CarriedFrom(prev.Find(zc.Origin)) {
			continue
		}
		nz, err := s.replayZone(cfg, zc, z)
		if err != nil {
			return nil, err
		}
		if nz != z {
			store = store.With(nz)
		}
	}
	return store, nil
}

// replayZone applies the journal of zc, an updatable zone, to z, the zone its file built; it
// returns z itself when the journal holds nothing to apply.
func (s *Server) replayZone(cfg *config.Config, zc *config.Zone, z *zone.Zone) (*zone.Zone, error) {
	path := zc.Update.JournalPath(zc, cfg.Dir)
	entries, _, err := update.Read(path)
	if err != nil {
		return nil, fmt.Errorf("line %d: zone %s: %w", zc.Line, zc.Origin, err)
	}
	nz, n, stale, err := update.Replay(z, entries)
	if err != nil {
		return nil, fmt.Errorf("line %d: zone %s: %s: %w", zc.Line, zc.Origin, path, err)
	}
	if stale {
		s.log.Warn("dns update journal does not start at the zone file's serial (the file was edited); its updates are not applied and it is moved aside at the next update",
			"zone", zc.Origin, "journal", path, "file_serial", z.SOA.Serial, "journal_from", entries[0].From)
	}
	if n == 0 {
		return z, nil
	}
	s.log.Info("dns update journal replayed", "zone", zc.Origin, "journal", path, "updates", n, "serial", nz.SOA.Serial)
	return nz, nil
}

// UpdateSummary describes, one line each, the zones that take dynamic updates: the journal and
// the updates it holds, and the rules (for `switchyard dns check`).
func (s *Server) UpdateSummary() []string {
	st := s.state.Load()
	var out []string
	for i := range st.cfg.Zones {
		zc := &st.cfg.Zones[i]
		if zc.Update == nil {
			continue
		}
		path := zc.Update.JournalPath(zc, st.cfg.Dir)
		entries, _, err := update.Read(path)
		held := fmt.Sprintf("%d updates", len(entries))
		if err != nil {
			held = err.Error()
		}
		out = append(out, fmt.Sprintf("update %s: serial %d, journal %s (%s)", zc.Origin, st.store.Find(zc.Origin).SOA.Serial, path, held))
		for _, r := range zc.Update.Allow {
			out = append(out, fmt.Sprintf("update %s: key %s may change names %v, types %v (empty: all)", zc.Origin, r.Key, r.Names, r.Types))
		}
	}
	return out
}
