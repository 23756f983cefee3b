package dns

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/dnssec"
)

// carryZone is the zone of the cache-across-updates tests: names whose answers read their own
// RRset, glue (MX, NS, SRV), a wildcard, a CNAME chain, an empty non-terminal and a delegation.
const carryZone = `$ORIGIN example.
$TTL 300
@        IN SOA ns1 hostmaster 1 3600 600 604800 60
@        IN NS  ns1
@        IN MX  10 mail
@        IN TXT "apex"
ns1      IN A   127.0.0.1
www      IN A   192.0.2.1
www      IN AAAA 2001:db8::1
api      IN A   192.0.2.2
mail     IN A   192.0.2.3
a.b      IN A   192.0.2.4
*.w      IN A   192.0.2.5
c        IN CNAME www
_sip._tcp IN SRV 0 0 5060 mail
sub      IN NS  ns.sub
ns.sub   IN A   192.0.2.6
`

// startCarryServer serves carryZone (signed online when signed) with updates allowed by upd-key.
func startCarryServer(t *testing.T, signed bool) *Server {
	t.Helper()
	dir := t.TempDir()
	dnssecLine := ""
	if signed {
		k, err := dnssec.Generate("example.", dnssec.FlagsKSK, 3600)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "example.key"), k.File(time.Now()), 0o600); err != nil {
			t.Fatal(err)
		}
		dnssecLine = fmt.Sprintf("    dnssec: {key_file: %s}\n", filepath.Join(dir, "example.key"))
	}
	if err := os.WriteFile(filepath.Join(dir, "example.zone"), []byte(carryZone), 0o600); err != nil {
		t.Fatal(err)
	}
	yml := fmt.Sprintf(`tsig_keys: [{name: upd-key, secret: "%s"}]
zones:
  - origin: example.
    file: %s
%s    update: {journal: %s, allow: [{key: upd-key}]}
`, updSecret, filepath.Join(dir, "example.zone"), dnssecLine, filepath.Join(dir, "journal"))
	return startServer(t, yml, Options{Logger: testLogger(t)})
}

// sendUpdate applies one RFC 2136 update (deletes of whole RRsets or records, then adds) and
// reports whether the server applied it.
func sendUpdate(t *testing.T, srv *Server, removeSets, remove, insert []string) bool {
	t.Helper()
	m := new(mdns.Msg)
	m.SetUpdate("example.")
	rrs := func(texts []string) []mdns.RR {
		var out []mdns.RR
		for _, s := range texts {
			rr, err := mdns.NewRR(s)
			if err != nil {
				t.Fatalf("%q: %v", s, err)
			}
			out = append(out, rr)
		}
		return out
	}
	if len(removeSets) > 0 {
		m.RemoveRRset(rrs(removeSets))
	}
	if len(remove) > 0 {
		m.Remove(rrs(remove))
	}
	if len(insert) > 0 {
		m.Insert(rrs(insert))
	}
	m.SetTsig("upd-key.", mdns.HmacSHA256, 300, time.Now().Unix())
	c := &mdns.Client{TsigSecret: map[string]string{"upd-key.": updSecret}, Timeout: 2 * time.Second}
	resp, _, err := c.Exchange(m, srv.Addr().String())
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	return resp.Rcode == mdns.RcodeSuccess
}

// queryDO packs name/qtype with EDNS, and DO when do is set.
func queryDO(t *testing.T, name string, qtype uint16, do bool) []byte {
	t.Helper()
	m := new(mdns.Msg)
	m.SetQuestion(name, qtype)
	m.Id = 4242
	m.SetEdns0(1232, do)
	raw, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// cachedEntry is the cache's entry for the UDP query raw, nil when there is none.
func cachedEntry(srv *Server, raw []byte) *cacheEntry {
	var scratch [cacheKeyMax + rotateSigMax]byte
	return srv.state.Load().cache.get(cacheKey(scratch[:0], raw, false))
}

// comparable is an answer as text with each RRSIG's times and signature left out: a carried
// answer keeps the signatures made for it, a fresh one may be signed again, both valid.
func comparable(t *testing.T, wire []byte) string {
	t.Helper()
	m := new(mdns.Msg)
	if err := m.Unpack(wire); err != nil {
		t.Fatalf("unpack: %v", err)
	}
	for _, sec := range [][]mdns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			if s, ok := rr.(*mdns.RRSIG); ok {
				s.Inception, s.Expiration, s.Signature = 0, 0, ""
			}
		}
	}
	return m.String()
}

