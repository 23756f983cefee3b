package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// migratesFrom is the layout whose pins this binary takes over (LayoutVersion's history).
const migratesFrom = "v2"

// freshInMigration are the maps whose shape changed from v2 to v3: made new in a migration.
// Every other map, the connection tables first, is taken over as it is, so that established
// flows keep their backend across the upgrade.
var freshInMigration = map[string]bool{bpfobj.LBMapVips: true, bpfobj.LBMapRings16: true, bpfobj.LBMapPrevRings16: true}

// stagingDir is where a migration pins the new layout's maps before it renames the directory
// into place: a migration stopped half way leaves no MapsDir that looks complete.
func stagingDir(pinDir string) string {
	return filepath.Join(pinDir, "migrating-maps-"+LayoutVersion) // bpffs refuses names with a dot
}

// migrateIfOld migrates maps pinned by a binary of layout v2, in the manner of tubular's upgrade
// of its pinned state: the new layout's maps are made in a staging directory (new vips and ring
// maps; every other map is the old one, pinned again), the VIPs are copied with their ids (so no
// VIP generation moves and no connection-table entry is voided) and no ring yet, the directory is
// renamed into place, and the old program keeps running on the old maps until the caller has
// written the rings and swaps the new program in (Forwarder.Attach, which then removes the old
// pins). It returns nil and no error when there is nothing to migrate.
//
// A migration stopped at any point is finished or started again by the next load: both
// directories with the new layout's program attached means only the old pins are left to remove;
// both with the old program attached means the rings were never switched, so the new directory
// is made again from the old maps, which are still the live ones.
func migrateIfOld(spec *ebpf.CollectionSpec, opts Options) (*Forwarder, error) {
	old := filepath.Join(opts.PinDir, "maps-"+migratesFrom)
	if _, err := os.Stat(old); err != nil {
		_ = os.RemoveAll(stagingDir(opts.PinDir)) // a stopped migration whose old pins are gone
		return nil, nil
	}
	cur := MapsDir(opts.PinDir)
	if _, err := os.Stat(cur); err == nil {
		live, err := attachedUses(opts.PinDir, filepath.Join(cur, bpfobj.LBMapVips))
		if err != nil {
			return nil, fmt.Errorf("migrate pins of layout %s: %w", migratesFrom, err)
		}
		if live {
			if err := os.RemoveAll(old); err != nil {
				return nil, fmt.Errorf("migrate pins of layout %s: remove the old pins: %w", migratesFrom, err)
			}
			return nil, nil
		}
		if err := os.RemoveAll(cur); err != nil {
			return nil, fmt.Errorf("migrate pins of layout %s: remove a stopped migration's %s: %w", migratesFrom, cur, err)
		}
	}
	return migrate(spec, opts, old)
}

// migrate makes the new layout's maps from the old ones in old (see migrateIfOld).
func migrate(spec *ebpf.CollectionSpec, opts Options, old string) (*Forwarder, error) {
	stage := stagingDir(opts.PinDir)
	_ = os.RemoveAll(stage)
	kept := map[string]*ebpf.Map{}
	defer func() {
		for _, m := range kept {
			m.Close()
		}
	}()
	for name, ms := range spec.Maps {
		ms.Pinning = ebpf.PinNone
		if freshInMigration[name] {
			continue
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(old, name), nil)
		if errors.Is(err, os.ErrNotExist) {
			continue // a map the old binary did not have: made new
		}
		if err != nil {
			return nil, fmt.Errorf("migrate pins of layout %s: open %s: %w", migratesFrom, name, err)
		}
		kept[name] = m
	}
	f := &Forwarder{Opts: opts, Migrated: true}
	if err := spec.LoadAndAssign(&f.Objs, &ebpf.CollectionOptions{MapReplacements: kept}); err != nil {
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			return nil, fmt.Errorf("migrate pins of layout %s in %s: they have other sizes than asked (%w): start with the sizes they were made with (max_vips, max_backends, conn_table_size), or run `switchyard lb detach` to start afresh (this drops established flows)", migratesFrom, old, err)
		}
		return nil, fmt.Errorf("migrate pins of layout %s: %w", migratesFrom, explainLoadError(err))
	}
	fail := func(err error) (*Forwarder, error) {
		f.Close()
		_ = os.RemoveAll(stage)
		return nil, fmt.Errorf("migrate pins of layout %s: %w", migratesFrom, err)
	}
	if err := copyVIPs(filepath.Join(old, bpfobj.LBMapVips), f.Objs.Vips); err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(stage, 0o700); err != nil {
		return fail(err)
	}
	if err := pinMaps(&f.Objs.LBMaps, stage); err != nil {
		return fail(err)
	}
	if err := os.Rename(stage, MapsDir(opts.PinDir)); err != nil {
		return fail(err)
	}
	return f, nil
}

