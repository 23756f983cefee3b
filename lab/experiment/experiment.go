// Package experiment is the registry of lab experiments: each re-measures one of the seed lessons'
// figures on the real system and prints the lesson's table beside the lesson's own numbers.
// Stops add their experiments from init functions in this package (one file per stop).
package experiment

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
)

// Experiment is one named measurement.
type Experiment struct {
	// Name is the identifier used by `switchyard lab experiment run NAME`.
	Name string
	// Stop is the stop it exercises: dns, edge, l4, l7.
	Stop string
	// Summary is one line for `experiment list`.
	Summary string
	// NeedsRoot is true when the experiment builds network namespaces or loads BPF.
	NeedsRoot bool
	// Run performs the experiment and writes its report (the table, the lesson's figures beside
	// it, and an explanation of differences) to w. Options carry flags such as --quick.
	Run func(ctx context.Context, w io.Writer, opt Options) error
}

// Options tune an experiment run.
type Options struct {
	// Quick scales the experiment down (fewer requests) for tests; the report says so.
	Quick bool
	// JSON asks for a machine-readable result after the table, where the experiment supports it.
	JSON bool
}

var (
	mu  sync.Mutex
	all = map[string]Experiment{}
)

// Register adds an experiment; it panics on a duplicate name, which is a programming error.
func Register(e Experiment) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := all[e.Name]; dup {
		panic("experiment: duplicate name " + e.Name)
	}
	all[e.Name] = e
}

// List returns every registered experiment sorted by name.
func List() []Experiment {
	mu.Lock()
	defer mu.Unlock()
	out := make([]Experiment, 0, len(all))
	for _, e := range all {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Get finds an experiment by name, with an error that lists the known names.
func Get(name string) (Experiment, error) {
	mu.Lock()
	e, ok := all[name]
	mu.Unlock()
	if !ok {
		names := ""
		for i, x := range List() {
			if i > 0 {
				names += ", "
			}
			names += x.Name
		}
		return Experiment{}, fmt.Errorf("find experiment %q: no such experiment (known: %s); see `switchyard lab experiment list`", name, names)
	}
	return e, nil
}