// TestUpdateCarriesUntouchedAnswers: an update keeps the cached answers that read nothing it
// changed (the same entry serves on, moved to the new zone copy: a name's own RRset, the apex's
// TXT beside its changed SOA, a CNAME chain) and builds again those that did (an MX whose
// target's address changed) or that it cannot judge (a wildcard's answers).
func TestUpdateCarriesUntouchedAnswers(t *testing.T) {
	srv := startCarryServer(t, false)
	src := netip.MustParseAddr("192.0.2.200")
	type qk struct {
		name  string
		qtype uint16
	}
	qs := []qk{{"www.example.", mdns.TypeA}, {"api.example.", mdns.TypeA}, {"example.", mdns.TypeMX},
		{"example.", mdns.TypeTXT}, {"x.w.example.", mdns.TypeA}, {"c.example.", mdns.TypeA}}
	entry := func(q qk) *cacheEntry { return cachedEntry(srv, queryDO(t, q.name, q.qtype, false)) }
	before := map[qk]*cacheEntry{}
	for _, q := range qs {
		srv.Respond(queryDO(t, q.name, q.qtype, false), src, false)
		if before[q] = entry(q); before[q] == nil {
			t.Fatalf("%s %s not cached", q.name, mdns.TypeToString[q.qtype])
		}
	}
	if !sendUpdate(t, srv, nil, nil, []string{"new.example. 60 A 192.0.2.99", "mail.example. 60 A 192.0.2.33"}) {
		t.Fatal("update refused")
	}
	for _, q := range qs {
		srv.Respond(queryDO(t, q.name, q.qtype, false), src, false)
	}
	// Kept: their own RRsets and no target changed.
	for _, q := range qs[:2] {
		if e := entry(q); e != before[q] || e.zone.Load() != srv.state.Load().store.Find("example.") {
			t.Errorf("%s %s: built again after an update of other names, want the entry carried", q.name, mdns.TypeToString[q.qtype])
		}
	}
	if e := entry(qs[3]); e != before[qs[3]] {
		t.Errorf("apex TXT: built again after an update that changed the apex's SOA alone")
	}
	if e := entry(qs[5]); e != before[qs[5]] {
		t.Errorf("c A (a CNAME to www): built again after an update of neither")
	}
	// Built again: the MX's glue changed; a wildcard answer is never carried.
	for _, q := range []qk{qs[2], qs[4]} {
		if e := entry(q); e == before[q] {
			t.Errorf("%s %s: carried across an update it reads", q.name, mdns.TypeToString[q.qtype])
		}
	}
	if a := answer(t, srv, "example.", mdns.TypeMX); !strings.Contains(a, "mail.example.") {
		t.Fatalf("MX after the update: %q", a)
	}
	m := q(t, srv, "example.", mdns.TypeMX, QueryOptions{})
	if !strings.Contains(fmt.Sprint(m.Extra), "192.0.2.33") {
		t.Errorf("MX after the update: glue %v, want mail's new address 192.0.2.33 beside the old", m.Extra)
	}
}

// TestCachedAnswersMatchFreshAcrossUpdates applies random updates (addresses, the apex's MX and
// TXT, a CNAME, a delegation made and removed above a name, the wildcard) and after each one asks
// every question twice through the cache and once past it: the cached answers must be what the
// zone answers now, signed or not.
func TestCachedAnswersMatchFreshAcrossUpdates(t *testing.T) {
	for _, signed := range []bool{false, true} {
		t.Run(fmt.Sprintf("signed=%v", signed), func(t *testing.T) {
			srv := startCarryServer(t, signed)
			src := netip.MustParseAddr("192.0.2.200")
			names := []string{"www", "api", "mail", "a.b", "x.w", "new", "x.api", "c"}
			var qs [][]byte
			for _, n := range append(slices.Clone(names), "@", "y.w", "b", "_sip._tcp", "x.sub", "nx") {
				fq := n + ".example."
				if n == "@" {
					fq = "example."
				}
				for _, qt := range []uint16{mdns.TypeA, mdns.TypeAAAA, mdns.TypeMX, mdns.TypeTXT, mdns.TypeNS,
					mdns.TypeSRV, mdns.TypeCNAME, mdns.TypeANY} {
					qs = append(qs, queryDO(t, fq, qt, signed))
				}
			}
			rng := rand.New(rand.NewPCG(7, uint64(len(qs))))
			pick := func(s []string) string { return s[rng.IntN(len(s))] }
			addr := func() string { return fmt.Sprintf("192.0.2.%d", 10+rng.IntN(5)) }
			ops := []func() bool{
				func() bool { return sendUpdate(t, srv, nil, nil, []string{pick(names) + ".example. 60 A " + addr()}) },
				func() bool { return sendUpdate(t, srv, []string{pick(names) + ".example. 0 A 0.0.0.0"}, nil, nil) },
				func() bool {
					return sendUpdate(t, srv, []string{"example. 0 MX 0 ."}, nil, []string{"example. 60 MX 10 " + pick(names) + ".example."})
				},
				func() bool {
					return sendUpdate(t, srv, nil, nil, []string{fmt.Sprintf("example. 60 TXT \"t%d\"", rng.IntN(3))})
				},
				func() bool { return sendUpdate(t, srv, nil, nil, []string{"api.example. 60 NS ns.sub.example."}) },
				func() bool { return sendUpdate(t, srv, []string{"api.example. 0 NS ."}, nil, nil) },
				func() bool { return sendUpdate(t, srv, nil, nil, []string{"*.w.example. 60 A " + addr()}) },
				func() bool { return sendUpdate(t, srv, []string{"c.example. 0 CNAME ."}, nil, nil) },
				func() bool {
					return sendUpdate(t, srv, nil, nil, []string{"c.example. 60 CNAME " + pick(names) + ".example."})
				},
				func() bool {
					return sendUpdate(t, srv, nil, nil, []string{"www.example. 60 AAAA 2001:db8::" + fmt.Sprint(rng.IntN(5))})
				},
			}
			carried := 0 // answers served by an entry made before the last update
			check := func(step int) {
				for _, raw := range qs {
					before := cachedEntry(srv, raw)
					srv.Respond(raw, src, false)
					if e := cachedEntry(srv, raw); e != nil && e == before && step > 0 {
						carried++
					}
					cached := srv.Respond(raw, src, false)
					fresh, _ := srv.respond(raw, src, false, nil)
					if got, want := comparable(t, cached), comparable(t, fresh); got != want {
						t.Fatalf("step %d: the cached answer differs from the zone's:\n%s\nwant:\n%s", step, got, want)
					}
				}
			}
			check(0)
			applied := 0
			for step := 1; step <= 150; step++ {
				if ops[rng.IntN(len(ops))]() {
					applied++
				}
				check(step)
			}
			if applied < 100 || carried < 1000 {
				t.Fatalf("%d of 150 updates applied, %d answers carried across them; want 100 and 1,000 at least", applied, carried)
			}
			t.Logf("%d updates applied, %d answers carried", applied, carried)
		})
	}
}
