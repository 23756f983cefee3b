package loader

import (
	"fmt"
	"reflect"

	"github.com/cilium/ebpf"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// LoadBenchFor loads the bench object (bpf/bench.c: the forwarder's BPF_PROG_TEST_RUN wrappers
// xdp_lb_bench and xdp_lb_bench_flows, and the reference programs) for benchmarking f. The
// object is built from the forwarder's source and so declares the forwarder's maps; they are
// replaced by f's own, so that what a benchmark writes through f's maps is what the wrappers
// read. Only benchmarks and tests load it; production never does.
func LoadBenchFor(f *Forwarder) (*bpfobj.BenchObjects, error) {
	spec, err := bpfobj.LoadBench()
	if err != nil {
		return nil, fmt.Errorf("load bench spec: %w", err)
	}
	repl := map[string]*ebpf.Map{}
	for name, m := range mapsByTag(&f.Objs.LBMaps) {
		if ms, ok := spec.Maps[name]; ok {
			ms.MaxEntries = m.MaxEntries() // sized as the forwarder's (LoadForwarder)
			repl[name] = m
		}
	}
	var objs bpfobj.BenchObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: repl}); err != nil {
		return nil, fmt.Errorf("load bench objects: %w", explainLoadError(err))
	}
	return &objs, nil
}

// mapsByTag lists the maps of a bpf2go maps struct (such as *bpfobj.LBMaps) by their `ebpf` tag, the
// map's name in the object.
func mapsByTag(v any) map[string]*ebpf.Map {
	out := map[string]*ebpf.Map{}
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		name := rv.Type().Field(i).Tag.Get("ebpf")
		if m, ok := rv.Field(i).Interface().(*ebpf.Map); ok && m != nil && name != "" {
			out[name] = m
		}
	}
	return out
}
