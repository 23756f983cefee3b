package keyroll

import (
	"fmt"
	"time"

	"github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/dnssec"
)

// FirstKeysBackdate is how long before their creation a new zone's first keys count as
// published and active.
const FirstKeysBackdate = time.Minute

// Timings are the rollover intervals of RFC 7583 for one zone.
type Timings struct {
	// Ipub is how long a new key is published before it is relied on: Dprp + TTLkey.
	Ipub time.Duration
	// IretZSK is how long an old ZSK stays published after it stopped signing: Dprp plus the
	// largest TTL of a signed RRset (Dsgn is nothing: signatures are made online, and the
	// reload that makes a new ZSK sign drops the signature and answer caches).
	IretZSK time.Duration
	// IretDS is how long an old KSK or CSK stays after the new DS was seen: DprpP + TTLds.
	IretDS time.Duration
	// Dprp is the propagation delay; a successor is generated that long before it is published.
	Dprp time.Duration
}

// TimingsOf derives the intervals from the zone's DNSSEC block (defaults applied) and zoneTTL,
// the largest TTL of the zone's data, which counts when the policy has no zone_max_ttl.
func TimingsOf(d *config.DNSSEC, zoneTTL uint32) Timings {
	p := d.Policy
	dprp := p.PropagationDelay.D()
	sec := func(ttl uint32) time.Duration { return time.Duration(ttl) * time.Second }
	ttlSig := p.ZoneMaxTTL
	if ttlSig == 0 {
		ttlSig = zoneTTL
	}
	return Timings{Ipub: dprp + sec(d.DNSKEYTTL), IretZSK: dprp + sec(max(ttlSig, d.DNSKEYTTL)),
		IretDS: dprp + sec(p.ParentDSTTL), Dprp: dprp}
}

// Roller applies one zone's policy to its state.
type Roller struct {
	Zone string
	Keys Store // where the key files and the state live
	Cfg  *config.DNSSEC
	T    Timings
	// Ran is the policy the server ran for the zone before this configuration (nil: none, as at
	// its start). An algorithm rollover is reversed only when Ran has the rollover's new
	// algorithm: an operator changed a server back, not a fleet's node that never took the
	// change and reloads because another node started the rollover (reverse.go).
	Ran *config.KeyPolicy
}

// NewRoller checks that the policy's lifetimes leave room for a rollover's intervals; zoneTTL
// is the largest TTL of the zone's data (see TimingsOf).
func NewRoller(zone string, keys Store, d *config.DNSSEC, zoneTTL uint32) (*Roller, error) {
	r := &Roller{Zone: zone, Keys: keys, Cfg: d, T: TimingsOf(d, zoneTTL)}
	p := d.Policy
	if p.ZSKLifetime.D() <= r.T.Ipub+r.T.IretZSK+r.T.Dprp {
		return nil, fmt.Errorf("policy.zsk_lifetime %s is shorter than a ZSK rollover (%s: propagation_delay, DNSKEY TTL and zone_max_ttl or the zone's largest TTL); raise it",
			p.ZSKLifetime.D(), r.T.Ipub+r.T.IretZSK+r.T.Dprp)
	}
	if p.KSKLifetime.D() <= r.T.Ipub+r.T.IretDS+r.T.Dprp {
		return nil, fmt.Errorf("policy.ksk_lifetime %s is shorter than a KSK rollover (%s: propagation_delay, DNSKEY TTL and parent_ds_ttl); raise it",
			p.KSKLifetime.D(), r.T.Ipub+r.T.IretDS+r.T.Dprp)
	}
	return r, nil
}

// Advance brings st up to now: the first keys of an empty state, successors generated when a
// key's lifetime nears its end, an old KSK's removal scheduled once its successor's DS was seen,
// and a scheme or algorithm rollover started (or an algorithm rollover reversed) when the
// policy's changed (policy.go).
// It reports whether st changed (then Save it).
func (r *Roller) Advance(st *State, now time.Time) (bool, error) {
	changed, err := r.applyPolicy(st, now)
	if err != nil {
		return false, err
	}
	for _, role := range r.roles() {
		c, err := r.advanceRole(st, role, now)
		if err != nil {
			return changed, err
		}
		changed = changed || c
	}
	return r.scheduleAlgorithmRemoval(st) || changed, nil
}

