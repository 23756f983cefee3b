package lab

import (
	"os"
	"strings"
)

// `lab up` on a lab that is up keeps the balancers' live state: the daemons write every change
// made through `switchyard vip|backend` back to their configuration file (or to the store), so
// writing the lab's initial configuration over it again would drop those changes at the daemon's
// next start. Processes that run are kept as they are (StartProcess); a daemon that died is
// started again on the file it left.

// keepConfig reports whether the daemon configuration file p is kept: the lab is up and the
// file is there. The lab notes it, so that `lab up` says why its sizes did not change.
func (s *State) keepConfig(p string) bool {
	if !s.reup {
		return false
	}
	if _, err := os.Stat(p); err != nil {
		return false
	}
	s.kept = append(s.kept, p)
	return true
}

// noteKept adds the note of what the re-run kept.
func (s *State) noteKept(o UpOptions) {
	what := []string{}
	if len(s.kept) > 0 {
		what = append(what, "the balancer daemons' configurations ("+strings.Join(s.kept, ", ")+")")
	}
	if s.Store != nil && s.reup { // a fresh lab seeded its store: nothing was kept
		what = append(what, "the VIPs in the store")
	}
	if len(what) == 0 {
		return
	}
	s.Notes = append(s.Notes, "the lab was up: kept "+strings.Join(what, " and ")+
		" with the changes made through `switchyard vip|backend`; run `switchyard lab down --prefix "+o.Spec.Prefix+"` first to start from the lab's own")
}
