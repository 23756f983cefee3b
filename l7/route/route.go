// Package route matches HTTP requests to L7 routes. Routes are tried in the order they are
// written and the first whose every condition holds wins; there is no implicit ordering by
// specificity, so the precedence an operator reads in the file is the one applied.
package route

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// Spec is the configuration of one route's conditions. Every set field must match.
type Spec struct {
	// Name identifies the route in metrics, logs and the admin API.
	Name string
	// Host matches the request host without port: "example.com" exactly, "*.example.com" any
	// subdomain. Empty matches every host.
	Host string
	// PathExact, PathPrefix and PathRegex match the normalised path; at most one may be set.
	// A prefix matches on segment boundaries: "/asset" matches "/asset" and "/asset/x", not "/assets".
	PathExact, PathPrefix, PathRegex string
	// Methods lists accepted methods; empty accepts all.
	Methods []string
	// Headers and Query are conditions on request headers and query parameters.
	Headers, Query []Cond
}

// Cond matches one header or query parameter: Present only requires it to exist, Regex matches
// its value against a regular expression, otherwise Value must be equal.
type Cond struct {
	Name    string
	Value   string
	Regex   string
	Present bool
}

// Route is a compiled Spec.
type Route struct {
	Spec
	// Index is the position in the table, which is its precedence.
	Index   int
	prefix  string // PathPrefix without its trailing slash
	pathRe  *regexp.Regexp
	methods map[string]bool
	headers []cond
	query   []cond
}

type cond struct {
	name    string
	value   string
	re      *regexp.Regexp
	present bool
}

// Table is an ordered list of routes. Compile also builds an index (index.go) so that Match
// costs about the same for ten routes or ten thousand; a Table built by hand, or whose Routes
// were changed after Compile, is matched by trying every route in order, with the same result.
type Table struct {
	Routes []*Route
	idx    *index
}

// Compile checks and compiles the specs in order.
func Compile(specs []Spec) (*Table, error) {
	t := &Table{}
	seen := map[string]bool{}
	for i, s := range specs {
		if s.Name == "" {
			return nil, fmt.Errorf("compile route %d: name is empty; give every route a unique name", i)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("compile route %q: duplicate name; route names must be unique", s.Name)
		}
		seen[s.Name] = true
		r, err := compile(s)
		if err != nil {
			return nil, fmt.Errorf("compile route %q: %w", s.Name, err)
		}
		r.Index = i
		t.Routes = append(t.Routes, r)
	}
	t.idx = buildIndex(t.Routes)
	return t, nil
}

func compile(s Spec) (*Route, error) {
	r := &Route{Spec: s}
	n := 0
	for _, p := range []string{s.PathExact, s.PathPrefix, s.PathRegex} {
		if p != "" {
			n++
		}
	}
	if n > 1 {
		return nil, fmt.Errorf("set more than one of path exact, prefix and regex; keep one")
	}
	if s.PathExact != "" && !strings.HasPrefix(s.PathExact, "/") {
		return nil, fmt.Errorf("exact path %q does not start with /", s.PathExact)
	}
	if s.PathPrefix != "" && !strings.HasPrefix(s.PathPrefix, "/") {
		return nil, fmt.Errorf("path prefix %q does not start with /", s.PathPrefix)
	}
	r.prefix = strings.TrimSuffix(s.PathPrefix, "/")
	if s.PathRegex != "" {
		re, err := regexp.Compile(anchor(s.PathRegex))
		if err != nil {
			return nil, fmt.Errorf("compile path regex: %w", err)
		}
		r.pathRe = re
	}
	if len(s.Methods) > 0 {
		r.methods = map[string]bool{}
		for _, m := range s.Methods {
			r.methods[strings.ToUpper(m)] = true
		}
	}
	var err error
	if r.headers, err = compileConds("header", s.Headers, http.CanonicalHeaderKey); err != nil {
		return nil, err
	}
	if r.query, err = compileConds("query", s.Query, func(s string) string { return s }); err != nil {
		return nil, err
	}
	return r, nil
}

