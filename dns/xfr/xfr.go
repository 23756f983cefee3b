// Package xfr serves zones to secondaries: the transfer data of each zone with its IXFR journal
// (carried over a reload), AXFR and IXFR streams over TCP and the IXFR SOA answer over UDP, the
// address and TSIG checks (RFC 8945) that guard them, and NOTIFY (RFC 1996) when a serial
// changes. The DNS server builds a Set with each configuration and hands transfer queries to a
// Server; the ordinary query path only borrows the TSIG keys to sign answers (VerifyTSIG).
package xfr

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strings"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/internal/wire"
	"github.com/switchyard/switchyard/dns/update"
	"github.com/switchyard/switchyard/dns/zone"
)

// Set is the transfer side of one configuration: the zones served to secondaries by origin, the
// TSIG keys by wire name, and the zones whose serial changed in the reload that built it (their
// secondaries get a NOTIFY). Immutable once built; a reload builds the next from the previous.
type Set struct {
	zones   map[string]*Zone
	keys    map[string]Key
	changed []*Zone
	store   *zone.Store
}

// Build prepares the transfer data of every zone of cfg with a transfer block, from the zones of
// store, carrying each zone's journal over from prev (nil for none), and the TSIG keys.
func Build(cfg *config.Config, store *zone.Store, prev *Set, log *slog.Logger) *Set {
	var prevZones map[string]*Zone
	if prev != nil {
		prevZones = prev.zones
	}
	zones, changed := buildZones(cfg, store, prevZones, log)
	return &Set{zones: zones, keys: buildKeys(cfg), changed: changed, store: store}
}

// Zone is what a zone transfer serves of one zone: immutable once built, replaced on reload.
type Zone struct {
	origin string
	// zone is the zone the transfer data was made from: a reload that carries the zone over
	// (zone.Build) carries its transfer data, journal and serial with it.
	zone *zone.Zone
	soa  *mdns.SOA
	// fallback are the answers of the dynamic names, which secondaries serve as plain records;
	// with the zone's static records they are the body of a full transfer (body), which is
	// unpacked from the zone for each transfer rather than held: size records.
	fallback []mdns.RR
	size     int
	// diffs are the changes from older serials, oldest first, at most journal of them; the last
	// one ends at soa. A reload appends one when the serial moves forward.
	diffs   []diff
	journal int
	allow   []netip.Prefix
	// journalPath keeps diffs across restarts (journal.go); file appends to it, which holds
	// fileSteps steps (carried from build to build with diffs).
	journalPath string
	file        *update.Journal
	fileSteps   int
	key         string // wire name of the TSIG key transfers need ("" for none)
	notify      []string
}

// diff is one step of an IXFR (RFC 1995): from one serial's SOA to the next.
type diff struct {
	from, to *mdns.SOA
	del, add []mdns.RR
}

// Key is a TSIG secret as miekg/dns takes it; VerifyTSIG returns one and Sign signs with it.
type Key struct {
	name, algorithm, secret string
}

// ConfigKey returns the key called name among cfg's tsig_keys (validated), or nil: what a
// secondary zone signs its requests to the primaries with.
func ConfigKey(cfg *config.Config, name string) *Key {
	if name == "" {
		return nil
	}
	k, ok := buildKeys(cfg)[config.KeyName(name)]
	if !ok {
		return nil
	}
	return &k
}

// buildKeys returns the configured TSIG keys by wire name.
func buildKeys(cfg *config.Config) map[string]Key {
	keys := map[string]Key{}
	for _, k := range cfg.TSIGKeys {
		n := config.KeyName(k.Name)
		alg := mdns.HmacSHA256
		if k.Algorithm == config.TSIGAlgorithmSHA512 {
			alg = mdns.HmacSHA512
		}
		keys[n] = Key{name: n, algorithm: alg, secret: k.Secret}
	}
	return keys
}

