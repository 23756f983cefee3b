// Package store keeps cached HTTP responses in two tiers: a memory tier with a byte (or object)
// budget, pointer-free storage (a log-structured arena and an index of slots, memtier.go) and
// W-TinyLFU, LRU or S3-FIFO eviction, and an optional disk tier that survives restarts. Entries are immutable: an update (a 304 refresh, a soft purge) stores a new
// Meta. A body is written to a temporary file and renamed into place only when it is complete, so
// a partial download never becomes an entry, and file names are hashes of the key, so no request
// can name a path outside the cache directory.
package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"

	"github.com/switchyard/switchyard/edge/cachecontrol"
)

// ErrTooLarge is returned by Writer.Commit for a body that fits neither tier.
var ErrTooLarge = errors.New("body too large to store")

// Meta describes one stored response (one variant of one URL).
type Meta struct {
	// Key is the variant key: the primary key plus the values of the request headers named by Vary.
	Key string `json:"key"`
	// Primary is the primary key (host and request URI) shared by every variant.
	Primary string `json:"primary"`
	// Status is the stored response's status code.
	Status int `json:"status"`
	// Header is the stored response header, without hop-by-hop fields.
	Header http.Header `json:"header"`
	// Vary lists the canonical request header names the response varies on.
	Vary []string `json:"vary,omitempty"`
	// Tags are the purge tags from Surrogate-Key and Cache-Tag.
	Tags []string `json:"tags,omitempty"`
	// ResponseTime is when the response (or its latest 304 refresh) was received.
	ResponseTime time.Time `json:"response_time"`
	// InitialAge is the corrected initial age at ResponseTime (RFC 9111 4.2.3).
	InitialAge time.Duration `json:"initial_age"`
	// Lifetime is the freshness lifetime computed when it was stored or refreshed.
	Lifetime time.Duration `json:"lifetime"`
	// Invalid marks a soft-purged entry: kept for stale serving, but never fresh.
	Invalid bool `json:"invalid,omitempty"`
	// Size is the body length in bytes.
	Size int64 `json:"size"`
	// File is the base name of the body file in the disk tier, "" for memory-only entries.
	File string `json:"file,omitempty"`
	// Directives caches the parsed Cache-Control of Header, so a hit does not parse it again.
	// The owner sets it before storing (and after a rebuild); it is never written to disk.
	Directives cachecontrol.Directives `json:"-"`

	// disk is the bytes allocated to the entry's files, its weight in the disk budget (diskuse.go).
	disk int64
}

// Age returns the entry's current age at now (RFC 9111 4.2.3).
func (m *Meta) Age(now time.Time) time.Duration {
	resident := now.Sub(m.ResponseTime)
	if resident < 0 {
		resident = 0
	}
	return m.InitialAge + resident
}

// Clone returns a deep copy that may be modified and stored as an update.
func (m *Meta) Clone() *Meta {
	c := *m
	c.Header = m.Header.Clone()
	return &c
}

// Entry is a stored response. Body is nil when the body lives only on disk; use Store.Open.
// An entry from the memory tier is a view of its record in the tier's arena: Body and the
// Meta's strings alias it (never write to them; the arena never reuses bytes anyone can still
// reach, so a view stays valid as long as it is held).
type Entry struct {
	// Meta describes the response.
	Meta *Meta
	// Body is the whole body when it is held in memory.
	Body []byte

	// memo is what the owner derived from this (immutable) entry, see Memo.
	memo atomic.Value
	// tier, slot and gen name the memory tier's record this entry is a view of (tier is nil
	// for an entry that is not); head is that record's stored head (SetHead), or nil.
	tier *memTier
	slot int32
	gen  uint32
	head []byte
}

// Head returns the bytes SetHead stored with the entry in the memory tier, or nil.
func (e *Entry) Head() []byte { return e.head }

// SetHead stores b with the entry in the memory tier's arena, so a later lookup of the same
// entry finds it in Head without deriving it again (the edge keeps its pre-rendered hit head
// there: a memo lives only as long as one decoded view, a head as long as the entry). It does
// nothing for an entry not from the memory tier, or replaced since it was looked up.
func (e *Entry) SetHead(b []byte) {
	if e.tier != nil && e.head == nil {
		e.tier.setHead(e.slot, e.gen, b)
	}
}

