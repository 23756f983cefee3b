package h1

import (
	"math/rand/v2"
	"net/url"
	"testing"
)

// TestPlainTargetIsRequestURI: every target PlainTarget accepts is what net/http's parsed URL
// gives back as RequestURI, so the fast paths and net/http compute the same cache key and
// forward the same target.
func TestPlainTargetIsRequestURI(t *testing.T) {
	alphabet := []byte("aZ09-._~/$&+,:;=@?%#!*'()[] \"<>\\^`{|}\x7f\x01é")
	rng := rand.New(rand.NewPCG(1, 2))
	accepted := 0
	for i := 0; i < 20000; i++ {
		b := []byte{'/'}
		for n := rng.IntN(12); n > 0; n-- {
			b = append(b, alphabet[rng.IntN(len(alphabet))])
		}
		if !PlainTarget(b) {
			continue
		}
		accepted++
		u, err := url.ParseRequestURI(string(b))
		if err != nil {
			t.Fatalf("PlainTarget accepted %q, which net/http refuses: %v", b, err)
		}
		if u.RequestURI() != string(b) {
			t.Fatalf("PlainTarget accepted %q, but RequestURI is %q", b, u.RequestURI())
		}
	}
	if accepted < 100 {
		t.Fatalf("only %d targets accepted; the property was hardly tested", accepted)
	}
	for _, bad := range []string{"", "x", "/a%20b", "/a b", "/a#b", "/a?b#c", "/é", "/a[b"} {
		if PlainTarget([]byte(bad)) {
			t.Errorf("PlainTarget(%q) = true", bad)
		}
	}
}

// TestPlainHost: host names, IPv4 and bracketed IPv6 with a port; nothing to decode.
func TestPlainHost(t *testing.T) {
	for h, want := range map[string]bool{
		"example.com": true, "a_b.example:8080": true, "10.0.0.1:80": true, "[::1]:443": true, "x~y": true,
		"": false, "a b": false, "a%20b": false, "a/b": false, "a@b": false, "é.example": false,
	} {
		if PlainHost([]byte(h)) != want {
			t.Errorf("PlainHost(%q) = %v", h, !want)
		}
	}
}

// TestHasToken follows net/http's reading of Connection.
func TestHasToken(t *testing.T) {
	for v, want := range map[string]bool{
		"close": true, "Close": true, "keep-alive, close": true, "close,foo": true, "x close": true,
		"closed": false, "enclose": false, "": false, "keep-alive": false,
	} {
		if HasToken([]byte(v), "close") != want {
			t.Errorf("HasToken(%q) = %v", v, !want)
		}
	}
}

// TestAppendElements reads a list as ReverseProxy does: commas, OWS trimmed, no empties.
func TestAppendElements(t *testing.T) {
	got := AppendElements(nil, []byte(" keep-alive ,,\tX-Secret , close b,"))
	want := []string{"keep-alive", "X-Secret", "close b"}
	if len(got) != len(want) {
		t.Fatalf("AppendElements = %q, want %q", got, want)
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Fatalf("AppendElements = %q, want %q", got, want)
		}
	}
}