// anchor makes a regex match the whole path, the way an operator reading "/v[0-9]+/x" expects.
func anchor(re string) string {
	if !strings.HasPrefix(re, "^") {
		re = "^" + re
	}
	if !strings.HasSuffix(re, "$") {
		re += "$"
	}
	return re
}

func compileConds(kind string, cs []Cond, canon func(string) string) ([]cond, error) {
	out := make([]cond, 0, len(cs))
	for _, c := range cs {
		if c.Name == "" {
			return nil, fmt.Errorf("%s condition has no name; set name", kind)
		}
		x := cond{name: canon(c.Name), value: c.Value, present: c.Present}
		if c.Regex != "" {
			re, err := regexp.Compile(anchor(c.Regex))
			if err != nil {
				return nil, fmt.Errorf("compile %s %q regex: %w", kind, c.Name, err)
			}
			x.re = re
		}
		out = append(out, x)
	}
	return out, nil
}

// Match returns the first route matching the request whose path was already normalised by
// httppath.Normalize, or nil.
func (t *Table) Match(r *http.Request, cleanPath string) *Route {
	host := hostOnly(r.Host)
	// A non-ASCII host may fold to a route's host in ways the index's keys do not model, so it
	// is matched by a scan (real host names are ASCII; IDNs arrive punycoded).
	if x := t.idx; x != nil && x.n == len(t.Routes) && isASCII(host) {
		return x.match(r, host, cleanPath)
	}
	return t.scan(r, host, cleanPath)
}

// scan tries every route in order.
func (t *Table) scan(r *http.Request, host, cleanPath string) *Route {
	var query map[string][]string
	for _, rt := range t.Routes {
		if rt.matches(r, host, cleanPath, &query) {
			return rt
		}
	}
	return nil
}

// matches reports whether every condition of the route holds. query is the request's parsed
// query, parsed on first use and kept for the next route.
func (rt *Route) matches(r *http.Request, host, cleanPath string, query *map[string][]string) bool {
	if !rt.matchHost(host) || !rt.matchPath(cleanPath) {
		return false
	}
	if rt.methods != nil && !rt.methods[r.Method] {
		return false
	}
	if !matchConds(rt.headers, func(n string) ([]string, bool) { v, ok := r.Header[n]; return v, ok }) {
		return false
	}
	if len(rt.query) > 0 {
		if *query == nil {
			*query = r.URL.Query() // parsed once, only when a route needs it
		}
		q := *query
		if !matchConds(rt.query, func(n string) ([]string, bool) { v, ok := q[n]; return v, ok }) {
			return false
		}
	}
	return true
}

func (rt *Route) matchHost(host string) bool {
	switch {
	case rt.Host == "":
		return true
	case strings.HasPrefix(rt.Host, "*."):
		return strings.HasSuffix(host, rt.Host[1:])
	}
	return strings.EqualFold(host, rt.Host)
}

func (rt *Route) matchPath(p string) bool {
	switch {
	case rt.PathExact != "":
		return p == rt.PathExact
	case rt.PathPrefix != "":
		// On a segment boundary: pre itself, or pre followed by "/".
		pre := rt.prefix
		return strings.HasPrefix(p, pre) && (len(p) == len(pre) || pre == "" || p[len(pre)] == '/')
	case rt.pathRe != nil:
		return rt.pathRe.MatchString(p)
	}
	return true
}

func matchConds(cs []cond, get func(string) ([]string, bool)) bool {
	for _, c := range cs {
		vals, ok := get(c.name)
		if !ok {
			return false
		}
		if c.present {
			continue
		}
		hit := false
		for _, v := range vals {
			if (c.re != nil && c.re.MatchString(v)) || (c.re == nil && v == c.value) {
				hit = true
				break
			}
		}
		if !hit {
			return false
		}
	}
	return true
}

func hostOnly(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}