// Memo returns the value SetMemo stored, or nil. The edge keeps an entry's pre-rendered response
// head here: entries are immutable (an update stores a new Entry), so a value derived once from
// one holds for its whole life and disappears with it. The memory tier keeps the views of the
// last few thousand entries it decoded (memtier.go), so a hot entry keeps its memo; a cold one
// is decoded afresh and derives it again.
func (e *Entry) Memo() any { return e.memo.Load() }

// SetMemo stores v (always of one type) as the entry's memo; racing callers may each store one.
func (e *Entry) SetMemo(v any) { e.memo.Store(v) }

// Config sizes the store.
type Config struct {
	// MemoryBytes is the memory tier's byte budget; used when MemoryObjects is zero.
	MemoryBytes int64
	// MemoryObjects, when positive, bounds the memory tier by object count instead of bytes.
	MemoryObjects int
	// MaxObjectBytes is the largest body held in memory; larger bodies live only on disk (and
	// are not cached at all without a disk tier).
	MaxObjectBytes int64
	// Dir is the disk tier's directory; "" means memory only.
	Dir string
	// DiskBytes is the disk tier's byte budget.
	DiskBytes int64
	// OnEvict is called with "memory" or "disk" for each entry evicted for lack of room.
	OnEvict func(tier string)
	// Directives parses the cache directives of a stored header when the index is rebuilt;
	// nil means cachecontrol.Parse (the edge passes its targeted-field rule, RFC 9213).
	Directives func(http.Header) cachecontrol.Directives
	// Eviction is the memory tier's policy: EvictTinyLFU (the default, ""), EvictLRU or
	// EvictS3FIFO. The disk index is always W-TinyLFU.
	Eviction string
}

// Store is the two-tier response store. It is safe for concurrent use.
type Store struct {
	cfg  Config
	mem  *memTier                    // the memory tier (memtier.go)
	disk *otter.Cache[string, *Meta] // the index of the disk tier; nil without one
	gen  atomic.Int64
	seed maphash.Seed // the key hash of the memory tier and the tag index
	tags tagIndex     // purge tag -> key hashes, for both tiers (tagindex.go)
	// names resolves the key hashes of tagged disk entries to keys (tagindex.go).
	names hashNames
	// interned holds the header values and directives entries share (intern.go).
	interned interner
}

// Open creates the store and, with a disk tier, rebuilds its index from the directory.
func Open(cfg Config) (*Store, error) {
	if cfg.MaxObjectBytes <= 0 {
		cfg.MaxObjectBytes = 8 << 20
	}
	s := &Store{cfg: cfg, seed: maphash.MakeSeed()}
	s.gen.Store(time.Now().UnixNano())
	if cfg.MemoryObjects <= 0 && cfg.MemoryBytes <= 0 {
		return nil, errors.New("open store: memory budget must be positive; set memory.max_bytes or memory.max_objects")
	}
	if err := CheckEviction(cfg.Eviction); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	s.mem = newMemTier(s, cfg.Eviction, cfg.MemoryObjects, cfg.MemoryBytes, func(m *Meta) {
		if cfg.OnEvict != nil {
			cfg.OnEvict("memory")
		}
		if m != nil {
			s.untag(m)
		}
	})
	var err error
	if cfg.Dir == "" {
		return s, nil
	}
	if cfg.DiskBytes <= 0 {
		return nil, errors.New("open store: disk budget must be positive; set disk.max_bytes")
	}
	s.disk, err = otter.New(&otter.Options[string, *Meta]{
		MaximumWeight: uint64(cfg.DiskBytes),
		Weigher:       func(_ string, m *Meta) uint32 { return diskWeight(m) },
		OnDeletion:    s.onDiskDeletion,
	})
	if err != nil {
		return nil, fmt.Errorf("open store: create disk index: %w", err)
	}
	if err := s.rebuild(); err != nil {
		return nil, err
	}
	return s, nil
}

