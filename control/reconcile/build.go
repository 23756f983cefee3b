package reconcile

import (
	"encoding/binary"
	"fmt"
	"runtime"

	"github.com/switchyard/switchyard/internal/maglev"
	"github.com/switchyard/switchyard/internal/splitmix"
	"github.com/switchyard/switchyard/maps"
)

// buildJob is one VIP whose table must be built and written.
type buildJob struct {
	key   maps.VIPKey
	id    uint32
	known bool // in the vips map already
	flags maps.VIPFlags
	vip   *VIP
	sig   uint64
	size  uint32 // the ring size
}

// tableBackend is a listed backend of a VIP; out ones keep their place in the table's base but
// take no slot (see maglev.BuildDrained).
type tableBackend struct {
	maglev.Backend
	out bool
}

// buildTable computes a VIP's table: the table of all its listed backends with the slots of
// those out of the ring given to the others, so that a drain moves only the drained backend's
// slots.
func buildTable(in []tableBackend, size uint64) ([]uint32, error) {
	listed := make([]maglev.Backend, len(in))
	out := map[uint32]bool{}
	for i, b := range in {
		listed[i] = b.Backend
		if b.out {
			out[b.ID] = true
		}
	}
	return maglev.BuildDrained(listed, func(b maglev.Backend) bool { return out[b.ID] }, size)
}

// sigVersion is part of every signature: bump it when maglev.Build gives other tables for the
// same input, so that a daemon of the new version rebuilds the rings an older one wrote.
const sigVersion = 3

// signature identifies the input of a table build: the ring size and every listed backend's
// address, id, weight and whether it is in the ring. The backends' hashes are summed, so the
// order the configuration lists them in does not count and nothing is sorted or formatted: it is
// computed for every VIP at every change. Never 0, which means "unknown".
func (r *Reconciler) signature(v *VIP, ringSize uint32) uint64 {
	sum := splitmix.Finalize(uint64(sigVersion)<<32 | uint64(ringSize))
	for _, b := range v.Backends {
		if b.Weight == 0 {
			continue
		}
		a := b.Addr.Unmap().As16()
		x := splitmix.Finalize(binary.LittleEndian.Uint64(a[:8]) ^ 0x5157)
		x = splitmix.Finalize(x ^ binary.LittleEndian.Uint64(a[8:]))
		word := uint64(r.backendIDs[b.Addr.Unmap()])<<33 | uint64(b.Weight)<<1
		if !b.InRing {
			word |= 1
		}
		sum += splitmix.Finalize(x ^ word)
	}
	return sum | 1
}

type built struct {
	table []uint32
	err   error
}

// buildAndWrite builds the jobs' tables on every CPU and writes them in job order as they
// complete. At most a few tables are held at once (a table of 65537 slots is 256 KiB), so the
// memory does not grow with the number of VIPs.
func (r *Reconciler) buildAndWrite(jobs []buildJob, res *Result) error {
	if len(jobs) == 0 {
		return nil
	}
	workers := min(runtime.GOMAXPROCS(0), len(jobs))
	out := make([]chan built, len(jobs))
	for i := range out {
		out[i] = make(chan built, 1)
	}
	next := make(chan int)
	stop := make(chan struct{})
	defer close(stop)
	window := make(chan struct{}, 2*workers) // tables built but not yet written
	go func() {
		defer close(next)
		for i := range jobs {
			select {
			case window <- struct{}{}:
			case <-stop:
				return
			}
			select {
			case next <- i:
			case <-stop:
				return
			}
		}
	}()
	for w := 0; w < workers; w++ {
		go func() {
			for i := range next {
				t, err := buildTable(r.tableInput(jobs[i].vip), uint64(jobs[i].size))
				out[i] <- built{t, err}
			}
		}()
	}
	for i, j := range jobs {
		b := <-out[i]
		<-window
		res.TablesBuilt++
		if b.err != nil {
			return fmt.Errorf("apply: vip %s: %w", j.key, b.err)
		}
		n, pn, err := r.writeJob(j, b.table, res)
		maglev.Recycle(b.table) // written into the map: the next build reuses it
		res.PrevSlotsWritten += pn
		if n > 0 {
			res.RingsRebuilt++
			res.SlotsWritten += n
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// writeJob writes a built table: in place, rotating the old one into the previous ring, when the
// VIP's ring has the table's size; else at a new range (placeRing).
func (r *Reconciler) writeJob(j buildJob, table []uint32, res *Result) (int, int, error) {
	rg, ok := r.ranges[j.id]
	if !ok || rg.Size != j.size {
		return r.placeRing(j, table, res)
	}
	n, pn, err := r.writeRing(j.id, rg, table, j.sig)
	if err != nil {
		return n, pn, err
	}
	return n, pn, r.putVIP(j.key, j.id, j.flags, j.known, false, res)
}
