package route

import (
	"net/http/httptest"
	"testing"

	"github.com/switchyard/switchyard/internal/httppath"
)

func TestFirstMatchWinsAndConditions(t *testing.T) {
	tab, err := Compile([]Spec{
		{Name: "api-v2", Host: "*.example.com", PathRegex: "/v[0-9]+/.*", Headers: []Cond{{Name: "x-version", Value: "2"}}},
		{Name: "tracking-read", PathPrefix: "/tracking", Methods: []string{"get", "HEAD"}},
		{Name: "event-write", PathExact: "/event", Methods: []string{"POST"}},
		{Name: "beta", PathPrefix: "/", Query: []Cond{{Name: "beta", Present: true}}},
		{Name: "mobile", PathPrefix: "/", Headers: []Cond{{Name: "User-Agent", Regex: ".*Mobile.*"}}},
		{Name: "default"},
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		method, url string
		hdr         map[string]string
		want        string
	}{
		{"GET", "http://a/tracking?no=1", nil, "tracking-read"},
		{"GET", "http://a/tracking/x", nil, "tracking-read"},
		{"POST", "http://a/tracking", nil, "default"},
		{"GET", "http://a/trackingx", nil, "default"},
		{"POST", "http://a/event", nil, "event-write"},
		{"POST", "http://a/event/", nil, "default"},
		{"GET", "http://api.example.com/v2/x", map[string]string{"X-Version": "2"}, "api-v2"},
		{"GET", "http://api.example.com:8080/v2/x", map[string]string{"X-Version": "2"}, "api-v2"},
		{"GET", "http://example.org/v2/x", map[string]string{"X-Version": "2"}, "default"},
		{"GET", "http://api.example.com/v2/x", map[string]string{"X-Version": "3"}, "default"},
		{"GET", "http://a/x?beta", nil, "beta"},
		{"GET", "http://a/x", map[string]string{"User-Agent": "Foo Mobile Bar"}, "mobile"},
		// The earlier route wins even though a later one is more specific.
		{"GET", "http://a/tracking?beta=1", nil, "tracking-read"},
	}
	for _, c := range cases {
		r := httptest.NewRequest(c.method, c.url, nil)
		for k, v := range c.hdr {
			r.Header.Set(k, v)
		}
		p, err := httppath.Normalize(r.URL.Path, r.URL.EscapedPath())
		if err != nil {
			t.Fatal(err)
		}
		got := tab.Match(r, p)
		if got == nil || got.Name != c.want {
			t.Errorf("%s %s -> %v, want %s", c.method, c.url, got, c.want)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	for _, specs := range [][]Spec{
		{{Name: ""}},
		{{Name: "a"}, {Name: "a"}},
		{{Name: "a", PathExact: "/x", PathPrefix: "/y"}},
		{{Name: "a", PathPrefix: "x"}},
		{{Name: "a", PathRegex: "("}},
		{{Name: "a", Headers: []Cond{{Value: "x"}}}},
	} {
		if _, err := Compile(specs); err == nil {
			t.Errorf("Compile(%+v) accepted", specs)
		}
	}
}
