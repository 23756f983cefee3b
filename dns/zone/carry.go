package zone

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"

	"github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
)

// source is what a zone is built from, hashed: its configuration and the content of its zone
// file (data), or its DNSKEYs (keys). A reload that finds both unchanged carries the zone over.
type source [16]byte // the first half of SHA-256: it detects changes, it authenticates nothing

// zonePath is the zone file of zc, relative paths taken from dir (the config file's).
func zonePath(zc *config.Zone, dir string) string {
	if zc.File == "" || filepath.IsAbs(zc.File) || dir == "" {
		return zc.File
	}
	return filepath.Join(dir, zc.File)
}

// hashConfig starts the source hash with every field of zc the built zone depends on. The
// file's content follows (sourceOf, or the parse's tee).
func hashConfig(zc *config.Zone, dir string) hash.Hash {
	h := sha256.New()
	fmt.Fprintf(h, "origin %q ttl %d file %q records %d\n", zc.Origin, zc.TTL, zonePath(zc, dir), len(zc.Records))
	for _, r := range zc.Records {
		fmt.Fprintf(h, "%q\n", r)
	}
	if zc.SOA != nil {
		fmt.Fprintf(h, "soa %+v\n", *zc.SOA)
	}
	for _, n := range zc.Names {
		fmt.Fprintf(h, "name %q\n", n.Name)
	}
	fmt.Fprintf(h, "dnssec %t zone_max_ttl %d\n", zc.DNSSEC != nil, ttlLimit(zc))
	h.Write([]byte("file\n"))
	return h
}

// hashKeys is the source hash of the DNSKEYs (and CDS) a signed zone publishes.
func hashKeys(keys []dns.RR) source {
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s\n", k.String())
	}
	var s source
	copy(s[:], h.Sum(nil))
	return s
}

// sourceOf hashes what zc would build from now: the configuration and the file's content (its
// bytes, not its mtime, which an editor or a checkout may keep or move at will).
func sourceOf(zc *config.Zone, dir string) (source, error) {
	h := hashConfig(zc, dir)
	if zc.File != "" {
		f, err := os.Open(zonePath(zc, dir))
		if err != nil {
			return source{}, fmt.Errorf("open zone file: %w", err)
		}
		defer f.Close()
		if _, err := io.Copy(h, f); err != nil {
			return source{}, fmt.Errorf("read zone file: %w", err)
		}
	}
	var s source
	copy(s[:], h.Sum(nil))
	return s, nil
}

// carried returns prev's zone for zc when it was built from the same data, else nil (its keys
// are compared by the caller: they follow from the data's largest TTL).
func carried(prev *Store, zc *config.Zone, dir string) *Zone {
	if prev == nil {
		return nil
	}
	old := prev.zones[zc.Origin]
	if old == nil {
		return nil
	}
	src, err := sourceOf(zc, dir)
	if err != nil || src != old.source {
		return nil // a missing file is reported by the build that follows
	}
	return old
}

// keyTypes are the apex records a signed zone's keys make (KeysFunc), replaced by rekey.
var keyTypes = []uint16{dns.TypeDNSKEY, dns.TypeCDS, dns.TypeCDNSKEY, dns.TypeNSEC3PARAM}

// rekey returns old, whose data is unchanged, with the key records ks (a KeysFunc's) in place of
// its own: what a key transition (a key published or removed) needs. It is made from old itself,
// the records as served (dynamic updates included), not from the file and the update journal,
// whose replay costs a rebuild of the zone per update it holds: thousands of them on a zone
// taking updates, at each step of every rollover.
func rekey(old *Zone, ks []dns.RR) (*Zone, error) {
	var del []dns.RR
	for _, t := range keyTypes {
		del = append(del, old.RRset(old.Origin, t)...)
	}
	nz, err := old.Apply(del, ks)
	if err != nil {
		return nil, fmt.Errorf("zone %s with new keys: %w", old.Origin, err)
	}
	nz.keys, nz.rekeyedFrom = hashKeys(ks), old.id
	// New keys sign every answer anew: no answer of old holds, so the copy starts a lineage.
	nz.lineage, nz.version, nz.recent = 0, 0, nil
	return nz, nil
}

// CarriedFrom reports whether a build carried z over from old: old itself, or old with new keys
// (rekey). Such a zone holds old's dynamic updates already.
func (z *Zone) CarriedFrom(old *Zone) bool {
	return old != nil && z != nil && (z == old || z.rekeyedFrom == old.id)
}