// buildZones prepares the transfer data of every zone with a transfer block, carrying the journal
// over from prev. It returns the zones whose serial changed (their secondaries get a NOTIFY).
func buildZones(cfg *config.Config, store *zone.Store, prev map[string]*Zone, log *slog.Logger) (map[string]*Zone, []*Zone) {
	out := map[string]*Zone{}
	var changed []*Zone
	for i := range cfg.Zones {
		zc := &cfg.Zones[i]
		if zc.Transfer == nil {
			continue
		}
		z := store.Get(zc.Origin)
		if z == nil {
			continue // a secondary zone without a copy yet, or expired: nothing to serve
		}
		x := &Zone{origin: z.Origin, zone: z, soa: z.SOA, journal: zc.Transfer.Journal,
			allow: zc.Transfer.AllowPrefixes(), notify: zc.Transfer.Notify, journalPath: cfg.IXFRJournalPath(zc)}
		if zc.Transfer.Key != "" {
			x.key = config.KeyName(zc.Transfer.Key)
		}
		out[x.origin] = x
		old := prev[x.origin]
		x.fallback = fallbackRecords(zc)
		x.size = z.RecordsLen() + len(x.fallback)
		if old != nil && old.zone == z && sameText(old.fallback, x.fallback) {
			// The same zone and fallbacks: the same body, no new step, no NOTIFY; the zone's
			// records are not listed and compared again.
			x.diffs, x.file, x.fileSteps = old.diffs, old.file, old.fileSteps
			continue
		}
		if old == nil {
			x.diffs = x.loadJournal(log) // the history of the process before this one
			changed = append(changed, x)
			continue
		}
		if old.journalPath == x.journalPath {
			x.file, x.fileSteps = old.file, old.fileSteps
		}
		if x.carryJournal(old, log) {
			x.saveJournal(log)
			changed = append(changed, x)
		}
	}
	return out, changed
}

// fallbackRecords are the A/AAAA records a secondary serves for the zone's dynamic names.
func fallbackRecords(zc *config.Zone) []mdns.RR {
	var out []mdns.RR
	for i := range zc.Names {
		n := &zc.Names[i]
		for _, s := range n.FallbackAddresses() {
			a, err := netip.ParseAddr(s)
			if err != nil {
				continue // validated before
			}
			hdr := mdns.RR_Header{Name: n.Name, Class: mdns.ClassINET, Ttl: n.TTL}
			if a.Is4() {
				hdr.Rrtype = mdns.TypeA
				out = append(out, &mdns.A{Hdr: hdr, A: a.AsSlice()})
			} else {
				hdr.Rrtype = mdns.TypeAAAA
				out = append(out, &mdns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
			}
		}
	}
	return out
}

// sameText reports whether a and b are the same records in the same order.
func sameText(a, b []mdns.RR) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].String() != b[i].String() {
			return false
		}
	}
	return true
}

// body is every record of a full transfer but the SOA.
func (x *Zone) body() []mdns.RR { return append(x.zone.Records(), x.fallback...) }

// carryJournal takes old's journal and, when the serial moved forward and the content changed,
// appends the step from old to x. It reports whether the serial changed.
func (x *Zone) carryJournal(old *Zone, log *slog.Logger) bool {
	// The zones are compared packed (zone.Diff: the change is unpacked, not both zones); the
	// few fallback answers as records.
	del, add := zone.Diff(old.zone, x.zone)
	fdel, fadd := diffRecords(old.fallback, x.fallback)
	del, add = append(del, fdel...), append(add, fadd...)
	same := len(del) == 0 && len(add) == 0 && old.soa.String() == x.soa.String()
	switch {
	case old.soa.Serial == x.soa.Serial && same:
		x.diffs = old.diffs
		return false
	case old.soa.Serial == x.soa.Serial:
		// Secondaries compare serials only: they would keep the old data forever. The journal
		// would no longer describe the zone, so incremental transfers fall back to full ones.
		log.Warn("dns zone changed but its serial did not; secondaries keep the old data until the serial is raised",
			"zone", x.origin, "serial", x.soa.Serial)
		return false
	case !wire.SerialLess(old.soa.Serial, x.soa.Serial):
		log.Warn("dns zone serial went backwards; the IXFR journal is dropped and secondaries may ignore the change",
			"zone", x.origin, "old", old.soa.Serial, "new", x.soa.Serial)
		return true
	}
	d := diff{from: old.soa, to: x.soa, del: del, add: add}
	x.diffs = append(append([]diff(nil), old.diffs...), d)
	x.bound()
	return true
}

// bound keeps the newest of x.diffs: at most journal steps, and (a memory bound) no more
// records than the zone holds, beyond which a full transfer is smaller than the incremental one.
func (x *Zone) bound() {
	if n := len(x.diffs) - x.journal; n > 0 {
		x.diffs = x.diffs[n:]
	}
	total := 0
	for _, d := range x.diffs {
		total += len(d.del) + len(d.add)
	}
	for len(x.diffs) > 0 && total > max(x.size, journalMinRecords) {
		total -= len(x.diffs[0].del) + len(x.diffs[0].add)
		x.diffs = x.diffs[1:]
	}
}

