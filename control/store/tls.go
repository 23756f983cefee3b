package store

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// SecureScheme is the URL scheme of an etcd store reached over TLS.
const SecureScheme = "etcds"

// TLS is how an etcds:// store is reached: the CA that signed etcd's certificate, and this
// client's etcd user, either by certificate (its common name is the user: etcd's
// --client-cert-auth) or by name and password (password.go).
type TLS struct {
	// CA is the PEM file of the CA that signed the etcd members' certificates ("" trusts the
	// system's roots).
	CA string
	// Cert and Key are this client's certificate and key (PEM files).
	Cert, Key string
	// User is an etcd user that authenticates by password, read from PasswordFile (its first
	// line), never from the command line.
	User, PasswordFile string
}

// params are the query parameters of an etcds:// URL.
var params = []string{"ca", "cert", "key", "user", "password_file"}

// query renders the TLS files as the URL's query (?ca=...&cert=...&key=...).
func (t *TLS) query() string {
	q := url.Values{}
	for k, v := range map[string]string{"ca": t.CA, "cert": t.Cert, "key": t.Key, "user": t.User, "password_file": t.PasswordFile} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + strings.ReplaceAll(q.Encode(), "%2F", "/") // paths stay readable in logs and status
}

// parseTLS reads the query of an etcds:// URL.
func parseTLS(query string) (*TLS, error) {
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", query, err)
	}
	t := &TLS{CA: q.Get("ca"), Cert: q.Get("cert"), Key: q.Get("key"), User: q.Get("user"), PasswordFile: q.Get("password_file")}
	for k := range q {
		if !slices.Contains(params, k) {
			if k == "password" {
				return nil, errors.New(`parameter "password": a password is never given in the URL (it would show in ps, logs and status): put it in a file readable by the daemon only and give ?user=NAME&password_file=FILE`)
			}
			return nil, fmt.Errorf("unknown parameter %q: the query takes ca, cert and key (PEM files), or user and password_file", k)
		}
	}
	switch {
	case (t.Cert == "") != (t.Key == ""):
		return nil, errors.New("cert and key go together: give both (the client certificate and its key) or neither")
	case (t.User == "") != (t.PasswordFile == ""):
		return nil, errors.New("user and password_file go together: give the etcd user and the file holding its password, or neither")
	case t.User != "" && t.Cert != "":
		return nil, errors.New("a client certificate and a password user together: etcd takes the password's user and ignores the certificate's; give either cert and key, or user and password_file")
	}
	return t, nil
}

// files are the TLS files' contents (ca, cert, key; nil for a file not given).
type files [3][]byte

func (a files) equal(b files) bool {
	return bytes.Equal(a[0], b[0]) && bytes.Equal(a[1], b[1]) && bytes.Equal(a[2], b[2])
}

// read reads the files given.
func (t *TLS) read() (files, error) {
	var raw files
	for i, name := range []string{t.CA, t.Cert, t.Key} {
		if name == "" {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			what := [...]string{"store ca: give the CA that signed etcd's certificate as ?ca=FILE", "store client certificate: give this node's certificate as ?cert=FILE", "store client key: give this node's key as ?key=FILE"}[i]
			return raw, fmt.Errorf("read %s: %w", what, err)
		}
		raw[i] = b
	}
	return raw, nil
}

// config loads the files into a tls.Config.
func (t *TLS) config() (*tls.Config, error) {
	raw, err := t.read()
	if err != nil {
		return nil, err
	}
	return t.build(raw)
}

