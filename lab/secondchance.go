package lab

import (
	"fmt"
	"path/filepath"

	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/lab/topo"
	"github.com/switchyard/switchyard/loader"
)

// AttachBackendPortPass puts xdp_pass on the router ports of the backends and L7 hosts. Their
// decap program sends a second-chance packet whose flow they do not hold back toward the router
// with XDP_TX (docs/xdp.md, "Second chance"), and a veth drops XDP_TX frames unless the receiving
// peer runs an XDP program, as on the balancers' ports. Up does it (its daemon runs with second
// chance on); Build does not, because every reply of every path leaves through those ports and
// a veth with an XDP program copies each TCP skb into an XDP buffer (about 1 us per request,
// docs/lab.md, "Benchmark"): tests and experiments that exercise second chance call it.
func (l *Lab) AttachBackendPortPass() error {
	return l.attachPortPass(append(l.Topo.ByRole(topo.Backend), l.Topo.ByRole(topo.L7)...))
}

// attachPortPass puts xdp_pass on the router-side port of every node, pinned under the router's
// pin directory, so that XDP_TX frames from the node's own XDP program are not dropped.
func (l *Lab) attachPortPass(nodes []topo.Node) error {
	for _, n := range nodes {
		pin := filepath.Join(PinDir(l.Topo.RouterNS, n.Port), "link")
		err := namednetns.DoNamed(l.Topo.RouterNS, func() error {
			lk, err := loader.AttachPass(n.Port, loader.Native, pin)
			if err != nil {
				return err
			}
			return lk.Close()
		})
		if err != nil {
			return fmt.Errorf("build lab: xdp_pass on router port %s: %w", n.Port, err)
		}
	}
	return nil
}
