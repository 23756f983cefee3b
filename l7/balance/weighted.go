package balance

import "sync"

// Weighted picks among n choices by weight with smooth weighted round robin (nginx's): every
// run of picks as long as the weights' sum holds each choice exactly its weight's number of
// times, spread out rather than in bursts. A weight of 0 is never picked.
type Weighted struct {
	mu      sync.Mutex
	weights []int
	current []int
	total   int
}

// NewWeighted makes a Weighted over weights (their sum must be above 0).
func NewWeighted(weights []int) *Weighted {
	w := &Weighted{weights: append([]int(nil), weights...), current: make([]int, len(weights))}
	for _, x := range weights {
		w.total += x
	}
	return w
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