// vipMetaV2 is struct vip_meta of layout v2.
type vipMetaV2 struct {
	ID, Flags uint32
}

// copyVIPs puts every VIP of a v2 vips map into the new one with its id and flags and no ring
// (ring_size 0): the control plane gives each its ring before the program is attached.
func copyVIPs(oldPath string, to *ebpf.Map) error {
	from, err := ebpf.LoadPinnedMap(oldPath, nil)
	if err != nil {
		return fmt.Errorf("open the old vips: %w", err)
	}
	defer from.Close()
	var (
		k bpfobj.LBVipKey
		v vipMetaV2
	)
	it := from.Iterate()
	for it.Next(&k, &v) {
		if err := to.Put(k, bpfobj.LBVipMeta{Id: v.ID, Flags: v.Flags}); err != nil {
			return fmt.Errorf("copy vip %d: %w", v.ID, err)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read the old vips: %w", err)
	}
	return nil
}

// pinMaps pins every map of m in dir under its name.
func pinMaps(m *bpfobj.LBMaps, dir string) error {
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		name := v.Type().Field(i).Tag.Get("ebpf")
		mp, _ := v.Field(i).Interface().(*ebpf.Map)
		if mp == nil || name == "" {
			continue
		}
		if err := mp.Pin(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("pin %s: %w", name, err)
		}
	}
	return nil
}

// attachedUses reports whether the program attached through pinDir's link uses the map pinned
// at mapPin (false when no link is pinned).
func attachedUses(pinDir, mapPin string) (bool, error) {
	l, err := link.LoadPinnedLink(LinkPath(pinDir), nil)
	if err != nil {
		return false, nil
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		return false, fmt.Errorf("read the pinned link: %w", err)
	}
	prog, err := ebpf.NewProgramFromID(info.Program)
	if err != nil {
		return false, fmt.Errorf("open the attached program: %w", err)
	}
	defer prog.Close()
	pi, err := prog.Info()
	if err != nil {
		return false, fmt.Errorf("read the attached program: %w", err)
	}
	ids, _ := pi.MapIDs()
	m, err := ebpf.LoadPinnedMap(mapPin, nil)
	if err != nil {
		return false, nil
	}
	defer m.Close()
	mi, err := m.Info()
	if err != nil {
		return false, fmt.Errorf("read %s: %w", mapPin, err)
	}
	id, _ := mi.ID()
	for _, x := range ids {
		if x == id {
			return true, nil
		}
	}
	return false, nil
}

// PinnedRingSlots is the number of slots of the ring maps pinned under pinDir in this layout
// (0 when none are pinned), so that a restart keeps the size the maps were made with.
func PinnedRingSlots(pinDir string) uint32 {
	if pinDir == "" {
		return 0
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(MapsDir(pinDir), bpfobj.LBMapRings16), nil)
	if err != nil {
		return 0
	}
	defer m.Close()
	return m.MaxEntries() * uint32(RingWordSlots)
}
