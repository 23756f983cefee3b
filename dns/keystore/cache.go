package keystore

import (
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"

	"github.com/switchyard/switchyard/internal/atomicfile"
)

// The node's cache of the store (Options.CacheDir): a file per state and key file it read or
// wrote, sealed by the fleet's key as in etcd (the same key name authenticated beside it, so a
// file renamed to another's is refused). It is read only when etcd does not answer and the node
// has no copy in memory: at a start during an etcd outage. Writing it is best effort: a failure
// is logged and costs only that fallback.

// cachePath is the file of the store's key k ("example.org./state.json"): one escaped name, so
// the root zone's "./state.json" is a file too.
func (s *Store) cachePath(k string) string { return filepath.Join(s.cache, url.QueryEscape(k)) }

// keep writes the sealed copy of b, the value of k.
func (s *Store) keep(k string, b []byte) {
	if s.cache == "" {
		return
	}
	err := os.MkdirAll(s.cache, 0o700)
	if err == nil {
		err = atomicfile.WriteBytes(s.cachePath(k), 0o600, s.st.Seal(k, b))
	}
	if err != nil {
		s.log.Warn("dns dnssec key cache not written: a restart while etcd is down will not find these keys", "cache", s.cache, "key", k, "err", err)
	}
}

// cached reads the copy of k, if the node has one it can open.
func (s *Store) cached(k string) ([]byte, bool) {
	if s.cache == "" {
		return nil, false
	}
	sealed, err := os.ReadFile(s.cachePath(k))
	if err == nil {
		var b []byte
		if b, err = s.st.Unseal(k, sealed); err == nil {
			return b, true
		}
	}
	if !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("dns dnssec key cache not readable", "cache", s.cache, "key", k, "err", err)
	}
	return nil, false
}
