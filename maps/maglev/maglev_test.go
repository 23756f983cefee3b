package maglev

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

func backendsN(n int) []Backend {
	bs := make([]Backend, n)
	for i := range bs {
		bs[i] = Backend{ID: uint32(i + 1), Identity: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Weight: 1}
	}
	return bs
}

func TestSharesWithinOnePercent(t *testing.T) {
	for _, n := range []int{3, 10, 100, 650} { // 65537 > 100 x backends for all of these
		table, err := Build(backendsN(n), DefaultSize)
		if err != nil {
			t.Fatal(err)
		}
		ideal := float64(DefaultSize) / float64(n)
		for id, c := range Shares(table) {
			if id == 0 {
				t.Fatalf("n=%d: empty slot in a full table", n)
			}
			if dev := math.Abs(float64(c)-ideal) / ideal; dev > 0.01 {
				t.Errorf("n=%d backend %d: %d slots, %.2f%% off the ideal %.1f", n, id, c, dev*100, ideal)
			}
		}
	}
}

func TestWeightsRespected(t *testing.T) {
	bs := []Backend{{1, "a", 1}, {2, "b", 2}, {3, "c", 5}, {4, "d", 0}}
	table, err := Build(bs, DefaultSize)
	if err != nil {
		t.Fatal(err)
	}
	sh := Shares(table)
	if sh[4] != 0 {
		t.Fatalf("weight-0 backend got %d slots", sh[4])
	}
	for _, b := range bs[:3] {
		want := float64(DefaultSize) * float64(b.Weight) / 8
		if dev := math.Abs(float64(sh[b.ID])-want) / want; dev > 0.01 {
			t.Errorf("backend %s weight %d: %d slots, want ~%.0f (%.2f%% off)", b.Identity, b.Weight, sh[b.ID], want, dev*100)
		}
	}
}

func TestDeterministicWhateverTheOrder(t *testing.T) {
	bs := backendsN(50)
	ref, _ := Build(bs, 4099)
	r := rand.New(rand.NewSource(7))
	for i := 0; i < 5; i++ {
		sh := append([]Backend(nil), bs...)
		r.Shuffle(len(sh), func(a, b int) { sh[a], sh[b] = sh[b], sh[a] })
		got, _ := Build(sh, 4099)
		if d := Diff(ref, got); len(d) != 0 {
			t.Fatalf("shuffle %d: %d slots differ", i, len(d))
		}
	}
}

// TestRemovalDisruption reports the share of slots that move when one of N backends leaves,
// against the ideal 1/N (only the leaving backend's slots move).
func TestRemovalDisruption(t *testing.T) {
	for _, n := range []int{5, 10, 50} {
		bs := backendsN(n)
		before, _ := Build(bs, DefaultSize)
		after, _ := Build(bs[1:], DefaultSize)
		moved := float64(len(Diff(before, after))) / DefaultSize
		ideal := 1 / float64(n)
		t.Logf("n=%d: %.4f of slots moved, ideal %.4f (ratio %.2f)", n, moved, ideal, moved/ideal)
		if moved < ideal*0.99 || moved > ideal*1.6 {
			t.Errorf("n=%d: moved %.4f, want close to the ideal %.4f", n, moved, ideal)
		}
		// Every slot of the leaving backend must move, and it must be gone.
		for i, id := range after {
			if id == bs[0].ID {
				t.Fatalf("slot %d still holds the removed backend", i)
			}
		}
	}
}

func TestBadInput(t *testing.T) {
	if _, err := Build(backendsN(2), 65536); err == nil {
		t.Error("non-prime size accepted")
	}
	if _, err := Build([]Backend{{0, "a", 1}}, 7); err == nil {
		t.Error("id 0 accepted")
	}
	if _, err := Build([]Backend{{1, "a", 1}, {2, "a", 1}}, 7); err == nil {
		t.Error("duplicate identity accepted")
	}
	table, err := Build(nil, 7)
	if err != nil || len(table) != 7 || Shares(table)[0] != 7 {
		t.Errorf("empty set: %v %v", table, err)
	}
}

func BenchmarkBuild1000(b *testing.B) {
	bs := backendsN(1000)
	for i := 0; i < b.N; i++ {
		if _, err := Build(bs, DefaultSize); err != nil {
			b.Fatal(err)
		}
	}
}
