package dns

import (
	"encoding/binary"
	"fmt"
	"os/exec"
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
	for _, ref := range []struct {
		name, bin, pkg string
		start          func() *refServer
	}{
		{"nsd", "nsd", "nsd", func() *refServer { return startNSD(t, "example.com", zone, "") }},
		{"knot", "knotd", "knot", func() *refServer { return startKnot(t, "example.com", zone, "", "") }},
	} {
		if _, err := exec.LookPath(ref.bin); err != nil {
			t.Logf("%s not installed: its comparison is skipped (apt-get install %s)", ref.bin, ref.pkg)
			continue
		}
		refs[ref.name] = ref.start().addr
	}
	notify := func(b []byte) []byte {
		b[2] |= mdns.OpcodeNotify << 3
		return b
	}
	twoOPT := func(b []byte) []byte {
		b = addCount(10)(b)
		return append(b, 0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0)
	}
	both := map[string]string{"nsd": "all", "knot": "all"}
	nsdEDE := map[string]string{"nsd": "all", "knot": "no-ede"}
	cases := []struct {
		name string
		raw  []byte
		want verdict
		cmp  map[string]string // reference servers compared: "all", or "no-ede" (Knot adds fewer EDEs)
	}{
		{"in-zone A", rawQuery(t, "www.example.com.", mdns.TypeA, mdns.ClassINET, true, nil),
			verdict{rcode: 0, answers: 1}, both},
		{"CHAOS in zone", rawQuery(t, "www.example.com.", mdns.TypeA, mdns.ClassCHAOS, true, nil),
			verdict{rcode: mdns.RcodeRefused, ede: "21"}, nsdEDE},
		{"HESIOD in zone", rawQuery(t, "www.example.com.", mdns.TypeA, mdns.ClassHESIOD, true, nil),
			verdict{rcode: mdns.RcodeRefused, ede: "21"}, nsdEDE},
		{"CHAOS without EDNS", rawQuery(t, "www.example.com.", mdns.TypeA, mdns.ClassCHAOS, false, nil),
			verdict{rcode: mdns.RcodeRefused}, both},
		{"out of zone", rawQuery(t, "www.example.net.", mdns.TypeA, mdns.ClassINET, true, nil),
			verdict{rcode: mdns.RcodeRefused, ede: "20"}, both},
		{"out of zone without EDNS", rawQuery(t, "www.example.net.", mdns.TypeA, mdns.ClassINET, false, nil),
			verdict{rcode: mdns.RcodeRefused}, both},
		{"truncated RRset, EDNS 1232", rawQuery(t, "big.example.com.", mdns.TypeTXT, mdns.ClassINET, true, nil),
			verdict{rcode: 0, tc: true, answers: 0}, both},
		{"truncated RRset, no EDNS", rawQuery(t, "big.example.com.", mdns.TypeTXT, mdns.ClassINET, false, nil),
			verdict{rcode: 0, tc: true, answers: 0}, both},
		{"ARCOUNT lies", rawQuery(t, "www.example.com.", mdns.TypeA, mdns.ClassINET, true, addCount(10)),
			verdict{rcode: mdns.RcodeFormatError}, both},
		{"ARCOUNT 1, no record", rawQuery(t, "www.example.com.", mdns.TypeA, mdns.ClassINET, false, addCount(10)),
			verdict{rcode: mdns.RcodeFormatError}, both},
		{"ANCOUNT lies", rawQuery(t, "www.example.com.", mdns.TypeA, mdns.ClassINET, false, addCount(6)),
			verdict{rcode: mdns.RcodeFormatError}, both},
		{"NSCOUNT lies", rawQuery(t, "www.example.com.", mdns.TypeA, mdns.ClassINET, false, addCount(8)),
			verdict{rcode: mdns.RcodeFormatError}, both},
		{"AXFR over UDP", rawQuery(t, "example.com.", mdns.TypeAXFR, mdns.ClassINET, true, nil),
			verdict{rcode: mdns.RcodeNotImplemented}, nsdEDE},
		{"IXFR over UDP not allowed", ixfrQuery(t), verdict{rcode: mdns.RcodeRefused, ede: "18"},
			map[string]string{"nsd": "all"}}, // Knot: NOTAUTH
		{"NOTIFY to the primary", rawQuery(t, "example.com.", mdns.TypeSOA, mdns.ClassINET, true, notify),
			verdict{rcode: mdns.RcodeRefused}, map[string]string{"nsd": "all"}}, // Knot: NOTAUTH
		{"meta type MAILA", rawQuery(t, "example.com.", mdns.TypeMAILA, mdns.ClassINET, true, nil), verdict{}, both},
		{"meta type MAILB", rawQuery(t, "example.com.", mdns.TypeMAILB, mdns.ClassINET, true, nil), verdict{}, both},
		{"meta type TKEY", rawQuery(t, "example.com.", mdns.TypeTKEY, mdns.ClassINET, true, nil), verdict{}, both},
		{"meta type TSIG", rawQuery(t, "example.com.", mdns.TypeTSIG, mdns.ClassINET, true, nil), verdict{}, both},
		{"meta type OPT", rawQuery(t, "example.com.", mdns.TypeOPT, mdns.ClassINET, true, nil), verdict{}, both},
		{"type 0", rawQuery(t, "example.com.", mdns.TypeNone, mdns.ClassINET, true, nil),
			verdict{}, map[string]string{"nsd": "all"}}, // Knot: NOTIMP
		{"two OPT", rawQuery(t, "www.example.com.", mdns.TypeA, mdns.ClassINET, true, twoOPT),
			verdict{rcode: mdns.RcodeFormatError}, both},
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
				if c.cmp[name] == "" {
					continue
				}
				ref := verdictOf(t, exchangeRaw(t, addr, c.raw))
				if c.cmp[name] == "no-ede" {
					ref.ede = c.want.ede
				}
				if ref != c.want {
					t.Errorf("%s: %v, switchyard expects %v", name, ref, c.want)
				}
			}
		})
	}
}

// ixfrQuery packs an unsigned IXFR query from serial 1 with EDNS.
func ixfrQuery(t *testing.T) []byte {
	m := new(mdns.Msg)
	m.SetIxfr("example.com.", 1, "ns1.example.com.", "hostmaster.example.com.")
	m.SetEdns0(1232, false)
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
