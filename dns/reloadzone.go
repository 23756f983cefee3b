package dns

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/dnssec"
	"github.com/switchyard/switchyard/dns/zone"
)

// A reload of one zone (ReloadZone, `switchyard dns reload --zone`) reads that zone's file
// again and swaps that zone alone into the served state, the way a dynamic update does
// (swapState): the configuration is not read, no other zone file is opened, and every other
// zone stays the same object. What a full reload does for a changed zone it does for this one:
// the update journal is replayed over the new file, a signed zone gets a new signer (its key
// policy advanced), the IXFR journal gains the step and the zone's secondaries get a NOTIFY.

var (
	// ErrUnknownZone is ReloadZone's error for a name that is no zone of the configuration
	// being served.
	ErrUnknownZone = errors.New("no such zone")
	// ErrNotReloadable is ReloadZone's error for a zone whose data is not read from a zone file:
	// a secondary zone (its primaries' data) or a zone whose records are in the configuration.
	ErrNotReloadable = errors.New("the zone has no zone file to read again")
)

// ZoneReload is what a reload of one zone did.
type ZoneReload struct {
	// Zone is the zone's origin.
	Zone string `json:"zone"`
	// OldSerial and Serial are its SOA serials before and after.
	OldSerial uint32 `json:"old_serial"`
	Serial    uint32 `json:"serial"`
	// Changed is false when the zone's file content and keys were unchanged: nothing was
	// swapped, no NOTIFY was sent.
	Changed bool `json:"changed"`
}

// ReloadZone reads the zone file of the zone name again and serves the zone built from it; the
// other zones, the configuration and the other files are not touched. On error (no such zone,
// a secondary zone, a zone file that does not build) the old zone keeps serving.
func (s *Server) ReloadZone(name string) (ZoneReload, error) {
	origin := strings.ToLower(mdns.Fqdn(name))
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.reloadZoneLocked(origin)
	if err != nil {
		s.metrics.reloads.WithLabelValues("error").Inc()
		return r, fmt.Errorf("reload zone %s (the old zone keeps serving): %w", origin, err)
	}
	s.metrics.reloads.WithLabelValues("ok").Inc()
	if r.Changed {
		s.log.Info("dns zone reloaded", "zone", origin, "old_serial", r.OldSerial, "serial", r.Serial)
	} else {
		s.log.Info("dns zone reload: zone file and keys unchanged; nothing to do", "zone", origin, "serial", r.Serial)
	}
	return r, nil
}

// reloadZoneLocked is ReloadZone with s.mu held.
func (s *Server) reloadZoneLocked(origin string) (ZoneReload, error) {
	st := s.state.Load()
	r := ZoneReload{Zone: origin}
	zc := zoneConfig(st.cfg, origin)
	switch {
	case zc == nil:
		return r, fmt.Errorf("%w in the configuration being served: check the name, or, for a zone just added to the configuration file, reload the configuration (switchyard dns reload without --zone, or SIGHUP)", ErrUnknownZone)
	case zc.Secondary != nil:
		return r, fmt.Errorf("%w: it is a secondary zone, whose data comes from its primaries: it is refreshed at its SOA refresh interval, or at once when a primary sends a NOTIFY (have the primary notify, e.g. knotc zone-notify)", ErrNotReloadable)
	case zc.File == "":
		return r, fmt.Errorf("%w: its records are in the configuration (records:, soa:): reload the configuration instead (switchyard dns reload without --zone, or SIGHUP)", ErrNotReloadable)
	}
	old := st.store.Get(origin)
	if old != nil {
		r.OldSerial = old.SOA.Serial
	}
	// zone.BuildZone carries the zone over as it is when its file and keys are unchanged;
	// keys records the signer of a signed zone in signers, as a full reload's build does.
	signers := map[string]*dnssec.Signer{}
	keys := s.signerKeys(st.cfg, s.now(), signers)
	z, err := zone.BuildZone(zc, st.cfg.Dir, st.store, keys)
	if err != nil {
		return r, fmt.Errorf("%w; correct the zone file %s and reload the zone again", err, st.cfg.Path(zc.File))
	}
	r.Serial = z.SOA.Serial
	if z == old {
		return r, nil
	}
	if zc.Update != nil {
		// Built from the file anew: the dynamic updates taken since are in the journal.
		if z, err = s.replayZone(st.cfg, zc, z); err != nil {
			return r, err
		}
		r.Serial = z.SOA.Serial
	}
	next := *st
	next.store = st.store.With(z)
	if sg := signers[origin]; sg != nil {
		next.signers = maps.Clone(st.signers)
		next.signers[origin] = sg
	}
	// No releaseOld: the old copy is one small zone, not worth a full collection of a heap
	// that may hold 100,000 others.
	s.swapState(st, &next, old)
	r.Changed = true
	return r, nil
}
