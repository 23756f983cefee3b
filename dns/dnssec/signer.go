package dnssec

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
)

// inceptionSkew backdates every signature's inception, so a validator whose clock is behind
// ours still accepts it.
const inceptionSkew = time.Hour

// Signer signs the RRsets of one zone. It is safe for concurrent use; a reload builds a new one.
type Signer struct {
	// Zone is the fully qualified, lowercased origin (the RRSIGs' signer name).
	Zone     string
	zsks     []*Key   // sign every RRset but the DNSKEY RRset
	ksks     []*Key   // sign the DNSKEY RRset
	dnskeys  []dns.RR // the DNSKEY RRset published at the apex
	validity int64    // seconds
	refresh  int64    // seconds
	seed     maphash.Seed
	// cache is shared with the signer of the next reload when that one signs with the same keys
	// (KeepCache), so a reload does not re-sign every hot RRset.
	cache *sigCache
	// Now is the clock (time.Now; tests move it).
	Now func() time.Time
	// Stats, when set, counts signing work; the server shares one across reloads for its metrics.
	Stats *Stats
	// NSEC3 denies by NSEC3 records (denial: nsec3, nsec3.go) instead of compact denial.
	NSEC3 bool
}

// Stats counts the signatures made and the RRsets whose signatures came from the cache.
type Stats struct {
	Signed, Hits atomic.Uint64
}

// KeySet is the keys of a zone at one moment: those that sign its data (ZSKs), those that sign
// its DNSKEY RRset (KSKs) and every key in that RRset (Published; the signing keys are added,
// but for those in Hidden: an algorithm rollover's keys that sign while their DNSKEY is not
// yet, or no longer, published, RFC 6781 4.1.4).
type KeySet struct {
	ZSKs, KSKs, Published, Hidden []*Key
}

// New loads the keys of cfg (paths relative to dir) for zone and prepares a signer.
func New(zone string, cfg *config.DNSSEC, dir string) (*Signer, error) {
	load := func(p string) (*Key, error) {
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		return LoadKey(p, zone)
	}
	var ks KeySet
	if cfg.KeyFile != "" {
		k, err := load(cfg.KeyFile)
		if err != nil {
			return nil, err
		}
		if !k.SEP() {
			return nil, fmt.Errorf("dnssec key_file %s: flags %d is a ZSK; a CSK needs flags 257 (`switchyard dns keygen` makes one), or use ksk_file and zsk_file",
				cfg.KeyFile, k.DNSKEY.Flags)
		}
		ks.ZSKs, ks.KSKs = []*Key{k}, []*Key{k}
	} else {
		ksk, err := load(cfg.KSKFile)
		if err != nil {
			return nil, err
		}
		zsk, err := load(cfg.ZSKFile)
		if err != nil {
			return nil, err
		}
		if !ksk.SEP() || zsk.SEP() {
			return nil, fmt.Errorf("dnssec ksk_file %s has flags %d and zsk_file %s flags %d: want 257 and 256 (`switchyard dns keygen --type ksk|zsk`)",
				cfg.KSKFile, ksk.DNSKEY.Flags, cfg.ZSKFile, zsk.DNSKEY.Flags)
		}
		ks.ZSKs, ks.KSKs = []*Key{zsk}, []*Key{ksk}
	}
	for _, p := range cfg.Publish {
		k, err := load(p)
		if err != nil {
			return nil, err
		}
		if k.SEP() {
			ks.KSKs = append(ks.KSKs, k) // a KSK rollover signs the DNSKEY RRset with both keys
		}
		ks.Published = append(ks.Published, k)
	}
	return NewFromKeys(zone, cfg, ks), nil
}

// NewFromKeys prepares a signer for zone with the keys of ks (a key policy's keys of the moment,
// package keyroll, or the files of New).
func NewFromKeys(zone string, cfg *config.DNSSEC, ks KeySet) *Signer {
	s := &Signer{Zone: zone, zsks: ks.ZSKs, ksks: ks.KSKs, validity: int64(cfg.Validity.D().Seconds()),
		refresh: int64(cfg.Refresh.D().Seconds()), seed: maphash.MakeSeed(), Now: time.Now, NSEC3: cfg.Denial == config.DenialNSEC3}
	seen := map[uint16]bool{}
	for _, k := range ks.Hidden {
		seen[k.Tag] = true
	}
	for _, k := range slices.Concat(ks.KSKs, ks.ZSKs, ks.Published) {
		if seen[k.Tag] {
			continue
		}
		seen[k.Tag] = true
		d := *k.DNSKEY
		d.Hdr.Ttl = cfg.DNSKEYTTL
		d.Hdr.Name = zone
		s.dnskeys = append(s.dnskeys, &d)
	}
	s.cache = &sigCache{}
	s.cache.init()
	return s
}

