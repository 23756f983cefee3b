// Package maglev builds Maglev lookup tables (Eisenbud et al., NSDI 2016) with weights. The build
// is deterministic for a given backend set whatever the order the backends are given in: they are
// sorted by identity and hashed with fixed seeds, so several balancer nodes that know the same
// backends compute the same table and a flow lands on the same backend whichever node it reaches.
package maglev

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/big"
	"sort"
	"sync"

	"github.com/switchyard/switchyard/internal/splitmix"
)

// DefaultSize is the default table size: a prime, so that every skip value generates a full
// permutation, and more than 100 times the backends of all but the largest pools, which keeps
// every backend's share within 1% of its ideal.
const DefaultSize = 65537

// Backend is one entry of a table build.
type Backend struct {
	// ID is what the table stores for this backend (0 is reserved for "no backend").
	ID uint32
	// Identity names the backend in hashing (its address): the same identity gets the same
	// permutation on every node, whatever its ID.
	Identity string
	// Weight is the backend's relative share; 0 leaves it out of the table (drained, unhealthy).
	Weight uint32
}

// ValidateSize checks that size is a usable table size: a prime of at least 3 and below 2^24.
func ValidateSize(size uint64) error {
	if size < 3 || size >= 1<<24 {
		return fmt.Errorf("maglev table size %d out of range: use a prime between 3 and 16777216, such as 65537", size)
	}
	if !big.NewInt(int64(size)).ProbablyPrime(20) {
		return fmt.Errorf("maglev table size %d is not prime: use a prime such as 65537 or 131071", size)
	}
	return nil
}

func hash64(seed byte, s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte{seed, 0x5a, seed})
	h.Write([]byte(s))
	return splitmix.Finalize(h.Sum64())
}

// Build returns a table of size entries holding backend IDs, each backend's share proportional to
// its weight. A set with no backend of positive weight gives a table of zeros.
func Build(backends []Backend, size uint64) ([]uint32, error) {
	if err := ValidateSize(size); err != nil {
		return nil, err
	}
	bs := make([]Backend, 0, len(backends))
	seen := map[string]bool{}
	ids := map[uint32]bool{}
	var maxW uint32
	for _, b := range backends {
		if b.Weight == 0 {
			continue
		}
		if b.ID == 0 {
			return nil, errors.New("build maglev table: backend id 0 is reserved for \"no backend\"")
		}
		if seen[b.Identity] {
			return nil, fmt.Errorf("build maglev table: backend %q given twice", b.Identity)
		}
		if ids[b.ID] {
			return nil, fmt.Errorf("build maglev table: backend id %d given twice", b.ID)
		}
		seen[b.Identity], ids[b.ID] = true, true
		bs = append(bs, b)
		if b.Weight > maxW {
			maxW = b.Weight
		}
	}
	table := newTable(size)
	if len(bs) == 0 {
		clear(table)
		return table, nil
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].Identity < bs[j].Identity })

	fill(table, bs, maxW)
	return table, nil
}

// fill places every backend's turns in table (Maglev's population loop). Each backend walks its
// permutation offset, offset+skip, ... (mod size) kept as a running position (an addition and a
// conditional subtraction instead of a multiplication and a 64-bit division per probe); with
// equal weights every backend takes one turn a round and the weight credits are skipped. The
// table is the one the textbook loop gives, slot for slot.
func fill(table []uint32, bs []Backend, maxW uint32) {
	size := uint64(len(table))
	n := len(bs)
	sc := getScratch(n, size)
	defer scratch.Put(sc)
	pos, skip, credit, share := sc.pos, sc.skip, sc.credit, sc.share
	equalW := true
	for i, b := range bs {
		pos[i] = hash64(1, b.Identity) % size
		skip[i] = hash64(2, b.Identity)%(size-1) + 1
		share[i] = float64(b.Weight) / float64(maxW)
		equalW = equalW && b.Weight == maxW
	}
	// filled is a bitmap (8 KiB for 65537 slots, so it stays in the first-level cache: most of
	// the time goes to probing taken slots near the end of the fill).
	filled := sc.filled
	// take places backend i's next turn: the first free slot on its permutation from pos[i].
	take := func(i int) {
		c, sk := pos[i], skip[i]
		for filled[c>>6]&(1<<(c&63)) != 0 {
			if c += sk; c >= size {
				c -= size
			}
		}
		filled[c>>6] |= 1 << (c & 63)
		table[c] = bs[i].ID
		if c += skip[i]; c >= size {
			c -= size
		}
		pos[i] = c
	}
	placed := uint64(0)
	for placed < size {
		for i := range bs {
			if equalW {
				take(i)
				if placed++; placed == size {
					return
				}
				continue
			}
			// Weighted Maglev: each round a backend earns weight/maxWeight turns, so shares
			// follow weights while the fill order stays interleaved (good spread on change).
			credit[i] += share[i]
			for credit[i] >= 1 && placed < size {
				credit[i]--
				take(i)
				placed++
			}
		}
	}
}

