package update

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/zone"
	"github.com/switchyard/switchyard/internal/atomicfile"
)

// The journal file holds the changes applied to a zone since its zone file was loaded, one
// chain of serials, appended with fsync after each update and replayed over the zone file at
// load. Text, so an operator can read it:
//
//	update <from serial> <to serial> <unix time> <key>
//	- <record deleted, presentation format>
//	+ <record added>
//	end
//
// An entry without its end line (a crash mid-write) is ignored and cut off by the next append.

// Journal appends the applied updates of one zone to its file.
type Journal struct {
	path string
	// Unsynced skips the sync after each append, for a file that only saves work (an IXFR
	// history a restart can do without): a crash may lose its last entries, never tear one
	// that a reader would take.
	Unsynced bool
	// last is the serial the file's chain ends at and size its valid length, known after the
	// first append has read the file (checked).
	last    uint32
	size    int64
	checked bool
	// torn is set while the file may hold bytes past size (a crash's torn entry, a failed
	// write): the next append cuts them off first. Otherwise it does not truncate, which changes
	// the file's times and so made every sync write the inode too.
	torn bool
}

// NewJournal returns the journal at path; nothing is read or written until Append.
func NewJournal(path string) *Journal { return &Journal{path: path} }

// Path returns the journal's file.
func (j *Journal) Path() string { return j.path }

// Append writes c, applied with key at now, and syncs it to disk. A file whose chain does not
// end at c.From (the zone file was edited and reloaded since) is moved to path.stale first, so
// the file is always one chain from the zone file's serial. On error nothing of c is kept.
func (j *Journal) Append(c *Change, key string, now time.Time) error {
	if err := j.check(); err != nil {
		return err
	}
	if j.size > 0 && j.last != c.From {
		stale := j.path + ".stale"
		if err := os.Rename(j.path, stale); err != nil {
			return fmt.Errorf("move the out-of-date update journal aside: %w", err)
		}
		j.size, j.torn = 0, false
	}
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("open update journal: %w; make its directory writable or set update.journal", err)
	}
	defer f.Close()
	// Cut a torn entry off, then write the new one at the end of the valid part.
	if j.torn {
		if err := f.Truncate(j.size); err != nil {
			return fmt.Errorf("truncate update journal: %w", err)
		}
	}
	j.torn = true // until the entry is written and synced
	b := entryText(c, key, now)
	if _, err := f.WriteAt(b, j.size); err != nil {
		return fmt.Errorf("write update journal: %w", err)
	}
	if !j.Unsynced {
		if err := syncData(f); err != nil {
			return fmt.Errorf("sync update journal: %w", err)
		}
	}
	j.torn = false
	if j.size == 0 {
		syncDir(filepath.Dir(j.path)) // the file's name is durable too
	}
	j.size += int64(len(b))
	j.last = c.To
	return nil
}

// Ends reports whether the file holds entries and its chain ends at serial: an Append from
// serial goes on the same chain.
func (j *Journal) Ends(serial uint32) (bool, error) {
	if err := j.check(); err != nil {
		return false, err
	}
	return j.size > 0 && j.last == serial, nil
}

// check reads the file once, for the serial its chain ends at and its valid length.
func (j *Journal) check() error {
	if j.checked {
		return nil
	}
	entries, size, err := Read(j.path)
	if err != nil {
		return err
	}
	j.size, j.checked, j.torn = size, true, true
	if len(entries) > 0 {
		j.last = entries[len(entries)-1].To
	}
	return nil
}

// entryText formats one entry.
func entryText(c *Change, key string, now time.Time) []byte {
	var b bytes.Buffer
	if key == "" {
		key = "-"
	}
	fmt.Fprintf(&b, "update %d %d %d %s\n", c.From, c.To, now.Unix(), key)
	for _, rr := range c.Del {
		fmt.Fprintf(&b, "- %s\n", rr.String())
	}
	for _, rr := range c.Add {
		fmt.Fprintf(&b, "+ %s\n", rr.String())
	}
	b.WriteString("end\n")
	return b.Bytes()
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// Read returns the complete entries of the journal at path and the length of the file they
// take; a missing file is no entries. A torn last entry is left out; a line that does not parse
// inside a complete entry is an error naming the line.
func Read(path string) ([]Change, int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("open update journal: %w", err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var out []Change
	var cur *Change
	var valid, off int64
	for line := 1; ; line++ {
		text, err := r.ReadString('\n')
		if err == io.EOF {
			return out, valid, nil // a last line without its newline is torn too
		}
		if err != nil {
			return nil, 0, fmt.Errorf("read update journal: %w", err)
		}
		off += int64(len(text))
		text = strings.TrimSuffix(text, "\n")
		bad := func(why string) error {
			return fmt.Errorf("update journal %s line %d: %s; move the file aside to load the zone file alone", path, line, why)
		}
		switch {
		case strings.HasPrefix(text, "update ") && cur == nil:
			f := strings.Fields(text)
			if len(f) != 5 {
				return nil, 0, bad("want `update FROM TO TIME KEY`")
			}
			from, err1 := strconv.ParseUint(f[1], 10, 32)
			to, err2 := strconv.ParseUint(f[2], 10, 32)
			if err1 != nil || err2 != nil {
				return nil, 0, bad("serials are not numbers")
			}
			cur = &Change{From: uint32(from), To: uint32(to)}
		case text == "end" && cur != nil:
			out = append(out, *cur)
			cur, valid = nil, off
		case (strings.HasPrefix(text, "- ") || strings.HasPrefix(text, "+ ")) && cur != nil:
			rr, err := dns.NewRR(text[2:])
			if err != nil || rr == nil {
				return nil, 0, bad(fmt.Sprintf("record does not parse (%v)", err))
			}
			if text[0] == '-' {
				cur.Del = append(cur.Del, rr)
			} else {
				cur.Add = append(cur.Add, rr)
			}
		default:
			return nil, 0, bad(fmt.Sprintf("unexpected %q", text))
		}
	}
}

// Replay applies the journal's entries to z, the zone as its file built it: the chain from
// z's serial on. It returns the zone and how many entries it applied; stale is set when the
// journal has entries but none starts at z's serial (the zone file was edited since), and then
// z is returned unchanged.
func Replay(z *zone.Zone, entries []Change) (out *zone.Zone, applied int, stale bool, err error) {
	start := -1
	for i, e := range entries {
		if e.From == z.SOA.Serial {
			start = i
			break
		}
	}
	if start < 0 {
		return z, 0, len(entries) > 0, nil
	}
	for _, e := range entries[start:] {
		if e.From != z.SOA.Serial {
			return nil, 0, false, fmt.Errorf("update journal: an entry starts at serial %d but the zone is at %d; the chain is broken, move the file aside", e.From, z.SOA.Serial)
		}
		if z, err = z.Apply(e.Del, e.Add); err != nil {
			return nil, 0, false, fmt.Errorf("update journal: replay serial %d to %d: %w", e.From, e.To, err)
		}
		applied++
	}
	return z, applied, false, nil
}

// Rewrite replaces the journal at path with cs, atomically (a temporary file beside it, synced,
// renamed over it): the IXFR history a primary keeps for its secondaries (package xfr) is
// rewritten whole when it gains a step and drops its oldest. No entries removes the file.
func Rewrite(path string, cs []Change, now time.Time) error {
	if len(cs) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove journal: %w", err)
		}
		return nil
	}
	err := atomicfile.Write(path, 0o600, func(w io.Writer) error {
		for i := range cs {
			if _, err := w.Write(entryText(&cs[i], "", now)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write journal: %w; make state_dir writable", err)
	}
	return nil
}
