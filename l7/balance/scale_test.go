package balance

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/benchcpu"
	"github.com/switchyard/switchyard/internal/testutil"
)

// nginxRR is the original smooth weighted round robin (a scan of every backend per pick), the
// oracle for the precomputed cycle.
type nginxRR struct {
	backends []*Backend
	current  []int
}

func (p *nginxRR) pick() *Backend {
	best, total := -1, 0
	for i, b := range p.backends {
		p.current[i] += b.Weight
		total += b.Weight
		if best < 0 || p.current[i] > p.current[best] {
			best = i
		}
	}
	p.current[best] -= total
	return p.backends[best]
}

// TestRoundRobinIsNginxSmooth checks that the precomputed cycle gives nginx's exact sequence.
func TestRoundRobinIsNginxSmooth(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 200; n++ {
		ws := make([]int, 1+rng.IntN(12))
		for i := range ws {
			ws[i] = 1 + rng.IntN(20)
		}
		bs := backends(ws...)
		p, oracle := NewRoundRobin(bs), &nginxRR{backends: bs, current: make([]int, len(bs))}
		for k := 0; k < 300; k++ {
			if got, want := p.Pick(req(), nil), oracle.pick(); got != want {
				t.Fatalf("weights %v pick %d: %s, nginx picks %s", ws, k, got.Address, want.Address)
			}
		}
	}
}

// TestRoundRobinSharesByWeight checks exact shares over whole cycles, for the smooth cycle and
// for the interleaved one used when the smooth one is too costly to build.
func TestRoundRobinSharesByWeight(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		n, maxW     int
		interleaved bool
	}{{50, 10, false}, {1000, 1, false}, {1000, 60, true}} {
		ws := make([]int, c.n)
		total := 0
		for i := range ws {
			ws[i] = 1 + rng.IntN(c.maxW)
			total += ws[i]
		}
		bs := backends(ws...)
		p := NewRoundRobin(bs)
		if got := p.t.load().data.seq == nil; got != c.interleaved {
			t.Fatalf("%d backends up to weight %d: interleaved = %v, want %v", c.n, c.maxW, got, c.interleaved)
		}
		count := map[*Backend]int{}
		last := map[*Backend]int{}
		maxRun := 0
		for k := 0; k < 3*total; k++ {
			b := p.Pick(req(), nil)
			count[b]++
			if prev, ok := last[b]; ok && k-prev == 1 {
				maxRun++
			}
			last[b] = k
		}
		for i, b := range bs {
			if count[b] != 3*ws[i] {
				t.Fatalf("%d backends: %s (weight %d) got %d picks over 3 cycles, want %d", c.n, b.Address, ws[i], count[b], 3*ws[i])
			}
		}
		// Spread: back-to-back picks of one backend are rare, not a heavy backend's whole share.
		if maxRun > 3*total/4 {
			t.Errorf("%d backends: %d back-to-back repeats in %d picks; picks are bunched", c.n, maxRun, 3*total)
		}
	}
}

// TestPickersSkipUnavailable takes backends out by health, drain and ejection, checks that no
// algorithm returns them, and that each comes back when its state clears (the ejection by
// itself, when it expires).
func TestPickersSkipUnavailable(t *testing.T) {
	key, _ := ParseKey("header:X-User")
	for _, size := range []int{4, 100} {
		ws := make([]int, size)
		for i := range ws {
			ws[i] = 1 + i%3
		}
		bs := backends(ws...)
		pickers := map[string]Picker{
			"round_robin":   NewRoundRobin(bs),
			"least_request": NewLeastRequest(bs),
			"hash":          NewRing(bs, key, 1.25),
			"sticky":        NewSticky(NewRoundRobin(bs), bs, "sid"),
		}
		down, drained, ejected := bs[0], bs[1], bs[2]
		down.SetHealthy(false)
		drained.SetDraining(true)
		ejected.Eject(time.Now().Add(time.Second))
		for name, p := range pickers {
			seen := map[*Backend]bool{}
			for i := 0; i < 40*size; i++ {
				r := keyReq(fmt.Sprint("user", i))
				r.AddCookie(&http.Cookie{Name: "sid", Value: ID(bs[i%3])})
				b := p.Pick(r, nil)
				// The ejection may have ended on a slow machine: then picking it is right.
				if b == nil || b == down || b == drained || (b == ejected && ejected.Ejected()) {
					t.Fatalf("%s over %d: picked %v, which is unavailable", name, size, b)
				}
				seen[b] = true
			}
			if len(seen) < size-3 {
				t.Errorf("%s over %d: only %d of %d available backends picked", name, size, len(seen), size-3)
			}
		}
		down.SetHealthy(true)
		drained.SetDraining(false)
		for name, p := range pickers {
			back := map[*Backend]bool{}
			i := 0
			// A thousand picks a poll: the ejection may take a while to expire on a slow machine.
			testutil.Eventually(t, 10*time.Second, func() bool {
				for end := i + 1000; i < end; i++ {
					r := keyReq(fmt.Sprint("user", i))
					r.AddCookie(&http.Cookie{Name: "sid", Value: ID(bs[i%3])})
					if b := p.Pick(r, nil); b == down || b == drained || b == ejected {
						back[b] = true
					}
				}
				return len(back) == 3
			}, "%s over %d: restored and expired backends not picked again (%d of 3 seen)", name, size, func() any { return len(back) })
		}
		ejected.Eject(time.Time{})
	}
}

