package testutil

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/switchyard/switchyard/internal/etcdauth"
	"github.com/switchyard/switchyard/internal/pki"
)

// EtcdTLS is the certificates of an etcd started by StartEtcdTLS: its CA, and client
// certificates the CA signs, whose common name is the etcd user.
type EtcdTLS struct {
	// CA is the PEM file of the CA that signed the server's and the clients' certificates.
	CA string

	ca                    *pki.CA
	dir                   string
	serverCert, serverKey string
	rootConfig            *tls.Config
	// passwords: users authenticate by password, clients need no certificate.
	passwords bool
}

// serverArgs serve clients over TLS, with client certificates required unless users have
// passwords.
func (e *EtcdTLS) serverArgs() []string {
	args := []string{"--cert-file", e.serverCert, "--key-file", e.serverKey}
	if e.passwords {
		return args
	}
	return append(args, "--trusted-ca-file", e.CA, "--client-cert-auth")
}

// Password is the password of an etcd user of StartEtcdPasswords.
func Password(user string) string { return user + "-secret" }

// PasswordFile writes the password of user to a file of its own and returns its path.
func (e *EtcdTLS) PasswordFile(t testing.TB, user string) string {
	t.Helper()
	p := filepath.Join(e.dir, user+".password")
	if err := os.WriteFile(p, []byte(Password(user)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// ClientCert issues a client certificate for the etcd user cn and returns its files.
func (e *EtcdTLS) ClientCert(t testing.TB, cn string) (cert, key string) {
	t.Helper()
	p, err := e.ca.Issue(cn, nil, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err = p.Write(e.dir, cn)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// StartEtcdTLS runs an etcd served over TLS with client certificates (a CA made for the test)
// and etcd's auth on: the user root (role root), and for each of grants, a user of that name
// with readwrite on the key prefix it maps to (PREFIX/, as a fleet's role). Connect as a user
// with a certificate from ClientCert; Etcd.TLS has the files.
func StartEtcdTLS(t testing.TB, grants map[string]string) *Etcd {
	t.Helper()
	return startEtcdAuth(t, grants, false)
}

// StartEtcdPasswords is StartEtcdTLS with users that authenticate by password (Password, or a
// file from EtcdTLS.PasswordFile), root's included: clients need the CA and no certificate.
func StartEtcdPasswords(t testing.TB, grants map[string]string) *Etcd {
	t.Helper()
	return startEtcdAuth(t, grants, true)
}

func startEtcdAuth(t testing.TB, grants map[string]string, passwords bool) *Etcd {
	t.Helper()
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Skip("etcd not installed: apt-get install etcd-server (make deps)")
	}
	dir := t.TempDir()
	ca, err := pki.NewCA("switchyard test etcd ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tl := &EtcdTLS{ca: ca, dir: dir, passwords: passwords}
	if tl.CA, err = ca.WriteCA(dir); err != nil {
		t.Fatal(err)
	}
	tl.issueServer(t)
	tl.rootConfig = tl.rootTLS(t)
	e := startEtcd(t, tl)
	if err := e.enableAuth(grants); err != nil {
		t.Fatalf("etcd auth: %v", err)
	}
	return e
}

// issueServer writes the server's certificate and key, signed by the current CA.
func (e *EtcdTLS) issueServer(t testing.TB) {
	t.Helper()
	srv, err := e.ca.Issue("etcd", []netip.Addr{netip.MustParseAddr("127.0.0.1")}, []string{"localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if e.serverCert, e.serverKey, err = srv.Write(e.dir, "server"); err != nil {
		t.Fatal(err)
	}
}

// rootTLS is the client configuration of the user root under the current CA.
func (e *EtcdTLS) rootTLS(t testing.TB) *tls.Config {
	t.Helper()
	rootCert, rootKey := e.ClientCert(t, "root")
	pair, err := tls.LoadX509KeyPair(rootCert, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(e.ca.Cert)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
}

// Rotate replaces the CA by a new one: the CA file (which etcd trusts, and clients given it
// trust) holds the new CA only, and the server's certificate is the new CA's. The old CA's
// client certificates are refused once etcd is restarted (Etcd.Stop, Etcd.Start); ClientCert
// issues from the new one, to the same files.
func (e *EtcdTLS) Rotate(t testing.TB) {
	t.Helper()
	ca, err := pki.NewCA("switchyard test etcd ca (rotated)", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.ca = ca
	if _, err := ca.WriteCA(e.dir); err != nil {
		t.Fatal(err)
	}
	e.issueServer(t)
	e.rootConfig = e.rootTLS(t)
}

// TLS is the certificates of an etcd from StartEtcdTLS (nil otherwise).
func (e *Etcd) TLS() *EtcdTLS { return e.tls }

// enableAuth turns auth on with the grants (user -> prefix), as root (its certificate's CN).
func (e *Etcd) enableAuth(grants map[string]string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.client}, TLS: e.tls.rootConfig, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var gs []etcdauth.Grant
	root := ""
	for user, prefix := range grants {
		g := etcdauth.Grant{User: user, Prefix: prefix}
		if e.tls.passwords {
			g.Password = Password(user)
		}
		gs = append(gs, g)
	}
	if e.tls.passwords {
		root = Password("root")
	}
	return etcdauth.Enable(ctx, cli, root, gs)
}
