package keyroll

import (
	"fmt"
	"time"
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

// duringAlgorithmRoll applies the policy while old's algorithm is being rolled away: the
// rollover's own algorithm and scheme go on, the old algorithm reverses it (reverse.go) if that
// is still safe, and anything else is refused with the fix.
func (r *Roller) duringAlgorithmRoll(st *State, old *KeyState, now time.Time) (bool, error) {
	p := r.Cfg.Policy
	next := st.key(old.Successor)
	scheme := schemeOf(next.Role)
	if p.Scheme != scheme {
		return false, fmt.Errorf("keys in %s are rolling from algorithm %d to %d (%s) and the policy asks for scheme %s: a scheme rollover starts only after it; restore scheme %s, and change it once `switchyard dns keys` shows the rollover done",
			r.Keys, old.Algorithm, next.Algorithm, AlgorithmPhase(st, now), p.Scheme, scheme)
	}
	switch {
	case p.Algorithm == next.Algorithm:
		return false, nil
	case p.Algorithm == old.Algorithm && old.Reverted.IsZero() && r.Ran != nil && r.Ran.Algorithm == next.Algorithm:
		return true, r.reverseAlgorithmRoll(st, now)
	case p.Algorithm == old.Algorithm && old.Reverted.IsZero():
		return false, fmt.Errorf("keys in %s are rolling from algorithm %d to %d (%s) and the policy asks for algorithm %d, but this server did not run algorithm %d: a rollover is reversed only by changing a running server's policy from algorithm %d back to %d (not by a start, nor by a fleet's node that never took the change); set algorithm %d, and to reverse the rollover then reload with algorithm %d",
			r.Keys, old.Algorithm, next.Algorithm, AlgorithmPhase(st, now), p.Algorithm, next.Algorithm, next.Algorithm, old.Algorithm, next.Algorithm, old.Algorithm)
	case !old.Reverted.IsZero():
		return false, fmt.Errorf("keys in %s: the rollover from algorithm %d to %d was reversed at %s and the policy asks for algorithm %d: its keys leave first; keep algorithm %d until `switchyard dns keys` shows key %d removed (at %s), then change it",
			r.Keys, next.Algorithm, old.Algorithm, stamp(old.Reverted), p.Algorithm, next.Algorithm, old.Tag, stamp(old.Remove))
	}
	return false, fmt.Errorf("keys in %s are rolling from algorithm %d to %d (%s) and the policy asks for algorithm %d: a rollover goes to one algorithm at a time; restore algorithm %d, and change it once `switchyard dns keys` shows the rollover done",
		r.Keys, old.Algorithm, next.Algorithm, AlgorithmPhase(st, now), p.Algorithm, next.Algorithm)
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
	return replaced(st, now, func(k, next *KeyState) bool { return next.Algorithm != k.Algorithm })
}

// replaced is the first KSK or CSK in st, not removed at now, whose successor differs from it
// as differs says, nil when none does.
func replaced(st *State, now time.Time, differs func(k, next *KeyState) bool) *KeyState {
	for _, k := range st.Keys {
		if next := st.key(k.Successor); k.SEP() && next != nil && differs(k, next) && k.At(now) != Removed {
			return k
		}
	}
	return nil
}

// awaitingDS says that the CDS and CDNSKEY name k, whose DS is awaited at the parent.
func awaitingDS(k *KeyState) string {
	return fmt.Sprintf("the CDS and CDNSKEY name %s %d; waiting for its DS at the parent (ds_check)", k.Role, k.Tag)
}

// stamp is t as `switchyard dns keys` and messages show it ("-": not scheduled).
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// AlgorithmPhase describes the algorithm rollover in progress at now, by RFC 6781 4.1.4's steps,
// and its next step ("" when none is in progress; stage 1 is before it, 6 after it).
func AlgorithmPhase(st *State, now time.Time) string {
	old := rollingAway(st, now)
	if old == nil {
		return ""
	}
	next := st.key(old.Successor)
	head := fmt.Sprintf("algorithm rollover %d -> %d", old.Algorithm, next.Algorithm)
	if !old.Reverted.IsZero() { // old is the reversed rollover's new key, next the old one
		return fmt.Sprintf("algorithm rollover %d -> %d reversed at %s: the algorithm %d keys are %s; they are removed at %s",
			next.Algorithm, old.Algorithm, stamp(old.Reverted), old.Algorithm, old.At(now), stamp(old.Remove))
	}
	switch {
	case old.At(now) == Withdrawn:
		return fmt.Sprintf("%s, stage 5 of 6 (DNSKEY removal): the algorithm %d DNSKEYs are gone; its RRSIGs are removed at %s",
			head, old.Algorithm, stamp(old.Remove))
	case next.At(now) == Presigned:
		return fmt.Sprintf("%s, stage 2 of 6 (new RRSIGs): both algorithms sign every RRset; the algorithm %d DNSKEYs are published at %s",
			head, next.Algorithm, stamp(next.Publish))
	case next.At(now) == Published:
		return fmt.Sprintf("%s, stage 3 of 6 (new DNSKEY): both algorithms' DNSKEYs are published; the CDS and CDNSKEY name %s %d at %s",
			head, next.Role, next.Tag, stamp(next.Active))
	case next.DSSeen.IsZero():
		return head + ", stage 4 of 6 (new DS): " + awaitingDS(next)
	}
	return fmt.Sprintf("%s, stage 4 of 6 (new DS): its DS was seen at the parent at %s; the algorithm %d DNSKEYs are removed at %s",
		head, stamp(next.DSSeen), old.Algorithm, stamp(old.Unpublish))
}