// KeepCache makes s use old's signature cache (and the seed its signing windows are offset by)
// when both sign with the same keys, validity, refresh and denial: the signatures old made are
// then exactly those s would make. A reload that leaves the signing keys as they were (a key
// policy's generation, publication or removal of a key, an edit of another zone) thus re-signs
// nothing, where each reload used to start with an empty cache and sign every answer anew.
// It reports whether the cache was kept.
func (s *Signer) KeepCache(old *Signer) bool {
	if old == nil || s.Zone != old.Zone || s.validity != old.validity || s.refresh != old.refresh || s.NSEC3 != old.NSEC3 ||
		!sameKeys(s.zsks, old.zsks) || !sameKeys(s.ksks, old.ksks) {
		return false
	}
	s.seed, s.cache = old.seed, old.cache
	return true
}

// sameKeys reports whether a and b are the same keys in the same order (the order of a set's
// RRSIGs).
func sameKeys(a, b []*Key) bool {
	return slices.EqualFunc(a, b, func(x, y *Key) bool {
		return x.Tag == y.Tag && x.DNSKEY.Algorithm == y.DNSKEY.Algorithm && x.DNSKEY.Flags == y.DNSKEY.Flags &&
			x.DNSKEY.PublicKey == y.DNSKEY.PublicKey
	})
}

// DNSKEYs returns the DNSKEY RRset to publish at the apex.
func (s *Signer) DNSKEYs() []dns.RR { return s.dnskeys }

// Keys returns the keys that sign the zone's data and its DNSKEY RRset.
func (s *Signer) Keys() (zsks, ksks []*Key) { return s.zsks, s.ksks }

// Sign returns the RRSIGs of the RRset set (records of one owner, type and class) and the Unix
// time until which they may be served: the end of the RRset's signing window. Signatures are
// cached by the RRset's wire content and window, so a hot answer is signed once per window.
// Each RRset's windows are offset by a hash of its content, so re-signing spreads over the
// refresh period instead of every answer expiring at the same second.
func (s *Signer) Sign(set []dns.RR) ([]dns.RR, int64, error) {
	// The key is the RRset packed as a message (uncompressed). Not dns.PackRR: it writes the
	// record's Rdlength, and the zone's records are shared by every query goroutine.
	var scratch [512]byte
	msg := dns.Msg{Answer: set}
	key, err := msg.PackBuffer(scratch[:])
	if err != nil {
		return nil, 0, fmt.Errorf("pack %s for signing: %w", set[0].Header().Name, err)
	}
	now := s.Now().Unix()
	off := int64(maphash.Bytes(s.seed, key) % uint64(s.refresh))
	w := (now + off) / s.refresh
	start := w*s.refresh - off
	until := start + s.refresh
	key = binary.BigEndian.AppendUint64(key, uint64(w))
	if sigs := s.cache.get(key); sigs != nil {
		if s.Stats != nil {
			s.Stats.Hits.Add(1)
		}
		return sigs, until, nil
	}
	signers := s.zsks
	if set[0].Header().Rrtype == dns.TypeDNSKEY {
		signers = s.ksks
	}
	sigs := make([]dns.RR, 0, len(signers))
	for _, k := range signers {
		h := set[0].Header()
		sig := &dns.RRSIG{Hdr: dns.RR_Header{Name: h.Name, Rrtype: dns.TypeRRSIG, Class: h.Class, Ttl: h.Ttl},
			Algorithm: k.DNSKEY.Algorithm, OrigTtl: h.Ttl, KeyTag: k.Tag, SignerName: s.Zone,
			Inception: uint32(start - int64(inceptionSkew.Seconds())), Expiration: uint32(start + s.validity)}
		if err := sig.Sign(k.priv, set); err != nil {
			return nil, 0, fmt.Errorf("sign %s %s: %w", h.Name, dns.TypeToString[h.Rrtype], err)
		}
		sigs = append(sigs, sig)
	}
	s.cache.put(key, sigs)
	if s.Stats != nil {
		s.Stats.Signed.Add(uint64(len(sigs)))
	}
	return sigs, until, nil
}

