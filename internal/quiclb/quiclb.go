// Package quiclb issues QUIC connection IDs that carry a server ID in the plaintext algorithm of
// the QUIC-LB draft (draft-ietf-quic-load-balancers), the scheme the XDP balancer routes QUIC by
// by default (docs/xdp.md, "QUIC by connection ID"): a QUIC server behind a VIP with
// `quic: {enabled: true}` issues them, so that a client that changes its address or port still
// reaches the server that holds its connection.
package quiclb

import (
	"crypto/rand"
	"fmt"

	"github.com/quic-go/quic-go"

	"github.com/switchyard/switchyard/internal/layout"
)

// NonceLen is the number of random bytes after the server ID: the draft's minimum is 4.
const NonceLen = 5

// Config is a server's QUIC-LB identity: the same server_id_len and config_id as its VIP's quic
// block on the balancer, and the server_id the balancer knows it by.
type Config struct {
	// ServerID is the server's ID, 1 .. 2^(8*ServerIDLen)-1 (0 names no server).
	ServerID uint32 `yaml:"server_id"`
	// ServerIDLen is the ID's length in bytes, 1..4; 0 takes the balancer's default, 2.
	ServerIDLen int `yaml:"server_id_len"`
	// ConfigID is the config rotation value, 0..6, in the top three bits of the first byte.
	ConfigID int `yaml:"config_id"`
}

// DefaultServerIDLen is the server ID length when ServerIDLen is 0 (the balancer's default,
// control/config.DefaultQUICServerIDLen).
const DefaultServerIDLen = 2

// IDLen is ServerIDLen or its default.
func (c Config) IDLen() int {
	if c.ServerIDLen == 0 {
		return DefaultServerIDLen
	}
	return c.ServerIDLen
}

// Validate checks the ranges the balancer reads, naming the fix.
func (c Config) Validate() error {
	n := c.IDLen()
	if n < 1 || n > layout.QUICLBMaxServerIDLen {
		return fmt.Errorf("server_id_len %d out of range: use 1..%d bytes, as the VIP's quic.server_id_len", c.ServerIDLen, layout.QUICLBMaxServerIDLen)
	}
	if c.ConfigID < 0 || c.ConfigID > layout.QUICLBMaxConfigID {
		return fmt.Errorf("config_id %d out of range: use 0..%d, as the VIP's quic.config_id", c.ConfigID, layout.QUICLBMaxConfigID)
	}
	if max := uint64(1)<<(8*n) - 1; c.ServerID == 0 || uint64(c.ServerID) > max {
		return fmt.Errorf("server_id %d out of range: use 1..%d (the backend's server_id on the balancer)", c.ServerID, max)
	}
	return nil
}

// Generator returns quic-go's connection ID generator for c (which must be valid).
func (c Config) Generator() quic.ConnectionIDGenerator { return generator{c} }

type generator struct{ c Config }

// GenerateConnectionID is the config rotation bits over five random bits, the server ID
// big-endian, then NonceLen random bytes.
func (g generator) GenerateConnectionID() (quic.ConnectionID, error) {
	n := g.c.IDLen()
	b := make([]byte, 1+n+NonceLen)
	if _, err := rand.Read(b); err != nil {
		return quic.ConnectionID{}, fmt.Errorf("generate connection id: %w", err)
	}
	b[0] = byte(g.c.ConfigID)<<5 | b[0]&0x1f
	for i := 0; i < n; i++ {
		b[n-i] = byte(g.c.ServerID >> (8 * i))
	}
	return quic.ConnectionIDFromBytes(b), nil
}

// ConnectionIDLen is the length of every ID the generator issues.
func (g generator) ConnectionIDLen() int { return 1 + g.c.IDLen() + NonceLen }
