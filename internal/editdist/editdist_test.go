package editdist

import "testing"

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"list", "list", 0}, {"lst", "list", 1}, {"lsit", "list", 1},
		{"wieght", "weight", 1}, {"port", "", 4}, {"drian", "drain", 1}, {"abc", "xyz", 3},
		{"naïve", "naive", 1},
	} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