// Diff lists the slots whose value differs between two tables of the same size.
func Diff(old, new []uint32) []int {
	var out []int
	for i := range new {
		if i >= len(old) || old[i] != new[i] {
			out = append(out, i)
		}
	}
	return out
}

// Shares counts the slots each backend ID holds.
func Shares(table []uint32) map[uint32]int {
	m := map[uint32]int{}
	for _, id := range table {
		m[id]++
	}
	return m
}

// BuildDrained is the table of a backend set some of whose members take no new flow (drained,
// unhealthy): the table of every listed backend, with the slots of those out of the ring given
// to what the table of the others holds there. A drain then moves exactly the drained backend's
// slots, 1/N of the table (a plain rebuild without it moves several times that once the table
// is under about 1,000 slots a backend: 7x at 1,000 backends in 65537 slots), and an undrain
// moves them back. The result is still a function of the set and its in-ring subset alone, so
// every node that knows the same backends computes the same table. With no backend out,
// BuildDrained is Build.
func BuildDrained(listed []Backend, out func(Backend) bool, size uint64) ([]uint32, error) {
	var in []Backend
	drained := map[uint32]bool{}
	for _, b := range listed {
		if b.Weight == 0 {
			continue
		}
		if out(b) {
			drained[b.ID] = true
			continue
		}
		in = append(in, b)
	}
	if len(drained) == 0 || len(in) == 0 {
		return Build(in, size)
	}
	full, err := Build(listed, size)
	if err != nil {
		return nil, err
	}
	rest, err := Build(in, size)
	if err != nil {
		return nil, err
	}
	for i, id := range full {
		if drained[id] {
			full[i] = rest[i]
		}
	}
	Recycle(rest)
	return full, nil
}

// A cold start builds thousands of tables of 256 KiB: they and the fill's working memory are
// reused from build to build instead of left to the garbage collector (which took a fifth of a
// 4,096-VIP start's CPU).
var (
	tables  sync.Pool // *[]uint32 of any size
	scratch = sync.Pool{New: func() any { return new(fillScratch) }}
)

// Recycle gives back a table that Build or BuildDrained returned, once the caller is done with
// it, so that a later build reuses its memory. The caller must not use it afterwards.
func Recycle(table []uint32) {
	if cap(table) > 0 {
		tables.Put(&table)
	}
}

// newTable returns a table of size slots, holding anything.
func newTable(size uint64) []uint32 {
	if p, ok := tables.Get().(*[]uint32); ok && uint64(cap(*p)) >= size {
		return (*p)[:size]
	}
	return make([]uint32, size)
}

// fillScratch is the working memory of a fill.
type fillScratch struct {
	pos, skip     []uint64
	credit, share []float64
	filled        []uint64
}

func getScratch(n int, size uint64) *fillScratch {
	sc := scratch.Get().(*fillScratch)
	sc.pos, sc.skip = grow(sc.pos, n), grow(sc.skip, n)
	sc.credit, sc.share = grow(sc.credit, n), grow(sc.share, n)
	clear(sc.credit)
	sc.filled = grow(sc.filled, int((size+63)/64))
	clear(sc.filled)
	return sc
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// MinSlotsPerBackend is the table size per backend below which shares drift from their ideal by
// more than about 1% (Maglev's own advice: a table at least 100 times the backends).
const MinSlotsPerBackend = 100

// SizeFor returns the smallest prime table size of at least MinSlotsPerBackend slots per backend
// for n backends, and never below DefaultSize.
func SizeFor(n int) uint64 {
	s := uint64(n) * MinSlotsPerBackend
	if s < DefaultSize {
		return DefaultSize
	}
	for !big.NewInt(int64(s)).ProbablyPrime(20) {
		s++
	}
	return s
}

// autoSizes caches AutoSize by power of two: a change computes the size of every VIP.
var autoSizes [25]atomicSize

type atomicSize struct {
	once sync.Once
	v    uint64
}

// AutoSize is the ring size a pool of n backends gets unless told otherwise: the smallest prime
// of at least MinSlotsPerBackend slots a backend for n rounded up to a power of two (101 for one
// backend, 1601 for 9 to 16, 3203 for 17 to 32, 102407 for 513 to 1,024). Rounding up keeps a
// pool's ring through most of its growth (a new size rebuilds the whole table), and the size is
// a function of n alone, so every node computes the same ring for the same backends.
func AutoSize(n int) uint64 {
	k := 0
	for n > 1<<k && k < len(autoSizes)-1 {
		k++
	}
	a := &autoSizes[k]
	a.once.Do(func() { a.v = NextPrime(uint64(1<<k) * MinSlotsPerBackend) })
	return a.v
}

// NextPrime is the smallest prime of at least n (and at least 3).
func NextPrime(n uint64) uint64 {
	if n < 3 {
		return 3
	}
	for !big.NewInt(int64(n)).ProbablyPrime(20) {
		n++
	}
	return n
}
