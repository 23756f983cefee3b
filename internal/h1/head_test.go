package h1

import "testing"

func TestParseHead(t *testing.T) {
	cases := []struct {
		name, head string
		ok         bool
		cl         int64
		chunked    bool
	}{
		{"plain", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", true, -1, false},
		{"length", "POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n", true, 12, false},
		{"chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n", true, -1, true},
		{"codings then chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip ,\tchunked\r\n\r\n", true, -1, true},
		{"two TE fields", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n", true, -1, true},
		{"value OWS trimmed, obs-text kept", "GET / HTTP/1.1\r\nX: \t\xc2\xa0v \r\n\r\n", true, -1, false},
		{"CL and TE", "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", false, 0, false},
		{"duplicate CL", "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", false, 0, false},
		{"CL sign", "POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\n", false, 0, false},
		{"CL too long", "POST / HTTP/1.1\r\nContent-Length: 1234567890123456789\r\n\r\n", false, 0, false},
		{"TE identity", "POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n", false, 0, false},
		{"TE xchunked", "POST / HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n", false, 0, false},
		{"TE chunked twice", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", false, 0, false},
		{"TE chunked first", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", false, 0, false},
		{"TE empty element", "POST / HTTP/1.1\r\nTransfer-Encoding: , chunked\r\n\r\n", false, 0, false},
		{"TE parameter", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip;q=1, chunked\r\n\r\n", false, 0, false},
		{"TE NBSP", "POST / HTTP/1.1\r\nTransfer-Encoding: \xc2\xa0chunked\r\n\r\n", false, 0, false},
		{"obs-fold", "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", false, 0, false},
		{"space before colon", "GET / HTTP/1.1\r\nX : a\r\n\r\n", false, 0, false},
		{"bare LF", "GET / HTTP/1.1\nHost: a\n\n", false, 0, false},
		{"bare LF last line", "GET / HTTP/1.1\r\nHost: a\r\n\n", false, 0, false},
		{"bare CR in value", "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", false, 0, false},
		{"NUL in value", "GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n", false, 0, false},
		{"NUL in start line", "GET /\x00 HTTP/1.1\r\n\r\n", false, 0, false},
		{"VT in value", "GET / HTTP/1.1\r\nX: a\x0bb\r\n\r\n", false, 0, false},
		{"empty name", "GET / HTTP/1.1\r\n: a\r\n\r\n", false, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var h Head
			rej := ParseHead([]byte(tc.head), &h)
			if (rej == nil) != tc.ok {
				t.Fatalf("rejection %v, want ok %v", rej, tc.ok)
			}
			if tc.ok && (h.ContentLength != tc.cl || h.Chunked != tc.chunked) {
				t.Errorf("CL %d chunked %v, want %d %v", h.ContentLength, h.Chunked, tc.cl, tc.chunked)
			}
		})
	}
}

func TestParseRequestLine(t *testing.T) {
	for line, ok := range map[string]bool{
		"GET / HTTP/1.1": true, "M-SEARCH * HTTP/1.1": true, "GET http://a/b?c HTTP/1.0": true,
		"GET  / HTTP/1.1": false, "GET / HTTP/1.1 ": false, "GET / HTTP/11": false, "G(T / HTTP/1.1": false,
		"GET /\x7f HTTP/1.1": false, "GET / http/1.1": false, "GET /": false, " GET / HTTP/1.1": false,
	} {
		if _, _, _, got := ParseRequestLine([]byte(line)); got != ok {
			t.Errorf("%q: ok %v, want %v", line, got, ok)
		}
	}
}
