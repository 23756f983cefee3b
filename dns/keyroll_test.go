package dns

import (
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
	at, until time.Time
	states    string   // tag:role:state of every key
	dnskeys   []uint16 // the tags of the DNSKEY RRset
	signers   []uint16 // the tags of the RRSIGs over www A
}

// TestKeyRolloverZSK walks a ZSK pre-publish rollover (KSK/ZSK scheme, algorithm 13).
func TestKeyRolloverZSK(t *testing.T) { walkRollover(t, "ksk_zsk", 13, "1000h", keyroll.RoleZSK) }

// TestKeyRolloverCSK walks a CSK double-signature rollover with the DS submission (Ed25519).
func TestKeyRolloverCSK(t *testing.T) { walkRollover(t, "csk", 15, "6m", keyroll.RoleCSK) }

// walkRollover starts a parent (org.) and a child (example.org.) with a key policy, and moves
// the child's clock from one key transition to the next until the first key of role is removed.
// The parent publishes what the child's CDS asks for, as a registry following RFC 8078 would.
// In every state delv validates a positive and a negative answer from every DS a resolver may
// still hold (and, for KSK/ZSK, kzonecheck the whole zone), the DNSKEY RRset carries a
// signature of the key each of those DS names, and no resolver cache can pair a DNSKEY RRset
// with data signed by none of its keys.
func walkRollover(t *testing.T, scheme string, alg int, kskLife, role string) {
	parent := startServer(t, "zones: [{origin: org., records: [\"@ SOA ns hostmaster 1 3600 600 604800 60\", \"@ NS ns\", \"ns A 127.0.0.1\"]}]", Options{})
	dir := t.TempDir()
	child := startServer(t, rollChildYAML(dir, scheme, alg, kskLife, parent.Addr().String()), Options{})
	start := time.Now()
	now := func() time.Time { return child.now() }
	first := func() *keyroll.KeyState {
		st, err := keyroll.Load(dir, "example.org.")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range st.Keys {
			if k.Role == role {
				return k
			}
		}
		t.Fatalf("no %s in %+v", role, st.Keys)
		return nil
	}
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
			}
		}
		for dsText, ds := range liveDS {
			if !signedBy(dnskeyResp, ds) {
				t.Errorf("%s: the DNSKEY RRset is not signed by the key of the live DS %s", step.states, dsText)
			}
			anchor := dsAnchor(t, ds)
			for _, q := range [][2]string{{"www.example.org.", "A"}, {"nope.example.org.", "A"}} {
				out := delvRoot(t, child, anchor, "example.org.", q[0], q[1])
				if !strings.Contains(out, "fully validated") {
					t.Errorf("%s: delv %s %s with DS %d: not validated:\n%s", step.states, q[0], q[1], ds.KeyTag, out)
				}
			}
		}
		if scheme == "ksk_zsk" {
			// The second validator, over the whole zone. Not for CSKs: kzonecheck takes a
			// zone for single-key signing only when it has one DNSKEY, so a CSK rollover's
			// two keys read to it as KSKs with no ZSK to sign the data.
			kzonecheckServed(t, child, "example.org.")
		}
		for _, rr := range exchange(t, child, doQuery("www.example.org.", mdns.TypeA, false), false).Answer {
			if sig, ok := rr.(*mdns.RRSIG); ok {
				step.signers = append(step.signers, sig.KeyTag)
			}
		}
		t.Logf("t+%s: %s; DNSKEY %v; www signed by %v; live DS %d", now().Sub(start).Round(time.Second), step.states, step.dnskeys, step.signers, len(liveDS))

		if first().At(now()) == keyroll.Removed {
			step.until = now().Add(time.Hour)
			steps = append(steps, step)
			break
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
			t.Fatalf("%s: nothing scheduled and the first %s not removed", step.states, role)
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
	for _, s := range []string{keyroll.Generated, keyroll.Published, keyroll.Active, keyroll.Retired, keyroll.Removed} {
		if !seen[role+":"+s] {
			t.Errorf("the walk never saw a %s %s", s, role)
		}
	}
	checkCaches(t, steps)
}

// checkCaches: a resolver may hold a DNSKEY RRset until Dprp + its TTL after it was last served
// and data until Dprp + the zone's max TTL; whatever it pairs, some signature over the data must
// be by a key of the RRset.
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
		}
	}
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
