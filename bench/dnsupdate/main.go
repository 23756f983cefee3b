// Command dnsupdate is the RFC 2136 load generator of bench/dns.sh's update row and of
// bench/dnsscale.sh's one-zone update: -c TCP connections with one update at a time on each (as
// nsupdate sends them; -m must be 1), for -d or until -n updates in all. Update i, signed with the TSIG key -key (HMAC-SHA256, base64 -secret), replaces the A
// RRset of u<i mod -names>.<zone> with an address made from i (delete the RRset, add one
// record, TTL -ttl), so every update changes the zone and the zone stays -names records larger, as
// ACME or DHCP traffic does. Every answer is checked: NOERROR with a valid TSIG; another rcode,
// a bad signature, a transport error or a deadline fails the run (exit 1, naming the first). It
// prints one line of key=value pairs (bench/loadstat: requests, ok, bad, errors, timeouts, rps,
// p50_ms, p99_ms, elapsed).
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/switchyard/switchyard/bench/loadstat"
)

type options struct {
	loadstat.Options
	addr, zone, key, secret string
	names                   int
	ttl                     uint
}

func main() {
	var o options
	flag.StringVar(&o.addr, "addr", "127.0.0.1:25353", "the primary taking the updates (TCP)")
	flag.StringVar(&o.zone, "zone", "bench.test.", "the zone updated")
	flag.StringVar(&o.key, "key", "upd.", "TSIG key name (HMAC-SHA256)")
	flag.StringVar(&o.secret, "secret", "", "TSIG secret, base64")
	flag.IntVar(&o.names, "names", 256, "distinct names updated in turn")
	flag.UintVar(&o.ttl, "ttl", 60, "TTL of the records added (at most a key policy's zone_max_ttl)")
	o.Register(flag.CommandLine, "TCP connections", "updates")
	flag.Parse()
	if err := o.Check(); err != nil {
		fmt.Fprintln(os.Stderr, "dnsupdate: bounded runs only:", err)
		os.Exit(2)
	}
	if o.secret == "" || o.names < 1 || o.names > 1<<20 || o.Concurrency != 1 {
		fmt.Fprintln(os.Stderr, "dnsupdate: -secret is required, -names must be 1..1048576 and -m 1 (one update at a time per connection)")
		os.Exit(2)
	}
	o.zone, o.key = dns.Fqdn(o.zone), dns.Fqdn(o.key)
	r, err := load(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dnsupdate:", err)
		os.Exit(1)
	}
	r.Exit("dnsupdate")
}

// load opens the connections and runs the updates over them.
func load(o options) (*loadstat.Run, error) {
	r := loadstat.NewRun(o.Options)
	conns := make([]*dns.Conn, o.Conns)
	for i := range conns {
		c, err := dns.DialTimeout("tcp", o.addr, o.Timeout)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w (is the server listening on TCP?)", o.addr, err)
		}
		defer c.Close()
		conns[i] = c
	}
	// With -m 1, Drive runs one loop per connection: no two updates share one at a time.
	var seq atomic.Int64
	r.Drive(len(conns), func(i int) (loadstat.Outcome, string) { return update(conns[i], o, seq.Add(1)-1) })
	return r, nil
}

// update sends update n on c and checks its answer.
func update(c *dns.Conn, o options, n int64) (loadstat.Outcome, string) {
	name := fmt.Sprintf("u%d.%s", n%int64(o.names), o.zone)
	rr := &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: uint32(o.ttl)},
		A: net.IPv4(10, byte(n>>16), byte(n>>8), byte(n)).To4()}
	m := new(dns.Msg)
	m.SetUpdate(o.zone)
	m.RemoveRRset([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA}}})
	m.Insert([]dns.RR{rr})
	m.SetTsig(o.key, dns.HmacSHA256, 300, time.Now().Unix())
	// Signed and checked here, not by dns.Conn: the Conn chains each request's MAC into the next
	// one's, as for a transfer's stream, and the server rightly rejects that.
	out, mac, err := dns.TsigGenerate(m, o.secret, "", false)
	if err != nil {
		return loadstat.Error, fmt.Sprintf("update %d: sign: %v", n, err)
	}
	if err := c.SetDeadline(time.Now().Add(o.Timeout)); err != nil {
		return loadstat.Error, err.Error()
	}
	if _, err := c.Write(out); err != nil {
		return loadstat.Classify(err), fmt.Sprintf("update %d: send: %v", n, err)
	}
	raw, err := c.ReadMsgHeader(nil)
	if err != nil {
		return loadstat.Classify(err), fmt.Sprintf("update %d: answer: %v", n, err)
	}
	in := new(dns.Msg)
	if err := in.Unpack(raw); err != nil {
		return loadstat.Bad, fmt.Sprintf("update %d: answer: %v", n, err)
	}
	if in.Id != m.Id || in.Rcode != dns.RcodeSuccess {
		return loadstat.Bad, fmt.Sprintf("update %d: rcode %s (id %d, sent %d)", n, dns.RcodeToString[in.Rcode], in.Id, m.Id)
	}
	if in.IsTsig() == nil {
		return loadstat.Bad, fmt.Sprintf("update %d: the answer is not signed", n)
	}
	if err := dns.TsigVerify(raw, o.secret, mac, false); err != nil {
		return loadstat.Bad, fmt.Sprintf("update %d: the answer's TSIG: %v", n, err)
	}
	return loadstat.OK, ""
}
