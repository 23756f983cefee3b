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
// additions), rewritten whole and atomically when a step is added or the oldest dropped; at
// start it is taken when its last step ends at the zone's serial, and dropped otherwise (the
// zone file changed while the server was down: the steps no longer lead to the zone).

// saveJournal writes x's steps to its journal file; a failure is logged and the steps serve from
// memory (a restart then answers the first IXFR with a full zone).
func (x *Zone) saveJournal(log *slog.Logger) {
	if x.journalPath == "" {
		return
	}
	cs := make([]update.Change, len(x.diffs))
	for i, d := range x.diffs {
		cs[i] = update.Change{From: d.from.Serial, To: d.to.Serial,
			Del: append([]mdns.RR{d.from}, d.del...), Add: append([]mdns.RR{d.to}, d.add...)}
	}
	if err := update.Rewrite(x.journalPath, cs, time.Now()); err != nil {
		log.Warn("dns IXFR journal not saved; after a restart the first transfer is a full one", "zone", x.origin, "err", err)
	}
}

// loadJournal returns the steps of x's journal file when they end at x's serial, at most
// x.journal of them (the newest).
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
	if n := len(out) - x.journal; n > 0 {
		out = out[n:]
	}
	return out
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
