// Package policy decides which sites a dynamic DNS name resolves to: geolocation (a client group
// table with fallback chains), latency (the lowest-latency live site for the client's group),
// weighted (target shares by smooth weighted round robin) and failover (a primary/secondary
// chain). Each name's policy is configured, checked and compiled here (Spec, Spec.Validate,
// Compile: package config calls Validate), so a policy's rules live in one package. Decisions
// only read health state; probing lives in package health.
package policy

import (
	"math"
	"net/netip"
	"sort"
	"sync"
	"time"
)

// Policy names accepted in a dynamic name's `policy` field.
const (
	Geolocation = "geolocation"
	Latency     = "latency"
	Weighted    = "weighted"
	Failover    = "failover"
)

// AllDownAnswerAll is the `all_down` behaviour that answers with every site when all are down
// (config.AllDownAnswerAll); any other answers NODATA.
const AllDownAnswerAll = "answer-all"

// Site is one location of a name.
type Site struct {
	// Name is the configured site name.
	Name string
	// Key identifies the site in the health checker: "fqdn/site".
	Key string
	// V4 and V6 are the addresses answered in A and AAAA records.
	V4, V6 []netip.Addr
	// Weight is the weighted policy's share.
	Weight float64
	// Lat and Lon are the site's coordinates (degrees) when HasCoords: a geolocation client
	// whose group has no chain goes to the nearest live site (NearestFrom).
	Lat, Lon  float64
	HasCoords bool
}

// Name is a compiled dynamic name.
type Name struct {
	FQDN    string
	TTL     uint32
	Policy  string
	AllDown string
	Answers int
	Sites   []Site

	geo     map[string][]int
	latency map[string][]float64 // per site index; 0 means "use the measured RTT"
	chain   []int
	// nearest is set when a site has coordinates (geolocation: NearestFrom).
	nearest bool

	mu      sync.Mutex // guards current: weighted state is shared by every query of the name
	current []float64
}

// Compile builds the dynamic names of specs (validated), keyed by FQDN.
func Compile(specs []Spec) map[string]*Name {
	out := map[string]*Name{}
	for _, nc := range specs {
		n := &Name{FQDN: nc.FQDN, TTL: nc.TTL, Policy: nc.Policy, AllDown: nc.AllDown,
			Answers: nc.Answers, geo: map[string][]int{}, latency: map[string][]float64{}}
		idx := map[string]int{}
		for i, sc := range nc.Sites {
			s := Site{Name: sc.Name, Key: nc.FQDN + "/" + sc.Name, Weight: sc.Weight}
			if len(sc.Coordinates) == 2 {
				s.Lat, s.Lon, s.HasCoords = sc.Coordinates[0], sc.Coordinates[1], true
				n.nearest = true
			}
			for _, a := range sc.Addresses {
				ip := netip.MustParseAddr(a).Unmap()
				if ip.Is4() {
					s.V4 = append(s.V4, ip)
				} else {
					s.V6 = append(s.V6, ip)
				}
			}
			idx[sc.Name] = i
			n.Sites = append(n.Sites, s)
		}
		indices := func(names []string) []int {
			out := make([]int, len(names))
			for i, s := range names {
				out[i] = idx[s]
			}
			return out
		}
		for g, chain := range nc.Geo {
			n.geo[g] = indices(chain)
		}
		for g, row := range nc.Latency {
			v := make([]float64, len(n.Sites))
			for s, l := range row {
				v[idx[s]] = l
			}
			n.latency[g] = v
		}
		n.chain = indices(nc.Chain)
		n.current = make([]float64, len(n.Sites))
		out[nc.FQDN] = n
	}
	return out
}

// ClientDependent reports whether the answer depends on the client's group, which decides the
// EDNS Client Subnet scope: 0 for policies that answer every client alike.
func (n *Name) ClientDependent() bool {
	return n.Policy == Geolocation || n.Policy == Latency
}

// Decision is the outcome of a policy for one query.
type Decision struct {
	// Sites are the indices of the sites to answer, in order; empty means answer NODATA.
	Sites []int
	// Reason is a short label for metrics and the query log: primary, fallback, weighted,
	// lowest-latency, all-down-answer-all, all-down-fail-closed.
	Reason string
}

// Health tells the policy which sites are up and how far they measured.
type Health interface {
	Up(key string) bool
	RTT(key string) time.Duration
}

// Decide runs the name's policy for a client in group (empty when no group matched).
func (n *Name) Decide(group string, h Health) Decision {
	return n.DecideFor(Client{Group: group}, h)
}

// Nearest reports whether the name answers a located client without a chain of its group by
// the sites' coordinates (the geolocation policy with site coordinates).
func (n *Name) Nearest(c Client) bool {
	if n.Policy != Geolocation || !n.nearest || !c.Located || !c.Loc.HasCoords {
		return false
	}
	_, ok := n.geo[c.Group]
	return !ok
}

