package balance

import (
	"hash/fnv"
	"math"
	"sync"
)

// Weighted picks among n choices by weight with smooth weighted round robin (nginx's): every
// run of picks as long as the weights' sum holds each choice exactly its weight's number of
// times, spread out rather than in bursts. A weight of 0 is never picked.
type Weighted struct {
	mu      sync.Mutex
	weights []int
	current []int
	total   int
	ids     []string // the choices' names, for Sticky
}

// NewWeighted makes a Weighted over the choices names with weights (their sum must be above 0).
func NewWeighted(names []string, weights []int) *Weighted {
	w := &Weighted{weights: append([]int(nil), weights...), current: make([]int, len(weights)),
		ids: append([]string(nil), names...)}
	for _, x := range weights {
		w.total += x
	}
	return w
}

// Sticky returns the choice for key by weighted rendezvous hashing: the same key always gets
// the same choice while the choices and weights stay, each choice gets its weight's share of
// keys, and a weight change moves only the keys it must (the highest score -w/ln(u) wins, u a
// hash of the key and the choice's name, the same on every node). An empty key falls back to
// Next.
func (w *Weighted) Sticky(key string) int {
	if key == "" {
		return w.Next()
	}
	best, bestScore := 0, math.Inf(-1)
	for i, x := range w.weights {
		if x == 0 {
			continue
		}
		u := (float64(stickyHash(w.ids[i], key)>>11) + 0.5) / (1 << 53) // in (0, 1)
		if s := float64(x) / -math.Log(u); s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// Next returns the index of the next choice.
func (w *Weighted) Next() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	best := 0
	for i, x := range w.weights {
		w.current[i] += x
		if w.current[i] > w.current[best] {
			best = i
		}
	}
	w.current[best] -= w.total
	return best
}

// stickyHash hashes a choice's name and a key with no seed of the process's own, so every
// node of a fleet, and every reload, maps a key alike: FNV-1a, then splitmix64's finaliser (FNV
// alone leaves short keys' high bits poorly mixed).
func stickyHash(id, key string) uint64 {
	f := fnv.New64a()
	f.Write([]byte(id))
	f.Write([]byte{0})
	f.Write([]byte(key))
	h := f.Sum64()
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}
