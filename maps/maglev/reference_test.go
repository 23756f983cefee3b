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
