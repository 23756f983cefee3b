package tlsconf

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"
)

// A fleet's session-ticket keys. With an etcd storage every node's listener issues and accepts
// session tickets under the same keys, so a client that resumes on another node behind ECMP
// skips the full handshake: a ring of ticketRingSize keys (the newest issues tickets, all of
// them decrypt), encrypted in the store like the certificates, replaced every TicketRotation by
// whichever node first finds the newest one older than that (under the store's lock), and
// re-read by every node every TicketRefresh. A ticket therefore stays usable for up to
// ticketRingSize rotations. Until a node first reads the ring it issues tickets of its own
// (crypto/tls's keys), which only it can resume.

// TicketRotation is how often a fleet's newest session-ticket key is replaced; TicketRefresh is
// how often each node re-reads the keys (tests shorten both).
var (
	TicketRotation = 12 * time.Hour
	TicketRefresh  = time.Minute
)

const (
	ticketRingSize = 3
	ticketKey      = "tls/session_ticket_keys" // under the storage's prefix
)

// ticketRing is the stored form of the keys.
type ticketRing struct {
	Created time.Time `json:"created"` // when Keys[0] was made
	Keys    [][]byte  `json:"keys"`    // newest first, 32 bytes each
}

// shareTicketsOn makes tc (and every clone of it: the stops clone it to set their ALPN lists)
// seal and open session tickets with the keys cs.tickets holds, which shareTickets keeps the
// fleet's. Until then they are crypto/tls's own.
func (cs *Certs) shareTicketsOn(tc *tls.Config) {
	cs.tickets = &tls.Config{}
	tc.WrapSession = func(st tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
		return cs.tickets.EncryptTicket(st, ss)
	}
	tc.UnwrapSession = func(identity []byte, st tls.ConnectionState) (*tls.SessionState, error) {
		return cs.tickets.DecryptTicket(identity, st)
	}
}

// shareTickets keeps the listener's session-ticket keys those of the fleet until ctx ends.
func (cs *Certs) shareTickets(ctx context.Context) {
	for {
		keys, err := cs.ticketKeys(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			cs.log.Warn("tls session ticket keys from the store failed, will retry", "error", err, "retrying_in", TicketRefresh)
		case len(keys) == 0:
			cs.log.Warn("tls session ticket keys in the store are malformed, will retry", "key", ticketKey, "retrying_in", TicketRefresh)
		default:
			cs.tickets.SetSessionTicketKeys(keys)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(TicketRefresh):
		}
	}
}

// ticketKeys reads the fleet's keys, making a new newest one first (under the storage's lock,
// read again once it is held: another node may have just done it) when there is none or it is
// older than TicketRotation.
func (cs *Certs) ticketKeys(ctx context.Context) ([][32]byte, error) {
	ring, fresh, err := cs.loadRing(ctx)
	if err != nil || fresh {
		return ring.keys(), err
	}
	if err := cs.etcd.Lock(ctx, ticketKey); err != nil {
		return nil, fmt.Errorf("lock session ticket keys: %w", err)
	}
	defer cs.etcd.Unlock(context.WithoutCancel(ctx), ticketKey)
	if ring, fresh, err = cs.loadRing(ctx); err != nil || fresh {
		return ring.keys(), err
	}
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("make a session ticket key: %w", err)
	}
	ring.Created, ring.Keys = time.Now(), append([][]byte{k}, ring.Keys[:min(len(ring.Keys), ticketRingSize-1)]...)
	b, _ := json.Marshal(ring)
	if err := cs.etcd.Store(ctx, ticketKey, b); err != nil {
		return nil, fmt.Errorf("store session ticket keys: %w", err)
	}
	cs.log.Info("tls session ticket key rotated for the fleet", "keys", len(ring.Keys))
	return ring.keys(), nil
}

// loadRing reads the stored keys (none yet is an empty ring) and reports whether the newest is
// younger than TicketRotation.
func (cs *Certs) loadRing(ctx context.Context) (ticketRing, bool, error) {
	var ring ticketRing
	b, err := cs.etcd.Load(ctx, ticketKey)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ring, false, nil
	case err != nil:
		return ring, false, fmt.Errorf("load session ticket keys: %w", err)
	}
	if err := json.Unmarshal(b, &ring); err != nil {
		return ticketRing{}, false, fmt.Errorf("read session ticket keys: %w (delete %s in the store to start a new ring)", err, ticketKey)
	}
	return ring, len(ring.Keys) > 0 && time.Since(ring.Created) < TicketRotation, nil
}

// keys are the ring's keys as crypto/tls takes them, newest first; malformed ones are skipped.
func (r ticketRing) keys() [][32]byte {
	var out [][32]byte
	for _, k := range r.Keys {
		if len(k) == 32 {
			out = append(out, [32]byte(k))
		}
	}
	return out
}
