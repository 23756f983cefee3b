package dns

import (
	"encoding/binary"
	"fmt"
	"testing"

	mdns "github.com/miekg/dns"
)

// conformanceZone is served by switchyard, NSD and Knot alike; big.example.com. holds one TXT
// RRset of 40 records, larger than any UDP answer.
func conformanceZone() string {
	z := `$ORIGIN example.com.
$TTL 300
@    IN SOA ns1 hostmaster 7 3600 600 604800 120
@    IN NS  ns1
ns1  IN A   192.0.2.53
www  IN A   192.0.2.1
`
	for i := range 40 {
		z += fmt.Sprintf("big IN TXT \"record number %d padding padding padding padding\"\n", i)
	}
	return z
}

// verdict is what the conformance cases compare across servers.
type verdict struct {
	rcode   int
	tc      bool
	answers int    // records in the answer section
	ede     string // EDE info codes, comma separated ("" for none)
}

func (v verdict) String() string {
	return fmt.Sprintf("rcode %s tc %v answers %d ede [%s]", mdns.RcodeToString[v.rcode], v.tc, v.answers, v.ede)
}

func verdictOf(t *testing.T, raw []byte) verdict {
	t.Helper()
	if len(raw) < 12 {
		t.Fatalf("short response %x", raw)
	}
	v := verdict{rcode: int(raw[3] & 0xF), tc: raw[2]&0x02 != 0, answers: int(binary.BigEndian.Uint16(raw[6:]))}
	var m mdns.Msg
	if err := m.Unpack(raw); err != nil {
		return v
	}
	if o := m.IsEdns0(); o != nil {
		v.rcode = m.Rcode
		for _, e := range o.Option {
			if ede, ok := e.(*mdns.EDNS0_EDE); ok {
				if v.ede != "" {
					v.ede += ","
				}
				v.ede += fmt.Sprint(ede.InfoCode)
			}
		}
	}
	return v
}

// rawQuery packs a query with EDNS (buffer 1232) and lets edit change the wire bytes.
func rawQuery(t *testing.T, name string, qtype, qclass uint16, edns bool, edit func([]byte) []byte) []byte {
	t.Helper()
	m := new(mdns.Msg)
	m.SetQuestion(name, qtype)
	m.Question[0].Qclass = qclass
	m.RecursionDesired = false
	m.Id = 0x4242
	if edns {
		m.SetEdns0(1232, false)
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		b = edit(b)
	}
	return b
}

// addCount raises the header count at off (4 QD, 6 AN, 8 NS, 10 AR) by one without adding a record.
func addCount(off int) func([]byte) []byte {
	return func(b []byte) []byte {
		binary.BigEndian.PutUint16(b[off:], binary.BigEndian.Uint16(b[off:])+1)
		return b
	}
}