// roles are the roles of the policy's keys.
func (r *Roller) roles() []string {
	if r.Cfg.Policy.Scheme == config.SchemeKSKZSK {
		return []string{RoleKSK, RoleZSK}
	}
	return []string{RoleCSK}
}

// current is the role's newest key without a successor.
func current(st *State, role string) *KeyState {
	for i := len(st.Keys) - 1; i >= 0; i-- {
		if k := st.Keys[i]; k.Role == role && k.Successor == 0 {
			return k
		}
	}
	return nil
}

func (r *Roller) advanceRole(st *State, role string, now time.Time) (bool, error) {
	changed := false
	cur := current(st, role)
	if cur == nil { // a new zone: nothing is cached anywhere, so the key is used at once
		k, err := r.generate(st, role, now)
		if err != nil {
			return false, err
		}
		// Backdated, so that the other servers of a fleet sharing the state see the key in use
		// too: one whose clock is a little behind, or that read its clock before waiting for
		// the zone's lock while this one generated.
		k.Publish = now.Add(-FirstKeysBackdate)
		k.Active, k.DSSeen = k.Publish, k.Publish
		return true, nil
	}
	life := r.Cfg.Policy.KSKLifetime.D()
	if role == RoleZSK {
		life = r.Cfg.Policy.ZSKLifetime.D()
	}
	publish := cur.Active.Add(life) // double signature: the successor signs once published
	if role == RoleZSK {
		publish = publish.Add(-r.T.Ipub) // pre-publication: published Ipub before it signs
	}
	if !now.Before(publish.Add(-r.T.Dprp)) {
		k, err := r.generate(st, role, now)
		if err != nil {
			return false, err
		}
		k.Publish = later(publish, now)
		k.Active = k.Publish.Add(r.T.Ipub)
		cur.Successor, cur.Retire = k.Tag, k.Active
		if role == RoleZSK {
			cur.Remove = cur.Retire.Add(r.T.IretZSK)
		}
		changed = true
	}
	for _, k := range st.Keys {
		changed = r.scheduleRemoval(st, k) || changed
	}
	return changed, nil
}

