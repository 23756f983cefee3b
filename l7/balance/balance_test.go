package balance

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

func backends(weights ...int) []*Backend {
	var out []*Backend
	for i, w := range weights {
		out = append(out, NewBackend(fmt.Sprintf("10.0.0.%d:80", i+1), w))
	}
	return out
}

func req() *http.Request { return httptest.NewRequest("GET", "/x", nil) }

func TestRoundRobinWeightsAndSmoothness(t *testing.T) {
	bs := backends(5, 1, 1)
	p := NewRoundRobin(bs)
	seq := ""
	count := map[*Backend]int{}
	for i := 0; i < 7; i++ {
		b := p.Pick(req(), nil)
		count[b]++
		seq += b.Address[7:8]
	}
	if count[bs[0]] != 5 || count[bs[1]] != 1 || count[bs[2]] != 1 {
		t.Errorf("counts over one cycle = %v, want 5/1/1", count)
	}
	// nginx's smooth WRR for 5,1,1 gives a a b a c a a: the heavy backend is spread out.
	if seq != "1121311" {
		t.Errorf("sequence %s, want 1121311", seq)
	}
	bs[0].SetHealthy(false)
	for i := 0; i < 4; i++ {
		if b := p.Pick(req(), nil); b == bs[0] {
			t.Fatal("picked an unhealthy backend")
		}
	}
	if b := p.Pick(req(), func(b *Backend) bool { return b != bs[2] }); b != bs[2] {
		t.Errorf("exclude not honoured: %v", b)
	}
}

func TestLeastRequestPrefersIdle(t *testing.T) {
	bs := backends(1, 1, 1, 1)
	for i := 0; i < 10; i++ {
		bs[0].Acquire()
		bs[1].Acquire()
		bs[2].Acquire()
	}
	p := NewLeastRequest(bs)
	hits := map[*Backend]int{}
	for i := 0; i < 1000; i++ {
		hits[p.Pick(req(), nil)]++
	}
	// The idle backend wins every comparison it is sampled into: P(sampled) = 1 - (3/4)^2 ≈ 0.44
	// with replacement-free second draw ≈ 0.5.
	if hits[bs[3]] < 400 {
		t.Errorf("idle backend got %d/1000 picks, want most comparisons won", hits[bs[3]])
	}
	bs[3].SetDraining(true)
	for i := 0; i < 50; i++ {
		if p.Pick(req(), nil) == bs[3] {
			t.Fatal("picked a draining backend")
		}
	}
}

func keyReq(k string) *http.Request {
	r := req()
	r.Header.Set("X-User", k)
	return r
}

func TestRingDistributionStickinessAndMovement(t *testing.T) {
	key, _ := ParseKey("header:X-User")
	bs := backends(1, 1, 1, 1)
	p := NewRing(bs, key, 0)
	first := map[string]*Backend{}
	hits := map[*Backend]int{}
	for i := 0; i < 4000; i++ {
		k := fmt.Sprint("user", i)
		b := p.Pick(keyReq(k), nil)
		first[k] = b
		hits[b]++
		if again := p.Pick(keyReq(k), nil); again != b {
			t.Fatalf("key %s moved between picks", k)
		}
	}
	for _, b := range bs {
		if hits[b] < 700 || hits[b] > 1300 {
			t.Errorf("backend %s got %d of 4000 keys, want about 1000", b.Address, hits[b])
		}
	}
	// Take one backend out: only its keys move.
	bs[1].SetHealthy(false)
	moved := 0
	for k, b := range first {
		nb := p.Pick(keyReq(k), nil)
		if nb != b {
			moved++
			if b != bs[1] {
				t.Fatalf("key %s moved from a live backend", k)
			}
		}
	}
	if moved != hits[bs[1]] {
		t.Errorf("moved %d keys, want exactly the %d of the removed backend", moved, hits[bs[1]])
	}
}

