package keyroll

import (
	"fmt"
	"time"
)

// A scheme rollover (ksk_zsk to csk or back, one algorithm) is a KSK rollover by double
// signature, as Knot makes one when single-type-signing changes: the new scheme's keys replace
// all the old ones. The new keys' times:
//
//	Publish  the policy change: in the DNSKEY RRset and signing beside the old keys, a new KSK
//	         the DNSKEY RRset, a new CSK or ZSK every RRset (active at once: the old keys sign
//	         too, so a cache holding the old DNSKEY RRset still validates)
//	Active   Publish + Ipub, for the KSK or CSK: no cache holds a DNSKEY RRset without it, so the
//	         CDS and CDNSKEY name it alone (the old KSK or CSK is retired) and its DS is awaited
//	         (ds_check)
//
// and once that DS was seen, every old key leaves at once (roll.go, as an old KSK or CSK does):
//
//	Remove   DS seen + IretDS (the old DS is gone from caches), and not before IretZSK after the
//	         new keys started signing the data (answers only the old keys signed are gone too)
//
// An old ZSK signs until it leaves. A new ZSK signing from its Publish (not pre-published) keeps
// a ZSK's signature on the data in every state, as Knot's kzonecheck wants of a zone with one.

// startSchemeRoll generates the policy scheme's keys as successors of the current ones (of
// scheme have) and schedules them.
func (r *Roller) startSchemeRoll(st *State, have string, now time.Time) error {
	oldRoles := []string{RoleCSK}
	if have != schemeOf(RoleCSK) {
		oldRoles = []string{RoleKSK, RoleZSK}
	}
	var olds []*KeyState
	for _, role := range oldRoles {
		k := current(st, role)
		if k == nil {
			return fmt.Errorf("key state of %s in %s has no current %s to roll from; restore the state from a backup", r.Zone, r.Keys, role)
		}
		olds = append(olds, k)
	}
	var sep *KeyState
	for _, role := range r.roles() {
		k, err := r.generate(st, role, now)
		if err != nil {
			return err
		}
		k.Publish, k.Active = now, now
		if k.SEP() {
			k.Active, sep = now.Add(r.T.Ipub), k
		}
	}
	for _, o := range olds {
		o.Successor = sep.Tag
		if o.SEP() {
			o.Retire = sep.Active
		}
	}
	return nil
}

// schemeRolling is the old KSK or CSK a scheme rollover in st is replacing at now, nil when none
// is in progress.
func schemeRolling(st *State, now time.Time) *KeyState {
	return replaced(st, now, func(k, next *KeyState) bool { return next.Algorithm == k.Algorithm && next.Role != k.Role })
}

// SchemePhase describes the scheme rollover in progress at now and its next step ("" when none
// is in progress).
func SchemePhase(st *State, now time.Time) string {
	old := schemeRolling(st, now)
	if old == nil {
		return ""
	}
	next := st.key(old.Successor)
	head := fmt.Sprintf("scheme rollover %s -> %s", schemeOf(old.Role), schemeOf(next.Role))
	switch {
	case next.At(now) == Published:
		return fmt.Sprintf("%s, stage 1 of 3 (new keys published): %s %d signs beside the old keys; the CDS and CDNSKEY name it at %s",
			head, next.Role, next.Tag, stamp(next.Active))
	case next.DSSeen.IsZero():
		return head + ", stage 2 of 3 (new DS): " + awaitingDS(next)
	}
	return fmt.Sprintf("%s, stage 3 of 3 (old keys leave): the DS of %s %d was seen at the parent at %s; the %s keys are removed at %s",
		head, next.Role, next.Tag, stamp(next.DSSeen), schemeOf(old.Role), stamp(old.Remove))
}
