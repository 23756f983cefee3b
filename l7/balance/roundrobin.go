package balance

import (
	"net/http"
	"sort"
	"sync/atomic"
)

// RoundRobin is weighted round robin with nginx's smooth spacing, made O(1) per pick: the picks
// of one cycle (sum of the weights, reduced by their gcd) are computed once per change of the
// available set, and a pick is an atomic increment and a slice index, with no lock.
//
// Fairness kept: over every cycle each available backend gets exactly its weight, and the order
// within a cycle is nginx's smooth weighted round robin (for 5,1,1: a a b a c a a), so a heavy
// backend's picks are spread out, not bunched. Building that cycle costs cycle length x
// backends; past buildBudget (e.g. 1,000 backends whose reduced weights sum past 4,000) the
// cycle is interleaved instead: round r visits, in pool order of weight, every backend whose
// weight is at least r. Shares stay exact; a heavy backend is still visited at most once per
// round, but rounds past the light backends' weights hold only the heavy ones.
//
// A pick with an Exclude (a retry) takes the next backend of the cycle that is not excluded,
// without consuming the position (see Pick); when the next retryWalk positions are all excluded
// it scans the pool, O(n) in the worst case: retries are rare and need a different backend, not
// an exact share.
type RoundRobin struct {
	t    *tracker[*cycle]
	next atomic.Uint64
}

// buildBudget bounds the work of computing one smooth cycle (length x backends).
const buildBudget = 1 << 22

// cycle is one round-robin cycle over the available backends.
type cycle struct {
	total uint64
	// seq is the smooth cycle, when it was cheap enough to build.
	seq []*Backend
	// Otherwise the interleaved cycle: byWeight sorted by weight, heaviest first; segment j
	// covers rounds in which the first count[j] of them take part, ending at position end[j].
	byWeight []*Backend
	end      []uint64
	count    []int
	start    []uint64
}

// NewRoundRobin returns a weighted round robin over the backends.
func NewRoundRobin(backends []*Backend) *RoundRobin {
	return &RoundRobin{t: newTracker(backends, newCycle)}
}

func newCycle(live []*Backend) *cycle {
	c := &cycle{}
	if len(live) == 0 {
		return c
	}
	g := 0
	for _, b := range live {
		g = gcd(g, b.Weight)
	}
	w := make([]int, len(live))
	for i, b := range live {
		w[i] = b.Weight / g
		c.total += uint64(w[i])
	}
	if c.total*uint64(len(live)) <= buildBudget || c.total == uint64(len(live)) {
		c.seq = smoothCycle(live, w, int(c.total))
		return c
	}
	c.interleave(live, w)
	return c
}

// smoothCycle runs nginx's smooth weighted round robin for one cycle: every backend's current
// weight grows by its weight, the largest (the first on a tie) is picked and loses the total.
func smoothCycle(live []*Backend, w []int, total int) []*Backend {
	seq := make([]*Backend, 0, total)
	if total == len(live) { // equal weights: the pool order
		return append(seq, live...)
	}
	cur := make([]int, len(live))
	for k := 0; k < total; k++ {
		best := 0
		for i := range cur {
			cur[i] += w[i]
			if cur[i] > cur[best] {
				best = i
			}
		}
		cur[best] -= total
		seq = append(seq, live[best])
	}
	return seq
}

func (c *cycle) interleave(live []*Backend, w []int) {
	idx := make([]int, len(live))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return w[idx[a]] > w[idx[b]] })
	for _, i := range idx {
		c.byWeight = append(c.byWeight, live[i])
	}
	// Segments from the lightest weight up: rounds 1..w_min take everyone, and so on.
	var pos uint64
	prev := 0
	for n := len(idx); n > 0; {
		wt := w[idx[n-1]]
		rounds := wt - prev
		c.start = append(c.start, pos)
		pos += uint64(rounds) * uint64(n)
		c.end = append(c.end, pos)
		c.count = append(c.count, n)
		prev = wt
		for n > 0 && w[idx[n-1]] == wt {
			n--
		}
	}
}

// at returns the backend at position k of the cycle.
func (c *cycle) at(k uint64) *Backend {
	k %= c.total
	if c.seq != nil {
		return c.seq[k]
	}
	j := sort.Search(len(c.end), func(j int) bool { return c.end[j] > k })
	return c.byWeight[(k-c.start[j])%uint64(c.count[j])]
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Pick implements Picker.
func (p *RoundRobin) Pick(_ *http.Request, ex Exclude) *Backend {
	s := p.t.load()
	if s.data.total == 0 {
		return nil
	}
	if ex == nil {
		return s.data.at(p.next.Add(1) - 1)
	}
	// A retry takes the next backend of the cycle that is not excluded without consuming the
	// position, as nginx's algorithm charges only the backend it picks: the next first try
	// still gets the position the retry looked at, so first tries keep their shares.
	k := p.next.Load()
	for i := uint64(0); i < min(s.data.total, retryWalk); i++ {
		if b := s.data.at(k + i); !ex(b) {
			return b
		}
	}
	n := uint64(len(s.live))
	for i := uint64(0); i < n; i++ {
		if b := s.live[(k+i)%n]; !ex(b) {
			return b
		}
	}
	return nil
}

// retryWalk bounds how far along the cycle a retry looks before scanning the pool.
const retryWalk = 64
