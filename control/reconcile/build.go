package reconcile

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"runtime"
	"sort"

	"github.com/switchyard/switchyard/maps"
	"github.com/switchyard/switchyard/maps/maglev"
)

// buildJob is one VIP whose table must be built and written.
type buildJob struct {
	key   maps.VIPKey
	id    uint32
	known bool // in the vips map already
	flags maps.VIPFlags
	in    []tableBackend
	sig   uint64
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
const sigVersion = 2

// signature identifies the input of a table build: the ring size and every listed backend's
// identity, id, weight and whether it is in the ring, in identity order (the build's own order, so the signature does not
// depend on the order the configuration lists them in). Never 0, which means "unknown".
func signature(in []tableBackend, ringSize uint32) uint64 {
	bs := append([]tableBackend(nil), in...)
	sort.Slice(bs, func(i, j int) bool { return bs[i].Identity < bs[j].Identity })
	h := fnv.New64a()
	var w [8]byte
	binary.LittleEndian.PutUint32(w[:4], sigVersion)
	h.Write(w[:4])
	binary.LittleEndian.PutUint32(w[:4], ringSize)
	h.Write(w[:4])
	for _, b := range bs {
		h.Write([]byte(b.Identity))
		binary.LittleEndian.PutUint32(w[:4], b.ID)
		binary.LittleEndian.PutUint32(w[4:], b.Weight)
		out := byte(0)
		if b.out {
			out = 1
		}
		h.Write([]byte{0, out})
		h.Write(w[:])
	}
	return h.Sum64() | 1
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
	size := uint64(r.m.RingSize())
	for w := 0; w < workers; w++ {
		go func() {
			for i := range next {
				t, err := buildTable(jobs[i].in, size)
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
		n, pn, err := r.writeRing(j.id, b.table, true, j.sig)
		res.PrevSlotsWritten += pn
		if err != nil {
			return err
		}
		if n > 0 {
			res.RingsRebuilt++
			res.SlotsWritten += n
		}
		if err := r.putVIP(j.key, j.id, j.flags, j.known, res); err != nil {
			return err
		}
	}
	return nil
}
