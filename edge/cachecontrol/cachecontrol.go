// Package cachecontrol implements the pure rules of HTTP caching that a shared cache applies
// (RFC 9111 and RFC 5861): parsing Cache-Control, deciding whether a response may be stored,
// computing its freshness lifetime and current age, and deciding whether a stored response may
// answer a request fresh, stale or not at all. It does no I/O, so every rule is unit-testable.
package cachecontrol

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Directives is a parsed Cache-Control header: directive name (lower case) to its argument
// ("" when the directive has none). Unknown directives are kept so callers can test for them.
type Directives map[string]string

// Parse parses every Cache-Control field line of h. Quoted arguments are unquoted; a directive
// repeated keeps its first value, as RFC 9111 section 4.2.1 advises for conflicting values.
func Parse(h http.Header) Directives {
	lines := h["Cache-Control"]
	if len(lines) == 0 {
		return nil // reads of a nil map work; most requests carry no Cache-Control
	}
	d := Directives{}
	for _, line := range lines {
		for _, part := range splitList(line) {
			name, arg, _ := strings.Cut(part, "=")
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "" {
				continue
			}
			arg = strings.Trim(strings.TrimSpace(arg), `"`)
			if _, seen := d[name]; !seen {
				d[name] = arg
			}
		}
	}
	return d
}

// splitList splits a comma-separated list, keeping commas inside quoted strings (a qualified
// no-cache="a, b" names two fields but is one directive).
func splitList(s string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}

// Has reports whether directive name is present.
func (d Directives) Has(name string) bool { _, ok := d[name]; return ok }

// Seconds returns the delta-seconds argument of name. ok is false when the directive is absent or
// its argument is not a non-negative integer; an overflowing value saturates (RFC 9111 1.2.2).
func (d Directives) Seconds(name string) (time.Duration, bool) {
	v, ok := d[name]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 10, 63)
	if err != nil {
		if ne, isNum := err.(*strconv.NumError); isNum && ne.Err == strconv.ErrRange {
			return maxDelta * time.Second, true
		}
		return 0, false
	}
	return time.Duration(min(n, maxDelta)) * time.Second, true
}

// Fields returns the field names of a qualified directive such as no-cache="Set-Cookie"
// (canonicalised), or nil when the directive is unqualified or absent.
func (d Directives) Fields(name string) []string {
	v := d[name]
	if v == "" {
		return nil
	}
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, http.CanonicalHeaderKey(f))
		}
	}
	return out
}

// understoodStatus lists the status codes this cache implements the semantics of; a response with
// must-understand may be stored only when its status is one of them (RFC 9111 5.2.2.3).
var understoodStatus = map[int]bool{
	200: true, 203: true, 204: true, 300: true, 301: true, 302: true, 303: true, 307: true,
	308: true, 404: true, 405: true, 410: true, 414: true, 451: true, 501: true,
}

// heuristicStatus lists the status codes that are heuristically cacheable (RFC 9110 15.1),
// except 206, which this cache stores only as its own slices, judged as the 200 they are part of
// (edge/slice.go); otherwise it fetches whole objects and serves ranges itself.
var heuristicStatus = map[int]bool{
	200: true, 203: true, 204: true, 300: true, 301: true, 308: true, 404: true, 405: true,
	410: true, 414: true, 501: true,
}

// Storable decides whether a shared cache may store the response to a GET request
// (RFC 9111 section 3). It returns "" when the response may be stored, otherwise the reason.
func Storable(req *http.Request, reqCC Directives, status int, h http.Header, respCC Directives) string {
	switch {
	case reqCC.Has("no-store"):
		return "request no-store"
	case respCC.Has("must-understand") && !understoodStatus[status]:
		return "must-understand with a status this cache does not implement"
	case respCC.Has("no-store") && !respCC.Has("must-understand"):
		return "response no-store"
	case respCC.Has("private") && respCC["private"] == "":
		return "response private"
	case h.Get("Vary") == "*" || containsToken(h.Values("Vary"), "*"):
		return "Vary: *"
	case status == http.StatusPartialContent:
		return "partial content"
	}
	if req.Header.Get("Authorization") != "" &&
		!respCC.Has("must-revalidate") && !respCC.Has("public") && !respCC.Has("s-maxage") {
		return "request carries Authorization"
	}
	if respCC.Has("public") || respCC.Has("s-maxage") || respCC.Has("max-age") ||
		h.Get("Expires") != "" || heuristicStatus[status] {
		return ""
	}
	return "status not cacheable without explicit freshness"
}

// containsToken reports whether any comma-separated element of the field lines equals tok.
func containsToken(lines []string, tok string) bool {
	for _, l := range lines {
		for _, p := range strings.Split(l, ",") {
			if strings.EqualFold(strings.TrimSpace(p), tok) {
				return true
			}
		}
	}
	return false
}

// Heuristic tunes the heuristic freshness of responses without explicit expiry.
type Heuristic struct {
	// Fraction of the time since Last-Modified used as the lifetime (RFC 9111 4.2.2 suggests 10%).
	Fraction float64
	// Max caps the heuristic lifetime.
	Max time.Duration
}

