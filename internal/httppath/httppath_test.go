package httppath

import "testing"

func TestNormalize(t *testing.T) {
	for _, c := range []struct{ decoded, raw, want string }{
		{"/tracking/../admin", "/tracking/../admin", "/admin"},
		{"/tracking/./a//b/", "/tracking/./a//b/", "/tracking/a/b/"},
		{"/../../etc/passwd", "/../../etc/passwd", "/etc/passwd"},
		{"/a/../..", "/a/../..", "/"},
	} {
		t.Run(c.decoded, func(t *testing.T) {
			got, err := Normalize(c.decoded, c.raw)
			if err != nil || got != c.want {
				t.Errorf("Normalize(%q) = %q %v, want %q", c.decoded, got, err, c.want)
			}
		})
	}
	for _, raw := range []string{"/tracking/..%2fadmin", "/a%5cb"} {
		if _, err := Normalize("/x", raw); err == nil {
			t.Errorf("%s accepted; an encoded slash is ambiguous", raw)
		}
	}
	if _, err := Normalize("/a\\..\\admin", "/a\\..\\admin"); err == nil {
		t.Error("backslash path accepted")
	}
}
