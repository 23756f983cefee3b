package l7

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/l7/core"
)

// A route's filters, in the Gateway API's vocabulary (HTTPRoute filters) so that a Gateway API
// controller maps one to one: RequestHeaderModifier, ResponseHeaderModifier and RequestRedirect.
// Header filters run on every engine (core.HeaderFilter); a redirect is answered by the proxy
// itself, without a backend.

// Filters are a route's `filters:` block.
type Filters struct {
	// RequestHeaders modifies the request's fields on the way to the backend.
	RequestHeaders *HeaderModifier `yaml:"request_headers"`
	// ResponseHeaders modifies the response's fields on the way to the client.
	ResponseHeaders *HeaderModifier `yaml:"response_headers"`
	// Redirect answers the route's requests with a redirect instead of sending them on.
	Redirect *Redirect `yaml:"redirect"`
	// URLRewrite changes the path and Host the backend gets (the client's stay in the
	// forwarding fields).
	URLRewrite *URLRewrite `yaml:"url_rewrite"`
}

// URLRewrite is the Gateway API's URLRewrite filter.
type URLRewrite struct {
	Hostname string `yaml:"hostname"`
	// Path replaces the whole path (replace_full_path) or the prefix the route matched
	// (replace_prefix_match, on routes that match by path prefix); the query is kept.
	Path struct {
		ReplaceFullPath    string `yaml:"replace_full_path"`
		ReplacePrefixMatch string `yaml:"replace_prefix_match"`
	} `yaml:"path"`
}

// validate checks a rewrite at field f of a route matching by prefix (when it does), naming the fix.
func (rw *URLRewrite) validate(c *Config, f, prefix string) error {
	p := rw.Path
	switch {
	case rw.Hostname != "" && (strings.ContainsAny(rw.Hostname, ":/ ") || !h1.PlainHost([]byte(rw.Hostname))):
		return c.fieldError(f+".hostname", "%q is not a host name; write it without scheme, port or path", rw.Hostname)
	case p.ReplaceFullPath != "" && p.ReplacePrefixMatch != "":
		return c.fieldError(f+".path", "sets both replace_full_path and replace_prefix_match; keep one")
	case p.ReplaceFullPath != "" && !strings.HasPrefix(p.ReplaceFullPath, "/"):
		return c.fieldError(f+".path.replace_full_path", "%q does not start with /", p.ReplaceFullPath)
	case p.ReplacePrefixMatch != "" && !strings.HasPrefix(p.ReplacePrefixMatch, "/"):
		return c.fieldError(f+".path.replace_prefix_match", "%q does not start with /", p.ReplacePrefixMatch)
	case p.ReplacePrefixMatch != "" && prefix == "":
		return c.fieldError(f+".path.replace_prefix_match", "needs a route that matches by path prefix (match.path.prefix), whose prefix it replaces")
	case rw.Hostname == "" && p.ReplaceFullPath == "" && p.ReplacePrefixMatch == "":
		return c.fieldError(f, "rewrites nothing; set hostname or path")
	}
	return nil
}

// rewritePath is the path the backend gets for the client's (normalised) path clean, on a
// route matching prefix.
func (rw *URLRewrite) rewritePath(clean, prefix string) string {
	switch {
	case rw.Path.ReplaceFullPath != "":
		return rw.Path.ReplaceFullPath
	case rw.Path.ReplacePrefixMatch != "":
		rest := strings.TrimPrefix(clean, strings.TrimSuffix(prefix, "/"))
		p := strings.TrimSuffix(rw.Path.ReplacePrefixMatch, "/") + rest
		if p == "" {
			p = "/"
		}
		return p
	}
	return clean
}

// apply rewrites a routed request for the core: its target (path rewritten, query kept) and
// the Host the backend gets.
func (rw *URLRewrite) apply(rq *routed) {
	if rw.Path.ReplaceFullPath != "" || rw.Path.ReplacePrefixMatch != "" {
		var query []byte
		if q := bytes.IndexByte(rq.Target, '?'); q >= 0 {
			query = rq.Target[q+1:]
		}
		rq.Target = core.AppendTarget(nil, rw.rewritePath(rq.Clean, rq.rt.cfg.Match.Path.Prefix), query)
	}
	if rw.Hostname != "" {
		rq.RI.UpstreamHost = []byte(rw.Hostname)
	}
}

// HeaderModifier sets (replacing), adds (beside) and removes header fields.
type HeaderModifier struct {
	Set    []HeaderValue `yaml:"set"`
	Add    []HeaderValue `yaml:"add"`
	Remove []string      `yaml:"remove"`
}

// HeaderValue is one field a modifier writes.
type HeaderValue struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}

// Redirect builds the Location from the request, replacing the parts it sets.
type Redirect struct {
	Scheme   string `yaml:"scheme"`   // http or https
	Hostname string `yaml:"hostname"` // without port
	Port     int    `yaml:"port"`
	Path     string `yaml:"path"`        // the whole path (the query is kept)
	Status   int    `yaml:"status_code"` // 301, 302 (default), 303, 307 or 308
}