// journalMinRecords lets small zones keep their steps even when a step changes most of them.
const journalMinRecords = 64

// diffRecords returns the records of old missing from new (deleted) and of new missing from old
// (added), compared by their text.
func diffRecords(old, new []mdns.RR) (del, add []mdns.RR) {
	key := func(rr mdns.RR) string { return strings.ToLower(rr.String()) }
	inOld := make(map[string]bool, len(old))
	for _, rr := range old {
		inOld[key(rr)] = true
	}
	inNew := make(map[string]bool, len(new))
	for _, rr := range new {
		k := key(rr)
		inNew[k] = true
		if !inOld[k] {
			add = append(add, rr)
		}
	}
	for _, rr := range old {
		if !inNew[key(rr)] {
			del = append(del, rr)
		}
	}
	return del, add
}

// records returns the transfer's record sequence: a full zone (AXFR, RFC 5936: SOA, body, SOA)
// or, for an IXFR from serial since, the journal steps (RFC 1995: SOA, then per step the old SOA,
// deletions, the new SOA, additions, then the SOA again), or the SOA alone when since is
// current. kind names what was sent, for the metrics.
func (x *Zone) records(ixfr bool, since uint32) (rrs []mdns.RR, kind string) {
	if ixfr {
		if !wire.SerialLess(since, x.soa.Serial) {
			return []mdns.RR{x.soa}, "IXFR-uptodate"
		}
		for i, d := range x.diffs {
			if d.from.Serial != since {
				continue
			}
			rrs = append(rrs, x.soa)
			for _, d := range x.diffs[i:] {
				rrs = append(rrs, d.from)
				rrs = append(rrs, d.del...)
				rrs = append(rrs, d.to)
				rrs = append(rrs, d.add...)
			}
			return append(rrs, x.soa), "IXFR"
		}
	}
	rrs = make([]mdns.RR, 0, x.size+2)
	rrs = append(rrs, x.soa)
	rrs = append(rrs, x.body()...)
	rrs = append(rrs, x.soa)
	if ixfr {
		return rrs, "IXFR-as-AXFR" // the serial is not in the journal: RFC 1995 4 allows a full zone
	}
	return rrs, "AXFR"
}

// AXFR returns the records a full transfer of the zone origin sends (SOA, body, SOA), or nil
// when the zone is not served to secondaries.
func (t *Set) AXFR(origin string) []mdns.RR {
	x := t.zones[origin]
	if x == nil {
		return nil
	}
	rrs, _ := x.records(false, 0)
	return rrs
}

// allowed reports whether a client at src may transfer the zone (the TSIG check is separate).
func (x *Zone) allowed(src netip.Addr) bool {
	if len(x.allow) == 0 {
		return x.key != "" // validated: no allow list means the key is the only gate
	}
	for _, p := range x.allow {
		if p.Contains(src) {
			return true
		}
	}
	return false
}

func (x *Zone) String() string {
	return fmt.Sprintf("%s serial %d (%d records, %d journal steps)", x.origin, x.soa.Serial, x.size, len(x.diffs))
}

// Summary describes, one line each, the zones of cfg (the configuration t was built from) served
// to secondaries and the fallback answers their dynamic names are transferred with.
func (t *Set) Summary(cfg *config.Config) []string {
	var out []string
	for _, zc := range cfg.Zones {
		x := t.zones[zc.Origin]
		if x == nil {
			continue
		}
		key := x.key
		if key == "" {
			key = "none"
		}
		out = append(out, fmt.Sprintf("transfer %s: serial %d, %d records, allow %v, key %s, notify %v, journal %d/%d steps",
			x.origin, x.soa.Serial, x.size, zc.Transfer.Allow, key, x.notify, len(x.diffs), x.journal))
		for i := range zc.Names {
			n := &zc.Names[i]
			how := "default for " + n.Policy
			if len(n.TransferFallback) > 0 {
				how = "transfer_fallback"
			}
			out = append(out, fmt.Sprintf("transfer %s: %v (%s)", n.Name, n.FallbackAddresses(), how))
		}
	}
	return out
}
