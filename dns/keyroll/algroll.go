package keyroll

import (
	"fmt"
	"time"

	"github.com/switchyard/switchyard/dns/config"
)

// An algorithm rollover is RFC 6781 4.1.4's conservative one (RFC 7583 3.4), started by a
// change of the policy's algorithm; every validator, whether it needs signatures of each
// algorithm in the DNSKEY RRset (RFC 4035 2.2) or of one it knows (RFC 6840 5.11), always finds
// them. The new keys' times:
//
//	Sign      the policy change: the new algorithm signs every RRset (presigned)
//	Publish   Sign + Dprp + the largest TTL (IretZSK): no cache holds data without the new
//	          RRSIGs when the new DNSKEYs appear; a new ZSK is active from then on
//	Active    Publish + Ipub, for the KSK or CSK: no cache holds a DNSKEY RRset without it, so
//	          the CDS and CDNSKEY name it alone and its DS is awaited (ds_check)
//
// and once that DS was seen, the old algorithm's keys' times:
//
//	Unpublish DS seen + IretDS: the old DS is gone from caches; the old DNSKEYs leave the RRset
//	Remove    Unpublish + Ipub: no cache holds a DNSKEY RRset of the old algorithm; its RRSIGs go

// applyAlgorithm compares the policy with st's keys: a scheme change is refused, an algorithm
// change starts an algorithm rollover (reporting true) unless another rollover is in progress.
func (r *Roller) applyAlgorithm(st *State, now time.Time) (bool, error) {
	if len(st.Keys) == 0 {
		return false, nil
	}
	p := r.Cfg.Policy
	newest := st.Keys[len(st.Keys)-1]
	have := config.SchemeKSKZSK
	if newest.Role == RoleCSK {
		have = config.SchemeCSK
	}
	if p.Scheme != have {
		return false, fmt.Errorf("keys in %s are scheme %s keys and the policy asks for scheme %s: a scheme rollover (ksk_zsk to csk or back) is not supported, only an algorithm rollover within one scheme; restore scheme %s",
			r.Keys, have, p.Scheme, have)
	}
	if old := rollingAway(st, now); old != nil {
		if p.Algorithm != newest.Algorithm {
			return false, fmt.Errorf("keys in %s are rolling from algorithm %d to %d (%s) and the policy asks for algorithm %d: a rollover is not reversed midway; restore algorithm %d, and change it once `switchyard dns keys` shows the rollover done",
				r.Keys, old.Algorithm, newest.Algorithm, AlgorithmPhase(st, now), p.Algorithm, newest.Algorithm)
		}
		return false, nil
	}
	if p.Algorithm == newest.Algorithm {
		return false, nil
	}
	for _, k := range st.Keys {
		if k.Successor != 0 && k.At(now) != Removed {
			return false, fmt.Errorf("keys in %s: the policy asks for algorithm %d while %s %d (algorithm %d) is being rolled to %d: an algorithm rollover starts only after it; keep algorithm %d until `switchyard dns keys` shows key %d removed, then change it",
				r.Keys, p.Algorithm, k.Role, k.Tag, k.Algorithm, k.Successor, k.Algorithm, k.Tag)
		}
	}
	return true, r.startAlgorithmRoll(st, now)
}

// startAlgorithmRoll generates the policy algorithm's keys as successors of the current ones and
// schedules them (presigned now, published after IretZSK, a KSK or CSK active Ipub later).
func (r *Roller) startAlgorithmRoll(st *State, now time.Time) error {
	olds := map[string]*KeyState{}
	for _, role := range r.roles() {
		if olds[role] = current(st, role); olds[role] == nil {
			return fmt.Errorf("key state of %s in %s has no current %s to roll from; restore the state from a backup", r.Zone, r.Keys, role)
		}
	}
	for _, role := range r.roles() {
		k, err := r.generate(st, role, now)
		if err != nil {
			return err
		}
		k.Sign = now
		k.Publish = now.Add(r.T.IretZSK)
		k.Active = k.Publish
		old := olds[role]
		old.Successor = k.Tag
		if k.SEP() {
			k.Active = k.Publish.Add(r.T.Ipub)
			old.Retire = k.Active
		}
	}
	return nil
}

// scheduleAlgorithmRemoval schedules the old algorithm's keys' Unpublish and Remove once the new
// KSK's or CSK's DS was seen at the parent; it reports whether st changed.
func (r *Roller) scheduleAlgorithmRemoval(st *State) bool {
	changed := false
	for _, k := range st.Keys {
		next := st.key(k.Successor)
		if !k.SEP() || next == nil || next.Algorithm == k.Algorithm || !k.Remove.IsZero() || next.DSSeen.IsZero() {
			continue
		}
		unpublish := later(next.DSSeen, next.Active).Add(r.T.IretDS)
		for _, o := range st.Keys {
			if o.Algorithm == k.Algorithm && o.Remove.IsZero() {
				o.Unpublish, o.Remove = unpublish, unpublish.Add(r.T.Ipub)
				if o.Retire.IsZero() { // a ZSK: it signs until Remove
					o.Retire = unpublish
				}
				changed = true
			}
		}
	}
	return changed
}

// rollingAway is the KSK or CSK an algorithm rollover in st is replacing at now, nil when none is
// in progress.
func rollingAway(st *State, now time.Time) *KeyState {
	for _, k := range st.Keys {
		if next := st.key(k.Successor); k.SEP() && next != nil && next.Algorithm != k.Algorithm && k.At(now) != Removed {
			return k
		}
	}
	return nil
}

// AlgorithmPhase describes the algorithm rollover in progress at now, by RFC 6781 4.1.4's steps,
// and its next step ("" when none is in progress; stage 1 is before it, 6 after it).
func AlgorithmPhase(st *State, now time.Time) string {
	old := rollingAway(st, now)
	if old == nil {
		return ""
	}
	next := st.key(old.Successor)
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	head := fmt.Sprintf("algorithm rollover %d -> %d", old.Algorithm, next.Algorithm)
	switch {
	case old.At(now) == Withdrawn:
		return fmt.Sprintf("%s, stage 5 of 6 (DNSKEY removal): the algorithm %d DNSKEYs are gone; its RRSIGs are removed at %s",
			head, old.Algorithm, ts(old.Remove))
	case next.At(now) == Presigned:
		return fmt.Sprintf("%s, stage 2 of 6 (new RRSIGs): both algorithms sign every RRset; the algorithm %d DNSKEYs are published at %s",
			head, next.Algorithm, ts(next.Publish))
	case next.At(now) == Published:
		return fmt.Sprintf("%s, stage 3 of 6 (new DNSKEY): both algorithms' DNSKEYs are published; the CDS and CDNSKEY name %s %d at %s",
			head, next.Role, next.Tag, ts(next.Active))
	case next.DSSeen.IsZero():
		return fmt.Sprintf("%s, stage 4 of 6 (new DS): the CDS and CDNSKEY name %s %d; waiting for its DS at the parent (ds_check)",
			head, next.Role, next.Tag)
	}
	return fmt.Sprintf("%s, stage 4 of 6 (new DS): its DS was seen at the parent at %s; the algorithm %d DNSKEYs are removed at %s",
		head, ts(next.DSSeen), old.Algorithm, ts(old.Unpublish))
}
