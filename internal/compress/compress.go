// Package compress gives the HTTP stops their response content codings (RFC 9110 8.4): which
// coding a request accepts (Accept-Encoding with q-values), whether a response may be
// compressed, and streaming encoders for gzip, br and zstd, reused across responses.
package compress

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Coding is a content coding.
type Coding uint8

// The codings, Identity (none) first.
const (
	Identity Coding = iota
	Gzip
	Brotli
	Zstd
)

var names = [...]string{Identity: "identity", Gzip: "gzip", Brotli: "br", Zstd: "zstd"}

func (c Coding) String() string { return names[c] }

// Parse reads a coding's name as Accept-Encoding and Content-Encoding write it.
func Parse(name string) (Coding, bool) {
	for c, n := range names {
		if strings.EqualFold(name, n) {
			return Coding(c), true
		}
	}
	if strings.EqualFold(name, "x-gzip") {
		return Gzip, true // RFC 9110 8.4.1.3
	}
	return Identity, false
}

// Negotiate picks the coding of offered (in the server's order of preference) that the
// Accept-Encoding value accept ranks highest (RFC 9110 12.5.3): a coding's own q, else that of
// "*"; q=0 refuses. Identity when none qualifies, or when the request has no Accept-Encoding
// (compressing for a client that did not ask is a change it may not expect).
func Negotiate(accept []byte, offered []Coding) Coding {
	best, bestQ := Identity, 0
	for _, c := range offered {
		q, star := -1, -1
		for item := range bytes.SplitSeq(accept, []byte(",")) {
			name, params, _ := bytes.Cut(item, []byte(";"))
			name = bytes.TrimSpace(name)
			iq := quality(params)
			switch {
			case bytes.Equal(name, []byte("*")):
				star = iq
			case len(name) > 0:
				if ic, ok := Parse(string(name)); ok && ic == c {
					q = max(q, iq)
				}
			}
		}
		if q < 0 {
			q = star
		}
		if q > bestQ {
			best, bestQ = c, q
		}
	}
	return best
}

// quality reads ";q=0.5" parameters as thousandths (1000 when absent or malformed, as a
// lenient reader of a field whose only parameter is q).
func quality(params []byte) int {
	for p := range bytes.SplitSeq(params, []byte(";")) {
		k, v, ok := bytes.Cut(bytes.TrimSpace(p), []byte("="))
		if !ok || !bytes.EqualFold(bytes.TrimSpace(k), []byte("q")) {
			continue
		}
		f, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
		if err != nil || f < 0 || f > 1 {
			return 1000
		}
		return int(f * 1000)
	}
	return 1000
}

// Compressible reports whether a body of media type contentType (parameters ignored) is one of
// types: exact ("application/json") or by top-level type ("text/*").
func Compressible(contentType []byte, types []string) bool {
	mt, _, _ := bytes.Cut(contentType, []byte(";"))
	mt = bytes.TrimSpace(mt)
	top, _, _ := bytes.Cut(mt, []byte("/"))
	for _, t := range types {
		if wild, ok := strings.CutSuffix(t, "/*"); ok {
			if bytes.EqualFold(top, []byte(wild)) {
				return true
			}
		} else if bytes.EqualFold(mt, []byte(t)) {
			return true
		}
	}
	return false
}

// Levels are the compression levels per coding: gzip 1-9, br 0-11, zstd 1-4 (fastest,
// default, better, best). Zero takes the default.
type Levels struct {
	Gzip   int `yaml:"gzip"`
	Brotli int `yaml:"br"`
	Zstd   int `yaml:"zstd"`
}

// Default levels: gzip 5 and br 4 (the ratio/speed knee for dynamic responses), zstd default.
const (
	DefaultGzip   = 5
	DefaultBrotli = 4
	DefaultZstd   = 2
)

// Check names the first level out of its coding's range.
func (l Levels) Check() error {
	switch {
	case l.Gzip < 0 || l.Gzip > 9:
		return fmt.Errorf("gzip level %d is out of range; use 1 (fastest) to 9 (smallest)", l.Gzip)
	case l.Brotli < 0 || l.Brotli > 11:
		return fmt.Errorf("br level %d is out of range; use 0 (fastest) to 11 (smallest)", l.Brotli)
	case l.Zstd < 0 || l.Zstd > 4:
		return fmt.Errorf("zstd level %d is out of range; use 1 (fastest) to 4 (best)", l.Zstd)
	}
	return nil
}

func (l Levels) withDefaults() Levels {
	if l.Gzip == 0 {
		l.Gzip = DefaultGzip
	}
	if l.Brotli == 0 {
		l.Brotli = DefaultBrotli
	}
	if l.Zstd == 0 {
		l.Zstd = DefaultZstd
	}
	return l
}

// Writer is a streaming encoder of one coding: what is written comes out compressed in the
// io.Writer it was given; Flush pushes out what a reader can decode so far; Close ends the
// stream. Get one from an Encoders and give it back with Put.
type Writer interface {
	io.Writer
	Flush() error
	Close() error
	Reset(io.Writer)
}

// Encoders hands out reusable encoders at fixed levels (an encoder's state is tens to hundreds
// of KiB: made once, reused).
type Encoders struct {
	levels Levels
	pools  [4]sync.Pool
}

// NewEncoders returns encoders at levels (checked with Levels.Check).
func NewEncoders(levels Levels) *Encoders {
	e := &Encoders{levels: levels.withDefaults()}
	e.pools[Gzip].New = func() any {
		w, _ := gzip.NewWriterLevel(io.Discard, e.levels.Gzip)
		return Writer(w)
	}
	e.pools[Brotli].New = func() any { return Writer(brotli.NewWriterLevel(io.Discard, e.levels.Brotli)) }
	e.pools[Zstd].New = func() any {
		w, _ := zstd.NewWriter(io.Discard, zstd.WithEncoderLevel(zstd.EncoderLevel(e.levels.Zstd)),
			zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true),
			zstd.WithWindowSize(8<<20)) // RFC 9659: an HTTP zstd window is at most 8 MiB

		return Writer(w)
	}
	return e
}

// Get returns an encoder of c writing to w.
func (e *Encoders) Get(c Coding, w io.Writer) Writer {
	enc := e.pools[c].Get().(Writer)
	enc.Reset(w)
	return enc
}

// Put takes back an encoder of c that was closed.
func (e *Encoders) Put(c Coding, enc Writer) {
	enc.Reset(io.Discard)
	e.pools[c].Put(enc)
}