// onDiskDeletion removes a deleted version's files unless the index still points at them (a meta
// update keeps the same body file).
func (s *Store) onDiskDeletion(e otter.DeletionEvent[string, *Meta]) {
	if e.Cause == otter.CauseOverflow && s.cfg.OnEvict != nil {
		s.cfg.OnEvict("disk")
	}
	cur, ok := s.disk.GetIfPresent(e.Key)
	if ok && cur.File == e.Value.File {
		return
	}
	s.mem.Invalidate(e.Key)
	os.Remove(s.path(e.Value.File, ".body"))
	os.Remove(s.path(e.Value.File, ".meta"))
	if ok {
		s.untag(e.Value)
		return
	}
	// Gone from both tiers. The disk index may still show the entry to a quiet lookup while its
	// deletion is reported, so the tags are dropped without asking it (a Commit racing with its
	// own entry's eviction adds them back after this).
	s.names.remove(s, e.Value)
	s.untagAs(e.Value, nil)
}

// hash is the key hash of the memory tier's index and of the tag index.
func (s *Store) hash(key string) uint64 { return maphash.String(s.seed, key) }

// path returns the location of a file of the disk tier; files are sharded by the first two hex
// digits of the key hash so no directory grows too large.
func (s *Store) path(file, ext string) string {
	return filepath.Join(s.cfg.Dir, file[:2], file+ext)
}

// FileName returns the disk base name of a key's version gen: the key's SHA-256 in hex plus the
// generation. Only hex digits and a dash, so it can never escape the cache directory.
func FileName(key string, gen int64) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:16]) + "-" + strconv.FormatInt(gen, 36)
}

