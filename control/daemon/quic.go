package daemon

import (
	"fmt"
	"net/netip"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/control/health"
	"github.com/switchyard/switchyard/control/reconcile"
)

// QUIC routing by connection ID (docs/xdp.md): every backend of a VIP with `quic: {enabled:
// true}` gets a server ID, its configured server_id or else its backend id, and the forwarder's
// quic_servers map sends packets whose connection ID carries it to that backend. A drained
// backend keeps its ID until its drain times out, so that its connections last as long as its
// TCP flows would.

// serverID is the server ID of backend b (backend id id) in a QUIC VIP.
func serverID(b config.Backend, id uint32) uint32 {
	if b.ServerID != 0 {
		return b.ServerID
	}
	return id
}

// quicServers computes the server ID map (server ID -> backend id) of cfg, with the reconciler's
// backend ids. A backend id used as a server ID that another backend has configured, or that
// does not fit a VIP's ID length, is an error naming the fix.
func (d *Daemon) quicServers(cfg *config.Config, states map[health.Key]backendState) (map[uint32]uint32, error) {
	want := map[uint32]uint32{}
	owner := map[uint32]netip.Addr{}
	for i := range cfg.VIPs {
		v := &cfg.VIPs[i]
		f := reconcile.FlagsOf(v)
		if !f.QUIC() {
			continue
		}
		max := f.QUICMaxServerID()
		for _, b := range v.Backends {
			a := b.Addr()
			if st, ok := states[health.Key{VIP: v.Name, Backend: a}]; ok && st.state == api.StateDrained {
				continue // drain timed out: its connections end as its TCP flows do
			}
			id, ok := d.rec.BackendID(a)
			if !ok {
				continue
			}
			sid := serverID(b, id)
			if uint64(sid) > max {
				return nil, fmt.Errorf("quic server id of backend %s in vip %s: its backend id %d does not fit the VIP's %d-byte server IDs: set server_id on the backend or raise quic.server_id_len", a, v.Name, sid, f.QUICServerIDLen())
			}
			if o, dup := owner[sid]; dup && o != a {
				return nil, fmt.Errorf("quic server id %d: both %s and %s have it (a configured server_id equals another backend's id): set server_id on %s too, or pick another", sid, o, a, o)
			}
			owner[sid] = a
			want[sid] = id
		}
	}
	return want, nil
}

// syncQUICLocked writes the server ID map after an Apply: the differences from what it wrote
// last (read back from the map the first time, so a restart corrects what changed meanwhile).
func (d *Daemon) syncQUICLocked(cfg *config.Config, states map[health.Key]backendState) error {
	want, err := d.quicServers(cfg, states)
	if err != nil {
		return err
	}
	have := d.quicIDs
	if have == nil {
		if have, err = d.set.QUICServers(); err != nil {
			return err
		}
	}
	if err := d.set.WriteQUICServers(have, want); err != nil {
		d.quicIDs = nil // unknown now: read back next time
		return err
	}
	d.quicIDs = want
	return nil
}

// quicFlowNote is what `lb flow` adds for a QUIC VIP's flow without a connection-table entry:
// the 5-tuple alone does not say where its next packet goes.
const quicFlowNote = "QUIC VIP: a packet whose connection ID carries a known server ID goes to that backend (see `backend list`), only other packets take this slot"

// quicServerID is the server ID shown in `backend list` (0: the VIP does not route QUIC).
func (d *Daemon) quicServerID(v *config.VIP, b config.Backend, id uint32) uint32 {
	if !reconcile.FlagsOf(v).QUIC() || id == 0 {
		return 0
	}
	return serverID(b, id)
}

// joinNote appends b to the note a.
func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
