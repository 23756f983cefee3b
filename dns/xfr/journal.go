package xfr

import (
	"log/slog"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/update"
)

// The IXFR history of a zone (Zone.diffs) is kept in a file (config.IXFRJournalPath) so the
// first IXFR after a restart is still incremental. It is written in the update journal's
// format (package update: one entry per step, the SOAs first among the deletions and the
// additions). A new step is appended (not synced: historyFile); the file is rewritten whole and
// atomically, with only the steps kept, once it holds twice as many as the zone keeps, so a step
// costs the same whatever the journal's length (rewriting 1,000 steps at every update was most
// of an update's CPU). At start it is taken when its last step ends at the zone's serial, and
// dropped otherwise (the zone file changed while the server was down, or a crash lost its last
// steps: the steps no longer lead to the zone).

// saveJournal writes x's newest step to its journal file, or all its steps when the file is
// due for compaction or does not end where the step starts; a failure is logged and the steps
// serve from memory (a restart then answers the first IXFR with a full zone).
func (x *Zone) saveJournal(log *slog.Logger) {
	if x.journalPath == "" {
		return
	}
	now := time.Now()
	if len(x.diffs) > 0 && x.file != nil && x.fileSteps < 2*max(x.journal, 1) {
		last := stepChange(x.diffs[len(x.diffs)-1])
		if ok, err := x.file.Ends(last.From); err == nil && ok {
			if err := x.file.Append(&last, "", now); err == nil {
				x.fileSteps++
				return
			}
		}
	}
	cs := make([]update.Change, len(x.diffs))
	for i, d := range x.diffs {
		cs[i] = stepChange(d)
	}
	x.file, x.fileSteps = historyFile(x.journalPath), len(cs)
	err := update.Rewrite(x.journalPath, cs, now)
	if err != nil || len(cs) == 0 {
		x.file = nil // unknown, or removed (no steps)
	}
	if err != nil {
		log.Warn("dns IXFR journal not saved; after a restart the first transfer is a full one", "zone", x.origin, "err", err)
	}
}

// historyFile is the journal file of the steps, appended without a sync each: it saves
// secondaries a full transfer after a restart, and a crash that loses its last steps costs one
// (its chain no longer ends at the zone's serial, so it is dropped at start).
func historyFile(path string) *update.Journal {
	j := update.NewJournal(path)
	j.Unsynced = true
	return j
}

// stepChange is a step as a journal entry: the SOAs first among the deletions and additions.
func stepChange(d diff) update.Change {
	return update.Change{From: d.from.Serial, To: d.to.Serial,
		Del: append([]mdns.RR{d.from}, d.del...), Add: append([]mdns.RR{d.to}, d.add...)}
}

// loadJournal returns the steps of x's journal file when they end at x's serial, the newest
// within x's bounds (bound).
func (x *Zone) loadJournal(log *slog.Logger) []diff {
	if x.journalPath == "" {
		return nil
	}
	cs, _, err := update.Read(x.journalPath)
	if err != nil {
		log.Warn("dns IXFR journal not read; secondaries get full transfers until the zone changes", "zone", x.origin, "err", err)
		return nil
	}
	if len(cs) == 0 || cs[len(cs)-1].To != x.soa.Serial {
		return nil
	}
	x.file, x.fileSteps = historyFile(x.journalPath), len(cs)
	var out []diff
	for _, c := range cs {
		from, ok1 := first[*mdns.SOA](c.Del)
		to, ok2 := first[*mdns.SOA](c.Add)
		if !ok1 || !ok2 || from.Serial != c.From || to.Serial != c.To {
			log.Warn("dns IXFR journal has a step without its SOAs; not used", "zone", x.origin, "journal", x.journalPath)
			return nil
		}
		if len(out) > 0 && out[len(out)-1].to.Serial != c.From {
			out = nil // a break in the chain: only the steps after it lead to the zone
		}
		out = append(out, diff{from: from, to: to, del: c.Del[1:], add: c.Add[1:]})
	}
	x.diffs = out
	x.bound()
	return x.diffs
}

// first returns rrs[0] as a T.
func first[T mdns.RR](rrs []mdns.RR) (T, bool) {
	var zero T
	if len(rrs) == 0 {
		return zero, false
	}
	t, ok := rrs[0].(T)
	return t, ok
}
