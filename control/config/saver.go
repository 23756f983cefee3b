package config

import (
	"bytes"
	"fmt"
	"sync"

	"gopkg.in/yaml.v3"
)

// Saver writes configurations as Save does, byte for byte, but keeps the YAML of every VIP it
// wrote and encodes again only the VIPs that changed since: the daemon persists every CLI change,
// and encoding 4,096 VIPs of 16 backends costs about half a second, a drain one VIP's worth.
// The zero Saver is ready; it is safe for concurrent use.
type Saver struct {
	mu    sync.Mutex
	cache map[string]*vipYAML // by VIP name
	gen   uint64              // of the last document: entries of other generations are gone
	buf   bytes.Buffer        // the last document, its memory reused by the next
	saved *Config             // the configuration of the document last saved (Snapshot)
}

type vipYAML struct {
	vip  VIP // what was encoded (configurations are changed by copy: CloneForChange)
	yaml []byte
	gen  uint64
}

// Save writes c to path atomically, as (*Config).Save.
func (s *Saver) Save(c *Config, path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.marshalLocked(c)
	if err != nil {
		return err
	}
	if err := writeFile(path, b); err != nil {
		s.saved = nil
		return err
	}
	s.saved = c // never changed in place (CloneForChange)
	if len(c.VIPs) == 0 {
		s.buf.Reset()
		s.buf.Write(b) // Snapshot digests s.buf: the document marshalLocked did not put there
	}
	return nil
}

// Marshal is (*Config).Marshal with the per-VIP cache.
func (s *Saver) Marshal(c *Config) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saved = nil // the document is no longer the one saved: no Snapshot until the next Save
	b, err := s.marshalLocked(c)
	return bytes.Clone(b), err
}

// marshalLocked encodes c into s.buf: the result is valid until the next call.
func (s *Saver) marshalLocked(c *Config) ([]byte, error) {
	if len(c.VIPs) == 0 {
		return c.Marshal()
	}
	top := *c
	top.VIPs = nil
	head, err := top.Marshal()
	if err != nil {
		return nil, err
	}
	const empty = "\nvips: []\n"
	at := bytes.Index(head, []byte(empty))
	if at < 0 {
		return c.Marshal() // not the layout expected: no shortcut
	}
	if s.cache == nil {
		s.cache = make(map[string]*vipYAML, len(c.VIPs))
	}
	s.gen++
	out := &s.buf
	out.Reset()
	out.Write(head[:at+1])
	out.WriteString("vips:\n")
	seen := 0
	for _, v := range c.VIPs {
		e := s.cache[v.Name]
		if e == nil || !e.vip.Equal(v) {
			y, err := marshalVIP(v)
			if err != nil {
				return nil, err
			}
			e = &vipYAML{vip: v, yaml: y} // v is never changed in place (CloneForChange)
			s.cache[v.Name] = e
		}
		if e.gen != s.gen {
			e.gen = s.gen
			seen++
		}
		out.Write(e.yaml)
	}
	out.Write(head[at+len(empty):])
	if seen != len(s.cache) {
		for name, e := range s.cache {
			if e.gen != s.gen {
				delete(s.cache, name) // a VIP removed (or renamed)
			}
		}
	}
	return out.Bytes(), nil
}

// marshalVIP encodes one VIP as an item of the vips sequence, indented as in the whole document.
func marshalVIP(v VIP) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode([]VIP{v}); err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	var out bytes.Buffer
	for _, line := range bytes.SplitAfter(buf.Bytes(), []byte("\n")) {
		if len(line) > 0 {
			out.WriteString("  ")
			out.Write(line)
		}
	}
	return out.Bytes(), nil
}

// Equal reports whether two VIPs are the same configuration (every field compared; see
// TestVIPEqualCoversEveryField).
func (v VIP) Equal(o VIP) bool {
	if v.Name != o.Name || v.Address != o.Address || v.Port != o.Port || v.Protocol != o.Protocol || v.Hash != o.Hash || v.QUIC != o.QUIC || v.RingSize != o.RingSize || !v.Guard.Equal(o.Guard) || !v.BGP.Equal(o.BGP) {
		return false
	}
	if (v.Health == nil) != (o.Health == nil) || (v.Health != nil && v.Health != o.Health && *v.Health != *o.Health) {
		return false
	}
	if len(v.Backends) != len(o.Backends) {
		return false
	}
	if sameBackends(v.Backends, o.Backends) {
		return true // shared by CloneForChange: the same memory
	}
	for i := range v.Backends {
		// Field by field: the parsed address beside Address is derived, not configuration.
		if b, ob := &v.Backends[i], &o.Backends[i]; b.Address != ob.Address || b.Weight != ob.Weight || b.Drained != ob.Drained || b.ServerID != ob.ServerID {
			return false
		}
	}
	return true
}

// Clone is a deep copy of the VIP.
func (v VIP) Clone() VIP { return v.clone() }

// ValidateChange is Validate for a configuration made from prev, a valid one, by a change:
// the VIPs equal to prev's of the same name are not checked again one by one (their defaults are
// applied already); everything across VIPs is. At 4,096 VIPs this is most of a change's cost.
func (c *Config) ValidateChange(prev *Config) error {
	if prev == nil {
		return c.Validate()
	}
	var byName map[string]*VIP // built only when a VIP is not at its index in prev
	find := func(v *VIP, i int) *VIP {
		if i < len(prev.VIPs) && prev.VIPs[i].Name == v.Name {
			return &prev.VIPs[i]
		}
		if i > 0 && i-1 < len(prev.VIPs) && prev.VIPs[i-1].Name == v.Name {
			return &prev.VIPs[i-1] // after a removal before it
		}
		if i+1 < len(prev.VIPs) && prev.VIPs[i+1].Name == v.Name {
			return &prev.VIPs[i+1]
		}
		if byName == nil {
			byName = make(map[string]*VIP, len(prev.VIPs))
			for j := range prev.VIPs {
				byName[prev.VIPs[j].Name] = &prev.VIPs[j]
			}
		}
		return byName[v.Name]
	}
	return c.validateVIPs(nil, func(i int, v *VIP) bool {
		p := find(v, i)
		if v.Name == "" || p == nil || !p.Equal(*v) {
			return false
		}
		v.adoptParsed(p) // the same strings: their parsed forms too
		return true
	}, prev.addrs)
}
