// Package secondary keeps the copies of the zones the DNS stop serves as a secondary: it asks
// the primaries for the SOA at the zone's refresh interval and when a primary sends NOTIFY,
// transfers what changed (IXFR, AXFR the first time and whenever IXFR is refused or answered
// with the whole zone), keeps the copy in a file so a restart serves it at once, retries at the
// SOA's retry interval and stops serving the zone when the expire interval passes without a
// primary confirming it (RFC 1034 4.3.5, RFC 1995, RFC 1996). Serials compare per RFC 1982.
// The server serves what Install hands it, with the same answer and transfer path as its own
// zones.
package secondary

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"sync"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/dns/internal/wire"
	"github.com/switchyard/switchyard/dns/xfr"
	"github.com/switchyard/switchyard/dns/zone"
)

// Options are one secondary zone's settings, from its configuration.
type Options struct {
	// Origin is the zone's apex, lowercased and fully qualified.
	Origin string
	// Primaries are the address:port the zone is asked from, in order.
	Primaries []string
	// Key signs the SOA queries and transfers; nil sends them unsigned.
	Key *xfr.Key
	// Path is the file the copy is kept in.
	Path string
	// TLS, when set, asks the primaries over TLS (XoT, RFC 9103) with this client
	// configuration; an empty ServerName checks the primary's address.
	TLS *tls.Config
}

// Hooks are how a Zone hands its copies to the server.
type Hooks struct {
	// Install serves z from now on (a new copy, or the old one again after it expired).
	Install func(z *zone.Zone)
	// Expire stops serving the zone: queries get SERVFAIL until a primary answers again.
	Expire func()
	// Log receives a line per transfer, failed refresh and expiry.
	Log *slog.Logger
	// Transfers counts transfers by zone, kind and result (switchyard_dns_transfers_in_total).
	Transfers *prometheus.CounterVec
}

// Status is what `switchyard dns status` shows of a secondary zone.
type Status struct {
	Serial  uint32
	From    Origin    // the last transfer: primary, kind and time
	Checked time.Time // the last time a primary confirmed the copy
	Next    time.Time // the next SOA check
	Expired bool
	Err     string // the last refresh's error, "" when it worked
}

// Zone is one secondary zone: its copy and the loop that keeps it fresh.
type Zone struct {
	hooks Hooks
	poke  chan struct{}

	mu     sync.Mutex // guards the fields below
	opt    Options
	cur    *zone.Zone
	status Status
}

// New prepares the secondary zone of opt with the copy saved at opt.Path, if any; nothing is
// asked of the primaries until Run. A copy that does not read is logged and ignored (the zone
// is transferred anew).
func New(opt Options, hooks Hooks) *Zone {
	z := &Zone{opt: opt, hooks: hooks, poke: make(chan struct{}, 1)}
	cur, from, checked, err := load(opt.Path, opt.Origin)
	if err != nil {
		hooks.Log.Warn("dns secondary: saved copy not used; transferring the zone anew", "zone", opt.Origin, "err", err)
	}
	if cur != nil {
		z.cur = cur
		z.status = Status{Serial: cur.SOA.Serial, From: from, Checked: checked}
		z.status.Expired = z.expiredAt(time.Now())
		hooks.Log.Info("dns secondary: serving the saved copy", "zone", opt.Origin, "serial", cur.SOA.Serial,
			"from", from.Primary, "checked", checked, "expired", z.status.Expired)
	}
	return z
}

// SetOptions takes changed settings (a reload); the next refresh uses them.
func (z *Zone) SetOptions(opt Options) {
	z.mu.Lock()
	z.opt = opt
	z.mu.Unlock()
}

// Current returns the copy to serve, nil when there is none yet or it expired.
func (z *Zone) Current() *zone.Zone {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.status.Expired {
		return nil
	}
	return z.cur
}

// Status returns the zone's state for `dns status`.
func (z *Zone) Status() Status {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.status
}