// build makes the tls.Config of the files' contents.
func (t *TLS) build(raw files) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CA != "" {
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(raw[0]) {
			return nil, fmt.Errorf("read store ca %s: no PEM certificate in it: give the CA's certificate (-----BEGIN CERTIFICATE-----)", t.CA)
		}
	}
	if t.Cert != "" {
		pair, err := tls.X509KeyPair(raw[1], raw[2])
		if err != nil {
			return nil, fmt.Errorf("load store client certificate %s: %w: give this node's certificate and key as ?cert=FILE&key=FILE (PEM, signed by the CA etcd trusts)", t.Cert, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// Explain adds to an etcd error what to do about it: a certificate etcd or this node does not
// trust, a user without a role on the fleet's prefix, or a client without credentials on a
// store with auth on. gRPC reports a failed handshake as a deadline or an unavailable store, so
// for those it dials the members itself to find the cause (diagnose). Other errors come back
// unchanged.
func (s *Store) Explain(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "context deadline exceeded") || strings.Contains(msg, "Unavailable") {
		if cause := s.diagnose(); cause != nil {
			msg += ": " + cause.Error()
		}
	}
	user, password := "USER", s.u.TLS != nil && s.u.TLS.User != ""
	who := "the store's user (this node's certificate CN)"
	if password {
		user = s.u.TLS.User
		who = "the store's user " + user
	}
	var fix string
	switch {
	case errors.Is(err, rpctypes.ErrPermissionDenied) || strings.Contains(msg, rpctypes.ErrPermissionDenied.Error()):
		fix = fmt.Sprintf("%s lacks permission on %s/: grant it a role with readwrite on that prefix: `etcdctl role grant-permission ROLE --prefix=true readwrite %s/` and `etcdctl user grant-role %s ROLE` (docs/fleet.md, \"A secured store\")", who, s.u.Prefix, s.u.Prefix, user)
	case password && (errors.Is(err, rpctypes.ErrAuthFailed) || strings.Contains(msg, rpctypes.ErrAuthFailed.Error())):
		fix = fmt.Sprintf("etcd refused user %s with the password in %s: write the user's password on the file's first line (`etcdctl user passwd %s` sets a new one; `etcdctl user get %s` shows the user exists)", user, s.u.TLS.PasswordFile, user, user)
	case errors.Is(err, rpctypes.ErrUserEmpty) || strings.Contains(msg, rpctypes.ErrUserEmpty.Error()):
		fix = "etcd has auth on and this client sent no user: use etcds:// with ?cert=FILE&key=FILE whose CN is an etcd user (etcd needs --client-cert-auth), or with ?user=NAME&password_file=FILE"
	case password && (strings.Contains(msg, "bad certificate") || strings.Contains(msg, "certificate required")):
		fix = "etcd requires client certificates (--client-cert-auth), and a password user has none: give this node a certificate (?cert=FILE&key=FILE instead of user and password_file), or serve the members without --client-cert-auth"
	case strings.Contains(msg, "certificate signed by unknown authority") || strings.Contains(msg, "certificate is not valid") ||
		strings.Contains(msg, "x509:"):
		fix = "etcd's certificate is not trusted: give the CA that signed it as ?ca=FILE (and check the member's certificate names the address dialled)"
	case strings.Contains(msg, "bad certificate") || strings.Contains(msg, "certificate required") || strings.Contains(msg, "unknown certificate authority"):
		fix = "etcd refused this node's client certificate: give one signed by the CA in etcd's --trusted-ca-file as ?cert=FILE&key=FILE"
	case strings.Contains(msg, "first record does not look like a TLS handshake") || strings.Contains(msg, "http2: frame too large"):
		fix = "the etcd members do not speak TLS there: use etcd:// for a plain etcd, or serve etcd with --cert-file and --key-file"
	case strings.Contains(msg, "tls:") || strings.Contains(msg, "authentication handshake failed"):
		fix = "the TLS handshake with etcd failed: check ?ca, ?cert and ?key against etcd's --trusted-ca-file, --cert-file and --key-file"
	case strings.Contains(msg, "speaks TLS"):
		fix = "use etcds://HOST:PORT/PREFIX?ca=FILE&cert=FILE&key=FILE for a store served over TLS"
	default:
		return err
	}
	if stale := s.tls.stale(); stale != nil {
		fix += fmt.Sprintf(" (this node's TLS files on disk do not load, so the ones loaded before are in use: %v)", stale)
	}
	if cause := strings.TrimPrefix(msg, err.Error()); cause != "" {
		return fmt.Errorf("%w%s: %s", err, cause, fix)
	}
	return fmt.Errorf("%w: %s", err, fix)
}

// diagnose dials the first endpoint as the client would and returns what fails: the TLS
// handshake (an untrusted server certificate), the server's alert after it (a client
// certificate refused), or, for etcd://, a member that speaks TLS. nil when nothing does.
func (s *Store) diagnose() error {
	ep := s.u.Endpoints[0]
	cfg := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // only asks whether the member speaks TLS
	if s.u.TLS != nil {
		var err error
		if cfg, err = s.tls.current(); err != nil {
			return err
		}
	}
	if host, _, err := net.SplitHostPort(ep); err == nil && cfg.ServerName == "" {
		cfg.ServerName = host
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	raw, err := s.dial(ctx, ep) // as the client dials (the lab's from a namespace)
	if err != nil {
		if s.u.TLS == nil {
			return nil
		}
		return fmt.Errorf("dial %s: %w", ep, err)
	}
	conn := tls.Client(raw, cfg)
	defer conn.Close()
	if err := conn.HandshakeContext(ctx); err != nil {
		if s.u.TLS == nil {
			return nil // no TLS there, as etcd:// expects: the cause is elsewhere
		}
		return fmt.Errorf("dial %s: %w", ep, err)
	}
	if s.u.TLS == nil {
		return fmt.Errorf("%s speaks TLS", ep)
	}
	// TLS 1.3 servers check the client's certificate after the handshake: a refusal arrives as
	// an alert on the first read, a timeout means it was accepted.
	_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := conn.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s after the handshake: %w", ep, err)
	}
	return nil
}

// CheckAccess reads and watches nothing: it asks for the fleet's prefix once and explains what
// fails (a wrong certificate, a missing permission), so that a node says what to fix at start.
func (s *Store) CheckAccess(ctx context.Context) error {
	_, err := s.cli.Get(ctx, s.vipsPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	return s.Explain(err)
}
