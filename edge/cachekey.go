package edge

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Cache-key rules: which parts of a request URI tell two objects apart. By default the key is
// the lower-cased host and the URI as the client sent it; `cache_key:` can leave tracking
// parameters out (utm_*), keep only some parameters, sort them (?a=1&b=2 and ?b=2&a=1 are one
// object), and ignore the path's case. The origin is still asked for the client's URI; purge
// and push reach an object by any URI that keys to it.

// CacheKey is the edge's `cache_key:` block.
type CacheKey struct {
	Query struct {
		// Include keeps only these parameters (names, or prefixes ending in *); empty: all.
		Include []string `yaml:"include"`
		// Exclude drops these parameters (names, or prefixes ending in *, e.g. utm_*).
		Exclude []string `yaml:"exclude"`
		// Sort orders the parameters by name (then value), so their order does not matter.
		Sort bool `yaml:"sort"`
	} `yaml:"query"`
	// IgnoreCase lower-cases the path.
	IgnoreCase bool `yaml:"ignore_case"`
}

// validate checks the rules, naming the fix.
func (k *CacheKey) validate() error {
	if len(k.Query.Include) > 0 && len(k.Query.Exclude) > 0 {
		return &fieldError{"cache_key.query", "sets both include and exclude; keep one (include keeps only the listed parameters)"}
	}
	for i, n := range append(append([]string(nil), k.Query.Include...), k.Query.Exclude...) {
		if n == "" || n == "*" || strings.Contains(strings.TrimSuffix(n, "*"), "*") {
			return &fieldError{fmt.Sprintf("cache_key.query[%d]", i), fmt.Sprintf("%q: write a parameter name or a prefix ending in * (e.g. utm_*)", n)}
		}
	}
	return nil
}

// matches reports whether parameter name is one of the list's names or prefixes.
func matches(list []string, name string) bool {
	for _, n := range list {
		if p, ok := strings.CutSuffix(n, "*"); ok && strings.HasPrefix(name, p) || n == name {
			return true
		}
	}
	return false
}

// keyURI is the request URI as the key holds it under the rules (nil rules: as it is).
func (k *CacheKey) keyURI(requestURI string) string {
	if k == nil {
		return requestURI
	}
	path, query, hasQuery := strings.Cut(requestURI, "?")
	if k.IgnoreCase {
		path = strings.ToLower(path)
	}
	if !hasQuery {
		return path
	}
	q := k.Query
	if len(q.Include) == 0 && len(q.Exclude) == 0 && !q.Sort {
		return path + "?" + query
	}
	params := strings.Split(query, "&")
	kept := params[:0]
	for _, p := range params {
		name, _, _ := strings.Cut(p, "=")
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		if (len(q.Include) > 0 && !matches(q.Include, name)) || matches(q.Exclude, name) || p == "" {
			continue
		}
		kept = append(kept, p)
	}
	if q.Sort {
		slices.Sort(kept)
	}
	if len(kept) == 0 {
		return path
	}
	return path + "?" + strings.Join(kept, "&")
}