// TestExcludeAvoidsBackends checks that a retry's Exclude is honoured by every algorithm.
func TestExcludeAvoidsBackends(t *testing.T) {
	key, _ := ParseKey("header:X-User")
	bs := backends(3, 1, 1, 2)
	for name, p := range map[string]Picker{"round_robin": NewRoundRobin(bs), "least_request": NewLeastRequest(bs),
		"hash": NewRing(bs, key, 0), "sticky": NewSticky(NewLeastRequest(bs), bs, "sid")} {
		only := bs[2]
		for i := 0; i < 200; i++ {
			if b := p.Pick(keyReq(fmt.Sprint(i)), func(b *Backend) bool { return b != only }); b != only {
				t.Fatalf("%s: picked %v, want the only one not excluded", name, b)
			}
		}
		if b := p.Pick(req(), func(*Backend) bool { return true }); b != nil {
			t.Errorf("%s: picked %s with every backend excluded", name, b.Address)
		}
	}
}

// TestRetiredPickersNotPinned checks that backends, which outlive reloads, do not keep the
// pickers of old configurations alive.
func TestRetiredPickersNotPinned(t *testing.T) {
	bs := backends(1, 1, 1)
	for i := 0; i < 100; i++ {
		NewRoundRobin(bs)
	}
	keep := NewRoundRobin(bs)
	runtime.GC()
	bs[0].SetHealthy(false) // a change prunes the dead watchers
	bs[0].SetHealthy(true)
	bs[0].wmu.Lock()
	n := len(bs[0].watchers)
	bs[0].wmu.Unlock()
	if n > 2 {
		t.Errorf("backend holds %d watchers after 100 retired pickers were collected, want 1", n)
	}
	if keep.Pick(req(), nil) == nil {
		t.Error("the live picker lost its backends")
	}
}

// TestRingBoundedLoadLargePool checks the bound over a pool whose average is re-summed
// periodically rather than on every pick.
func TestRingBoundedLoadLargePool(t *testing.T) {
	key, _ := ParseKey("header:X-User")
	ws := make([]int, 200)
	for i := range ws {
		ws[i] = 1
	}
	bs := backends(ws...)
	p := NewRing(bs, key, 1.25)
	for i := 0; i < 2000; i++ {
		p.Pick(keyReq("hot"), nil).Acquire()
	}
	var max int64
	for _, b := range bs {
		max = maxI(max, b.InFlight())
	}
	// Exact bound: ceil(1.25 * 2000/200) = 13; the periodic sum may lag by a few placements.
	if max > 14 {
		t.Errorf("hot key put %d in flight on one backend of 200 with 2000 requests, want <= 14", max)
	}
}

