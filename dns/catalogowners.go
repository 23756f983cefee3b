package dns

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/atomicfile"
)

// The owners of the consumed catalogs' members (catalogOwner: the catalog each member is served
// from) are kept in the state directory beside the secondary zones' copies, one "member catalog"
// line each, rewritten whole (internal/atomicfile) when they change. Without them a restart
// would know no owners and serve a zone listed by two catalogs from the first in the
// configuration, not from the one that owned it (RFC 9432 5.4).

// loadCatalogOwners reads the owners saved by the process before this one; none (no file, no
// consumed catalog) is an empty map. A line that does not parse is skipped with a warning: the
// owners are then decided anew, as for a first start.
func (s *Server) loadCatalogOwners(cfg *config.Config) map[string]string {
	owners := map[string]string{}
	if len(cfg.Catalogs) == 0 {
		return owners
	}
	path := cfg.CatalogOwnersPath()
	f, err := os.Open(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("dns catalog owners not read; owners are decided anew", "file", path, "err", err)
		}
		return owners
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		member, catalog, ok := strings.Cut(sc.Text(), " ")
		if !ok || member == "" || catalog == "" || strings.Contains(catalog, " ") {
			s.log.Warn("dns catalog owners: line skipped (want \"member catalog\")", "file", path, "line", n)
			continue
		}
		owners[member] = catalog
	}
	if err := sc.Err(); err != nil {
		s.log.Warn("dns catalog owners not read whole", "file", path, "err", err)
	}
	return owners
}

// saveCatalogOwners writes owners, sorted, over the saved ones; a failure is logged (the owners
// stay in memory: only a restart would decide them anew).
func (s *Server) saveCatalogOwners(cfg *config.Config, owners map[string]string) {
	path := cfg.CatalogOwnersPath()
	err := atomicfile.Write(path, 0o600, func(w io.Writer) error {
		for _, m := range slices.Sorted(maps.Keys(owners)) {
			if _, err := fmt.Fprintf(w, "%s %s\n", m, owners[m]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.log.Warn("dns catalog owners not saved; a restart may serve a member listed by two catalogs from the other one; make state_dir writable",
			"file", path, "err", err)
	}
}
