// Command dnsquery is the fixed-rate query generator of bench/dns.sh's stall phase: UDP queries
// for the -q questions in turn, -rate a second in all over -c sockets (one query at a time on
// each; -m must be 1), for -d or until -n queries (bench/loadstat's Pace: a query's latency
// counts from its release, so a stalled server shows in the percentiles). With -dnssec the
// queries set DO and every answer must carry an RRSIG. Every answer is checked: NOERROR, the
// question asked, not truncated, at least one answer record; another answer, a transport error
// or a deadline (a lost query) fails the run (exit 1, naming the first). It prints one line of
// key=value pairs (bench/loadstat's, then keytags: the RRSIG key tags seen, "-" for none).
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/switchyard/switchyard/bench/loadstat"
)

type options struct {
	loadstat.Options
	addr, questions string
	rate            float64
	dnssec          bool
}

// tags are the RRSIG key tags seen in the answers.
type tags struct {
	mu   sync.Mutex
	seen map[uint16]bool
}

func main() {
	var o options
	flag.StringVar(&o.addr, "addr", "127.0.0.1:25353", "the server asked (UDP)")
	flag.StringVar(&o.questions, "q", "www.bench.test. A", "questions asked in turn: NAME TYPE, comma-separated")
	flag.Float64Var(&o.rate, "rate", 1000, "queries a second offered, in all")
	flag.BoolVar(&o.dnssec, "dnssec", false, "set DO and require an RRSIG in every answer")
	o.Register(flag.CommandLine, "UDP sockets", "queries")
	flag.Parse()
	qs, err := parseQuestions(o.questions)
	if err == nil {
		err = o.Check()
	}
	if err == nil && (o.Concurrency != 1 || o.rate <= 0 || o.rate > 100_000) {
		err = fmt.Errorf("-m %d -rate %g: want -m 1 (one query at a time per socket) and a rate of 1..100000", o.Concurrency, o.rate)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dnsquery:", err)
		os.Exit(2)
	}
	r := loadstat.NewRun(o.Options)
	conns := make([]*net.UDPConn, o.Conns)
	for i := range conns {
		ua, err := net.ResolveUDPAddr("udp", o.addr)
		if err == nil {
			conns[i], err = net.DialUDP("udp", nil, ua)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "dnsquery: dial %s: %v\n", o.addr, err)
			os.Exit(1)
		}
		defer conns[i].Close()
	}
	ts := &tags{seen: map[uint16]bool{}}
	var seq atomic.Uint64
	r.Pace(len(conns), o.rate, func(i int) (loadstat.Outcome, string) {
		n := seq.Add(1) - 1
		return query(conns[i], o, qs[n%uint64(len(qs))], ts)
	})
	r.Exit("dnsquery", "keytags="+ts.String())
}

// parseQuestions reads "NAME TYPE, NAME TYPE".
func parseQuestions(s string) ([]dns.Question, error) {
	var out []dns.Question
	for _, q := range strings.Split(s, ",") {
		f := strings.Fields(q)
		if len(f) != 2 || dns.StringToType[strings.ToUpper(f[1])] == 0 {
			return nil, fmt.Errorf("-q %q: want NAME TYPE pairs separated by commas, e.g. \"www.example. A, example. MX\"", q)
		}
		out = append(out, dns.Question{Name: dns.Fqdn(f[0]), Qtype: dns.StringToType[strings.ToUpper(f[1])], Qclass: dns.ClassINET})
	}
	return out, nil
}

// query asks q on c and checks the answer.
func query(c *net.UDPConn, o options, q dns.Question, ts *tags) (loadstat.Outcome, string) {
	m := new(dns.Msg)
	m.SetQuestion(q.Name, q.Qtype)
	m.RecursionDesired = false
	m.SetEdns0(1232, o.dnssec)
	out, err := m.Pack()
	if err != nil {
		return loadstat.Error, err.Error()
	}
	what := q.Name + " " + dns.TypeToString[q.Qtype]
	if err := c.SetDeadline(time.Now().Add(o.Timeout)); err != nil {
		return loadstat.Error, err.Error()
	}
	if _, err := c.Write(out); err != nil {
		return loadstat.Classify(err), what + ": send: " + err.Error()
	}
	buf := make([]byte, 4096)
	in := new(dns.Msg)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return loadstat.Classify(err), what + ": answer: " + err.Error()
		}
		if err := in.Unpack(buf[:n]); err != nil {
			return loadstat.Bad, what + ": answer: " + err.Error()
		}
		if in.Id == m.Id {
			break // an answer to an earlier query that timed out is skipped (the run failed already)
		}
	}
	switch {
	case in.Rcode != dns.RcodeSuccess:
		return loadstat.Bad, what + ": rcode " + dns.RcodeToString[in.Rcode]
	case in.Truncated || len(in.Answer) == 0:
		return loadstat.Bad, what + ": truncated or empty answer"
	case len(in.Question) != 1 || !strings.EqualFold(in.Question[0].Name, q.Name) || in.Question[0].Qtype != q.Qtype:
		return loadstat.Bad, what + ": the answer is to another question"
	}
	signed := false
	for _, rr := range in.Answer {
		if sig, ok := rr.(*dns.RRSIG); ok {
			signed = true
			ts.add(sig.KeyTag)
		}
	}
	if o.dnssec && !signed {
		return loadstat.Bad, what + ": no RRSIG in the answer to a DO=1 query"
	}
	return loadstat.OK, ""
}

func (t *tags) add(tag uint16) {
	t.mu.Lock()
	t.seen[tag] = true
	t.mu.Unlock()
}

// String lists the tags seen, sorted, comma-separated ("-" for none).
func (t *tags) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for tag := range t.seen {
		out = append(out, strconv.Itoa(int(tag)))
	}
	slices.Sort(out)
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}
