package keyroll

import (
	"fmt"
	"time"
)

// An algorithm rollover is reversed (the policy's old algorithm restored) only while nothing
// outside the zone has been told of the new keys: before the CDS and CDNSKEY name the new KSK or
// CSK (RFC 6781 4.1.4 stages 2 and 3), so no parent can serve its DS yet. The way back is the
// way forward run backwards, each step safe for every cache:
//
//	stage 2 (presigned)  the new keys never were in the DNSKEY RRset: they are removed at once
//	                     (a validator ignores RRSIGs of keys it has no DNSKEY for)
//	stage 3 (published)  the new DNSKEYs leave the RRset now and keep signing (withdrawn) for
//	                     Ipub, until no cache holds a DNSKEY RRset with the new algorithm
//
// From stage 4 on the parent may already serve the new DS; turning back then would need the DS
// set rolled back first, which is a new rollover: the change is refused.
//
// Only a server that ran the new algorithm reverses (Roller.Ran): one started with the old
// algorithm, or a fleet's node whose configuration still has it and that reloads because
// another node started the rollover, would otherwise undo a rollover nobody asked to undo.

// reverseAlgorithmRoll undoes st's algorithm rollover at now: each new key leaves as above, is
// marked Reverted and names the old key it was to replace as its successor (so the old key is
// the role's current key again, and no other rollover starts before the new keys are gone).
func (r *Roller) reverseAlgorithmRoll(st *State, now time.Time) error {
	old := rollingAway(st, now)
	next := st.key(old.Successor)
	if s := next.At(now); s != Presigned && s != Published {
		return fmt.Errorf("keys in %s are rolling from algorithm %d to %d (%s) and the policy asks for algorithm %d again: the CDS and CDNSKEY already name %s %d, so the parent may serve its DS, and a rollover is not reversed past that; restore algorithm %d, let it finish (`switchyard dns keys` shows the rollover done), then set algorithm %d to roll back",
			r.Keys, old.Algorithm, next.Algorithm, AlgorithmPhase(st, now), old.Algorithm, next.Role, next.Tag, next.Algorithm, old.Algorithm)
	}
	for _, o := range st.Keys {
		k := st.key(o.Successor)
		if k == nil || k.Algorithm == o.Algorithm || !o.Remove.IsZero() {
			continue
		}
		if k.At(now) == Presigned {
			k.Remove = now
		} else {
			k.Unpublish, k.Remove = now, now.Add(r.T.Ipub)
		}
		for _, t := range []*time.Time{&k.Publish, &k.Active} { // never reached now
			if t.After(now) {
				*t = time.Time{}
			}
		}
		k.Reverted, k.Successor = now, o.Tag
		o.Successor, o.Retire = 0, time.Time{}
	}
	return nil
}
