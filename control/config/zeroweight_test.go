package config

import (
	"math/rand"
	"regexp"
	"testing"
)

// TestMayHaveZeroWeight: the scan says what the regular expression it replaced says, on the
// cases that tell them apart and on random documents made of their pieces.
func TestMayHaveZeroWeight(t *testing.T) {
	re := regexp.MustCompile(`(?m)\bweight:\s*0+\s*([#,}\]]|$)`)
	cases := []string{
		"weight: 0", "weight: 0\n", "  weight: 00 # off\n", "{address: a, weight: 0}", "[weight: 0]", "weight:0,",
		"weight: 1", "weight: 10", "weight: 01", "weight: 0x", "xweight: 0", "_weight: 0", "-weight: 0", "weight:\n  0\n",
		"weight: 0 \r\n", "weight: 0\t}", "weight: 0 a", "weight:", "weight: ", "weight: 1\nweight: 0", "weight: 5 weight: 0",
	}
	pieces := []string{"weight:", "weight: ", "0", "00", "1", " ", "\n", "\t", "\r", "#", ",", "}", "]", "a", "_", "-", "x weight:"}
	r := rand.New(rand.NewSource(3))
	for i := 0; i < 20000; i++ {
		s := ""
		for n := r.Intn(8); n >= 0; n-- {
			s += pieces[r.Intn(len(pieces))]
		}
		cases = append(cases, s)
	}
	for _, c := range cases {
		if got, want := mayHaveZeroWeight([]byte(c)), re.MatchString(c); got != want {
			t.Errorf("%q: scan says %v, the expression %v", c, got, want)
		}
	}
}
