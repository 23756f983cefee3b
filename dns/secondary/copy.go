package secondary

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/switchyard/switchyard/dns/zone"
	"github.com/switchyard/switchyard/internal/atomicfile"
)

// The saved copy of a secondary zone is a zone file (zone.WriteText) whose first line says
// where the copy came from, for `switchyard dns status` after a restart:
//
//	; switchyard secondary copy from <primary> by <kind> at <RFC 3339 time>
//
// The file's modification time is the last time a primary confirmed the copy (a transfer or a
// SOA check that found it current): the expire timer runs from there across restarts.

const copyHeader = "; switchyard secondary copy from "

// Origin describes where and how the copy was last transferred.
type Origin struct {
	Primary string
	Kind    string // AXFR, IXFR, IXFR-as-AXFR
	At      time.Time
}

// save writes z to path atomically (a temporary file beside it, synced, renamed over it, the
// directory synced): a crash leaves the old copy or the new one, never half of one.
func save(path string, z *zone.Zone, from Origin) error {
	err := atomicfile.Write(path, 0o600, func(w io.Writer) error {
		fmt.Fprintf(w, "%s%s by %s at %s\n", copyHeader, from.Primary, from.Kind, from.At.UTC().Format(time.RFC3339))
		return z.WriteText(w)
	})
	if err != nil {
		return fmt.Errorf("save secondary zone copy: %w; make state_dir writable", err)
	}
	return nil
}

// load reads the copy of origin at path: the zone, where it came from, and when a primary last
// confirmed it. A missing file is (nil, Origin{}, zero time, nil).
func load(path, origin string) (*zone.Zone, Origin, time.Time, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, Origin{}, time.Time{}, nil
	}
	if err != nil {
		return nil, Origin{}, time.Time{}, fmt.Errorf("open secondary zone copy: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, Origin{}, time.Time{}, fmt.Errorf("stat secondary zone copy: %w", err)
	}
	r := bufio.NewReader(f)
	first, _ := r.Peek(256)
	from := parseHeader(string(first))
	z, err := zone.Read(origin, r, path)
	if err != nil {
		return nil, Origin{}, time.Time{}, fmt.Errorf("read secondary zone copy %s: %w; remove it to transfer the zone anew", path, err)
	}
	return z, from, fi.ModTime(), nil
}

// parseHeader reads the copy's first line; an unknown one gives an empty Origin.
func parseHeader(text string) Origin {
	line, _, _ := strings.Cut(text, "\n")
	rest, ok := strings.CutPrefix(line, copyHeader)
	if !ok {
		return Origin{}
	}
	f := strings.Fields(rest) // <primary> by <kind> at <time>
	if len(f) != 5 || f[1] != "by" || f[3] != "at" {
		return Origin{}
	}
	at, _ := time.Parse(time.RFC3339, f[4])
	return Origin{Primary: f[0], Kind: f[2], At: at}
}

// touch records that a primary confirmed the copy now.
func touch(path string, now time.Time) {
	os.Chtimes(path, now, now)
}