// Notify asks for a refresh now (a primary sent NOTIFY); it never blocks.
func (z *Zone) Notify() {
	select {
	case z.poke <- struct{}{}:
	default: // one is pending already
	}
}

// firstRetry is the wait before asking again when there is no copy at all (no SOA to take
// the retry interval from); it doubles up to maxFirstRetry.
const (
	firstRetry    = 2 * time.Second
	maxFirstRetry = 5 * time.Minute
	// minInterval keeps a SOA with refresh or retry 0 from asking in a loop.
	minInterval = time.Second
)

// Run refreshes the zone until ctx ends: at once, then at the SOA's refresh interval after a
// refresh that worked and its retry interval after one that did not, and at each Notify.
func (z *Zone) Run(ctx context.Context) {
	backoff := firstRetry
	for {
		wait := z.refresh(ctx)
		if wait == 0 { // no copy and no primary answered
			wait, backoff = backoff, min(2*backoff, maxFirstRetry)
		} else {
			backoff = firstRetry
		}
		z.mu.Lock()
		z.status.Next = time.Now().Add(wait)
		z.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-z.poke:
		case <-t.C:
		}
		t.Stop()
	}
}

// refresh asks the primaries in turn until one confirms the copy or hands a newer one. It
// returns the wait until the next refresh (0: no copy, back off).
func (z *Zone) refresh(ctx context.Context) time.Duration {
	z.mu.Lock()
	opt, cur, expired := z.opt, z.cur, z.status.Expired
	z.mu.Unlock()
	var err error
	for _, p := range opt.Primaries {
		var next *zone.Zone
		var from Origin
		if next, from, err = z.fromPrimary(ctx, opt, p, cur); err == nil {
			z.confirmed(opt, cur, next, from, expired)
			return interval(next.SOA.Refresh)
		}
		if ctx.Err() != nil {
			return minInterval
		}
	}
	now := time.Now()
	z.mu.Lock()
	z.status.Err = err.Error()
	newlyExpired := cur != nil && !z.status.Expired && z.expiredAt(now)
	if newlyExpired {
		z.status.Expired = true
	}
	z.mu.Unlock()
	if cur == nil {
		z.hooks.Log.Warn("dns secondary: no primary gave the zone; answering SERVFAIL until one does", "zone", opt.Origin, "err", err)
	} else {
		z.hooks.Log.Warn("dns secondary: refresh failed; serving the copy until it expires", "zone", opt.Origin, "err", err,
			"serial", cur.SOA.Serial)
	}
	if newlyExpired {
		z.hooks.Log.Error("dns secondary: zone expired (no primary confirmed it within the SOA expire interval); answering SERVFAIL until a primary answers",
			"zone", opt.Origin, "serial", cur.SOA.Serial, "expire", time.Duration(cur.SOA.Expire)*time.Second)
		z.hooks.Expire()
	}
	if cur == nil {
		return 0
	}
	return interval(cur.SOA.Retry)
}

// expiredAt reports whether the copy's expire interval has passed at now. The caller holds mu.
func (z *Zone) expiredAt(now time.Time) bool {
	return z.cur != nil && now.Sub(z.status.Checked) >= time.Duration(z.cur.SOA.Expire)*time.Second
}

