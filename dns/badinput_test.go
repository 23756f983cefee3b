package dns

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

func packQuery(t testing.TB, name string, qtype uint16, edns bool) []byte {
	m := new(mdns.Msg)
	m.SetQuestion(name, qtype)
	if edns {
		m.SetEdns0(1232, false)
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// badPackets are malformed queries with the rcode they must get (-1: dropped).
func badPackets(t testing.TB) map[string]struct {
	raw   []byte
	rcode int
} {
	good := packQuery(t, "www.example.com.", mdns.TypeA, false)
	// A question whose name is a compression pointer to itself.
	loop := append([]byte{}, good[:12]...)
	loop = append(loop, 0xC0, 12, 0, 1, 0, 1)
	// A label of 64 bytes (the limit is 63).
	long := append([]byte{}, good[:12]...)
	long = append(long, 64)
	for i := 0; i < 64; i++ {
		long = append(long, 'a')
	}
	long = append(long, 0, 0, 1, 0, 1)
	// A name longer than 255 bytes.
	huge := append([]byte{}, good[:12]...)
	for i := 0; i < 5; i++ {
		huge = append(huge, 63)
		for j := 0; j < 63; j++ {
			huge = append(huge, 'b')
		}
	}
	huge = append(huge, 0, 0, 1, 0, 1)
	twoQ := append([]byte{}, good...)
	twoQ[5] = 2
	twoQ = append(twoQ, good[12:]...)
	response := append([]byte{}, good...)
	response[2] |= 0x80
	truncated := good[:len(good)-3]
	unknownClass := packQuery(t, "www.example.com.", mdns.TypeA, false)
	unknownClass[len(unknownClass)-1] = 77
	unknownType := packQuery(t, "www.example.com.", 65000, false)
	twoOPT := func() []byte {
		m := new(mdns.Msg)
		m.SetQuestion("www.example.com.", mdns.TypeA)
		m.SetEdns0(1232, false)
		m.Extra = append(m.Extra, m.Extra[0])
		b, _ := m.Pack()
		return b
	}()
	badECS := func() []byte {
		m := new(mdns.Msg)
		m.SetQuestion("app.example.com.", mdns.TypeA)
		m.SetEdns0(1232, false)
		o := m.IsEdns0()
		o.Option = append(o.Option, &mdns.EDNS0_LOCAL{Code: mdns.EDNS0SUBNET, Data: []byte{0, 1, 40, 0, 10, 0, 0, 0, 0}})
		b, _ := m.Pack()
		return b
	}()
	return map[string]struct {
		raw   []byte
		rcode int
	}{
		"compression loop":  {loop, mdns.RcodeFormatError},
		"64-byte label":     {long, mdns.RcodeFormatError},
		"name over 255":     {huge, mdns.RcodeFormatError},
		"two questions":     {twoQ, mdns.RcodeFormatError},
		"truncated message": {truncated, mdns.RcodeFormatError},
		"two OPT records":   {twoOPT, mdns.RcodeFormatError},
		"ECS prefix 40/v4":  {badECS, mdns.RcodeFormatError},
		"unknown class":     {unknownClass, mdns.RcodeRefused}, // as NSD and Knot
		"unknown type":      {unknownType, mdns.RcodeSuccess},  // RFC 3597: NODATA
		"a response":        {response, -1},
		"short header":      {good[:11], -1},
		"empty":             {nil, -1},
	}
}

func TestBadInputGetsFormerrNotimpOrDrop(t *testing.T) {
	srv := startServer(t, testConfig(t), Options{})
	conn, err := net.Dial("udp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for name, c := range badPackets(t) {
		t.Run(name, func(t *testing.T) {
			out := srv.Respond(c.raw, netip.MustParseAddr("127.0.0.1"), false)
			if c.rcode < 0 {
				if out != nil {
					t.Fatalf("answered %x, want drop", out)
				}
				return
			}
			if len(out) < 12 {
				t.Fatalf("no response, want rcode %d", c.rcode)
			}
			if got := int(out[3] & 0xF); got != c.rcode {
				t.Errorf("rcode %d, want %d", got, c.rcode)
			}
			if out[0] != c.raw[0] || out[1] != c.raw[1] {
				t.Error("response ID differs from the query's")
			}
			// And over the real socket: the server answers (or drops) and keeps serving.
			if len(c.raw) > 0 {
				conn.Write(c.raw)
				buf := make([]byte, 2048)
				conn.SetReadDeadline(time.Now().Add(time.Second))
				n, err := conn.Read(buf)
				if err != nil || int(buf[3]&0xF) != c.rcode || n < 12 {
					t.Errorf("over UDP: n=%d err=%v", n, err)
				}
			}
		})
	}
	// Still alive and correct after the bad input.
	if msg := q(t, srv, "www.example.com", mdns.TypeA, QueryOptions{}); len(msg.Answer) != 1 {
		t.Fatalf("server broken after bad input: %v", msg)
	}
	// A TCP client that sends a length and then stalls must not block other clients.
	c, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{0x10, 0x00, 1, 2})
	if msg := q(t, srv, "www.example.com", mdns.TypeA, QueryOptions{TCP: true}); len(msg.Answer) != 1 {
		t.Fatalf("tcp query blocked by a stalled client: %v", msg)
	}
}

// FuzzRespond drives the whole message path with arbitrary bytes: it must never panic, never
// answer a response, and every answer must parse and fit the UDP limit the query allows.
func FuzzRespond(f *testing.F) {
	for _, c := range badPackets(f) {
		f.Add(c.raw)
	}
	f.Add(packQuery(f, "www.example.com.", mdns.TypeA, true))
	f.Add(packQuery(f, "app.example.com.", mdns.TypeA, true))
	f.Add(packQuery(f, "example.com.", mdns.TypeANY, false))
	f.Add(packQuery(f, "txt.big.test.", mdns.TypeTXT, false))
	// A zone with transfers and a TSIG key, so the transfer and signature paths are fuzzed too.
	xfr := "tsig_keys: [{name: xfr-key, secret: \"" + xfrSecret + "\"}]\n"
	f.Add(xfrQuery(f, -1, xfrSecret))
	f.Add(xfrQuery(f, 1, xfrSecret))
	f.Add(xfrQuery(f, 1, ""))
	srv := newTestServer(f, xfr+testConfig(f)+bigZoneSuffix()+
		"  - origin: xfr.test.\n    transfer: {allow: [127.0.0.0/8], key: xfr-key}\n", Options{})
	src := netip.MustParseAddr("127.0.11.1")
	f.Fuzz(func(t *testing.T, raw []byte) {
		out := srv.Respond(raw, src, false)
		if out == nil {
			return
		}
		// A cached answer must be byte for byte what the full path produced.
		var scratch [cacheKeyMax]byte
		if key := cacheKey(scratch[:0], raw, false); key != nil {
			if e := srv.state.Load().cache.get(key); e != nil {
				if got := e.response(nil, raw); string(got) != string(out) {
					t.Fatalf("cached answer differs:\n%x\n%x", got, out)
				}
			}
		}
		if len(raw) >= 3 && raw[2]&0x80 != 0 {
			t.Fatal("answered a message with QR set")
		}
		if len(out) > 1232 {
			t.Fatalf("response of %d bytes over UDP", len(out))
		}
		var m mdns.Msg
		if err := m.Unpack(out); err != nil && len(out) > 12 {
			t.Fatalf("unparsable response: %v", err)
		}
		if len(out) > 512 {
			var req mdns.Msg
			if req.Unpack(raw) != nil || req.IsEdns0() == nil || int(req.IsEdns0().UDPSize()) < len(out) {
				t.Fatalf("response of %d bytes exceeds the query's limit", len(out))
			}
		}
	})
}

func bigZoneSuffix() string {
	s := "  - origin: big.test.\n    records:\n"
	for i := 0; i < 40; i++ {
		s += "      - 'txt TXT \"record " + fmtInt(i) + " xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"'\n"
	}
	return s
}

// The answer cache serves a repeated question with the asker's ID and letter case (resolvers that
// randomise case, "0x20", drop answers whose question differs).
func TestCachedAnswerKeepsIDAndCase(t *testing.T) {
	srv := newTestServer(t, testConfig(t), Options{})
	src := netip.MustParseAddr("127.0.0.1")
	first := srv.Respond(packQuery(t, "www.example.com.", mdns.TypeA, true), src, false)
	mixed := packQuery(t, "WwW.eXaMpLe.CoM.", mdns.TypeA, true)
	mixed[0], mixed[1] = 0xAB, 0xCD
	second := srv.Respond(mixed, src, false)
	var a, b mdns.Msg
	if err := a.Unpack(first); err != nil {
		t.Fatal(err)
	}
	if err := b.Unpack(second); err != nil {
		t.Fatal(err)
	}
	if b.Id != 0xABCD || b.Question[0].Name != "WwW.eXaMpLe.CoM." || len(b.Answer) != 1 || !strings.EqualFold(b.Answer[0].String(), a.Answer[0].String()) {
		t.Fatalf("cached answer: id %x question %s answers %v", b.Id, b.Question[0].Name, b.Answer)
	}
	if e := srv.state.Load().cache.get(cacheKey(nil, mixed, false)); e == nil {
		t.Fatal("the second query did not hit the cache")
	}
}

func BenchmarkRespond(b *testing.B) {
	srv := newTestServer(b, testConfig(b), Options{})
	src := netip.MustParseAddr("127.0.11.1")
	ecs := func(name string) []byte {
		m := new(mdns.Msg)
		m.SetQuestion(name, mdns.TypeA)
		m.SetEdns0(1232, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &mdns.EDNS0_SUBNET{Code: mdns.EDNS0SUBNET,
			Family: 1, SourceNetmask: 24, Address: []byte{10, 1, 0, 0}})
		raw, err := m.Pack()
		if err != nil {
			b.Fatal(err)
		}
		return raw
	}
	for name, raw := range map[string][]byte{
		"static":       packQuery(b, "www.example.com.", mdns.TypeA, true),
		"dynamic-geo":  packQuery(b, "app.example.com.", mdns.TypeA, true),
		"geo-ecs":      ecs("app.example.com."),
		"weighted":     packQuery(b, "static.example.com.", mdns.TypeA, true),
		"weighted-ecs": ecs("static.example.com."),
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if srv.Respond(raw, src, false) == nil {
					b.Fatal("no answer")
				}
			}
		})
		// As the UDP workers call it: a cached answer goes into the batch's buffer.
		b.Run(name+"-into", func(b *testing.B) {
			b.ReportAllocs()
			dst := make([]byte, 0, cacheWireMax)
			for i := 0; i < b.N; i++ {
				if srv.respondTo(dst, raw, src, false) == nil {
					b.Fatal("no answer")
				}
			}
		})
	}
}
