package core

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/h1"
)

// The request core's rules, tested once here; the end-to-end table in package l7 runs the same
// behaviours through every engine.

func parse(t *testing.T, raw string) *h1.Head {
	t.Helper()
	h := &h1.Head{}
	if rej := h1.ParseHead([]byte(raw), h); rej != nil {
		t.Fatalf("parse %q: %v", raw, rej)
	}
	return h
}

func TestReuseRules(t *testing.T) {
	ok := ResponseEnd{Framing: LengthBody, Complete: true}
	if !Reusable(ok) {
		t.Fatal("a complete Content-Length response on a quiet connection is not reusable")
	}
	for name, e := range map[string]ResponseEnd{
		"incomplete":      {Framing: LengthBody},
		"leftover bytes":  {Framing: LengthBody, Complete: true, Leftover: 1},
		"maybe more":      {Framing: LengthBody, Complete: true, MaybeMore: true},
		"peer shut":       {Framing: ChunkedBody, Complete: true, PeerShut: true},
		"upstream close":  {Framing: LengthBody, Complete: true, UpstreamClose: true},
		"close-delimited": {Framing: CloseBody, Complete: true},
		"framing error":   {Framing: ChunkedBody, Complete: true, Err: ErrUpstream},
	} {
		if Reusable(e) {
			t.Errorf("%s: pooled", name)
		}
	}
}

