package dns

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/keyroll"
)

// rollTimings are the walks' policy: short intervals so a rollover spans minutes of skewed
// clock, well inside the hour by which signatures are backdated (delv checks them against the
// real clock).
const rollPolicy = `dnskey_ttl: 60
      refresh: 1m
      validity: 2h
      policy: {scheme: %s, algorithm: %d, zsk_lifetime: 10m, ksk_lifetime: %s, propagation_delay: 1m, zone_max_ttl: 300, parent_ds_ttl: 60}
      ds_check: {parents: [%s], interval: 30s}`

func rollChildYAML(dir, scheme string, alg int, kskLife, parent string) string {
	return `zones:
  - origin: example.org.
    transfer: {allow: [127.0.0.1]}
    dnssec:
      key_dir: ` + dir + `
      ` + fmt.Sprintf(rollPolicy, scheme, alg, kskLife, parent) + `
    records:
      - "@ SOA ns1 hostmaster 1 3600 600 604800 60"
      - "@ NS ns1"
      - "ns1 A 127.0.0.1"
      - "www 300 A 192.0.2.1"
`
}

// reloadParent makes the parent org. serve the delegation to example.org. with ds as its DS set.
func reloadParent(t *testing.T, parent *Server, ds []*mdns.DS) {
	t.Helper()
	yml := `zones:
  - origin: org.
    records:
      - "@ SOA ns hostmaster 1 3600 600 604800 60"
      - "@ NS ns"
      - "ns A 127.0.0.1"
      - "example NS ns1.example"
      - "ns1.example A 127.0.0.1"
`
	for _, d := range ds {
		yml += fmt.Sprintf("      - \"example 60 DS %d %d %d %s\"\n", d.KeyTag, d.Algorithm, d.DigestType, d.Digest)
	}
	cfg, err := config.Parse([]byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.Dir = "127.0.0.1:0", "testdata"
	if err := parent.Reload(cfg); err != nil {
		t.Fatal(err)
	}
}

// dsAnchor writes a delv trust anchor for example.org. naming ds (as a resolver that cached the
// parent's DS would trust it).
func dsAnchor(t *testing.T, ds *mdns.DS) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "anchor")
	a := fmt.Sprintf("trust-anchors { example.org. static-ds %d %d %d \"%s\"; };\n", ds.KeyTag, ds.Algorithm, ds.DigestType, ds.Digest)
	if err := os.WriteFile(p, []byte(a), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// rollStep is what the walk saw while one set of key states held, from at until the next step.
type rollStep struct {
	at, until  time.Time
	states     string   // tag:role:state of every key
	dnskeys    []uint16 // the tags of the DNSKEY RRset
	signers    []uint16 // the tags of the RRSIGs over www A
	keyAlgs    []uint8  // the algorithms of the DNSKEY RRset
	signerAlgs []uint8  // the algorithms of the RRSIGs over www A
}

// TestKeyRolloverZSK walks a ZSK pre-publish rollover (KSK/ZSK scheme, algorithm 13).
func TestKeyRolloverZSK(t *testing.T) {
	walkRollover(t, rollCase{scheme: "ksk_zsk", alg: 13, kskLife: "1000h", role: keyroll.RoleZSK})
}

// TestKeyRolloverCSK walks a CSK double-signature rollover with the DS submission (Ed25519).
func TestKeyRolloverCSK(t *testing.T) {
	walkRollover(t, rollCase{scheme: "csk", alg: 15, kskLife: "6m", role: keyroll.RoleCSK})
}

// TestKeyRolloverAlgorithm walks an algorithm rollover of KSK/ZSK keys from ECDSA P-256 to
// Ed25519 (RFC 6781 4.1.4), started by the policy's change, through the DS submission.
func TestKeyRolloverAlgorithm(t *testing.T) {
	walkRollover(t, rollCase{scheme: "ksk_zsk", alg: 13, toAlg: 15, kskLife: "1000h", role: keyroll.RoleKSK})
}

// TestKeyRolloverAlgorithmCSK walks an algorithm rollover of a CSK from RSA/SHA-256 to ECDSA
// P-256.
func TestKeyRolloverAlgorithmCSK(t *testing.T) {
	walkRollover(t, rollCase{scheme: "csk", alg: 8, toAlg: 13, kskLife: "1000h", role: keyroll.RoleCSK})
}

// TestKeyRolloverSchemeToCSK walks a scheme rollover from a KSK and ZSK to a CSK (ECDSA P-256),
// through the CSK's DS submission, until the KSK and the ZSK are gone.
func TestKeyRolloverSchemeToCSK(t *testing.T) {
	walkRollover(t, rollCase{scheme: "ksk_zsk", toScheme: "csk", alg: 13, kskLife: "1000h", role: keyroll.RoleKSK,
		want: []string{"ksk:active", "ksk:retired", "ksk:removed", "zsk:active", "zsk:removed", "csk:published", "csk:active"}})
}

// TestKeyRolloverSchemeToKSKZSK walks a scheme rollover from a CSK to a KSK and ZSK (Ed25519),
// until the CSK is gone.
func TestKeyRolloverSchemeToKSKZSK(t *testing.T) {
	walkRollover(t, rollCase{scheme: "csk", toScheme: "ksk_zsk", alg: 15, kskLife: "1000h", role: keyroll.RoleCSK,
		want: []string{"csk:active", "csk:retired", "csk:removed", "ksk:published", "ksk:active", "zsk:active"}})
}

// TestKeyRolloverAlgorithmReversedPresigned walks an algorithm rollover (13 to 15, KSK/ZSK)
// reversed while the new keys only sign (stage 2): they leave at once.
func TestKeyRolloverAlgorithmReversedPresigned(t *testing.T) {
	walkRollover(t, rollCase{scheme: "ksk_zsk", alg: 13, toAlg: 15, revertAt: keyroll.Presigned, kskLife: "1000h", role: keyroll.RoleKSK,
		want: []string{"ksk:presigned", "ksk:removed", "zsk:presigned"}})
}

// TestKeyRolloverAlgorithmReversedPublished walks an algorithm rollover of a CSK (13 to 15)
// reversed once the new DNSKEY is published (stage 3): it is withdrawn and signs on until no
// cache holds it, then goes.
func TestKeyRolloverAlgorithmReversedPublished(t *testing.T) {
	walkRollover(t, rollCase{scheme: "csk", alg: 13, toAlg: 15, revertAt: keyroll.Published, kskLife: "1000h", role: keyroll.RoleCSK,
		want: []string{"csk:presigned", "csk:published", "csk:withdrawn", "csk:removed"}})
}

// rollCase is a walk's policy: scheme, algorithm and KSK lifetime; toAlg or toScheme, when set,
// the algorithm or scheme the policy changes to after the first step (an algorithm or scheme
// rollover); revertAt, when set, the state of the new KSK or CSK in which the policy's algorithm
// goes back to alg (a reversed algorithm rollover); role, the role whose first key's removal ends
// the walk (with revertAt: whose last key's; with toScheme: once every key of the old scheme is
// removed); want, the role:state pairs the walk must see (default: role's states in a rollover).
type rollCase struct {
	scheme, toScheme string
	alg, toAlg       int
	kskLife          string
	role             string
	revertAt         string
	want             []string
}

// ended reports whether the walk is over in st at now.
func (c rollCase) ended(t *testing.T, st *keyroll.State, now time.Time) bool {
	var keys []*keyroll.KeyState
	for _, k := range st.Keys {
		oldScheme := (k.Role == keyroll.RoleCSK) == (c.scheme == "csk")
		if c.toScheme != "" && oldScheme || c.toScheme == "" && k.Role == c.role {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		t.Fatalf("no %s in %+v", c.role, st.Keys)
	}
	switch {
	case c.toScheme != "":
		return !slices.ContainsFunc(keys, func(k *keyroll.KeyState) bool { return k.At(now) != keyroll.Removed })
	case c.revertAt != "":
		return keys[len(keys)-1].At(now) == keyroll.Removed
	}
	return keys[0].At(now) == keyroll.Removed
}

// newestOf is st's newest key of role.
func newestOf(st *keyroll.State, role string) *keyroll.KeyState {
	for i := len(st.Keys) - 1; i >= 0; i-- {
		if st.Keys[i].Role == role {
			return st.Keys[i]
		}
	}
	return &keyroll.KeyState{}
}

// wantSeen are the role:state pairs the walk must see.
func (c rollCase) wantSeen() []string {
	if c.want != nil {
		return c.want
	}
	want := []string{keyroll.Generated, keyroll.Published, keyroll.Active, keyroll.Retired, keyroll.Removed}
	if c.toAlg != 0 {
		want = []string{keyroll.Presigned, keyroll.Published, keyroll.Active, keyroll.Retired, keyroll.Withdrawn, keyroll.Removed}
	}
	var out []string
	for _, s := range want {
		out = append(out, c.role+":"+s)
	}
	return out
}

// walkRollover starts a parent (org.) and a child (example.org.) with a key policy, and moves
// the child's clock from one key transition to the next until the first key of role is removed.
// The parent publishes what the child's CDS asks for, as a registry following RFC 8078 would.
// In every state delv validates a positive and a negative answer from every DS a resolver may
// still hold, and both answers carry a signature of its algorithm (and kzonecheck validates the
// whole zone, for KSK/ZSK, or a CSK with one DNSKEY), the DNSKEY RRset carries a signature of
// the key each of those DS names, and no resolver cache can pair a DNSKEY RRset with data
// signed by none of its keys, or by not every algorithm of it.
func walkRollover(t *testing.T, c rollCase) {
	scheme := c.scheme
	parent := startServer(t, "zones: [{origin: org., records: [\"@ SOA ns hostmaster 1 3600 600 604800 60\", \"@ NS ns\", \"ns A 127.0.0.1\"]}]", Options{})
	dir := t.TempDir()
	child := startServer(t, rollChildYAML(dir, scheme, c.alg, c.kskLife, parent.Addr().String()), Options{})
	start := time.Now()
	now := func() time.Time { return child.now() }
	reverted := false
	cdsOf := func() []*mdns.DS {
		var out []*mdns.DS
		for _, rr := range exchange(t, child, doQuery("example.org.", mdns.TypeCDS, false), true).Answer {
			if c, ok := rr.(*mdns.CDS); ok {
				out = append(out, &c.DS)
			}
		}
		return out
	}
	// The parent's DS set, and each DS a resolver may still have cached, until when.
	parentDS := cdsOf()
	if len(parentDS) != 1 {
		t.Fatalf("a new zone's CDS: %v, want one", parentDS)
	}
	reloadParent(t, parent, parentDS)
	live := map[string]time.Time{parentDS[0].String(): {}}
	liveDS := map[string]*mdns.DS{parentDS[0].String(): parentDS[0]}
	const dsHold = 60*time.Second + time.Minute // the DS TTL and the propagation delay
	// When the parent began serving each DS.
	dsSince := map[uint16]time.Time{parentDS[0].KeyTag: now()}

	var steps []rollStep
	seen := map[string]bool{}
	for i := 0; i < 30; i++ {
		st, _ := keyroll.Load(dir, "example.org.")
		var states []string
		for _, k := range st.Keys {
			s := k.At(now())
			states = append(states, fmt.Sprintf("%d:%s:%s", k.Tag, k.Role, s))
			seen[k.Role+":"+s] = true
		}
		step := rollStep{at: now(), states: strings.Join(states, " ")}
		dnskeyResp := exchange(t, child, doQuery("example.org.", mdns.TypeDNSKEY, false), true)
		for _, rr := range dnskeyResp.Answer {
			if k, ok := rr.(*mdns.DNSKEY); ok {
				step.dnskeys = append(step.dnskeys, k.KeyTag())
				step.keyAlgs = append(step.keyAlgs, k.Algorithm)
			}
		}
		www := exchange(t, child, doQuery("www.example.org.", mdns.TypeA, false), false)
		nope := exchange(t, child, doQuery("nope.example.org.", mdns.TypeA, false), false)
		for dsText, ds := range liveDS {
			if !signedBy(dnskeyResp, ds) {
				t.Errorf("%s: the DNSKEY RRset is not signed by the key of the live DS %s", step.states, dsText)
			}
			for _, m := range []*mdns.Msg{www, nope} {
				if !slices.Contains(sigAlgs(m), ds.Algorithm) {
					t.Errorf("%s: the answer for %s has no RRSIG of the live DS's algorithm %d:\n%v", step.states, m.Question[0].Name, ds.Algorithm, m)
				}
			}
			anchor := dsAnchor(t, ds)
			for _, q := range [][2]string{{"www.example.org.", "A"}, {"nope.example.org.", "A"}} {
				out := delvRoot(t, child, anchor, "example.org.", q[0], q[1])
				if !strings.Contains(out, "fully validated") {
					t.Errorf("%s: delv %s %s with DS %d: not validated:\n%s", step.states, q[0], q[1], ds.KeyTag, out)
				}
			}
		}
		if scheme == "ksk_zsk" || c.toScheme != "" || len(step.dnskeys) == 1 {
			// The second validator, over the whole zone. Not for CSKs with two DNSKEYs:
			// kzonecheck takes a zone for single-key signing only when it has one DNSKEY,
			// so a CSK rollover's two keys read to it as KSKs with no ZSK to sign the data.
			// A scheme rollover always has a ZSK signing or one DNSKEY.
			kzonecheckServed(t, child, "example.org.")
		}
		for _, rr := range www.Answer {
			if sig, ok := rr.(*mdns.RRSIG); ok {
				step.signers = append(step.signers, sig.KeyTag)
			}
		}
		step.signerAlgs = sigAlgs(www)
		t.Logf("t+%s: %s; DNSKEY %v (algorithms %v); www signed by %v (algorithms %v); live DS %d",
			now().Sub(start).Round(time.Second), step.states, step.dnskeys, step.keyAlgs, step.signers, step.signerAlgs, len(liveDS))

		if c.ended(t, st, now()) {
			step.until = now().Add(time.Hour)
			steps = append(steps, step)
			break
		}
		if i == 0 && (c.toAlg != 0 || c.toScheme != "") {
			// The policy's new algorithm or scheme: the rollover starts at the reload.
			step.until = now()
			steps = append(steps, step)
			if err := reloadChild(t, child, rollChildYAML(dir, cmp.Or(c.toScheme, scheme), cmp.Or(c.toAlg, c.alg), c.kskLife, parent.Addr().String())); err != nil {
				t.Fatalf("reload with scheme %s, algorithm %d: %v", cmp.Or(c.toScheme, scheme), cmp.Or(c.toAlg, c.alg), err)
			}
			continue
		}
		if k := newestOf(st, c.role); c.revertAt != "" && !reverted && k.Algorithm == uint8(c.toAlg) && k.At(now()) == c.revertAt {
			// The old algorithm again: the rollover is reversed at the reload.
			step.until = now()
			steps = append(steps, step)
			if err := reloadChild(t, child, rollChildYAML(dir, scheme, c.alg, c.kskLife, parent.Addr().String())); err != nil {
				t.Fatalf("reload with algorithm %d again in state %s: %v", c.alg, c.revertAt, err)
			}
			reverted = true
			lines, err := keyroll.Describe("example.org.", child.Config().Zones[0].DNSSEC, keyroll.DirStore(dir), now())
			if d := strings.Join(lines, "\n"); err != nil || c.revertAt == keyroll.Published &&
				!strings.Contains(d, fmt.Sprintf("algorithm rollover %d -> %d reversed at", c.alg, c.toAlg)) {
				t.Errorf("dns keys after the reversal: %v\n%s", err, d)
			}
			continue
		}
		// The registry follows the CDS; a DS it withdrew stays live in caches for dsHold.
		if cds := cdsOf(); len(cds) > 0 && !sameDS(cds, parentDS) {
			for _, d := range parentDS {
				if !slices.ContainsFunc(cds, func(c *mdns.DS) bool { return c.String() == d.String() }) {
					live[d.String()] = now().Add(dsHold)
				}
			}
			parentDS = cds
			for _, d := range cds {
				if _, ok := liveDS[d.String()]; !ok {
					dsSince[d.KeyTag] = now()
				}
				live[d.String()], liveDS[d.String()] = time.Time{}, d
			}
			reloadParent(t, parent, parentDS)
		}
		// The next moment something changes: a key transition, a DS check, a cached DS expiring.
		r, err := keyroll.NewRoller("example.org.", keyroll.DirStore(dir), child.Config().Zones[0].DNSSEC, 300)
		if err != nil {
			t.Fatal(err)
		}
		next := r.NextEvent(st, now())
		if keyroll.AwaitingDS(st, now()) != nil && (next.IsZero() || next.Sub(now()) > 30*time.Second) {
			next = now().Add(31 * time.Second)
		}
		for _, until := range live {
			if !until.IsZero() && until.After(now()) && (next.IsZero() || until.Before(next)) {
				next = until
			}
		}
		if next.IsZero() {
			t.Fatalf("%s: nothing scheduled and the walk not ended", step.states)
		}
		step.until = next
		steps = append(steps, step)
		child.skew.Add(int64(next.Sub(now())))
		for d, until := range live {
			if !until.IsZero() && !now().Before(until) {
				delete(live, d)
				delete(liveDS, d)
			}
		}
		if err := child.keyRound(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if now().Sub(start) > 50*time.Minute {
		t.Fatalf("the walk took %s of skewed clock; signatures made then are not yet valid for delv", now().Sub(start))
	}
	for _, s := range c.wantSeen() {
		if !seen[s] {
			t.Errorf("the walk never saw %s", s)
		}
	}
	if c.revertAt != "" && !reverted {
		t.Errorf("the walk never reached state %s of the new key to reverse the rollover", c.revertAt)
	}
	checkCaches(t, steps)
	checkDSCaches(t, steps, dsSince)
}

// checkDSCaches: a resolver that fetches a DS from the parent may pair it with a DNSKEY RRset
// it cached up to Dprp + its TTL before; each such RRset must hold the DS's key.
func checkDSCaches(t *testing.T, steps []rollStep, dsSince map[uint16]time.Time) {
	t.Helper()
	keyHold := 60*time.Second + time.Minute
	for tag, since := range dsSince {
		for _, a := range steps {
			if a.at.Before(since) && a.until.Add(keyHold).After(since) && !slices.Contains(a.dnskeys, tag) {
				t.Errorf("the parent's DS of key %d from %s meets the cached DNSKEY RRset of %q (%v), without that key",
					tag, since.Format(time.TimeOnly), a.states, a.dnskeys)
			}
		}
	}
}

// checkCaches: a resolver may hold a DNSKEY RRset until Dprp + its TTL after it was last served
// and data until Dprp + the zone's max TTL; whatever it pairs, some signature over the data must
// be by a key of the RRset, and every algorithm of the RRset must sign the data (RFC 4035 2.2,
// which a strict validator holds a zone to in an algorithm rollover).
func checkCaches(t *testing.T, steps []rollStep) {
	t.Helper()
	keyHold, dataHold := 60*time.Second+time.Minute, 300*time.Second+time.Minute
	for i, a := range steps {
		for j, b := range steps {
			// a's DNSKEY RRset cached with b's data, or b's data cached with a's DNSKEY RRset.
			close := j >= i && b.at.Sub(a.until) < keyHold || j < i && a.at.Sub(b.until) < dataHold
			if close && !slices.ContainsFunc(b.signers, func(tag uint16) bool { return slices.Contains(a.dnskeys, tag) }) {
				t.Errorf("DNSKEY RRset of %q (%v) cannot validate the data of %q (signed by %v)", a.states, a.dnskeys, b.states, b.signers)
			}
			for _, alg := range a.keyAlgs {
				if close && !slices.Contains(b.signerAlgs, alg) {
					t.Errorf("DNSKEY RRset of %q (algorithms %v) meets the data of %q signed by algorithms %v only", a.states, a.keyAlgs, b.states, b.signerAlgs)
				}
			}
		}
	}
}

// sigAlgs are the algorithms of the RRSIGs in m's answer and authority sections.
func sigAlgs(m *mdns.Msg) []uint8 {
	var out []uint8
	for _, rr := range append(slices.Clone(m.Answer), m.Ns...) {
		if sig, ok := rr.(*mdns.RRSIG); ok && !slices.Contains(out, sig.Algorithm) {
			out = append(out, sig.Algorithm)
		}
	}
	return out
}

// reloadChild reloads srv with the configuration yml (its listener kept).
func reloadChild(t *testing.T, srv *Server, yml string) error {
	t.Helper()
	cfg, err := config.Parse([]byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen = srv.Config().Listen
	return srv.Reload(cfg)
}

func sameDS(a, b []*mdns.DS) bool {
	if len(a) != len(b) {
		return false
	}
	for _, d := range a {
		if !slices.ContainsFunc(b, func(x *mdns.DS) bool { return x.String() == d.String() }) {
			return false
		}
	}
	return true
}

// signedBy reports whether resp's DNSKEY RRset has a valid RRSIG by the DNSKEY that ds names.
func signedBy(resp *mdns.Msg, ds *mdns.DS) bool {
	var keys []mdns.RR
	for _, rr := range resp.Answer {
		if k, ok := rr.(*mdns.DNSKEY); ok {
			keys = append(keys, k)
		}
	}
	for _, rr := range resp.Answer {
		sig, ok := rr.(*mdns.RRSIG)
		if !ok || sig.KeyTag != ds.KeyTag {
			continue
		}
		for _, k := range keys {
			if d := k.(*mdns.DNSKEY).ToDS(ds.DigestType); d != nil && strings.EqualFold(d.Digest, ds.Digest) && sig.Verify(k.(*mdns.DNSKEY), keys) == nil {
				return true
			}
		}
	}
	return false
}

// maxTTLZone is a ksk_zsk policy zone whose www record has ttl; limit is the policy's
// zone_max_ttl field (empty: none).
func maxTTLZone(dir, limit string, ttl int) string {
	return `zones:
  - origin: example.org.
    dnssec:
      key_dir: ` + dir + `
      dnskey_ttl: 60
      policy: {scheme: ksk_zsk, zsk_lifetime: 10h, ksk_lifetime: 1000h, propagation_delay: 1m` + limit + `}
    records:
      - "@ SOA ns1 hostmaster 1 3600 600 604800 60"
      - "@ NS ns1"
      - "ns1 A 127.0.0.1"
      - ` + fmt.Sprintf(`"www %d A 192.0.2.1"`, ttl) + `
`
}

// TestZoneMaxTTLRefusesLongerTTL: a record above the policy's zone_max_ttl fails the load and a
// reload (the old zone keeps answering), with an error naming the record, its TTL and the fix.
func TestZoneMaxTTLRefusesLongerTTL(t *testing.T) {
	dir := t.TempDir()
	const limit = ", zone_max_ttl: 3600"
	cfg, err := config.Parse([]byte(maxTTLZone(dir, limit, 7200)))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen = "127.0.0.1:0"
	wantErr := func(err error) {
		t.Helper()
		for _, want := range []string{"www.example.org.", "TTL 7200", "zone_max_ttl 3600", "lower the record's TTL or raise zone_max_ttl"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error %v: want it to say %q", err, want)
			}
		}
	}
	_, err = NewServer(cfg, Options{})
	wantErr(err)

	srv := startServer(t, maxTTLZone(dir, limit, 3600), Options{})
	bad, err := config.Parse([]byte(maxTTLZone(dir, limit, 7200)))
	if err != nil {
		t.Fatal(err)
	}
	bad.Listen = srv.Config().Listen
	wantErr(srv.Reload(bad))
	resp := exchange(t, srv, doQuery("www.example.org.", mdns.TypeA, false), false)
	if len(resp.Answer) == 0 || resp.Answer[0].Header().Ttl != 3600 {
		t.Fatalf("after the refused reload: %v, want the old zone's www 3600 A", resp.Answer)
	}
}

// TestZoneMaxTTLFromZone: without zone_max_ttl a ZSK rollover keeps the old ZSK published for
// the propagation delay plus the zone's own largest TTL (RFC 7583 3.2's Iret), and with one,
// for that instead.
func TestZoneMaxTTLFromZone(t *testing.T) {
	for _, c := range []struct {
		limit string
		want  time.Duration
	}{{"", time.Minute + 7200*time.Second}, {", zone_max_ttl: 9000", time.Minute + 9000*time.Second}} {
		dir := t.TempDir()
		srv := startServer(t, maxTTLZone(dir, c.limit, 7200), Options{})
		srv.skew.Add(int64(10 * time.Hour))
		if err := srv.keyRound(t.Context()); err != nil {
			t.Fatal(err)
		}
		st, err := keyroll.Load(dir, "example.org.")
		if err != nil {
			t.Fatal(err)
		}
		var old *keyroll.KeyState
		for _, k := range st.Keys {
			if k.Role == keyroll.RoleZSK && k.Successor != 0 {
				old = k
			}
		}
		if old == nil {
			t.Fatalf("zone_max_ttl %q: no ZSK rollover scheduled after the lifetime: %+v", c.limit, st.Keys)
		}
		if got := old.Remove.Sub(old.Retire); got != c.want {
			t.Errorf("zone_max_ttl %q: the old ZSK stays %s after it retires, want %s", c.limit, got, c.want)
		}
	}
}

// rollFixture makes a parent (org.) for the ds_check and a key directory, and returns the child's
// configuration for a scheme and algorithm (rollChildYAML), the text of its state file and what
// `switchyard dns keys` prints for a server of it.
func rollFixture(t *testing.T) (yml func(scheme string, alg int) string, state func() string, describe func(*Server) string) {
	t.Helper()
	parent := startServer(t, "zones: [{origin: org., records: [\"@ SOA ns hostmaster 1 3600 600 604800 60\", \"@ NS ns\", \"ns A 127.0.0.1\"]}]", Options{})
	dir := t.TempDir()
	yml = func(scheme string, alg int) string {
		return rollChildYAML(dir, scheme, alg, "1000h", parent.Addr().String())
	}
	state = func() string {
		b, err := os.ReadFile(filepath.Join(dir, "example.org.keys.json"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	describe = func(srv *Server) string {
		lines, err := keyroll.Describe("example.org.", srv.Config().Zones[0].DNSSEC, keyroll.DirStore(dir), srv.now())
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	return yml, state, describe
}

// restartMidway starts a server of configuration from, reloads it with to (starting a rollover)
// and stops it, then starts another of to: it returns that one and the state the first left,
// failing the test if the restart changed it.
func restartMidway(t *testing.T, from, to string, state func() string) (*Server, string) {
	t.Helper()
	a := newTestServer(t, from, Options{})
	stopA := startBuilt(t, a)
	if err := reloadChild(t, a, to); err != nil {
		t.Fatalf("reload starting the rollover: %v", err)
	}
	started := state()
	stopA()
	b := newTestServer(t, to, Options{})
	startBuilt(t, b)
	if got := state(); got != started {
		t.Fatalf("the restart changed the key state:\n%s\nwas\n%s", got, started)
	}
	return b, started
}

// TestKeyRolloverAlgorithmRestart: a server restarted in the middle of an algorithm rollover
// resumes it from the state file (the same keys and times, no new key, the same stage) and moves
// on by its timestamps. A start with the old algorithm does not reverse it (it did not run the
// new one), and a policy changed to a third algorithm midway is refused with the fix, as is a
// change of scheme: all leave the state and the served keys as they were.
func TestKeyRolloverAlgorithmRestart(t *testing.T) {
	yml, state, describe := rollFixture(t)
	b, started := restartMidway(t, yml("ksk_zsk", 13), yml("ksk_zsk", 15), state)
	keys, _ := rrTags(t, b, "example.org.", mdns.TypeDNSKEY)
	_, sigs := rrTags(t, b, "www.example.org.", mdns.TypeA)
	if len(keys) != 2 || len(sigs) != 2 {
		t.Fatalf("after the restart: DNSKEY %v, www signed by %v; want the old KSK and ZSK published, both ZSKs signing", keys, sigs)
	}
	if d := describe(b); !strings.Contains(d, "algorithm rollover 13 -> 15, stage 2 of 6 (new RRSIGs)") {
		t.Errorf("dns keys after the restart:\n%s", d)
	}

	refused := func(yml string, want ...string) {
		t.Helper()
		err := reloadChild(t, b, yml)
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("reload: %v; want it to say %q", err, w)
			}
		}
		if got := state(); got != started {
			t.Errorf("a refused reload changed the key state:\n%s", got)
		}
	}
	// A start with the old algorithm does not reverse the rollover: it did not run the new one.
	cfg, err := config.Parse([]byte(yml("ksk_zsk", 13)))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen = "127.0.0.1:0"
	if _, err := NewServer(cfg, Options{}); err == nil || !strings.Contains(err.Error(),
		"a rollover is reversed only by changing a running server's policy from algorithm 15 back to 13") {
		t.Errorf("a start with algorithm 13 in the rollover to 15: %v; want it refused naming how to reverse", err)
	}
	if got := state(); got != started {
		t.Errorf("a refused start changed the key state:\n%s", got)
	}
	refused(yml("ksk_zsk", 8), "rolling from algorithm 13 to 15", "a rollover goes to one algorithm at a time; restore algorithm 15")
	refused(yml("csk", 15), "a scheme rollover starts only after it; restore scheme ksk_zsk")

	// On by the timestamps: Dprp + the zone's max TTL later the new DNSKEYs are published.
	b.skew.Add(int64(time.Minute + 300*time.Second))
	if err := b.keyRound(t.Context()); err != nil {
		t.Fatal(err)
	}
	if keys, _ := rrTags(t, b, "example.org.", mdns.TypeDNSKEY); len(keys) != 4 {
		t.Errorf("after Dprp + max TTL: DNSKEY %v, want both algorithms' KSK and ZSK", keys)
	}
	if d := describe(b); !strings.Contains(d, "stage 3 of 6 (new DNSKEY)") {
		t.Errorf("dns keys in stage 3:\n%s", d)
	}
}

// TestKeyRolloverAlgorithmWaits: an algorithm change while a ZSK rollover is in progress is
// refused, naming the key to wait for; nothing is generated. (The ds_check parent is never asked:
// no DS is awaited.)
func TestKeyRolloverAlgorithmWaits(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, rollChildYAML(dir, "ksk_zsk", 13, "1000h", "127.0.0.1:47200"), Options{})
	srv.skew.Add(int64(7 * time.Minute)) // the ZSK's successor is made Ipub + Dprp before its lifetime ends
	if err := srv.keyRound(t.Context()); err != nil {
		t.Fatal(err)
	}
	st, err := keyroll.Load(dir, "example.org.")
	if err != nil || len(st.Keys) != 3 {
		t.Fatalf("no ZSK rollover under way: %v %+v", err, st)
	}
	err = reloadChild(t, srv, rollChildYAML(dir, "ksk_zsk", 15, "1000h", "127.0.0.1:47200"))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("while zsk %d (algorithm 13) is being rolled", st.Keys[1].Tag)) ||
		!strings.Contains(err.Error(), "an algorithm rollover starts only after it") {
		t.Fatalf("algorithm change during a ZSK rollover: %v", err)
	}
	if after, _ := keyroll.Load(dir, "example.org."); len(after.Keys) != 3 {
		t.Errorf("the refused change generated keys: %+v", after.Keys)
	}
}

// TestKeyRolloverAlgorithmReverseRefused: once the CDS names the new algorithm's KSK (stage 4),
// the parent may serve its DS, so the old algorithm restored is refused naming the way back
// (finish, then roll again); the state and the served keys stay as they were.
func TestKeyRolloverAlgorithmReverseRefused(t *testing.T) {
	yml, state, describe := rollFixture(t)
	srv := startServer(t, yml("ksk_zsk", 13), Options{})
	if err := reloadChild(t, srv, yml("ksk_zsk", 15)); err != nil {
		t.Fatalf("reload with algorithm 15: %v", err)
	}
	// Stage 3 after Dprp + the zone's max TTL, stage 4 Ipub later.
	for _, d := range []time.Duration{time.Minute + 300*time.Second, 2 * time.Minute} {
		srv.skew.Add(int64(d))
		if err := srv.keyRound(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	var st keyroll.State
	before := state()
	if err := json.Unmarshal([]byte(before), &st); err != nil {
		t.Fatal(err)
	}
	ksk := newestOf(&st, keyroll.RoleKSK)
	if ksk.Algorithm != 15 || ksk.At(srv.now()) != keyroll.Active {
		t.Fatalf("not in stage 4:\n%s", describe(srv))
	}
	keys, _ := rrTags(t, srv, "example.org.", mdns.TypeDNSKEY)
	err := reloadChild(t, srv, yml("ksk_zsk", 13))
	for _, want := range []string{fmt.Sprintf("the CDS and CDNSKEY already name ksk %d", ksk.Tag),
		"restore algorithm 15, let it finish", "then set algorithm 13 to roll back"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("algorithm 13 again in stage 4: %v; want it to say %q", err, want)
		}
	}
	if after := state(); after != before {
		t.Errorf("the refused reversal changed the key state:\n%s", after)
	}
	if got, _ := rrTags(t, srv, "example.org.", mdns.TypeDNSKEY); !slices.Equal(got, keys) || len(got) != 4 {
		t.Errorf("after the refused reversal: DNSKEY %v, want %v (both algorithms' KSK and ZSK)", got, keys)
	}
}

// TestKeyRolloverSchemeRestart: a scheme rollover (ksk_zsk to csk) is kept in the state: a
// server restarted in its first stage serves the same keys, `dns keys` shows the stage, a
// policy changed again midway is refused with the fix and the state untouched, and Ipub later
// the CDS names the CSK alone.
func TestKeyRolloverSchemeRestart(t *testing.T) {
	yml, state, describe := rollFixture(t)
	b, started := restartMidway(t, yml("ksk_zsk", 13), yml("csk", 13), state)
	var st keyroll.State
	if err := json.Unmarshal([]byte(state()), &st); err != nil {
		t.Fatal(err)
	}
	csk := newestOf(&st, keyroll.RoleCSK)
	keys, _ := rrTags(t, b, "example.org.", mdns.TypeDNSKEY)
	_, sigs := rrTags(t, b, "www.example.org.", mdns.TypeA)
	if len(keys) != 3 || len(sigs) != 2 || !slices.Contains(sigs, csk.Tag) {
		t.Fatalf("after the restart: DNSKEY %v, www signed by %v; want KSK, ZSK and CSK %d published, the ZSK and the CSK signing", keys, sigs, csk.Tag)
	}
	if d := describe(b); !strings.Contains(d, fmt.Sprintf("scheme rollover ksk_zsk -> csk, stage 1 of 3 (new keys published): csk %d signs beside the old keys", csk.Tag)) {
		t.Errorf("dns keys after the restart:\n%s", d)
	}
	for _, bad := range []string{yml("ksk_zsk", 13), yml("csk", 15)} {
		err := reloadChild(t, b, bad)
		if err == nil || !strings.Contains(err.Error(), "a scheme rollover is not changed midway; restore scheme csk and algorithm 13") {
			t.Errorf("a policy change midway: %v; want it refused naming the fix", err)
		}
		if got := state(); got != started {
			t.Errorf("a refused reload changed the key state:\n%s", got)
		}
	}

	b.skew.Add(int64(2 * time.Minute)) // Ipub
	if err := b.keyRound(t.Context()); err != nil {
		t.Fatal(err)
	}
	var cds []uint16
	for _, rr := range exchange(t, b, doQuery("example.org.", mdns.TypeCDS, false), true).Answer {
		if c, ok := rr.(*mdns.CDS); ok {
			cds = append(cds, c.KeyTag)
		}
	}
	if !slices.Equal(cds, []uint16{csk.Tag}) {
		t.Errorf("after Ipub the CDS names %v, want the CSK %d alone", cds, csk.Tag)
	}
	if d := describe(b); !strings.Contains(d, fmt.Sprintf("stage 2 of 3 (new DS): the CDS and CDNSKEY name csk %d", csk.Tag)) ||
		!strings.Contains(d, fmt.Sprintf("awaiting the DS of csk %d", csk.Tag)) {
		t.Errorf("dns keys in stage 2:\n%s", d)
	}
}
