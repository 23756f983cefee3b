package balance

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"sync"

	"github.com/switchyard/switchyard/internal/splitmix"
)

// Picker chooses the backend for one request, or nil when none is available.
type Picker interface {
	Pick(r *http.Request, ex Exclude) *Backend
}

// RoundRobin is nginx's smooth weighted round robin: over any window of sum(weights) picks each
// backend gets exactly its weight, and picks of a heavy backend are spread out, not bunched.
type RoundRobin struct {
	mu       sync.Mutex
	backends []*Backend
	current  []int
}

// NewRoundRobin returns a weighted round robin over the backends.
func NewRoundRobin(backends []*Backend) *RoundRobin {
	return &RoundRobin{backends: backends, current: make([]int, len(backends))}
}

// Pick implements Picker.
func (p *RoundRobin) Pick(_ *http.Request, ex Exclude) *Backend {
	p.mu.Lock()
	defer p.mu.Unlock()
	best, total := -1, 0
	for i, b := range p.backends {
		if skip(b, ex) {
			continue
		}
		p.current[i] += b.Weight
		total += b.Weight
		if best < 0 || p.current[i] > p.current[best] {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	p.current[best] -= total
	return p.backends[best]
}

// LeastRequest samples two available backends at random and takes the one with fewer requests
// in flight per unit of weight ("power of two choices"): nearly as good as a full scan for
// balance, without a global lock or the herd effect of everyone picking the same least-loaded one.
type LeastRequest struct {
	backends []*Backend
}

// NewLeastRequest returns a least-requests picker over the backends.
func NewLeastRequest(backends []*Backend) *LeastRequest { return &LeastRequest{backends: backends} }

// Pick implements Picker.
func (p *LeastRequest) Pick(_ *http.Request, ex Exclude) *Backend {
	n := len(p.backends)
	if n == 0 {
		return nil
	}
	// Sample indexes; fall back to a scan of the available ones when sampling hits unavailable
	// backends, so a mostly-ejected pool still finds its last live member.
	var a, b *Backend
	for try := 0; try < 4 && (a == nil || b == nil); try++ {
		c := p.backends[rand.IntN(n)]
		if skip(c, ex) {
			continue
		}
		if a == nil {
			a = c
		} else if c != a {
			b = c
		}
	}
	if a == nil || b == nil {
		live := make([]*Backend, 0, n)
		for _, c := range p.backends {
			if !skip(c, ex) {
				live = append(live, c)
			}
		}
		switch len(live) {
		case 0:
			return nil
		case 1:
			return live[0]
		}
		i := rand.IntN(len(live))
		j := rand.IntN(len(live) - 1)
		if j >= i {
			j++
		}
		a, b = live[i], live[j]
	}
	if load(b) < load(a) {
		return b
	}
	return a
}

func load(b *Backend) float64 { return float64(b.InFlight()+1) / float64(b.Weight) }

// Key extracts the consistent-hashing key of a request.
type Key func(r *http.Request) string

// ParseKey builds a Key from its configuration form: "header:NAME", "cookie:NAME", "path" or
// "client" (the client address without port).
func ParseKey(spec string) (Key, error) {
	switch {
	case spec == "path":
		return func(r *http.Request) string { return r.URL.Path }, nil
	case spec == "client":
		return ClientIP, nil
	case len(spec) > 7 && spec[:7] == "header:":
		name := http.CanonicalHeaderKey(spec[7:])
		return func(r *http.Request) string { return r.Header.Get(name) }, nil
	case len(spec) > 7 && spec[:7] == "cookie:":
		name := spec[7:]
		return func(r *http.Request) string {
			if c, err := r.Cookie(name); err == nil {
				return c.Value
			}
			return ""
		}, nil
	}
	return nil, fmt.Errorf("parse hash key %q: want path, client, header:NAME or cookie:NAME", spec)
}

// ClientIP returns the host part of the request's remote address.
func ClientIP(r *http.Request) string {
	a := r.RemoteAddr
	for i := len(a) - 1; i >= 0; i-- {
		if a[i] == ':' {
			a = a[:i]
			break
		}
	}
	if len(a) > 1 && a[0] == '[' {
		a = a[1 : len(a)-1]
	}
	return a
}

// Ring is consistent hashing on a ring of virtual nodes with bounded load (Mirrokni, Thorup and
// Zadimoghaddam): a key goes to the first backend clockwise from its hash whose in-flight count
// stays under LoadFactor times the pool's average, so a hot key spills over to the next backend
// instead of overloading one, and a backend leaving only moves the keys that were on it.
type Ring struct {
	backends   []*Backend
	points     []ringPoint
	key        Key
	loadFactor float64
}

type ringPoint struct {
	hash uint64
	idx  int
}

// VirtualNodes is the number of ring points per unit of weight; 100 keeps the share of each
// backend within a few percent of its weight.
const VirtualNodes = 100

// NewRing returns a bounded-load ring over the backends. loadFactor <= 1 disables the bound.
func NewRing(backends []*Backend, key Key, loadFactor float64) *Ring {
	r := &Ring{backends: backends, key: key, loadFactor: loadFactor}
	for i, b := range backends {
		for v := 0; v < VirtualNodes*b.Weight; v++ {
			r.points = append(r.points, ringPoint{hash64(b.Address + "#" + strconv.Itoa(v)), i})
		}
	}
	sort.Slice(r.points, func(a, b int) bool { return r.points[a].hash < r.points[b].hash })
	return r
}

func hash64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	// The avalanche spreads the virtual nodes evenly around the ring.
	return splitmix.Finalize(h.Sum64())
}

// Pick implements Picker.
func (p *Ring) Pick(r *http.Request, ex Exclude) *Backend {
	if len(p.points) == 0 {
		return nil
	}
	bound := math.MaxFloat64
	if p.loadFactor > 1 {
		var total int64
		live := 0
		for _, b := range p.backends {
			if !skip(b, ex) {
				total += b.InFlight()
				live++
			}
		}
		if live == 0 {
			return nil
		}
		// +1 counts the request being placed, so an idle pool accepts it anywhere.
		bound = math.Ceil(p.loadFactor * float64(total+1) / float64(live))
	}
	h := hash64(p.key(r))
	start := sort.Search(len(p.points), func(i int) bool { return p.points[i].hash >= h })
	var fallback *Backend
	for i := 0; i < len(p.points); i++ {
		b := p.backends[p.points[(start+i)%len(p.points)].idx]
		if skip(b, ex) {
			continue
		}
		if float64(b.InFlight()+1) <= bound {
			return b
		}
		if fallback == nil {
			fallback = b
		}
	}
	return fallback
}

// Sticky pins a client to a backend with a cookie holding the backend's id; when the cookie is
// missing or names a backend that is unavailable, the inner picker chooses and the proxy sets
// the cookie on the response (see Sticky.Cookie).
type Sticky struct {
	inner    Picker
	backends []*Backend
	ids      map[string]*Backend
	// CookieName is the name of the session cookie.
	CookieName string
}

// NewSticky wraps a picker with cookie stickiness.
func NewSticky(inner Picker, backends []*Backend, cookie string) *Sticky {
	s := &Sticky{inner: inner, backends: backends, ids: map[string]*Backend{}, CookieName: cookie}
	for _, b := range backends {
		s.ids[ID(b)] = b
	}
	return s
}

// ID is the opaque, stable cookie value naming a backend; a hash, so the cookie does not reveal
// internal addresses.
func ID(b *Backend) string { return strconv.FormatUint(hash64(b.Address), 36) }

// Pick implements Picker.
func (s *Sticky) Pick(r *http.Request, ex Exclude) *Backend {
	if c, err := r.Cookie(s.CookieName); err == nil {
		if b := s.ids[c.Value]; b != nil && !skip(b, ex) {
			return b
		}
	}
	return s.inner.Pick(r, ex)
}

// NeedsCookie reports whether the response must (re)set the cookie for the chosen backend.
func (s *Sticky) NeedsCookie(r *http.Request, chosen *Backend) bool {
	c, err := r.Cookie(s.CookieName)
	return err != nil || c.Value != ID(chosen)
}