// fromPrimary asks primary for the SOA and, when its serial is newer than cur's, transfers
// the zone. It returns the copy to serve (cur when it is current) and, for a new copy, where
// it came from (From.Kind empty when cur is current).
func (z *Zone) fromPrimary(ctx context.Context, opt Options, primary string, cur *zone.Zone) (*zone.Zone, Origin, error) {
	serial, err := soaSerial(ctx, primary, opt.Origin, opt.Key, tlsFor(opt.TLS, primary))
	transferOnly := errors.Is(err, errSOARefused) // the transfer says whether there is news
	if err != nil && !transferOnly {
		return nil, Origin{}, err
	}
	if !transferOnly && cur != nil && !wire.SerialLess(cur.SOA.Serial, serial) {
		return cur, Origin{}, nil
	}
	var have *mdns.SOA
	if cur != nil {
		have = cur.SOA
	}
	next, kind, err := z.transfer(ctx, opt, primary, cur, have)
	if err != nil && have != nil {
		z.hooks.Log.Info("dns secondary: incremental transfer failed; asking for the whole zone", "zone", opt.Origin,
			"primary", primary, "err", err)
		next, kind, err = z.transfer(ctx, opt, primary, cur, nil)
	}
	if err != nil {
		return nil, Origin{}, err
	}
	if next == cur {
		return cur, Origin{}, nil // an IXFR that found the copy current
	}
	return next, Origin{Primary: primary, Kind: kind, At: time.Now()}, nil
}

// transfer runs one transfer (IXFR from have, AXFR when have is nil), counts it and builds the
// new copy.
func (z *Zone) transfer(ctx context.Context, opt Options, primary string, cur *zone.Zone, have *mdns.SOA) (*zone.Zone, string, error) {
	kind := KindAXFR
	if have != nil {
		kind = KindIXFR
	}
	rrs, err := transferIn(ctx, primary, opt.Origin, have, opt.Key, tlsFor(opt.TLS, primary))
	var next *zone.Zone
	if err == nil {
		next, kind, err = build(opt.Origin, rrs, cur, have)
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	z.hooks.Transfers.WithLabelValues(opt.Origin, kind, result).Inc()
	if err != nil {
		return nil, kind, err
	}
	z.hooks.Log.Info("dns secondary: zone transferred", "zone", opt.Origin, "primary", primary, "kind", kind,
		"from_serial", serialOf(cur), "serial", next.SOA.Serial, "records", len(rrs))
	return next, kind, nil
}

// build makes the new copy from a transfer's records and returns the kind it turned out to be.
func build(origin string, rrs []mdns.RR, cur *zone.Zone, have *mdns.SOA) (*zone.Zone, string, error) {
	if have == nil {
		z, err := fromAXFR(origin, rrs)
		return z, KindAXFR, err
	}
	steps, full, err := ixfrSteps(rrs)
	switch {
	case err != nil:
		return nil, KindIXFR, err
	case full:
		z, err := fromAXFR(origin, rrs)
		return z, KindIXFRAsAXFR, err
	case len(steps) == 0:
		return cur, KindIXFR, nil // the primary's serial moved back between the SOA and the IXFR
	}
	z, err := applySteps(cur, steps)
	return z, KindIXFR, err
}

// confirmed records a refresh that worked: the new copy saved and installed, or the current one
// confirmed (and served again when it had expired).
func (z *Zone) confirmed(opt Options, cur, next *zone.Zone, from Origin, wasExpired bool) {
	now := time.Now()
	if next != cur {
		if err := save(opt.Path, next, from); err != nil {
			// Served all the same; a restart transfers it again.
			z.hooks.Log.Error("dns secondary: the new copy is served but not saved", "zone", opt.Origin, "err", err)
		}
	} else {
		touch(opt.Path, now)
	}
	z.mu.Lock()
	z.cur = next
	z.status.Serial, z.status.Checked, z.status.Expired, z.status.Err = next.SOA.Serial, now, false, ""
	if from.Kind != "" {
		z.status.From = from
	}
	z.mu.Unlock()
	if next != cur || wasExpired {
		if wasExpired {
			z.hooks.Log.Info("dns secondary: zone served again", "zone", opt.Origin, "serial", next.SOA.Serial)
		}
		z.hooks.Install(next)
	}
}

// interval turns a SOA timer (seconds) into a wait.
func interval(sec uint32) time.Duration {
	return max(time.Duration(sec)*time.Second, minInterval)
}

func serialOf(z *zone.Zone) uint32 {
	if z == nil {
		return 0
	}
	return z.SOA.Serial
}