func maxI(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func benchPick(b *testing.B, n int, mk func([]*Backend) Picker) {
	ws := make([]int, n)
	for i := range ws {
		ws[i] = 1
	}
	bs := backends(ws...)
	p := mk(bs)
	rs := make([]*http.Request, 64)
	for i := range rs {
		rs[i] = keyReq(fmt.Sprint("user", i))
		rs[i].AddCookie(&http.Cookie{Name: "sid", Value: ID(bs[i%n])})
	}
	defer benchcpu.Start(b)()
	for i := 0; i < b.N; i++ {
		if p.Pick(rs[i%len(rs)], nil) == nil {
			b.Fatal("no backend")
		}
	}
}

// BenchmarkPick compares 10 and 1,000 backends per algorithm (target: every pick O(1) or
// O(log n), so the two sizes cost about the same).
func BenchmarkPick(b *testing.B) {
	key, _ := ParseKey("header:X-User")
	algos := []struct {
		name string
		mk   func([]*Backend) Picker
	}{
		{"round_robin", func(bs []*Backend) Picker { return NewRoundRobin(bs) }},
		{"least_request", func(bs []*Backend) Picker { return NewLeastRequest(bs) }},
		{"hash", func(bs []*Backend) Picker { return NewRing(bs, key, 1.25) }},
		{"sticky", func(bs []*Backend) Picker { return NewSticky(NewRoundRobin(bs), bs, "sid") }},
	}
	for _, a := range algos {
		for _, n := range []int{10, 1000} {
			b.Run(fmt.Sprintf("%s/%d", a.name, n), func(b *testing.B) { benchPick(b, n, a.mk) })
		}
	}
}

// TestRoundRobinRetriesKeepFirstTryShares checks that retries (a non-nil Exclude) do not shift
// the first tries: with a failing backend retried on the other, first tries still alternate.
func TestRoundRobinRetriesKeepFirstTryShares(t *testing.T) {
	bs := backends(1, 1, 2)
	p := NewRoundRobin(bs)
	first := map[*Backend]int{}
	for i := 0; i < 400; i++ {
		b := p.Pick(req(), nil)
		first[b]++
		if b == bs[0] { // it fails: retry elsewhere
			if r := p.Pick(req(), func(x *Backend) bool { return x == b }); r == nil || r == b {
				t.Fatalf("retry picked %v", r)
			}
		}
	}
	if first[bs[0]] != 100 || first[bs[1]] != 100 || first[bs[2]] != 200 {
		t.Errorf("first tries %d/%d/%d, want 100/100/200 (weights 1,1,2) despite the retries",
			first[bs[0]], first[bs[1]], first[bs[2]])
	}
}

// TestRingJumpTableSearch checks the jump table against a plain binary search of the ring.
func TestRingJumpTableSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 2, 3, 5, 17, 100, 1000, 100000} {
		pts := make([]ringPoint, n)
		for i := range pts {
			pts[i].hash = rng.Uint64()
		}
		sort.Slice(pts, func(a, b int) bool { return pts[a].hash < pts[b].hash })
		v := newRingView(pts)
		probes := []uint64{0, ^uint64(0)}
		for _, p := range pts[:min(n, 50)] {
			probes = append(probes, p.hash, p.hash+1, p.hash-1)
		}
		for i := 0; i < 2000; i++ {
			probes = append(probes, rng.Uint64())
		}
		for _, h := range probes {
			want := sort.Search(n, func(i int) bool { return pts[i].hash >= h })
			if got := v.search(h); got != want {
				t.Fatalf("%d points: search(%x) = %d, want %d", n, h, got, want)
			}
		}
	}
}

// TestPicksDuringStateChanges picks from several goroutines while backends go down and come
// back (run with -race): every pick returns a backend, and none that stayed down.
func TestPicksDuringStateChanges(t *testing.T) {
	key, _ := ParseKey("header:X-User")
	bs := backends(1, 2, 3, 1, 2, 3, 1, 2)
	bs[7].SetHealthy(false) // stays down
	pickers := []Picker{NewRoundRobin(bs), NewLeastRequest(bs), NewRing(bs, key, 1.25), NewSticky(NewRoundRobin(bs), bs, "sid")}
	done := make(chan struct{})
	errs := make(chan string, 4)
	for _, p := range pickers {
		go func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					errs <- ""
					return
				default:
				}
				if b := p.Pick(keyReq(fmt.Sprint(i)), nil); b == nil || b == bs[7] {
					errs <- fmt.Sprintf("%T picked %v", p, b)
					return
				}
			}
		}()
	}
	for i := 0; i < 2000; i++ {
		b := bs[i%3]
		b.SetHealthy(false)
		b.SetDraining(true)
		b.Eject(time.Now().Add(time.Millisecond))
		b.SetHealthy(true)
		b.SetDraining(false)
	}
	close(done)
	for range pickers {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
}
