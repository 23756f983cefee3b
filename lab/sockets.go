package lab

import (
	"os"
	"path/filepath"
	"sort"
)

// LabSocket is the control socket of one balancer daemon of a lab that is up.
type LabSocket struct {
	Prefix, NS, Path string
	// Shared: the lab runs a store, so every daemon of it serves the same VIPs and any one of
	// them reads and changes the fleet's.
	Shared bool
}

// DaemonSockets lists the balancer daemons' sockets of every lab that is up (of prefix only,
// when it is not empty), sorted by prefix and namespace; sockets whose file is gone are left out.
// The CLI looks here when no daemon socket is in /run/switchyard.
func DaemonSockets(prefix string) []LabSocket {
	states, _ := filepath.Glob(filepath.Join(StateRoot, "*", "state.json"))
	var out []LabSocket
	for _, p := range states {
		name := filepath.Base(filepath.Dir(p))
		if prefix != "" && name != prefix {
			continue
		}
		st, err := LoadState(name)
		if err != nil {
			continue
		}
		for ns, sock := range st.Sockets {
			if _, err := os.Stat(sock); err == nil {
				out = append(out, LabSocket{Prefix: st.Prefix, NS: ns, Path: sock, Shared: st.Store != nil})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Prefix != out[j].Prefix {
			return out[i].Prefix < out[j].Prefix
		}
		return out[i].NS < out[j].NS
	})
	return out
}