// SignSection returns rrs with the RRSIGs of each of its RRsets after the set, the records of a
// set gathered (and duplicates dropped) so every signature covers exactly what the validator
// sees; the OPT pseudo-record and records in skip are passed through unsigned. The second value
// is the earliest end of the RRsets' signing windows (0 when nothing was signed).
func (s *Signer) SignSection(rrs []dns.RR, skip func(dns.RR) bool) ([]dns.RR, int64, error) {
	if len(rrs) == 0 {
		return rrs, 0, nil
	}
	out := make([]dns.RR, 0, 2*len(rrs))
	var until int64
	done := make([]bool, len(rrs))
	for i, rr := range rrs {
		if done[i] {
			continue
		}
		h := rr.Header()
		if h.Rrtype == dns.TypeOPT || h.Rrtype == dns.TypeRRSIG || skip != nil && skip(rr) {
			out = append(out, rr)
			continue
		}
		set := []dns.RR{rr}
		for j := i + 1; j < len(rrs); j++ {
			o := rrs[j]
			if oh := o.Header(); !done[j] && oh.Rrtype == h.Rrtype && oh.Class == h.Class && equalFold(oh.Name, h.Name) {
				done[j] = true
				if !slices.ContainsFunc(set, func(x dns.RR) bool { return dns.IsDuplicate(x, o) }) {
					set = append(set, o)
				}
			}
		}
		sigs, u, err := s.Sign(set)
		if err != nil {
			return nil, 0, err
		}
		out = append(append(out, set...), sigs...)
		if until == 0 || u < until {
			until = u
		}
	}
	return out, until, nil
}

func equalFold(a, b string) bool {
	return len(a) == len(b) && dns.CanonicalName(a) == dns.CanonicalName(b)
}

// sigCache holds signatures by RRset content and window, in shards, each bounded: a full shard
// drops an arbitrary entry (Go's map order), O(1), so a flood of distinct answers cannot grow it.
type sigCache struct {
	seed   maphash.Seed
	shards [16]sigShard
}

type sigShard struct {
	mu sync.RWMutex
	m  map[string][]dns.RR
	_  [40]byte
}

// sigCacheEntries bounds the whole signature cache.
const sigCacheEntries = 1 << 16

func (c *sigCache) init() {
	c.seed = maphash.MakeSeed()
	for i := range c.shards {
		c.shards[i].m = map[string][]dns.RR{}
	}
}

func (c *sigCache) shard(key []byte) *sigShard {
	return &c.shards[maphash.Bytes(c.seed, key)%uint64(len(c.shards))]
}

func (c *sigCache) get(key []byte) []dns.RR {
	sh := c.shard(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.m[string(key)]
}

func (c *sigCache) put(key []byte, sigs []dns.RR) {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(sh.m) >= sigCacheEntries/len(c.shards) {
		for k := range sh.m {
			delete(sh.m, k)
			break
		}
	}
	sh.m[string(key)] = sigs
}

// ResetCache empties the signature cache (benchmarks measure signing with it).
func (s *Signer) ResetCache() {
	for i := range s.cache.shards {
		sh := &s.cache.shards[i]
		sh.mu.Lock()
		clear(sh.m)
		sh.mu.Unlock()
	}
}

// Len reports the number of cached signature sets (for tests and metrics).
func (s *Signer) Len() int {
	n := 0
	for i := range s.cache.shards {
		sh := &s.cache.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}

// NSEC returns the compact-denial NSEC record (RFC 9824) at name: its next name is the
// immediate successor "\000.name", so it covers nothing but name itself, and its type bitmap
// lists types plus RRSIG and NSEC. For a name that does not exist, types is NXNAME alone.
func NSEC(name string, ttl uint32, types []uint16) *dns.NSEC {
	bm := append([]uint16{dns.TypeRRSIG, dns.TypeNSEC}, types...)
	slices.Sort(bm)
	bm = slices.Compact(bm)
	return &dns.NSEC{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeNSEC, Class: dns.ClassINET, Ttl: ttl},
		NextDomain: successor(name), TypeBitMap: bm}
}

// successor is the immediate successor of name in canonical order (RFC 4471 3.1.1): "\000."
// prepended, or, when that would exceed 255 octets, the first label with its last octet
// incremented (RFC 4471's rule for full-length names, good enough for a covering NSEC).
func successor(name string) string {
	if len(name)+2 <= 254 { // wire length is presentation length + 1 for unescaped names
		return `\000.` + name
	}
	labels := dns.SplitDomainName(name)
	l := []byte(labels[0])
	l[len(l)-1]++
	labels[0] = string(l)
	return dns.Fqdn(strings.Join(labels, "."))
}
