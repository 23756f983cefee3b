package maglev

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"
)

// referenceBuild is the textbook population loop the package had before fill (a multiplication
// and a 64-bit division per probe): fill must give the same table, slot for slot, or every node
// running an older binary would disagree with a newer one.
func referenceBuild(bs []Backend, size uint64) []uint32 {
	bs = append([]Backend(nil), bs...)
	sort.Slice(bs, func(i, j int) bool { return bs[i].Identity < bs[j].Identity })
	var maxW uint32
	for _, b := range bs {
		maxW = max(maxW, b.Weight)
	}
	table := make([]uint32, size)
	n := len(bs)
	offset, skip, next, credit := make([]uint64, n), make([]uint64, n), make([]uint64, n), make([]float64, n)
	for i, b := range bs {
		offset[i] = hash64(1, b.Identity) % size
		skip[i] = hash64(2, b.Identity)%(size-1) + 1
	}
	filled := make([]bool, size)
	var placed uint64
	for placed < size {
		for i := range bs {
			credit[i] += float64(bs[i].Weight) / float64(maxW)
			for credit[i] >= 1 && placed < size {
				credit[i]--
				c := (offset[i] + next[i]*skip[i]) % size
				for filled[c] {
					next[i]++
					c = (offset[i] + next[i]*skip[i]) % size
				}
				filled[c] = true
				table[c] = bs[i].ID
				next[i]++
				placed++
			}
		}
	}
	return table
}

func TestBuildMatchesReference(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for round := 0; round < 40; round++ {
		n := 1 + r.Intn(40)
		size := []uint64{7, 251, 4099, 65537}[round%4]
		var bs []Backend
		for i := 0; i < n; i++ {
			w := uint32(1)
			if round%2 == 1 {
				w = uint32(1 + r.Intn(5))
			}
			bs = append(bs, Backend{ID: uint32(i + 1), Identity: fmt.Sprintf("10.%d.%d.%d", round, i, r.Intn(250)), Weight: w})
		}
		got, err := Build(bs, size)
		if err != nil {
			t.Fatal(err)
		}
		if d := Diff(referenceBuild(bs, size), got); len(d) != 0 {
			t.Fatalf("round %d (%d backends, size %d): %d slots differ from the reference", round, n, size, len(d))
		}
	}
}

// TestBuildsMatchReference covers Build and BuildDrained against the textbook loop from 1 to
// 1,000 backends, with and without weights, with the tables reused from build to build.
func TestBuildsMatchReference(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for _, c := range []struct {
		n    int
		size uint64
	}{{1, 1031}, {2, 1031}, {16, 65537}, {16, 100003}, {100, 65537}, {300, 4099}, {1000, 65537}, {2, 65537}} {
		for _, weighted := range []bool{false, true} {
			var bs []Backend
			for i := 0; i < c.n; i++ {
				w := uint32(1)
				if weighted {
					w = uint32(1 + r.Intn(7))
				}
				bs = append(bs, Backend{ID: uint32(i + 1), Identity: fmt.Sprintf("fd00::%x", r.Intn(1<<20)*1024+i), Weight: w})
			}
			got, err := Build(bs, c.size)
			if err != nil {
				t.Fatal(err)
			}
			if d := Diff(referenceBuild(bs, c.size), got); len(d) != 0 {
				t.Fatalf("%d backends, size %d, weighted %v: %d slots differ from the reference", c.n, c.size, weighted, len(d))
			}
			out := map[uint32]bool{1: true}
			drained, err := BuildDrained(bs, func(b Backend) bool { return out[b.ID] }, c.size)
			if err != nil {
				t.Fatal(err)
			}
			full := make([]uint32, c.size) // the only backend out: an empty table
			if len(bs) > 1 {
				full = referenceBuild(bs, c.size)
				rest := referenceBuild(bs[1:], c.size)
				for i, id := range full {
					if id == 1 {
						full[i] = rest[i]
					}
				}
			}
			if d := Diff(full, drained); len(d) != 0 {
				t.Fatalf("%d backends, size %d, weighted %v, one drained: %d slots differ from the reference", c.n, c.size, weighted, len(d))
			}
		}
	}
}

// TestRecycledTables: a table given back is reused by the next build, which must hold nothing
// of its old content (an empty set gives zeros, a smaller set its own table).
func TestRecycledTables(t *testing.T) {
	big, err := Build(backendsN(50), 4099)
	if err != nil {
		t.Fatal(err)
	}
	Recycle(big)
	empty, err := Build(nil, 4099)
	if err != nil {
		t.Fatal(err)
	}
	if Shares(empty)[0] != 4099 {
		t.Fatalf("empty set after a recycled table: %v", Shares(empty))
	}
	Recycle(empty)
	for _, n := range []int{3, 7} {
		got, err := Build(backendsN(n), 4099)
		if err != nil {
			t.Fatal(err)
		}
		if d := Diff(referenceBuild(backendsN(n), 4099), got); len(d) != 0 {
			t.Fatalf("%d backends on a recycled table: %d slots differ from the reference", n, len(d))
		}
		Recycle(got)
	}
}

func BenchmarkBuild16(b *testing.B) {
	bs := backendsN(16)
	for i := 0; i < b.N; i++ {
		if _, err := Build(bs, DefaultSize); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReferenceBuild16(b *testing.B) {
	bs := backendsN(16)
	for i := 0; i < b.N; i++ {
		referenceBuild(bs, DefaultSize)
	}
}
