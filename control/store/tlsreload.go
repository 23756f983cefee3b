package store

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"

	"google.golang.org/grpc/credentials"
)

// Certificate rotation without a restart: an etcds:// client reads its CA, certificate and key
// files again for every new connection (gRPC's transport credentials below), so a node whose
// files were replaced presents the new certificate and trusts the new CA from its next
// connection to etcd, while the connection it has keeps working; etcd restarted or a connection
// lost reconnects within 2 s (store.go) with the new files. A pair caught half written (a
// certificate that does not match its key yet) is not taken: the files loaded before stay in
// use until both match. Files are compared by content, not modification time.

// tlsFiles keeps the tls.Config of an etcds:// store current with its files.
type tlsFiles struct {
	t *TLS

	mu   sync.Mutex
	raw  files // as last loaded
	cfg  *tls.Config
	last error // why the files on disk were not taken at the last read, or nil
}

func newTLSFiles(t *TLS) *tlsFiles { return &tlsFiles{t: t} }

// current is the tls.Config of the files as they are now. When they do not load (a rotation
// half done: a certificate that does not match its key yet, a file missing between two
// renames), it keeps the last good files and returns them; with none, it returns the error.
func (f *tlsFiles) current() (*tls.Config, error) {
	raw, err := f.t.read()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && f.cfg != nil && raw.equal(f.raw) {
		return f.cfg.Clone(), nil
	}
	var cfg *tls.Config
	if err == nil {
		cfg, err = f.t.build(raw)
	}
	if err != nil {
		f.last = err
		if f.cfg != nil {
			return f.cfg.Clone(), nil
		}
		return nil, err
	}
	f.raw, f.cfg, f.last = raw, cfg, nil
	return cfg.Clone(), nil
}

// stale is why the files on disk were not taken at the last connection (nil: they were, or
// the store is not etcds://).
func (f *tlsFiles) stale() error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// credentials are gRPC transport credentials that handshake with the files as they are now.
func (f *tlsFiles) credentials() credentials.TransportCredentials { return reloadingTLS{f} }

type reloadingTLS struct{ f *tlsFiles }

// ClientHandshake is gRPC's TLS handshake (server name from the address dialled, h2) on the
// current files.
func (r reloadingTLS) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	cfg, err := r.f.current()
	if err != nil {
		return nil, nil, err
	}
	return credentials.NewTLS(cfg).ClientHandshake(ctx, authority, conn)
}

func (reloadingTLS) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("store: client credentials only")
}

func (reloadingTLS) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2"}
}

func (r reloadingTLS) Clone() credentials.TransportCredentials { return r }

// OverrideServerName is deprecated in gRPC and unused by etcd's client.
func (reloadingTLS) OverrideServerName(string) error { return nil }
