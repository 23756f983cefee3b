// Package lessonsim replays the request flow of the lesson "Domain Name System Design" through a
// real switchyard DNS server: 40 resolvers that cache per TTL, with request shares proportional
// to 1/(j+1), ask the server over UDP on loopback whenever their cached answer expires, and the
// lesson's 514 requests/s are accounted to the site each resolver is bound to. Time runs on a
// model clock (one step per model second) so an hour-long flow takes seconds; every resolution
// and every health probe is real. The lab experiments dns-policy and dns-failover print it.
package lessonsim

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/netip"
	"sort"
	"strings"

	mdns "github.com/miekg/dns"

	sydns "github.com/switchyard/switchyard/dns"
	"github.com/switchyard/switchyard/dns/config"
)

// The lesson's model parameters (name/model.mjs).
var (
	// Zones are the lesson's zones, called sites in switchyard's configuration.
	Zones = []string{"b34", "b35", "b06"}
	// Groups are the lesson's client groups; resolver j belongs to Groups[j%4].
	Groups = []string{"g1", "g2", "g3", "g4"}
	// Distance is the lesson's abstract distance matrix, used as the latency table.
	Distance = map[string]map[string]float64{
		"g1": {"b34": 1, "b35": 3, "b06": 2},
		"g2": {"b34": 3, "b35": 1, "b06": 2},
		"g3": {"b34": 2, "b35": 4, "b06": 1},
		"g4": {"b34": 2, "b35": 3, "b06": 4},
	}
	// Geolocation is the lesson's coarse zone table.
	Geolocation = map[string]string{"g1": "b34", "g2": "b35", "g3": "b34", "g4": "b06"}
	// Fallback is the lesson's fallback per zone, used as the second link of each geo chain.
	Fallback = map[string]string{"b34": "b06", "b35": "b34", "b06": "b35"}
	// Weight is T3, the target share.
	Weight = map[string]float64{"b34": 0.5, "b35": 0.3, "b06": 0.2}
)

const (
	// Resolvers is T4's resolver count.
	Resolvers = 40
	// Detection is T5: the health check marks a dead zone after this many seconds.
	Detection = 10
	// RequestsPerSecond is K01's peak edge rate, rounded up.
	RequestsPerSecond = 514
)

// Requests returns the per-resolver requests per second: shares ~ 1/(j+1), floors, remainder to
// the largest fractional parts, exactly as the lesson computes them.
func Requests() []int {
	raw := make([]float64, Resolvers)
	t0 := 0.0
	for j := range raw {
		raw[j] = 1 / float64(j+1)
		t0 += raw[j]
	}
	out := make([]int, Resolvers)
	type frac struct {
		f float64
		j int
	}
	var fr []frac
	sum := 0
	for j, p := range raw {
		x := p / t0 * RequestsPerSecond
		out[j] = int(math.Floor(x))
		sum += out[j]
		fr = append(fr, frac{math.Mod(x, 1), j})
	}
	sort.SliceStable(fr, func(a, b int) bool { return fr[a].f > fr[b].f })
	for k := 0; k < RequestsPerSecond-sum; k++ {
		out[fr[k].j]++
	}
	return out
}

// EqualRequests is the lesson's T4 sensitivity flow: equal shares totalling 514.
func EqualRequests() []int {
	out := make([]int, Resolvers)
	for j := range out {
		out[j] = 12
		if j < 34 {
			out[j] = 13
		}
	}
	return out
}

// Spec is one run.
type Spec struct {
	// Policy is geolocation, latency or weighted.
	Policy string
	// TTL of the dynamic name, seconds.
	TTL uint32
	// Duration in model seconds.
	Duration int
	// OutageStart is the model second b34's target stops accepting connections; 0 means never.
	OutageStart int
	// Requests per resolver per second; nil means Requests().
	Requests []int
	// Answers is the weighted policy's records per answer (default 1).
	Answers int
}

