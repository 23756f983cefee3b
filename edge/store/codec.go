package store

import (
	"encoding/binary"
	"errors"
	"net/http"
	"sort"
	"strings"
	"time"
	"unsafe"

	"github.com/switchyard/switchyard/edge/cachecontrol"
)

// The memory tier keeps a Meta encoded in its arena, beside the key and the body (arena.go), so a
// million entries are a million byte ranges in a few large buffers rather than a million header
// maps the collector must mark. A decoded Meta's strings alias the arena: its chunks are never
// written again once a record is in them, so the strings stay valid for as long as anything
// holds them (the chunk stays reachable through them).

const (
	flagInvalid    = 1 << iota // Meta.Invalid
	flagSamePrim               // Primary == Key
	flagZeroTime               // ResponseTime is the zero time
	flagReparseDir             // the directives could not be encoded: parse them from the header
)

// appendMeta encodes m (without its key, which the record holds apart) onto b.
func appendMeta(b []byte, m *Meta) []byte {
	var flags byte
	if m.Invalid {
		flags |= flagInvalid
	}
	if m.Primary == m.Key {
		flags |= flagSamePrim
	}
	if m.ResponseTime.IsZero() {
		flags |= flagZeroTime
	}
	canon, ok := canonDirectives(nil, m.Directives)
	if !ok {
		flags |= flagReparseDir
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(m.Status))
	if !m.ResponseTime.IsZero() {
		b = binary.AppendVarint(b, m.ResponseTime.UnixNano())
	}
	b = binary.AppendVarint(b, int64(m.InitialAge))
	b = binary.AppendVarint(b, int64(m.Lifetime))
	b = binary.AppendVarint(b, m.Size)
	b = binary.AppendVarint(b, m.disk)
	if flags&flagSamePrim == 0 {
		b = appendString(b, m.Primary)
	}
	b = appendString(b, m.File)
	values := 0
	for _, vv := range m.Header {
		values += len(vv)
	}
	b = binary.AppendUvarint(b, uint64(len(m.Header)))
	b = binary.AppendUvarint(b, uint64(values))
	for k, vv := range m.Header {
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(vv)))
		for _, v := range vv {
			b = appendString(b, v)
		}
	}
	b = appendStrings(b, m.Vary)
	b = appendStrings(b, m.Tags)
	if ok {
		b = appendString(b, string(canon))
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

// canonDirectives appends d's canonical form (names sorted, "name=value\x00" each), the
// interner's key. ok is false when a name or value holds a byte the form cannot carry.
func canonDirectives(b []byte, d cachecontrol.Directives) ([]byte, bool) {
	names := make([]string, 0, len(d))
	for k := range d {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if strings.ContainsAny(k, "=\x00") || strings.IndexByte(d[k], 0) >= 0 {
			return b, false
		}
		b = append(b, k...)
		b = append(b, '=')
		b = append(b, d[k]...)
		b = append(b, 0)
	}
	return b, true
}

// parseCanon rebuilds a directives map from its canonical form.
func parseCanon(c string) cachecontrol.Directives {
	d := cachecontrol.Directives{}
	for c != "" {
		item, rest, _ := strings.Cut(c, "\x00")
		k, v, _ := strings.Cut(item, "=")
		d[k] = v
		c = rest
	}
	return d
}

var errCorrupt = errors.New("memory tier record is corrupt")

// decoder reads an encoded Meta; its strings alias the record.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err, d.b = errCorrupt, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err, d.b = errCorrupt, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.err, d.b = errCorrupt, nil
		return ""
	}
	if n == 0 {
		return ""
	}
	s := unsafe.String(&d.b[0], int(n))
	d.b = d.b[n:]
	return s
}

func (d *decoder) strs(room []string) []string {
	n := d.uvarint()
	if n == 0 || n > uint64(len(d.b)) {
		return nil
	}
	out := room[:0:0]
	if n <= uint64(len(room)) {
		out = room[:n:n]
	} else {
		out = make([]string, n)
	}
	for i := range out {
		out[i] = d.str()
	}
	return out
}

// entryBox holds a decoded entry, its Meta and (for the usual sizes) its header values and
// tags in one allocation: a cold hit decodes one of these and a header map.
type entryBox struct {
	e    Entry
	m    Meta
	vals [10]string
	tags [2]string
}

// decodeEntry rebuilds the entry of a record: key, encoded Meta and body, all aliasing rec.
// The body's capacity is its length, so an append can never write into the arena.
func (s *Store) decodeEntry(key string, meta, body []byte) (*Entry, error) {
	box := &entryBox{}
	m := &box.m
	if err := s.decodeMeta(m, key, meta, box.vals[:], box.tags[:]); err != nil {
		return nil, err
	}
	box.e.Meta = m
	if len(body) > 0 {
		box.e.Body = body[:len(body):len(body)]
	} else if m.Size == 0 {
		box.e.Body = []byte{}
	}
	return &box.e, nil
}

// decodeMeta decodes meta into m; vals and tags are room for the header values and tags (more
// are allocated).
func (s *Store) decodeMeta(m *Meta, key string, meta []byte, vals, tags []string) error {
	if len(meta) == 0 {
		return errCorrupt
	}
	flags := meta[0]
	d := decoder{b: meta[1:]}
	m.Key = key
	m.Status = int(d.uvarint())
	if flags&flagZeroTime == 0 {
		m.ResponseTime = time.Unix(0, d.varint())
	}
	m.InitialAge = time.Duration(d.varint())
	m.Lifetime = time.Duration(d.varint())
	m.Size = d.varint()
	m.disk = d.varint()
	m.Primary = key
	if flags&flagSamePrim == 0 {
		m.Primary = d.str()
	}
	m.File = d.str()
	m.Invalid = flags&flagInvalid != 0
	fields, values := d.uvarint(), d.uvarint()
	if fields > uint64(len(d.b)) || values > uint64(len(d.b)) {
		return errCorrupt
	}
	m.Header = make(http.Header, fields)
	if values <= uint64(len(vals)) {
		vals = vals[:values]
	} else {
		vals = make([]string, values)
	}
	for range fields {
		k := d.str()
		n := d.uvarint()
		if n > uint64(len(vals)) {
			return errCorrupt
		}
		for i := range n {
			vals[i] = d.str()
		}
		m.Header[k] = vals[:n:n] // capped: an append never writes into the next field's values
		vals = vals[n:]
	}
	m.Vary = d.strs(nil)
	m.Tags = d.strs(tags)
	if flags&flagReparseDir != 0 {
		parse := s.cfg.Directives
		if parse == nil {
			parse = cachecontrol.Parse
		}
		m.Directives = parse(m.Header)
	} else {
		m.Directives = s.interned.canonical(d.str())
	}
	return d.err
}