func TestRingBoundedLoad(t *testing.T) {
	key, _ := ParseKey("header:X-User")
	bs := backends(1, 1, 1)
	p := NewRing(bs, key, 1.25)
	// One hot key: without a bound every request lands on one backend.
	hot := p.Pick(keyReq("hot"), nil)
	for i := 0; i < 30; i++ {
		b := p.Pick(keyReq("hot"), nil)
		b.Acquire()
	}
	var max, total int64
	for _, b := range bs {
		total += b.InFlight()
		if b.InFlight() > max {
			max = b.InFlight()
		}
	}
	// Bound = ceil(1.25 * (n+1)/3): no backend holds more than it.
	if max > 13 {
		t.Errorf("hot key put %d of %d in flight on one backend, want <= 13 (load factor 1.25)", max, total)
	}
	if hot.InFlight() != max {
		t.Errorf("the key's own backend is not the fullest: spill-over should start only when it is full")
	}
}

func TestStickyCookie(t *testing.T) {
	bs := backends(1, 1, 1)
	s := NewSticky(NewRoundRobin(bs), bs, "sid")
	r := req()
	r.AddCookie(&http.Cookie{Name: "sid", Value: ID(bs[2])})
	for i := 0; i < 5; i++ {
		if b := s.Pick(r, nil); b != bs[2] {
			t.Fatalf("sticky pick = %s, want %s", b.Address, bs[2].Address)
		}
	}
	if s.NeedsCookie(r, bs[2]) {
		t.Error("cookie already names the backend; no Set-Cookie needed")
	}
	bs[2].SetHealthy(false)
	b := s.Pick(r, nil)
	if b == bs[2] || b == nil {
		t.Fatalf("sticky to an unhealthy backend: %v", b)
	}
	if !s.NeedsCookie(r, b) {
		t.Error("failover backend needs a new cookie")
	}
}

func TestParseKey(t *testing.T) {
	r := httptest.NewRequest("GET", "/p/q", nil)
	r.RemoteAddr = "[2001:db8::1]:4000"
	r.AddCookie(&http.Cookie{Name: "c", Value: "v"})
	for spec, want := range map[string]string{"path": "/p/q", "client": "2001:db8::1", "cookie:c": "v"} {
		k, err := ParseKey(spec)
		if err != nil || k(r) != want {
			t.Errorf("key %s = %q %v, want %q", spec, k(r), err, want)
		}
	}
	if _, err := ParseKey("body"); err == nil {
		t.Error("bad key accepted")
	}
}

// A sticky split gives a key the same choice every time, and on every process (no seed of its
// own), each choice its weight's share of keys, and a weight change moves only keys toward the
// choice that gained.
func TestWeightedSticky(t *testing.T) {
	w := NewWeighted([]string{"stable", "canary"}, []int{90, 10})
	first := map[string]int{}
	share := [2]int{}
	for i := range 10000 {
		k := fmt.Sprintf("user-%d", i)
		first[k] = w.Sticky(k)
		share[first[k]]++
	}
	for k, c := range first {
		if w.Sticky(k) != c {
			t.Fatalf("key %s moved without a change", k)
		}
	}
	if share[1] < 800 || share[1] > 1200 {
		t.Errorf("canary got %d of 10,000 keys, want about 1,000", share[1])
	}
	if got := NewWeighted([]string{"stable", "canary"}, []int{90, 10}).Sticky("user-1"); got != first["user-1"] {
		t.Error("another Weighted maps user-1 elsewhere: the hash must not depend on the process")
	}
	w2 := NewWeighted([]string{"stable", "canary"}, []int{80, 20})
	moved := 0
	for k, c := range first {
		switch n := w2.Sticky(k); {
		case n == c:
		case c == 1:
			t.Fatalf("key %s left the canary when the canary's weight grew", k)
		default:
			moved++
		}
	}
	if moved < 800 || moved > 1400 {
		t.Errorf("90/10 to 80/20 moved %d of 10,000 keys, want about 1,100 (only what the change needs)", moved)
	}
	if NewWeighted([]string{"a", "b"}, []int{1, 0}).Sticky("x") != 0 {
		t.Error("a weight of 0 was picked")
	}
}