// Result is what a run measured.
type Result struct {
	Accepted, Dropped int
	// UpstreamQueries counts real queries the resolvers sent at t >= 1, as the lesson counts.
	UpstreamQueries int
	// ServerQueries is the server's own switchyard_dns_queries_total for the name, warm-up included.
	ServerQueries int
	Share         map[string]float64
	Deviation     float64
	UnitDistance  float64
	// Window is the failover window: seconds from the outage to the last dropped request.
	Window int
	// DetectedAt is the first model second whose queries no longer get b34 (0: never).
	DetectedAt int
	// ScopeErrors counts ECS answers whose scope was not the group's /16.
	ScopeErrors int
}

// resolverAddr returns the loopback source address of resolver j: one /24 per group, so the
// server can tell the group from the resolver address when the resolver sends no ECS.
func resolverAddr(j int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 0, byte(21 + j%len(Groups)), byte(j + 1)})
}

// Config builds the server configuration of a run: the lesson's tables as switchyard policy
// configuration, with a TCP health check per site on targets (site -> address:port).
func Config(s Spec, targets map[string]string) *config.Config {
	name := config.Name{Name: "app", TTL: s.TTL, Policy: s.Policy, Answers: s.Answers,
		Geo: map[string][]string{"default": {"b06"}}, Latency: map[string]map[string]float64{}}
	if name.Policy == "latency-based" {
		name.Policy = config.PolicyLatency
	}
	groups := map[string][]string{}
	for gi, g := range Groups {
		groups[g] = []string{fmt.Sprintf("127.0.%d.0/24", 21+gi), fmt.Sprintf("10.%d.0.0/16", 21+gi)}
		z := Geolocation[g]
		name.Geo[g] = []string{z, Fallback[z]}
		name.Latency[g] = Distance[g]
	}
	for i, z := range Zones {
		site := config.Site{Name: z, Addresses: []string{fmt.Sprintf("198.51.100.%d", i+1)}, Weight: Weight[z] * 10}
		if t, ok := targets[z]; ok {
			site.Check = &config.Check{Type: "tcp", Target: t, Rise: 2, Fall: Detection}
		}
		name.Sites = append(name.Sites, site)
	}
	return &config.Config{Listen: "127.0.0.1:0", Groups: groups,
		Zones: []config.Zone{{Origin: "lesson.test.", Names: []config.Name{name}}}}
}

// Run replays the flow of s through a real server and returns what it measured.
func Run(ctx context.Context, s Spec) (Result, error) {
	if s.Requests == nil {
		s.Requests = Requests()
	}
	// One real TCP target per site; b34's closes at the outage.
	listeners := map[string]net.Listener{}
	targets := map[string]string{}
	defer func() {
		for _, ln := range listeners {
			ln.Close()
		}
	}()
	for _, z := range Zones {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return Result{}, fmt.Errorf("listen site target: %w", err)
		}
		go acceptAndClose(ln)
		listeners[z], targets[z] = ln, ln.Addr().String()
	}
	cfg := Config(s, targets)
	srv, err := sydns.NewServer(cfg, sydns.Options{ManualHealth: true})
	if err != nil {
		return Result{}, fmt.Errorf("build server: %w", err)
	}
	if err := srv.Start(ctx); err != nil {
		return Result{}, fmt.Errorf("start server: %w", err)
	}
	defer srv.Close()
	r := newReplay(s, srv.Addr().String())
	checked := cfg.Zones[0].Names[0].Sites[0].Check != nil
	for t := 1 - int(s.TTL); t <= s.Duration; t++ {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		if s.OutageStart > 0 && t == s.OutageStart {
			listeners["b34"].Close()
			delete(listeners, "b34")
			r.down["b34"] = true
		}
		if err := r.second(ctx, t); err != nil {
			return Result{}, err
		}
		if t >= 1 && checked {
			// The end of each model second is one health round: real TCP connects to every target.
			srv.Health().Round(ctx)
			if r.res.DetectedAt == 0 && !srv.Health().Up("app.lesson.test./b34") {
				r.res.DetectedAt = t + 1 // answers change from the next second's queries on
			}
		}
	}
	res := r.result()
	res.ServerQueries = serverQueries(srv)
	return res, nil
}

// replay is the resolvers' state during a run: the site each is bound to and when its answer
// expires, and the counts so far.
type replay struct {
	s        Spec
	server   string
	siteOf   map[string]string // answer address -> site
	bound    []string
	expires  []int
	down     map[string]bool
	res      Result
	zoneReq  map[string]int
	distance int
}