// managedFields are the fields a header modifier may not touch: framing, connection control
// and the forwarding fields the proxy writes itself.
var managedFields = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive",
	"Proxy-Connection", "Upgrade", "Te", "Trailer", "Proxy-Authenticate", "Proxy-Authorization",
	"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded", "Via"}

// validate checks a modifier at field f, naming the fix.
func (m *HeaderModifier) validate(c *Config, f string) error {
	check := func(path, name string) error {
		switch {
		case name == "" || !h1.IsToken([]byte(name)):
			return c.fieldError(path, "%q is not a header field name (letters, digits and !#$%%&'*+-.^_`|~)", name)
		case containsFold(managedFields, name):
			return c.fieldError(path, "%q is a field the proxy manages itself (framing, connection or forwarding); it cannot be modified", name)
		}
		return nil
	}
	for i, hv := range append(append([]HeaderValue(nil), m.Set...), m.Add...) {
		path := fmt.Sprintf("%s.set[%d]", f, i)
		if i >= len(m.Set) {
			path = fmt.Sprintf("%s.add[%d]", f, i-len(m.Set))
		}
		if err := check(path+".name", hv.Name); err != nil {
			return err
		}
		if strings.ContainsAny(hv.Value, "\r\n\x00") {
			return c.fieldError(path+".value", "holds CR, LF or NUL, which would end the field early; write it on one line")
		}
	}
	for i, name := range m.Remove {
		if err := check(fmt.Sprintf("%s.remove[%d]", f, i), name); err != nil {
			return err
		}
	}
	return nil
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// validate checks a redirect at field f, naming the fix.
func (r *Redirect) validate(c *Config, f string) error {
	switch {
	case r.Scheme != "" && r.Scheme != "http" && r.Scheme != "https":
		return c.fieldError(f+".scheme", "%q; use http or https", r.Scheme)
	case r.Hostname != "" && (strings.ContainsAny(r.Hostname, ":/ ") || !h1.PlainHost([]byte(r.Hostname))):
		return c.fieldError(f+".hostname", "%q is not a host name; write it without scheme, port or path", r.Hostname)
	case r.Port < 0 || r.Port > 65535:
		return c.fieldError(f+".port", "%d is not a port", r.Port)
	case r.Path != "" && !strings.HasPrefix(r.Path, "/"):
		return c.fieldError(f+".path", "%q does not start with /", r.Path)
	case r.Status != 0 && r.Status != 301 && r.Status != 302 && r.Status != 303 && r.Status != 307 && r.Status != 308:
		return c.fieldError(f+".status_code", "%d is not a redirect status; use 301, 302, 303, 307 or 308", r.Status)
	case r.Scheme == "" && r.Hostname == "" && r.Port == 0 && r.Path == "":
		return c.fieldError(f, "changes nothing, so every request would be sent back to itself (a loop); set scheme, hostname, port or path")
	}
	return nil
}

// filter compiles a modifier for the request core (nil: none).
func (m *HeaderModifier) filter() *core.HeaderFilter {
	if m == nil {
		return nil
	}
	f := &core.HeaderFilter{}
	for _, hv := range m.Set {
		f.Set = append(f.Set, core.FieldValue{Name: []byte(hv.Name), Value: []byte(hv.Value)})
	}
	for _, hv := range m.Add {
		f.Add = append(f.Add, core.FieldValue{Name: []byte(hv.Name), Value: []byte(hv.Value)})
	}
	for _, name := range m.Remove {
		f.Remove = append(f.Remove, []byte(name))
	}
	return f.Compile()
}

// redirect answers r with the route's redirect: the request's URL with the parts rd sets.
func (rd *Redirect) answer(w http.ResponseWriter, r *http.Request, scheme string) int {
	u := url.URL{Scheme: scheme, Host: r.Host, Path: r.URL.Path, RawQuery: r.URL.RawQuery}
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		host, port = r.Host, ""
	}
	if rd.Scheme != "" {
		// The scheme's well-known port unless one is set, as the Gateway API's RequestRedirect
		// derives it; without a scheme the request's own port stays.
		u.Scheme, port = rd.Scheme, ""
	}
	if rd.Hostname != "" {
		host = rd.Hostname
	}
	if rd.Port != 0 {
		port = strconv.Itoa(rd.Port)
	}
	u.Host = host
	if port != "" {
		u.Host = net.JoinHostPort(host, port)
	}
	if rd.Path != "" {
		u.Path = rd.Path
	}
	http.Redirect(w, r, u.String(), rd.code())
	return rd.code()
}

// code is the redirect's status: status_code, or 302.
func (rd *Redirect) code() int {
	if rd.Status == 0 {
		return http.StatusFound
	}
	return rd.Status
}