// Lifetime computes the freshness lifetime of a stored response (RFC 9111 4.2.1): s-maxage, then
// max-age, then Expires minus Date, then the Last-Modified heuristic for heuristically cacheable
// statuses. heuristic reports whether the heuristic produced it (then Age over 24h needs Warning in
// old RFCs; here it only informs the caller).
func Lifetime(status int, h http.Header, cc Directives, hc Heuristic) (life time.Duration, heuristic bool) {
	if v, ok := cc.Seconds("s-maxage"); ok {
		return v, false
	}
	if v, ok := cc.Seconds("max-age"); ok {
		return v, false
	}
	if _, ok := h["Expires"]; ok {
		// An invalid Expires, several Expires lines included, means already expired (RFC 9111 5.3).
		t, ok := headerDate(h, "Expires")
		if !ok {
			return 0, false
		}
		date := dateOf(h, time.Now())
		if d := t.Sub(date); d > 0 {
			return d, false
		}
		return 0, false
	}
	if !heuristicStatus[status] && !cc.Has("public") {
		return 0, false
	}
	if lm, ok := headerDate(h, "Last-Modified"); ok {
		date := dateOf(h, time.Now())
		if age := date.Sub(lm); age > 0 {
			life = time.Duration(float64(age) * hc.Fraction)
			if hc.Max > 0 && life > hc.Max {
				life = hc.Max
			}
			return life, true
		}
	}
	return 0, false
}

// dateOf returns the Date header, or fallback when it is missing or invalid.
func dateOf(h http.Header, fallback time.Time) time.Time {
	if t, ok := headerDate(h, "Date"); ok {
		return t
	}
	return fallback
}

// InitialAge computes corrected_initial_age (RFC 9111 4.2.3) from the response's Date and Age
// headers and the times the request was sent and the response received.
func InitialAge(h http.Header, requestTime, responseTime time.Time) time.Duration {
	apparent := responseTime.Sub(dateOf(h, responseTime))
	if apparent < 0 {
		apparent = 0
	}
	ageValue, _ := AgeValue(h)
	corrected := ageValue + responseTime.Sub(requestTime)
	if apparent > corrected {
		return apparent
	}
	return corrected
}

// Verdict is what a stored response may do for a request.
type Verdict int

const (
	// Fresh means the stored response answers the request as is.
	Fresh Verdict = iota
	// StaleOK means the request itself accepts the stale response (max-stale).
	StaleOK
	// StaleWhileRevalidate means it may be served stale while one background revalidation runs.
	StaleWhileRevalidate
	// Revalidate means it must be validated with the origin before use (it may still be served
	// stale if the origin then fails, see StaleIfError).
	Revalidate
)

// String names the verdict for logs and tests.
func (v Verdict) String() string {
	return [...]string{"fresh", "stale-ok", "stale-while-revalidate", "revalidate"}[v]
}

// Decide applies the request and response directives to a stored response of the given age and
// lifetime (RFC 9111 4.2, 5.2.1; RFC 5861). grace is the operator's default
// stale-while-revalidate window for responses that carry none.
func Decide(reqCC, respCC Directives, age, life, grace time.Duration) Verdict {
	if (respCC.Has("no-cache") && respCC["no-cache"] == "") || reqCC.Has("no-cache") {
		return Revalidate
	}
	if ma, ok := reqCC.Seconds("max-age"); ok && age > ma {
		return Revalidate
	}
	if mf, ok := reqCC.Seconds("min-fresh"); ok && life-age < mf {
		return Revalidate
	}
	if age < life {
		return Fresh
	}
	staleness := age - life
	if NoStale(respCC) {
		return Revalidate
	}
	if reqCC.Has("max-stale") {
		// max-stale without a value accepts any staleness.
		if ms, ok := reqCC.Seconds("max-stale"); (!ok && reqCC["max-stale"] == "") || (ok && staleness <= ms) {
			return StaleOK
		}
	}
	swr, ok := respCC.Seconds("stale-while-revalidate")
	if !ok {
		swr = grace
	}
	if staleness < swr {
		return StaleWhileRevalidate
	}
	return Revalidate
}

// RequestDirectives parses a request's Cache-Control, treating "Pragma: no-cache" without a
// Cache-Control header as no-cache (RFC 9111 5.4 keeps that for HTTP/1.0 clients).
func RequestDirectives(h http.Header) Directives {
	d := Parse(h)
	if d == nil && containsToken(h.Values("Pragma"), "no-cache") {
		d = Directives{"no-cache": ""}
	}
	return d
}

// NoStale reports whether the response forbids a shared cache from serving it stale in any
// circumstance: must-revalidate, proxy-revalidate and s-maxage (RFC 9111 5.2.2.2, 5.2.2.8, 5.2.2.10).
func NoStale(respCC Directives) bool {
	return respCC.Has("must-revalidate") || respCC.Has("proxy-revalidate") || respCC.Has("s-maxage")
}

// StaleIfError returns how long past expiry the response may be served when the origin fails or
// answers 5xx: its stale-if-error directive, else grace; zero when it may not be served stale.
func StaleIfError(reqCC, respCC Directives, grace time.Duration) time.Duration {
	if NoStale(respCC) {
		return 0
	}
	if v, ok := reqCC.Seconds("stale-if-error"); ok {
		return v
	}
	if v, ok := respCC.Seconds("stale-if-error"); ok {
		return v
	}
	return grace
}
