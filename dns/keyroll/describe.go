package keyroll

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/switchyard/switchyard/dns/config"
)

// Dir is the key directory of a policy zone's dnssec block, relative to the configuration's
// directory cfgDir.
func Dir(d *config.DNSSEC, cfgDir string) string {
	if filepath.IsAbs(d.KeyDir) || cfgDir == "" {
		return d.KeyDir
	}
	return filepath.Join(cfgDir, d.KeyDir)
}

// Describe lists the keys of zone in dir at now for `switchyard dns keys`: role, tag, algorithm,
// state, each timestamp, an algorithm or scheme rollover's stage and next step, the DS awaited
// at the parent and the next transition. It reads the state only.
func Describe(zone string, d *config.DNSSEC, dir Store, now time.Time) ([]string, error) {
	// The zone's largest TTL is not known here (the zone is not loaded); the transitions
	// listed come from the state and from Ipub and Dprp, which do not depend on it.
	r, err := NewRoller(zone, dir, d, 0)
	if err != nil {
		return nil, err
	}
	st, err := dir.Load(zone)
	if err != nil {
		return nil, err
	}
	if len(st.Keys) == 0 {
		return []string{fmt.Sprintf("zone %s: no keys yet in %s; the server makes them when it loads the zone", zone, dir)}, nil
	}
	out := []string{fmt.Sprintf("zone %s: policy %s, algorithm %d, keys in %s", zone, d.Policy.Scheme, d.Policy.Algorithm, dir)}
	for _, k := range st.Keys {
		line := fmt.Sprintf("  %s %5d alg %2d %-9s created %s", k.Role, k.Tag, k.Algorithm, k.At(now), stamp(k.Created))
		if !k.Sign.IsZero() {
			line += " sign " + stamp(k.Sign)
		}
		line += fmt.Sprintf(" publish %s active %s retire %s", stamp(k.Publish), stamp(k.Active), stamp(k.Retire))
		if !k.Unpublish.IsZero() {
			line += " unpublish " + stamp(k.Unpublish)
		}
		line += " remove " + stamp(k.Remove)
		if !k.Reverted.IsZero() {
			line += " reverted " + stamp(k.Reverted)
		}
		out = append(out, line)
	}
	for _, phase := range []string{AlgorithmPhase(st, now), SchemePhase(st, now)} {
		if phase != "" {
			out = append(out, "  "+phase)
		}
	}
	if k := AwaitingDS(st, now); k != nil {
		how := "put it at the parent (its CDS and CDNSKEY are published)"
		if d.DSCheck != nil {
			how = fmt.Sprintf("asking %v every %s", d.DSCheck.Parents, d.DSCheck.Interval.D())
		}
		out = append(out, fmt.Sprintf("  awaiting the DS of %s %d at the parent: %s", k.Role, k.Tag, how))
	}
	if next := r.NextEvent(st, now); !next.IsZero() {
		out = append(out, "  next transition "+stamp(next))
	}
	return out, nil
}
