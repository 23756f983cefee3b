package keyroll

import (
	"fmt"
	"time"

	"github.com/switchyard/switchyard/dns/config"
)

// schemeOf is the policy scheme a key of role belongs to.
func schemeOf(role string) string {
	if role == RoleCSK {
		return config.SchemeCSK
	}
	return config.SchemeKSKZSK
}

// currentSEP is the newest KSK or CSK without a successor: the key whose scheme and algorithm
// the zone has when no rollover is under way (nil in an empty state).
func currentSEP(st *State) *KeyState {
	for i := len(st.Keys) - 1; i >= 0; i-- {
		if k := st.Keys[i]; k.SEP() && k.Successor == 0 {
			return k
		}
	}
	return nil
}

// applyPolicy compares the policy with st's keys. A change of scheme starts a scheme rollover
// (schemeroll.go), a change of algorithm an algorithm rollover (algroll.go), both reporting
// true; the old algorithm restored early in an algorithm rollover reverses it (reverse.go).
// Any other change while a rollover is under way, or of scheme and algorithm at once, is
// refused with the fix and st left as it was.
func (r *Roller) applyPolicy(st *State, now time.Time) (bool, error) {
	cur := currentSEP(st)
	if cur == nil {
		return false, nil
	}
	p := r.Cfg.Policy
	if old := rollingAway(st, now); old != nil {
		return r.duringAlgorithmRoll(st, old, now)
	}
	if old := schemeRolling(st, now); old != nil {
		next := st.key(old.Successor)
		if p.Scheme == schemeOf(next.Role) && p.Algorithm == next.Algorithm {
			return false, nil
		}
		return false, fmt.Errorf("keys in %s are rolling from scheme %s to %s (%s) and the policy asks for scheme %s, algorithm %d: a scheme rollover is not changed midway; restore scheme %s and algorithm %d, and change them once `switchyard dns keys` shows the rollover done",
			r.Keys, schemeOf(old.Role), schemeOf(next.Role), SchemePhase(st, now), p.Scheme, p.Algorithm, schemeOf(next.Role), next.Algorithm)
	}
	have := schemeOf(cur.Role)
	switch {
	case p.Scheme == have && p.Algorithm == cur.Algorithm:
		return false, nil
	case p.Scheme != have && p.Algorithm != cur.Algorithm:
		return false, fmt.Errorf("keys in %s are scheme %s, algorithm %d and the policy asks for scheme %s, algorithm %d: change one at a time; set algorithm %d (a scheme rollover) or scheme %s (an algorithm rollover) first, the other once `switchyard dns keys` shows that rollover done",
			r.Keys, have, cur.Algorithm, p.Scheme, p.Algorithm, cur.Algorithm, have)
	}
	kind, want, keep := "an algorithm", fmt.Sprintf("algorithm %d", p.Algorithm), fmt.Sprintf("algorithm %d", cur.Algorithm)
	if p.Scheme != have {
		kind, want, keep = "a scheme", "scheme "+p.Scheme, "scheme "+have
	}
	for _, k := range st.Keys {
		if k.Successor != 0 && k.At(now) != Removed {
			return false, fmt.Errorf("keys in %s: the policy asks for %s while %s %d (algorithm %d) is being rolled to %d: %s rollover starts only after it; keep %s until `switchyard dns keys` shows key %d removed, then change it",
				r.Keys, want, k.Role, k.Tag, k.Algorithm, k.Successor, kind, keep, k.Tag)
		}
	}
	if p.Scheme != have {
		return true, r.startSchemeRoll(st, have, now)
	}
	return true, r.startAlgorithmRoll(st, now)
}
