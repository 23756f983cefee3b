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
	in    []maglev.Backend
	sig   uint64
}

// sigVersion is part of every signature: bump it when maglev.Build gives other tables for the
// same input, so that a daemon of the new version rebuilds the rings an older one wrote.
const sigVersion = 1

// signature identifies the input of a Maglev build: the ring size and every in-ring backend's
// identity, id and weight, in identity order (the build's own order, so the signature does not
// depend on the order the configuration lists them in). Never 0, which means "unknown".
func signature(in []maglev.Backend, ringSize uint32) uint64 {
	bs := append([]maglev.Backend(nil), in...)
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
		h.Write([]byte{0})
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
				t, err := maglev.Build(jobs[i].in, size)
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