// rebuild reads every meta file, keeps the newest complete version of each key, and removes
// temporary files, orphans and superseded versions.
func (s *Store) rebuild() error {
	if err := os.MkdirAll(filepath.Join(s.cfg.Dir, "tmp"), 0o755); err != nil {
		return fmt.Errorf("open store: create %s: %w", s.cfg.Dir, err)
	}
	tmp := filepath.Join(s.cfg.Dir, "tmp")
	olds, _ := os.ReadDir(tmp)
	for _, o := range olds {
		os.Remove(filepath.Join(tmp, o.Name()))
	}
	best := map[string]*Meta{}
	var remove []string
	err := filepath.WalkDir(s.cfg.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == tmp {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".meta":
			m, ok, err := s.readMeta(p)
			if err != nil {
				return err // out of descriptors or the like: fail, never delete on it
			}
			if !ok {
				remove = append(remove, p, strings.TrimSuffix(p, ".meta")+".body")
				return nil
			}
			if old := best[m.Key]; old == nil || old.ResponseTime.Before(m.ResponseTime) {
				if old != nil {
					remove = append(remove, s.path(old.File, ".meta"), s.path(old.File, ".body"))
				}
				best[m.Key] = m
			} else {
				remove = append(remove, p, s.path(m.File, ".body"))
			}
		case ".body":
			if _, err := os.Stat(strings.TrimSuffix(p, ".body") + ".meta"); errors.Is(err, fs.ErrNotExist) {
				remove = append(remove, p)
			} else if err != nil {
				return err
			}
		default:
			remove = append(remove, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("open store: scan %s: %w", s.cfg.Dir, err)
	}
	for _, p := range remove {
		os.Remove(p)
	}
	parse := s.cfg.Directives
	if parse == nil {
		parse = cachecontrol.Parse
	}
	for k, m := range best {
		m.Directives = parse(m.Header)
		s.intern(m)
		s.disk.Set(k, m)
		s.names.add(s, m)
		s.tags.add(s, m)
	}
	return nil
}

// readMeta loads a meta file and checks that its body is complete and its name is its own. ok is
// false for an entry to remove; err is a read failure that says nothing about the entry.
func (s *Store) readMeta(p string) (m *Meta, ok bool, err error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	m = &Meta{}
	if json.Unmarshal(b, m) != nil || m.Key == "" || filepath.Base(p) != m.File+".meta" {
		return nil, false, nil
	}
	if !strings.HasPrefix(m.File, FileName(m.Key, 0)[:32]) {
		return nil, false, nil
	}
	st, err := os.Stat(s.path(m.File, ".body"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	if err != nil || st.Size() != m.Size {
		return nil, false, nil
	}
	m.disk = allocated(st) + metaAllocated(p)
	return m, true, nil
}

// ErrUnavailable wraps a failure to read a stored body that says nothing about the entry: the
// process is out of descriptors or memory, or the disk failed to answer. The entry is kept; the
// request should fail (503) rather than become a miss.
var ErrUnavailable = errors.New("stored body unreadable for now")

// Get returns the entry stored under key. With a disk tier, a body not in memory is read from
// disk and promoted when it fits MaxObjectBytes; a larger one comes back with a nil Body.
// ok is false when nothing is stored. An entry is forgotten only when its body file is gone or
// its size is wrong; any other read error (EMFILE, ENFILE, ENOMEM, EIO, ...) is returned wrapping
// ErrUnavailable, with the entry left in place: under descriptor pressure the disk cache must not
// delete itself.
func (s *Store) Get(key string) (*Entry, bool, error) {
	if e, ok := s.mem.GetIfPresent(key); ok {
		return e, true, nil
	}
	if s.disk == nil {
		return nil, false, nil
	}
	m, ok := s.disk.GetIfPresent(key)
	if !ok {
		return nil, false, nil
	}
	if m.Size > s.cfg.MaxObjectBytes {
		return &Entry{Meta: m}, true, nil
	}
	body, err := os.ReadFile(s.path(m.File, ".body"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("read body of %s: %w: %w", key, ErrUnavailable, err)
	}
	if err != nil || int64(len(body)) != m.Size {
		s.disk.Invalidate(key) // the file vanished or changed under us: forget the entry
		return nil, false, nil
	}
	e := &Entry{Meta: m, Body: body}
	s.mem.Set(key, e)
	return e, true, nil
}

// Open opens the body file of a disk entry, for bodies too large to hold in memory.
func (s *Store) Open(m *Meta) (*os.File, error) {
	if m.File == "" {
		return nil, fmt.Errorf("open body of %s: entry has no disk file", m.Key)
	}
	f, err := os.Open(s.path(m.File, ".body"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open body of %s: %w: %w", m.Key, ErrUnavailable, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open body of %s: %w", m.Key, err)
	}
	return f, nil
}

// Update replaces the metadata of a stored entry (a 304 refresh or a soft purge), keeping its
// body. It does nothing when key is no longer stored.
func (s *Store) Update(m *Meta) error {
	s.intern(m)
	old, _ := s.Peek(m.Key)
	applied := false
	defer func() {
		if applied {
			s.tagStored(m)
			s.untag(old)
		}
	}()
	if s.disk != nil {
		if cur, ok := s.disk.GetIfPresent(m.Key); !ok || cur.File != m.File {
			return nil
		}
		if err := s.writeMeta(m); err != nil {
			return err
		}
		s.measure(m)
		s.disk.Set(m.Key, m)
		s.names.add(s, m)
		applied = true
	}
	if e, ok := s.mem.Peek(m.Key); ok {
		s.mem.Set(m.Key, &Entry{Meta: m, Body: e.Body})
		applied = true
	}
	return nil
}

// Delete removes key from both tiers.
func (s *Store) Delete(key string) {
	old, _ := s.Peek(key)
	s.mem.Invalidate(key)
	if s.disk != nil {
		s.disk.Invalidate(key)
	}
	s.untag(old)
}

// All calls fn for the metadata of every stored entry until fn returns false.
func (s *Store) All(fn func(*Meta) bool) {
	if s.disk != nil {
		for _, m := range s.disk.All() {
			if !fn(m) {
				return
			}
		}
		return
	}
	for _, e := range s.mem.All() {
		if !fn(e.Meta) {
			return
		}
	}
}

// Len returns the number of stored entries.
func (s *Store) Len() int {
	if s.disk != nil {
		return s.disk.EstimatedSize()
	}
	return s.mem.EstimatedSize()
}

// Bytes returns the weighted size of the memory tier and of the disk tier.
func (s *Store) Bytes() (memory, disk uint64) {
	if s.mem.IsWeighted() {
		memory = s.mem.WeightedSize()
	}
	if s.disk != nil {
		disk = s.disk.WeightedSize()
	}
	return memory, disk
}

// writeMeta writes m's meta file through a temporary file and a rename.
func (s *Store) writeMeta(m *Meta) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("write meta of %s: %w", m.Key, err)
	}
	tmp, err := os.CreateTemp(filepath.Join(s.cfg.Dir, "tmp"), "meta-*")
	if err != nil {
		return fmt.Errorf("write meta of %s: %w", m.Key, err)
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.path(m.File, ".meta"))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write meta of %s: %w", m.Key, err)
	}
	return nil
}

// Writer receives a body as it streams from the origin. Commit makes it an entry; Abort (or
// any failed write) discards it, so a partial body never becomes an entry.
type Writer struct {
	s      *Store
	f      *os.File
	buf    []byte
	n      int64
	failed error
}

// NewWriter starts a body. With a disk tier the body goes to a temporary file; bodies up to
// MaxObjectBytes are also kept in memory.
func (s *Store) NewWriter() (*Writer, error) {
	w := &Writer{s: s}
	if s.disk != nil {
		f, err := os.CreateTemp(filepath.Join(s.cfg.Dir, "tmp"), "body-*")
		if err != nil {
			return nil, fmt.Errorf("start body: %w", err)
		}
		w.f = f
	}
	return w, nil
}

// Write appends p to the body. It never returns an error so that it can sit in an io.MultiWriter
// beside the client; a failure is remembered and reported by Commit.
func (w *Writer) Write(p []byte) (int, error) {
	if w.failed != nil {
		return len(p), nil
	}
	w.n += int64(len(p))
	if w.n <= w.s.cfg.MaxObjectBytes {
		w.buf = append(w.buf, p...)
	} else {
		w.buf = nil
		if w.f == nil {
			w.failed = fmt.Errorf("store body: %w: over memory.max_object_bytes %d and there is no disk tier", ErrTooLarge, w.s.cfg.MaxObjectBytes)
		}
	}
	if w.f != nil {
		if _, err := w.f.Write(p); err != nil {
			w.failed = fmt.Errorf("store body: %w", err)
		}
	}
	return len(p), nil
}

// Spool opens a read handle on the body written so far, for readers that follow a body too large
// to keep in memory. It works only with a disk tier; the handle stays valid after Commit renames
// the file and after Abort removes it.
func (w *Writer) Spool() (*os.File, error) {
	if w.f == nil || w.failed != nil {
		return nil, errors.New("spool body: no disk file to read it from")
	}
	f, err := os.Open(w.f.Name())
	if err != nil {
		return nil, fmt.Errorf("spool body: %w", err)
	}
	return f, nil
}

// Failed reports whether a write failed (the body on disk is then incomplete).
func (w *Writer) Failed() bool { return w.failed != nil }

// Len is the number of body bytes written so far.
func (w *Writer) Len() int64 { return w.n }

// Commit completes the body and stores m (its Size and File are filled in) in both tiers.
func (w *Writer) Commit(m *Meta) (*Entry, error) {
	if w.failed != nil {
		w.Abort()
		return nil, w.failed
	}
	m.Size = w.n
	w.s.intern(m)
	e := &Entry{Meta: m, Body: w.buf}
	old, _ := w.s.Peek(m.Key)
	if w.f != nil {
		m.File = FileName(m.Key, w.s.gen.Add(1))
		dst := w.s.path(m.File, ".body")
		err := w.f.Close()
		if err == nil {
			err = os.MkdirAll(filepath.Dir(dst), 0o755)
		}
		if err == nil {
			err = os.Rename(w.f.Name(), dst)
		}
		if err == nil {
			err = w.s.writeMeta(m)
		}
		if err != nil {
			os.Remove(w.f.Name())
			os.Remove(dst)
			return nil, fmt.Errorf("commit body of %s: %w", m.Key, err)
		}
		w.s.measure(m)
		w.s.disk.Set(m.Key, m)
		w.s.names.add(w.s, m)
	}
	if w.n <= w.s.cfg.MaxObjectBytes {
		w.s.mem.Set(m.Key, e)
	}
	w.s.tagStored(m)
	w.s.untag(old)
	return e, nil
}

// Abort discards the body.
func (w *Writer) Abort() {
	if w.f != nil {
		w.f.Close()
		os.Remove(w.f.Name())
	}
	w.buf = nil
}

// Reader returns a reader of an entry's body, from memory or from its disk file.
func (s *Store) Reader(e *Entry) (io.ReadSeeker, func(), error) {
	if e.Body != nil || e.Meta.Size == 0 {
		return bytes.NewReader(e.Body), func() {}, nil
	}
	f, err := s.Open(e.Meta)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { f.Close() }, nil
}
