// Package geoip reads MaxMind DB files (GeoIP2 / GeoLite2 City, Country and ASN, or any
// database with their fields) for the DNS stop's client groups: a client's country, continent,
// autonomous system and coordinates, with the database network the answer holds for (the EDNS
// Client Subnet scope). The file is read into memory, so a replaced file never changes under a
// lookup, and Watch reloads it when its modification time or size changes; a file that does not
// open keeps the old database serving.
package geoip

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	maxminddb "github.com/oschwald/maxminddb-golang/v2"
)

// Location is what a database knows of an address.
type Location struct {
	// Country is the ISO 3166-1 code (the registered country when the database has no other).
	Country string
	// Continent is the two-letter continent code (EU, NA, AS, ...).
	Continent string
	// ASN is the autonomous system number (GeoLite2-ASN), 0 when unknown.
	ASN uint32
	// Lat and Lon are the coordinates (degrees) when HasCoords.
	Lat, Lon  float64
	HasCoords bool
	// Bits is the prefix length of the database network holding the address: every address of
	// it gets the same record, so it is the scope an answer may be cached for.
	Bits int
}

// record is the part of a City, Country or ASN record a lookup decodes.
type record struct {
	Country struct {
		ISOCode string `maxminddb:"iso_code"`
	} `maxminddb:"country"`
	Registered struct {
		ISOCode string `maxminddb:"iso_code"`
	} `maxminddb:"registered_country"`
	Continent struct {
		Code string `maxminddb:"code"`
	} `maxminddb:"continent"`
	Location struct {
		Latitude  *float64 `maxminddb:"latitude"`
		Longitude *float64 `maxminddb:"longitude"`
	} `maxminddb:"location"`
	ASN uint32 `maxminddb:"autonomous_system_number"`
}

// loaded is one version of the file.
type loaded struct {
	r     *maxminddb.Reader
	mod   time.Time
	size  int64
	build time.Time
}

// DB is a database file, reloaded by Watch. Lookups are safe for concurrent use with a reload.
type DB struct {
	path string
	cur  atomic.Pointer[loaded]
}

// Open reads the database at path; an error names the file and the fix.
func Open(path string) (*DB, error) {
	d := &DB{path: path}
	l, err := load(path)
	if err != nil {
		return nil, err
	}
	d.cur.Store(l)
	return d, nil
}

// load reads and checks the file (it must decode as a MaxMind DB with a search tree).
func load(path string) (*loaded, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("open geo database: %w (give the path of a GeoIP2/GeoLite2 .mmdb file)", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("open geo database: %w", err)
	}
	r, err := maxminddb.OpenBytes(b)
	if err != nil {
		return nil, fmt.Errorf("open geo database %s: %w (not a MaxMind DB file, or truncated: copy it again)", path, err)
	}
	// A probe lookup walks the search tree, so a file cut short inside it is refused here rather
	// than failing queries (Verify would refuse databases without descriptions, and reads it all).
	if err := r.Lookup(netip.IPv4Unspecified()).Err(); err != nil {
		return nil, fmt.Errorf("open geo database %s: %w (corrupt: copy it again)", path, err)
	}
	return &loaded{r: r, mod: fi.ModTime(), size: fi.Size(), build: r.Metadata.BuildTime()}, nil
}

// Path is the file the database is read from.
func (d *DB) Path() string { return d.path }

// Type is the database's type (e.g. GeoLite2-City) and BuildTime when it was built.
func (d *DB) Type() string { return d.cur.Load().r.Metadata.DatabaseType }

// BuildTime is when the loaded file was built (its metadata).
func (d *DB) BuildTime() time.Time { return d.cur.Load().build }

// Lookup returns what the database holds for addr; ok is false when it holds nothing (the
// address is in no network of it) or the record does not decode.
func (d *DB) Lookup(addr netip.Addr) (Location, bool) {
	res := d.cur.Load().r.Lookup(addr.Unmap())
	if !res.Found() {
		return Location{}, false
	}
	var rec record
	if err := res.Decode(&rec); err != nil {
		return Location{}, false
	}
	loc := Location{Country: rec.Country.ISOCode, Continent: rec.Continent.Code, ASN: rec.ASN,
		Bits: res.Prefix().Bits()}
	if loc.Country == "" {
		loc.Country = rec.Registered.ISOCode
	}
	if rec.Location.Latitude != nil && rec.Location.Longitude != nil {
		loc.Lat, loc.Lon, loc.HasCoords = *rec.Location.Latitude, *rec.Location.Longitude, true
	}
	return loc, true
}

// Reload reads the file again when its modification time or size changed. It reports whether a
// new version serves; on error the old one keeps serving.
func (d *DB) Reload() (bool, error) {
	old := d.cur.Load()
	fi, err := os.Stat(d.path)
	if err != nil {
		return false, fmt.Errorf("reload geo database (old one kept): %w", err)
	}
	if fi.ModTime().Equal(old.mod) && fi.Size() == old.size {
		return false, nil
	}
	l, err := load(d.path)
	if err != nil {
		// Remember the bad version, so it is reported once, not at every check.
		d.cur.Store(&loaded{r: old.r, mod: fi.ModTime(), size: fi.Size(), build: old.build})
		return false, fmt.Errorf("reload geo database (old one kept): %w", err)
	}
	d.cur.Store(l)
	return true, nil
}

// Watch checks the file every interval until ctx ends, calling done after each check that
// loaded a new version or failed (err set), and logging both.
func (d *DB) Watch(ctx context.Context, interval time.Duration, log *slog.Logger, done func(err error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := d.Reload()
		switch {
		case err != nil:
			log.Error("dns geo database: new file refused, the old one serves on", "path", d.path, "err", err)
			done(err)
		case changed:
			log.Info("dns geo database reloaded", "path", d.path, "type", d.Type(), "build", d.BuildTime())
			done(nil)
		}
	}
}