func TestResponseFraming(t *testing.T) {
	cl := parse(t, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n")
	ch := parse(t, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
	none := parse(t, "HTTP/1.1 200 OK\r\n\r\n")
	for _, c := range []struct {
		method string
		code   int
		h      *h1.Head
		want   Framing
	}{
		{"GET", 200, cl, LengthBody}, {"GET", 200, ch, ChunkedBody}, {"GET", 200, none, CloseBody},
		{"HEAD", 200, cl, NoBody}, {"GET", 204, ch, NoBody}, {"GET", 304, cl, NoBody},
	} {
		t.Run(c.method, func(t *testing.T) {
			if got := ResponseFraming(c.method, c.code, c.h); got != c.want {
				t.Errorf("%s %d: framing %d, want %d", c.method, c.code, got, c.want)
			}
		})
	}
}

func TestBodiesStopAtTheirEnd(t *testing.T) {
	var rb ResponseBody
	rb.Reset(LengthBody, 5, false)
	if n, out, _ := rb.Next([]byte("helloHTTP/1.1 200")); n != 5 || string(out) != "hello" || !rb.Done() {
		t.Errorf("length body took %d %q, done %v", n, out, rb.Done())
	}
	rb.Reset(ChunkedBody, -1, false)
	data := "3\r\nabc\r\n0\r\n\r\nHTTP/1.1 200 OK"
	if n, _, err := rb.Next([]byte(data)); err != nil || n != strings.Index(data, "HTTP") || !rb.Done() {
		t.Errorf("chunked body took %d (%v), done %v", n, err, rb.Done())
	}
	rb.Reset(ChunkedBody, -1, false)
	if _, _, err := rb.Next([]byte("zz\r\n")); !errors.Is(err, ErrUpstream) {
		t.Errorf("bad chunk size: %v, want ErrUpstream", err)
	}
	rb.Reset(CloseBody, -1, false)
	if _, out, _ := rb.Next([]byte("abc")); string(out) != "3\r\nabc\r\n" {
		t.Errorf("close-delimited bytes re-framed as %q", out)
	}
	if out, ok := rb.End(); !ok || string(out) != "0\r\n\r\n" || !rb.Done() {
		t.Error("a close-delimited body does not end at EOF")
	}
	rb.Reset(LengthBody, 10, false)
	rb.Next([]byte("abc"))
	if _, ok := rb.End(); ok {
		t.Error("a truncated Content-Length body was taken as complete at EOF")
	}
	req := NewRequestBody(parse(t, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n"))
	if n, out, _ := req.Next([]byte("hiGET")); n != 2 || string(out) != "hi" || !req.Done() {
		t.Errorf("request body took %d", n)
	}
}

func TestRetryPolicy(t *testing.T) {
	var none *RetryPolicy
	if none.Covers("GET") || none.RetryStatus(503) {
		t.Error("no policy retries")
	}
	p := &RetryPolicy{Attempts: 2, OnStatus: map[int]bool{503: true}, BufferBody: 10}
	if !p.Covers("GET") || p.Covers("POST") {
		t.Error("idempotent methods only without non_idempotent")
	}
	if !p.Replayable("PUT", 10, true) || p.Replayable("PUT", 11, true) || p.Replayable("PUT", 5, false) {
		t.Error("a body is replayed only when whole and within buffer_body")
	}
	if p.MaxAttempts(true) != 3 || p.MaxAttempts(false) != 1 {
		t.Error("attempts")
	}
	p.NonIdempotent = true
	if !p.Covers("POST") {
		t.Error("non_idempotent opts POST in")
	}
}

func TestLocalResourceIsNotTheBackend(t *testing.T) {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM, syscall.ENOBUFS} {
		if !LocalResource(fmt.Errorf("dial: %w", os.NewSyscallError("socket", e))) {
			t.Errorf("%v not local", e)
		}
	}
	if LocalResource(syscall.ECONNREFUSED) || LocalResource(os.ErrDeadlineExceeded) {
		t.Error("a refused or timed-out connection is the backend's failure")
	}
}

func TestIdleIsLIFOAndForgets(t *testing.T) {
	p := NewIdle[string, *int]()
	now := time.Now()
	a, b, c := new(int), new(int), new(int)
	idle := func(*int) time.Duration { return time.Minute }
	p.Put("k", a, now.Add(-2*time.Minute), 3) // too old by the time it is asked for
	p.Put("k", b, now, 3)
	p.Put("k", c, now, 3)
	if p.Put("k", new(int), now, 3) {
		t.Error("kept more than maxIdle")
	}
	var dropped []*int
	drop := func(x *int) { dropped = append(dropped, x) }
	if got, _ := p.Get("k", now, idle, drop); got != c {
		t.Error("not LIFO")
	}
	p.Remove("k", func(x *int) bool { return x == b })
	if _, ok := p.Get("k", now, idle, drop); ok || len(dropped) != 1 || dropped[0] != a {
		t.Errorf("expired connection handed out or not dropped: %v", dropped)
	}
	if p.Len() != 0 {
		t.Errorf("%d left", p.Len())
	}
}

func TestUpstreamHeadStripsHopByHop(t *testing.T) {
	h := parse(t, "GET /a HTTP/1.1\r\nHost: app\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: 5\r\n"+
		"Te: trailers, gzip\r\nUpgrade-Insecure-Requests: 1\r\nX-Forwarded-For: 203.0.113.7\r\nVia: 1.0 edge\r\n\r\n")
	ri := Inspect(h, nil)
	out := string(UpstreamHead(nil, h, &ri, "GET", []byte("/a"), Client{IP: "10.0.0.1", Scheme: "https"}, nil))
	for _, gone := range []string{"X-Hop:", "Keep-Alive:", "Connection:", "gzip"} {
		if strings.Contains(out, gone) {
			t.Errorf("%s forwarded:\n%s", gone, out)
		}
	}
	for _, want := range []string{"GET /a HTTP/1.1\r\nHost: app\r\n", "Upgrade-Insecure-Requests: 1\r\n", "Te: trailers\r\n",
		"X-Forwarded-For: 203.0.113.7, 10.0.0.1\r\n", "X-Forwarded-Proto: https\r\n",
		"Forwarded: for=10.0.0.1;proto=https;host=\"app\"\r\n", "Via: 1.0 edge, 1.1 switchyard\r\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	rh := parse(t, "HTTP/1.1 200 OK\r\nConnection: X-Secret\r\nX-Secret: s\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n")
	tokens, upClose := ResponseTokens(rh, nil)
	resp := string(ResponseHead(nil, rh, tokens, 200, ChunkedBody, true, nil))
	// Trailer stays: the chunked body's trailer fields are forwarded.
	if upClose || strings.Contains(resp, "X-Secret") || !strings.Contains(resp, "Trailer: X-T\r\n") ||
		!strings.Contains(resp, "Connection: close\r\n") || strings.Count(resp, "Transfer-Encoding") != 1 {
		t.Errorf("response head:\n%s", resp)
	}
}

// Both body directions re-frame chunked bodies canonically (h1.Chunked), trailer fields
// included, in pieces of any size, and refuse malformed framing.
func TestChunkedBodiesAreReframed(t *testing.T) {
	in := "00A;ext=1\r\n0123456789\r\n3\r\nabc\r\n0\r\nX-T:v\r\nHost: x\r\n\r\n"
	want := "a\r\n0123456789\r\n3\r\nabc\r\n0\r\nX-T: v\r\n\r\n"
	var rb ResponseBody
	rb.Reset(ChunkedBody, -1, false)
	var got []byte
	for i := 0; i < len(in); i++ { // byte by byte: the decoder keeps its place
		n, out, err := rb.Next([]byte(in[i : i+1]))
		if err != nil || n != 1 {
			t.Fatalf("byte %d: took %d (%v)", i, n, err)
		}
		got = append(got, out...)
	}
	if string(got) != want || !rb.Done() {
		t.Errorf("response body re-framed as %q (done %v), want %q", got, rb.Done(), want)
	}
	req := NewRequestBody(parse(t, "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"))
	n, out, rej := req.Next([]byte(in + "GET / HTTP/1.1\r\n"))
	if rej != nil || n != len(in) || string(out) != want || !req.Done() {
		t.Errorf("request body took %d %q (%v), want %d %q", n, out, rej, len(in), want)
	}
	req = NewRequestBody(parse(t, "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"))
	if _, _, rej := req.Next([]byte("3\r\nabc\n0\r\n\r\n")); rej == nil || rej.Status != 400 {
		t.Errorf("chunk data without CRLF: %v, want a 400 refusal", rej)
	}
	rb.Reset(ChunkedBody, -1, false)
	if _, _, err := rb.Next([]byte("3\nabc\r\n0\r\n\r\n")); !errors.Is(err, ErrUpstream) {
		t.Errorf("bare LF in a response chunk size line: %v, want ErrUpstream", err)
	}
}