// DecideFor runs the name's policy for client c: its group, and for geolocation with site
// coordinates, its location when its group has no chain of its own.
func (n *Name) DecideFor(c Client, h Health) Decision {
	up := func(i int) bool { return h.Up(n.Sites[i].Key) }
	var d Decision
	switch n.Policy {
	case Geolocation:
		chain, ok := n.geo[c.Group]
		if !ok && n.Nearest(c) {
			if d = n.fromChain(n.byDistance(c.Loc.Lat, c.Loc.Lon), up); d.Reason == "primary" {
				d.Reason = "nearest"
			}
			break
		}
		if !ok {
			chain = n.geo["default"]
		}
		d = n.fromChain(chain, up)
	case Failover:
		d = n.fromChain(n.chain, up)
	case Latency:
		d = n.lowestLatency(c.Group, h, up)
	case Weighted:
		d = n.weighted(up)
	}
	if len(d.Sites) > 0 {
		return d
	}
	if n.AllDown == AllDownAnswerAll {
		all := make([]int, len(n.Sites))
		for i := range all {
			all[i] = i
		}
		return Decision{Sites: all, Reason: "all-down-answer-all"}
	}
	return Decision{Reason: "all-down-fail-closed"}
}

// byDistance lists the sites with coordinates, nearest to (lat, lon) first (great-circle).
func (n *Name) byDistance(lat, lon float64) []int {
	var idx []int
	dist := make([]float64, len(n.Sites))
	for i, s := range n.Sites {
		if s.HasCoords {
			idx = append(idx, i)
			dist[i] = haversine(lat, lon, s.Lat, s.Lon)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return dist[idx[a]] < dist[idx[b]] })
	return idx
}

// haversine is the central angle between two points (radians; the order of distances is all
// that matters here).
func haversine(lat1, lon1, lat2, lon2 float64) float64 {
	rad := math.Pi / 180
	dlat, dlon := (lat2-lat1)*rad, (lon2-lon1)*rad
	a := math.Sin(dlat/2)*math.Sin(dlat/2) + math.Cos(lat1*rad)*math.Cos(lat2*rad)*math.Sin(dlon/2)*math.Sin(dlon/2)
	return 2 * math.Asin(math.Sqrt(min(1, a)))
}

// fromChain answers the first live site of chain; when the whole chain is dead it falls back to
// any live site of the name, in configuration order, before declaring the name all down.
func (n *Name) fromChain(chain []int, up func(int) bool) Decision {
	for k, i := range chain {
		if up(i) {
			reason := "primary"
			if k > 0 {
				reason = "fallback"
			}
			return Decision{Sites: []int{i}, Reason: reason}
		}
	}
	for i := range n.Sites {
		if up(i) {
			return Decision{Sites: []int{i}, Reason: "fallback"}
		}
	}
	return Decision{}
}

func (n *Name) lowestLatency(group string, h Health, up func(int) bool) Decision {
	row, ok := n.latency[group]
	if !ok {
		row = n.latency["default"]
	}
	best, bestV := -1, math.Inf(1)
	for i := range n.Sites {
		if !up(i) {
			continue
		}
		v := 0.0
		if row != nil {
			v = row[i]
		}
		if v == 0 {
			// No configured figure: use the measured probe round trip in milliseconds.
			v = math.Inf(1)
			if rtt := h.RTT(n.Sites[i].Key); rtt > 0 {
				v = float64(rtt) / float64(time.Millisecond)
			}
		}
		if best < 0 || v < bestV {
			best, bestV = i, v
		}
	}
	if best < 0 {
		return Decision{}
	}
	return Decision{Sites: []int{best}, Reason: "lowest-latency"}
}

// weighted runs smooth weighted round robin (the nginx algorithm) over the live sites: over any
// window of sum(weights) picks, each site is chosen in proportion to its weight, evenly spread.
// With Answers > 1 the next sites in the rotation follow the pick, so clients that spread over
// the records they get dilute the skew of one large resolver bound to one answer.
func (n *Name) weighted(up func(int) bool) Decision {
	n.mu.Lock()
	defer n.mu.Unlock()
	total, best := 0.0, -1
	for i, s := range n.Sites {
		if !up(i) || s.Weight <= 0 {
			continue
		}
		n.current[i] += s.Weight
		total += s.Weight
		if best < 0 || n.current[i] > n.current[best] {
			best = i
		}
	}
	if best < 0 {
		return Decision{}
	}
	n.current[best] -= total
	sites := []int{best}
	if n.Answers > 1 {
		rest := make([]int, 0, len(n.Sites))
		for i, s := range n.Sites {
			if i != best && up(i) && s.Weight > 0 {
				rest = append(rest, i)
			}
		}
		sort.SliceStable(rest, func(a, b int) bool { return n.current[rest[a]] > n.current[rest[b]] })
		for _, i := range rest {
			if len(sites) >= n.Answers {
				break
			}
			sites = append(sites, i)
		}
	}
	return Decision{Sites: sites, Reason: "weighted"}
}
