package balance

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"sync/atomic"

	"github.com/switchyard/switchyard/internal/splitmix"
)

// Picker chooses the backend for one request, or nil when none is available.
type Picker interface {
	Pick(r *http.Request, ex Exclude) *Backend
}

// LeastRequest samples two available backends at random and takes the one with fewer requests
// in flight per unit of weight ("power of two choices"): nearly as good as a full scan for
// balance, without a global lock or the herd effect of everyone picking the same least-loaded one.
// It samples the snapshot of available backends, so a mostly-ejected pool costs no more.
type LeastRequest struct {
	t *tracker[struct{}]
}

// NewLeastRequest returns a least-requests picker over the backends.
func NewLeastRequest(backends []*Backend) *LeastRequest {
	return &LeastRequest{t: newTracker(backends, func([]*Backend) struct{} { return struct{}{} })}
}

// Pick implements Picker.
func (p *LeastRequest) Pick(_ *http.Request, ex Exclude) *Backend {
	live := p.t.load().live
	n := len(live)
	switch {
	case n == 0:
		return nil
	case n == 1:
		if ex != nil && ex(live[0]) {
			return nil
		}
		return live[0]
	}
	i := rand.IntN(n)
	j := rand.IntN(n - 1)
	if j >= i {
		j++
	}
	a, b := live[i], live[j]
	if ex != nil && (ex(a) || ex(b)) {
		a, b = sampleTwo(live, ex)
		if b == nil {
			return a
		}
	}
	if load(b) < load(a) {
		return b
	}
	return a
}

// sampleTwo draws two distinct backends not excluded, uniformly (reservoir sampling): the slow
// path of a retry whose first draw hit an excluded backend.
func sampleTwo(live []*Backend, ex Exclude) (a, b *Backend) {
	seen := 0
	for _, c := range live {
		if ex(c) {
			continue
		}
		seen++
		switch {
		case seen == 1:
			a = c
		case seen == 2:
			b = c
		default:
			if k := rand.IntN(seen); k == 0 {
				a = c
			} else if k == 1 {
				b = c
			}
		}
	}
	return a, b
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
//
// A pick is a jump-table bucket and a binary search in it (O(log n) at worst) in the ring of the available backends' points, kept
// with the snapshot (an unavailable backend's points are left out, which moves exactly the keys
// a walk past them would). The pool's average load is summed exactly per pick for up to
// exactSum available backends; above that it is re-summed every live/exactSum picks, so the bound
// can lag the true average by that many placements (well under one request per backend).
type Ring struct {
	t          *tracker[*ringView]
	key        Key
	loadFactor float64
	picks      atomic.Uint64
	total      atomic.Int64 // the last sum of in-flight requests over the available backends
}

type ringPoint struct {
	hash uint64
	b    *Backend
}

// ringView is the ring of the available backends' points, with a jump table on the top bits of
// the hash so that a lookup searches a bucket of a few points, not the whole ring.
type ringView struct {
	pts   []ringPoint
	jump  []uint32 // jump[j]: the first point whose hash>>shift is >= j; one entry past the end
	shift uint
}

func newRingView(pts []ringPoint) *ringView {
	v := &ringView{pts: pts}
	bits := max(0, min(16, bitsLen(len(pts))-2)) // about 4 points per bucket
	v.shift = uint(64 - bits)
	v.jump = make([]uint32, (1<<bits)+1)
	i := 0
	for j := range v.jump {
		for i < len(pts) && pts[i].hash>>v.shift < uint64(j) { // a shift by 64 gives 0 in Go
			i++
		}
		v.jump[j] = uint32(i)
	}
	return v
}

func bitsLen(n int) int {
	b := 0
	for ; n > 0; n >>= 1 {
		b++
	}
	return b
}

// search returns the index of the first point whose hash is >= h (len(pts) when none is).
func (v *ringView) search(h uint64) int {
	j := int(h >> v.shift)
	lo, hi := int(v.jump[j]), int(v.jump[j+1])
	return lo + sort.Search(hi-lo, func(i int) bool { return v.pts[lo+i].hash >= h })
}

// VirtualNodes is the number of ring points per unit of weight; 100 keeps the share of each
// backend within a few percent of its weight.
const VirtualNodes = 100

// exactSum is the pool size up to which the bounded-load average is summed on every pick.
const exactSum = 16

// NewRing returns a bounded-load ring over the backends. loadFactor <= 1 disables the bound.
func NewRing(backends []*Backend, key Key, loadFactor float64) *Ring {
	var all []ringPoint
	for _, b := range backends {
		for v := 0; v < VirtualNodes*b.Weight; v++ {
			all = append(all, ringPoint{hash64(b.Address + "#" + strconv.Itoa(v)), b})
		}
	}
	sort.Slice(all, func(a, b int) bool { return all[a].hash < all[b].hash })
	derive := func(live []*Backend) *ringView {
		if len(live) == len(backends) {
			return newRingView(all)
		}
		in := make(map[*Backend]bool, len(live))
		for _, b := range live {
			in[b] = true
		}
		pts := make([]ringPoint, 0, len(all))
		for _, pt := range all {
			if in[pt.b] {
				pts = append(pts, pt)
			}
		}
		return newRingView(pts)
	}
	return &Ring{t: newTracker(backends, derive), key: key, loadFactor: loadFactor}
}

// hash64 is FNV-1a with an avalanche, which spreads the virtual nodes evenly around the ring.
func hash64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return splitmix.Finalize(h)
}

// inFlight returns the sum of in-flight requests over the available backends (see Ring).
func (p *Ring) inFlight(live []*Backend) int64 {
	every := uint64(len(live) / exactSum)
	if every > 1 && (p.picks.Add(1)-1)%every != 0 {
		return p.total.Load()
	}
	var total int64
	for _, b := range live {
		total += b.InFlight()
	}
	p.total.Store(total)
	return total
}

// Pick implements Picker.
func (p *Ring) Pick(r *http.Request, ex Exclude) *Backend {
	s := p.t.load()
	pts := s.data.pts
	if len(pts) == 0 {
		return nil
	}
	bound := math.MaxFloat64
	if p.loadFactor > 1 {
		// +1 counts the request being placed, so an idle pool accepts it anywhere.
		bound = math.Ceil(p.loadFactor * float64(p.inFlight(s.live)+1) / float64(len(s.live)))
	}
	h := hash64(p.key(r))
	start := s.data.search(h)
	var fallback *Backend
	for i := 0; i < len(pts); i++ {
		b := pts[(start+i)%len(pts)].b
		if ex != nil && ex(b) {
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
	idOf     map[*Backend]string
	// CookieName is the name of the session cookie.
	CookieName string
}

// NewSticky wraps a picker with cookie stickiness.
func NewSticky(inner Picker, backends []*Backend, cookie string) *Sticky {
	s := &Sticky{inner: inner, backends: backends, ids: map[string]*Backend{}, idOf: map[*Backend]string{}, CookieName: cookie}
	for _, b := range backends {
		id := ID(b)
		s.ids[id], s.idOf[b] = b, id
	}
	return s
}

// ID is the opaque, stable cookie value naming a backend; a hash, so the cookie does not reveal
// internal addresses.
func ID(b *Backend) string { return strconv.FormatUint(hash64(b.Address), 36) }

// Pick implements Picker: a map lookup and one availability check (one clock read) when the
// cookie names a backend, else the inner picker's cost.
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
	id, ok := s.idOf[chosen]
	if !ok {
		id = ID(chosen)
	}
	c, err := r.Cookie(s.CookieName)
	return err != nil || c.Value != id
}
