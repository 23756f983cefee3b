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
// against the ideal 1/N (only the leaving backend's slots move), and checks where the leaving
// backend's slots go.
func TestRemovalDisruption(t *testing.T) {
	for _, n := range []int{5, 10, 50} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			bs := backendsN(n)
			before, _ := Build(bs, DefaultSize)
			after, _ := Build(bs[1:], DefaultSize)
			moved := float64(len(Diff(before, after))) / DefaultSize
			ideal := 1 / float64(n)
			t.Logf("n=%d: %.4f of slots moved, ideal %.4f (ratio %.2f)", n, moved, ideal, moved/ideal)
			if moved < ideal*0.99 || moved > ideal*1.6 {
				t.Errorf("n=%d: moved %.4f, want close to the ideal %.4f", n, moved, ideal)
			}
			checkRemovedSpread(t, bs, before, after)
		})
	}
}

// checkRemovedSpread: after bs[0] leaves, every slot holds a surviving backend (no hole, no id
// that was never listed), and the slots bs[0] held are spread over every survivor. Maglev gives
// each backend its own random preference order, so a leaving backend's ~size/N slots land on
// the survivors almost evenly (at n=50, ~27 slots each; the chance that one gets none is about
// e^-27); a table that handed them all to a neighbour, as a ring of consecutive ranges does,
// would double one survivor's load.
func checkRemovedSpread(t *testing.T, bs []Backend, before, after []uint32) {
	t.Helper()
	alive := map[uint32]bool{}
	for _, b := range bs[1:] {
		alive[b.ID] = true
	}
	got := map[uint32]int{}
	for i, id := range after {
		if !alive[id] {
			t.Fatalf("slot %d holds %d after the rebuild, not a surviving backend", i, id)
		}
		if before[i] == bs[0].ID {
			got[id]++
		}
	}
	if len(got) != len(alive) {
		t.Errorf("the removed backend's slots went to %d of %d survivors: %v", len(got), len(alive), got)
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

// TestDrainDisruption: draining one of 1,000 backends in the default table moves at most 1.5x
// the ideal 1/N of the slots (a plain rebuild without it moved 7x), every moved slot is one the
// drained backend held, shares stay near their ideal, and undraining restores the table.
func TestDrainDisruption(t *testing.T) {
	const n = 1000
	bs := backendsN(n)
	none := func(Backend) bool { return false }
	before, err := BuildDrained(bs, none, DefaultSize)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := Build(bs, DefaultSize)
	if len(Diff(before, plain)) != 0 {
		t.Fatal("with nothing drained, BuildDrained differs from Build")
	}
	for _, k := range []int{0, 1, 500, n - 1} {
		drained := bs[k].ID
		out := func(b Backend) bool { return b.ID == drained }
		after, err := BuildDrained(bs, out, DefaultSize)
		if err != nil {
			t.Fatal(err)
		}
		d := Diff(before, after)
		ratio := float64(len(d)) / (float64(DefaultSize) / n)
		t.Logf("drain backend %d of %d: %d slots moved, %.2fx the ideal", k, n, len(d), ratio)
		if ratio > 1.5 {
			t.Errorf("drain of backend %d moved %.2fx the ideal slots, want at most 1.5x", k, ratio)
		}
		for _, i := range d {
			if before[i] != drained {
				t.Fatalf("slot %d moved from %d, which was not drained", i, before[i])
			}
		}
		sh := Shares(after)
		if sh[drained] != 0 {
			t.Fatalf("drained backend still holds %d slots", sh[drained])
		}
		ideal := float64(DefaultSize) / (n - 1)
		for id, c := range sh {
			if float64(c) > ideal*1.5 {
				t.Errorf("backend %d holds %d slots, ideal %.0f", id, c, ideal)
			}
		}
		// Undrain: back to the table before, exactly.
		again, _ := BuildDrained(bs, none, DefaultSize)
		if len(Diff(before, again)) != 0 {
			t.Fatal("undrain did not restore the table")
		}
	}
	// A plain rebuild without the backend (what a drain did before) moves far more: the
	// reason for BuildDrained. Logged as the reference.
	rebuilt, _ := Build(bs[1:], DefaultSize)
	t.Logf("plain rebuild without backend 0: %.2fx the ideal", float64(len(Diff(before, rebuilt)))/(float64(DefaultSize)/n))
}

func TestSizeFor(t *testing.T) {
	for n, want := range map[int]uint64{16: DefaultSize, 655: DefaultSize, 1000: 100003, 4000: 400009} {
		if got := SizeFor(n); got != want {
			t.Errorf("SizeFor(%d) = %d, want %d", n, got, want)
		}
	}
}