func newReplay(s Spec, server string) *replay {
	r := &replay{s: s, server: server, siteOf: map[string]string{}, bound: make([]string, Resolvers),
		expires: make([]int, Resolvers), down: map[string]bool{}, res: Result{Share: map[string]float64{}},
		zoneReq: map[string]int{}}
	for i, z := range Zones {
		r.siteOf[fmt.Sprintf("198.51.100.%d", i+1)] = z
	}
	ttl := int(s.TTL)
	for j := range r.expires {
		r.expires[j] = 1 - ttl + (j*13)%ttl
	}
	return r
}

// second runs model second t: resolvers whose answer expired ask the server again, then (from
// t = 1 on) every resolver's requests go to the site it is bound to, or are dropped.
func (r *replay) second(ctx context.Context, t int) error {
	res := &r.res
	for j := 0; j < Resolvers; j++ {
		group := Groups[j%len(Groups)]
		if t >= r.expires[j] {
			site, answerTTL, scopeOK, err := resolve(ctx, r.server, j)
			if err != nil {
				return fmt.Errorf("resolver %d at t=%d: %w", j, t, err)
			}
			if !scopeOK {
				res.ScopeErrors++
			}
			r.bound[j] = r.siteOf[site]
			if site == "" {
				r.bound[j] = "" // fail-closed NODATA: the resolver has no address
			}
			r.expires[j] = t + int(answerTTL)
			if t >= 1 {
				res.UpstreamQueries++
			}
		}
		if t < 1 {
			continue
		}
		n, target := r.s.Requests[j], r.bound[j]
		if target == "" || r.down[target] {
			res.Dropped += n
			res.Window = t - r.s.OutageStart + 1
			continue
		}
		res.Accepted += n
		r.distance += n * int(Distance[group][target])
		r.zoneReq[target] += n
	}
	return nil
}

// result is the run's figures: shares, deviation from the weights, mean distance.
func (r *replay) result() Result {
	res := r.res
	for _, z := range Zones {
		res.Share[z] = float64(r.zoneReq[z]) / float64(res.Accepted)
		res.Deviation += math.Abs(res.Share[z] - Weight[z])
	}
	res.Deviation /= 2
	res.UnitDistance = float64(r.distance) / float64(res.Accepted)
	return res
}

func acceptAndClose(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// resolve is resolver j asking the server: even resolvers send EDNS Client Subnet (a /24 in
// their group's 10.x/16) from 127.0.0.1, odd ones rely on their own source address.
func resolve(ctx context.Context, server string, j int) (addr string, ttl uint32, scopeOK bool, err error) {
	o := sydns.QueryOptions{}
	ecs := j%2 == 0
	if ecs {
		o.Subnet = fmt.Sprintf("10.%d.%d.0/24", 21+j%len(Groups), j)
	} else {
		o.Source = resolverAddr(j)
	}
	resp, _, err := sydns.Query(ctx, server, "app.lesson.test", mdns.TypeA, o)
	if err != nil {
		return "", 0, false, err
	}
	scopeOK = true
	if ecs {
		scopeOK = false
		if opt := resp.IsEdns0(); opt != nil {
			for _, op := range opt.Option {
				if e, ok := op.(*mdns.EDNS0_SUBNET); ok {
					// Client-dependent policies scope to the group /16, weighted to 0.
					scopeOK = e.SourceScope == 16 || e.SourceScope == 0
				}
			}
		}
	}
	for _, rr := range resp.Answer {
		if a, ok := rr.(*mdns.A); ok {
			return a.A.String(), a.Hdr.Ttl, scopeOK, nil
		}
	}
	// NODATA: the negative TTL comes from the SOA in the authority section.
	ttl = 1
	for _, rr := range resp.Ns {
		ttl = max(1, rr.Header().Ttl)
	}
	return "", ttl, scopeOK, nil
}

func serverQueries(srv *sydns.Server) int {
	mfs, err := srv.Registry().Gather()
	if err != nil {
		return -1
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "switchyard_dns_queries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && strings.HasPrefix(l.GetValue(), "app.") {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return int(total)
}