// TestConformanceWithNSDAndKnot sends the same questions to switchyard, NSD and Knot serving the
// same zone and compares rcode, TC, answer count and Extended DNS Errors. The expectations are
// written down too, so the switchyard half runs (and fails) without the reference servers.
func TestConformanceWithNSDAndKnot(t *testing.T) {
	zone := conformanceZone()
	srv := startZoneServer(t, "example.com.", zone, "", "", Options{})
	refs := map[string]string{}
	for _, start := range []func() *refServer{
		func() *refServer { return startNSD(t, "example.com", zone, "") },
		func() *refServer { return startKnot(t, "example.com", zone, "", "") },
	} {
		var r *refServer
		t.Run("start", func(t *testing.T) { r = start() })
		if r != nil {
			refs[r.name] = r.addr
		} else {
			t.Log("a reference server is missing; its comparison is skipped (see the skip message above)")
		}
	}
	twoOPT := func(b []byte) []byte {
		b = addCount(10)(b)
		return append(b, 0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0)
	}
	cases := []struct {
		name  string
		raw   []byte
		want  verdict
		edeOf map[string]bool // reference servers whose EDE must match ours (Knot adds fewer)
	}{
		{"in-zone A", rawQuery(t, "www.example.com.", mdns.TypeA, mdns.ClassINET, true, nil),
			verdict{rcode: 0, answers: 1}, map[string]bool{"nsd": true, "knot": true}},
		{"CHAOS in zone", rawQuery(t, "www.example.com.", mdns.TypeA, mdns.ClassCHAOS, true, nil),
			verdict{rcode: mdns.RcodeRefused, ede: "21"}, map[string]bool{"nsd": true}},
		{"HESIOD in zone", rawQuery(t, "www.example.com.", mdns.TypeA, mdns.ClassHESIOD, true, nil),
			verdict{rcode: mdns.RcodeRefused, ede: "21"}, map[string]bool{"nsd": true}},
		{"CHAOS without EDNS", rawQuery(t, "www.example.com.", mdns.TypeA, mdns.ClassCHAOS, false, nil),
			verdict{rcode: mdns.RcodeRefused}, map[string]bool{"nsd": true, "knot": true}},
		{"out of zone", rawQuery(t, "www.example.net.", mdns.TypeA, mdns.ClassINET, true, nil),
			verdict{rcode: mdns.RcodeRefused, ede: "20"}, map[string]bool{"nsd": true, "knot": true}},
		{"out of zone without EDNS", rawQuery(t, "www.example.net.", mdns.TypeA, mdns.ClassINET, false, nil),
			verdict{rcode: mdns.RcodeRefused}, map[string]bool{"nsd": true, "knot": true}},
		{"truncated RRset, EDNS 1232", rawQuery(t, "big.example.com.", mdns.TypeTXT, mdns.ClassINET, true, nil),
			verdict{rcode: 0, tc: true, answers: 0}, map[string]bool{"nsd": true, "knot": true}},
		{"truncated RRset, no EDNS", rawQuery(t, "big.example.com.", mdns.TypeTXT, mdns.ClassINET, false, nil),
			verdict{rcode: 0, tc: true, answers: 0}, map[string]bool{"nsd": true, "knot": true}},
		{"ARCOUNT lies", rawQuery(t, "www.example.com.", mdns.TypeA, mdns.ClassINET, true, addCount(10)),
			verdict{rcode: mdns.RcodeFormatError}, map[string]bool{"nsd": true, "knot": true}},
		{"ARCOUNT 1, no record", rawQuery(t, "www.example.com.", mdns.TypeA, mdns.ClassINET, false, addCount(10)),
			verdict{rcode: mdns.RcodeFormatError}, map[string]bool{"nsd": true, "knot": true}},
		{"ANCOUNT lies", rawQuery(t, "www.example.com.", mdns.TypeA, mdns.ClassINET, false, addCount(6)),
			verdict{rcode: mdns.RcodeFormatError}, map[string]bool{"nsd": true, "knot": true}},
		{"NSCOUNT lies", rawQuery(t, "www.example.com.", mdns.TypeA, mdns.ClassINET, false, addCount(8)),
			verdict{rcode: mdns.RcodeFormatError}, map[string]bool{"nsd": true, "knot": true}},
		{"two OPT", rawQuery(t, "www.example.com.", mdns.TypeA, mdns.ClassINET, true, twoOPT),
			verdict{rcode: mdns.RcodeFormatError}, map[string]bool{"nsd": true, "knot": true}},
	}
	// A transfer the server does not allow: REFUSED with EDE 18 (Prohibited), as NSD answers
	// (Knot answers NOTAUTH without EDE; not compared).
	t.Run("AXFR not allowed", func(t *testing.T) {
		raw := rawQuery(t, "example.com.", mdns.TypeAXFR, mdns.ClassINET, true, nil)
		want := fmt.Sprintf("%s ede [18]", mdns.RcodeToString[mdns.RcodeRefused])
		servers := map[string]string{"switchyard": srv.Addr().String()}
		if a, ok := refs["nsd"]; ok {
			servers["nsd"] = a
		}
		for name, addr := range servers {
			m := tcpExchangeRaw(t, addr, raw)
			if got := fmt.Sprintf("%s ede [%s]", mdns.RcodeToString[m.Rcode], edeCodes(m)); got != want || len(m.Answer) != 0 {
				t.Errorf("%s: %s with %d answers, want %s", name, got, len(m.Answer), want)
			}
		}
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := verdictOf(t, exchangeRaw(t, srv.Addr().String(), c.raw))
			if got != c.want {
				t.Errorf("switchyard: %v, want %v", got, c.want)
			}
			for name, addr := range refs {
				ref := verdictOf(t, exchangeRaw(t, addr, c.raw))
				if !c.edeOf[name] {
					ref.ede = c.want.ede
				}
				if ref != c.want {
					t.Errorf("%s: %v, switchyard expects %v", name, ref, c.want)
				}
			}
		})
	}
}