// scheduleRemoval schedules k's removal once it is replaced by a KSK or CSK of its algorithm (a
// KSK, CSK or scheme rollover) whose DS has been seen at the parent: when the old DS has expired
// from caches and, for a key that signs data (a CSK, or a ZSK a scheme rollover replaces), the
// answers it signed before its successors did. It reports whether k changed.
func (r *Roller) scheduleRemoval(st *State, k *KeyState) bool {
	next := st.key(k.Successor)
	if next == nil || !next.SEP() || next.Algorithm != k.Algorithm || !k.Remove.IsZero() || next.DSSeen.IsZero() {
		return false
	}
	k.Remove = later(next.DSSeen, next.Active).Add(r.T.IretDS)
	if k.Role != RoleKSK {
		// Answers signed by the old key alone, from before the new keys signed, stay in
		// caches until Dprp plus their TTL after that: a new CSK, or a scheme rollover's new
		// ZSK, signs once published.
		k.Remove = later(k.Remove, next.Publish.Add(r.T.IretZSK))
	}
	if k.Role == RoleZSK { // replaced by a CSK: it signs until it leaves
		k.Retire = k.Remove
	}
	return true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// generate makes a key for role, stores its file and appends it to st.
func (r *Roller) generate(st *State, role string, now time.Time) (*KeyState, error) {
	flags := uint16(dnssec.FlagsKSK)
	if role == RoleZSK {
		flags = dnssec.FlagsZSK
	}
	var k *dnssec.Key
	for {
		var err error
		if k, err = dnssec.GenerateAlgorithm(r.Zone, r.Cfg.Policy.Algorithm, r.Cfg.Policy.KeySize, flags, r.Cfg.DNSKEYTTL); err != nil {
			return nil, err
		}
		if st.key(k.Tag) == nil { // tags must tell the zone's keys apart
			break
		}
	}
	name := fmt.Sprintf("K%s+%03d+%05d.key", r.Zone, k.DNSKEY.Algorithm, k.Tag)
	if err := r.Keys.WriteKey(r.Zone, name, k.File(now)); err != nil {
		return nil, err
	}
	ks := &KeyState{Tag: k.Tag, Role: role, Algorithm: k.DNSKEY.Algorithm, File: name, Created: now}
	st.Keys = append(st.Keys, ks)
	return ks, nil
}

// KeySet loads the keys that st has in the zone at now: ZSKs active, KSKs and CSKs published,
// active or retired (double signature), and every key not generated or removed in the DNSKEY
// RRset; in an algorithm rollover, presigned and withdrawn keys sign (a KSK the DNSKEY RRset)
// but are left out of it. CDS lists the keys whose DS the parent should serve: the active KSKs
// and CSKs.
func (r *Roller) KeySet(st *State, now time.Time) (ks dnssec.KeySet, cds []*dnssec.Key, err error) {
	for _, k := range st.Keys {
		state := k.At(now)
		if state == Generated || state == Removed {
			continue
		}
		key, err := r.Key(k)
		if err != nil {
			return ks, nil, err
		}
		hidden := state == Presigned || state == Withdrawn
		if hidden {
			ks.Hidden = append(ks.Hidden, key)
		} else {
			ks.Published = append(ks.Published, key)
		}
		if k.SEP() {
			ks.KSKs = append(ks.KSKs, key)
			if state == Active {
				cds = append(cds, key)
			}
		}
		if k.Role == RoleCSK || k.Role == RoleZSK && (state == Active || hidden) {
			ks.ZSKs = append(ks.ZSKs, key)
		}
	}
	if len(ks.ZSKs) == 0 || len(ks.KSKs) == 0 {
		return ks, nil, fmt.Errorf("key state of %s in %s has no signing key at %s; restore the state from a backup", r.Zone, r.Keys, now.UTC().Format(time.RFC3339))
	}
	return ks, cds, nil
}

// Key loads k's key from the store.
func (r *Roller) Key(k *KeyState) (*dnssec.Key, error) {
	b, err := r.Keys.ReadKey(r.Zone, k.File)
	if err != nil {
		return nil, err
	}
	return dnssec.ParseKey(b, r.Keys.String()+"/"+k.File, r.Zone)
}

// NextEvent is the first moment after now at which st's keys change state or a successor is
// generated (zero: none scheduled, e.g. only a DS is awaited).
func (r *Roller) NextEvent(st *State, now time.Time) time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, k := range st.Keys {
		for _, t := range []time.Time{k.Sign, k.Publish, k.Active, k.Retire, k.Unpublish, k.Remove} {
			consider(t)
		}
		if k.Successor == 0 && !k.Active.IsZero() {
			life, lead := r.Cfg.Policy.KSKLifetime.D(), r.T.Dprp
			if k.Role == RoleZSK {
				life, lead = r.Cfg.Policy.ZSKLifetime.D(), r.T.Dprp+r.T.Ipub
			}
			consider(k.Active.Add(life - lead))
		}
	}
	return next
}

// AwaitingDS is the KSK or CSK whose DS the parent should serve and has not been seen to: an
// active successor of a retired key, nil when none.
func AwaitingDS(st *State, now time.Time) *KeyState {
	for _, k := range st.Keys {
		if k.SEP() && k.DSSeen.IsZero() && k.At(now) == Active {
			return k
		}
	}
	return nil
}

// CDS returns the CDS and CDNSKEY records (RFC 7344) for keys, the DS set the parent should have.
func CDS(zone string, ttl uint32, keys []*dnssec.Key) []dns.RR {
	var out []dns.RR
	for _, k := range keys {
		ds := k.DS()
		ds.Hdr.Name, ds.Hdr.Ttl = zone, ttl
		out = append(out, &dns.CDS{DS: *ds})
		out[len(out)-1].Header().Rrtype = dns.TypeCDS
		dk := *k.DNSKEY
		dk.Hdr.Name, dk.Hdr.Ttl = zone, ttl
		cdk := &dns.CDNSKEY{DNSKEY: dk}
		cdk.Hdr.Rrtype = dns.TypeCDNSKEY
		out = append(out, cdk)
	}
	return out
}
