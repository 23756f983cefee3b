package h2

// Request field rules of RFC 9113 8.2 and 8.3: what a request must carry and what it must not,
// checked before anything of it reaches an HTTP/1.1 upstream (a field value with CR or LF, or a
// connection-specific field, would otherwise let an HTTP/2 client write HTTP/1.1 framing of its
// own: the downgrade form of request smuggling).

// pseudo takes one request pseudo-header field; it returns what is wrong with it, if anything.
func (st *Stream) pseudo(name, value string) string {
	if len(st.Fields) > 0 || st.ContentLength >= 0 {
		return "pseudo-header field after a regular field"
	}
	var dst *string
	switch name {
	case ":method":
		dst = &st.Method
	case ":scheme":
		dst = &st.Scheme
	case ":path":
		dst = &st.Path
	case ":authority":
		dst = &st.Authority
	case ":protocol":
		if !st.c.cfg.ExtendedConnect {
			return "unknown pseudo-header field :protocol (extended CONNECT is off)"
		}
		dst = &st.Protocol
	default:
		return "unknown pseudo-header field " + name
	}
	if *dst != "" {
		return "repeated pseudo-header field " + name
	}
	if value == "" {
		return "empty pseudo-header field " + name
	}
	*dst = value
	return ""
}

// checkPseudo checks the request's pseudo-header fields once all are read (RFC 9113 8.3.1).
func (st *Stream) checkPseudo() string {
	if st.Method == "" {
		return "missing :method"
	}
	if !isToken(st.Method) {
		return "invalid :method"
	}
	if !visible(st.Authority, true) {
		return "invalid :authority"
	}
	if st.Protocol != "" {
		// Extended CONNECT (RFC 8441 4): a protocol to run over the stream, with :scheme and
		// :path naming the resource like any request.
		if st.Method != "CONNECT" || !isToken(st.Protocol) {
			return ":protocol on a request that is not CONNECT, or not a token"
		}
	} else if st.Method == "CONNECT" {
		if st.Scheme != "" || st.Path != "" || st.Authority == "" {
			return "CONNECT with :scheme or :path, or without :authority"
		}
		return ""
	}
	if st.Scheme == "" || st.Path == "" {
		return "missing :scheme or :path"
	}
	if !isToken(st.Scheme) {
		return "invalid :scheme"
	}
	if !visible(st.Path, false) || (st.Path[0] != '/' && !(st.Path == "*" && st.Method == "OPTIONS")) {
		return "invalid :path"
	}
	for _, f := range st.Fields {
		if f.Name == "host" && st.Authority != "" && f.Value != st.Authority {
			return "host differs from :authority"
		}
	}
	return ""
}

// checkField checks a regular request field: a lowercase token name that is not
// connection-specific, te only "trailers", a value without NUL, CR, LF (nor other controls but
// HTAB) and without leading or trailing whitespace.
func checkField(name, value string) string {
	if name == "" {
		return "empty field name"
	}
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if 'A' <= ch && ch <= 'Z' || !tokenByte(ch) {
			return "invalid field name"
		}
	}
	switch name {
	case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade":
		return "connection-specific field " + name
	case "te":
		if value != "trailers" {
			return "te other than trailers"
		}
	}
	for i := 0; i < len(value); i++ {
		if ch := value[i]; ch < ' ' && ch != '\t' || ch == 0x7f {
			return "invalid field value"
		}
	}
	if n := len(value); n > 0 && (value[0] == ' ' || value[0] == '\t' || value[n-1] == ' ' || value[n-1] == '\t') {
		return "field value with surrounding whitespace"
	}
	return ""
}

// visible reports printable ASCII without spaces (an :authority also without userinfo).
func visible(s string, authority bool) bool {
	for i := 0; i < len(s); i++ {
		if ch := s[i]; ch <= ' ' || ch >= 0x7f || authority && (ch == '@' || ch == '/' || ch == '?' || ch == '#') {
			return false
		}
	}
	return true
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !tokenByte(s[i]) {
			return false
		}
	}
	return s != ""
}

func tokenByte(ch byte) bool {
	switch {
	case 'a' <= ch && ch <= 'z', 'A' <= ch && ch <= 'Z', '0' <= ch && ch <= '9':
		return true
	}
	switch ch {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}
