package lab

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/internal/pebble"
	"github.com/switchyard/switchyard/lab/topo"
)

// The lab's front door: Pebble (internal/pebble) runs as the lab's ACME CA in the DNS host's
// namespace, and the edge obtains its certificate for static.lab.test from it by dns-01: the
// edge publishes _acme-challenge.static.lab.test with an RFC 2136 update signed with the acme
// TSIG key to the lab's DNS stop, whose zone allows that key that name and type, and Pebble,
// resolving with the DNS stop, reads the record there. dns-01 rather than tls-alpn-01 or
// http-01 because it is the path no peer runs for itself (the DNS stop answering its own
// stops' challenges), and the one that reaches the edge by no address but the DNS server's.

// Pebble's ports in the DNS host's namespace: the ACME directory and the management interface.
const (
	pebblePort     = 14000
	pebbleMgmtPort = 15000
	tlsPort        = 443
	acmeKeyName    = "acme"
)

// ACMEState is the lab's ACME set-up, saved with the state: where the CA is and the root its
// certificates chain to (the demo's HTTPS clients trust it).
type ACMEState struct {
	// Directory is Pebble's ACME directory URL.
	Directory string `json:"directory"`
	// Root is the PEM file of Pebble's issuing root (fetched once the edge's certificate
	// verifies against it).
	Root string `json:"root,omitempty"`
	// Names are the names the edge and the L7 tier order.
	Names []string `json:"names"`
}

// acmeSetup is what the stops' configurations need of the lab's ACME CA.
type acmeSetup struct {
	server     *pebble.Server
	dns        netip.AddrPort // the DNS stop: RFC 2136 primary and Pebble's resolver
	tsigSecret string
	dir        string // the lab's state directory, which holds each stop's certificate storage
}

// acmeYAML is the acme block (YAML flow style) of a stop's TLS listener: name ordered from the
// lab's CA by dns-01 through the DNS stop, kept in storage under the lab's state directory.
func (a *acmeSetup) acmeYAML(name, storage string) string {
	return fmt.Sprintf(`{directory: %s, ca_root: %s, domains: [%s], storage: %s, dns01: {server: "%s", tsig: {name: %s, secret: %q}, propagation_timeout: 30s}}`,
		a.server.Directory, a.server.CARoot, name, filepath.Join(a.dir, storage), a.dns, acmeKeyName, a.tsigSecret)
}

// prepareACME builds Pebble (once per machine) and writes its configuration and the lab's
// TSIG key, kept across `lab up` runs so that running stops stay in step.
func prepareACME(st *State, dnsNode topo.Node) (*acmeSetup, error) {
	bin, err := pebble.Build(os.Stderr)
	if err != nil {
		return nil, err
	}
	dir := StateDir(st.Prefix)
	dns := netip.AddrPortFrom(dnsNode.Addr4, 53)
	srv, err := pebble.Prepare(bin, filepath.Join(dir, "pebble"), pebble.Options{
		Listen: netip.AddrPortFrom(dnsNode.Addr4, pebblePort).String(), Mgmt: netip.AddrPortFrom(dnsNode.Addr4, pebbleMgmtPort).String(),
		HTTPPort: 80, TLSPort: tlsPort, DNSServer: dns.String()})
	if err != nil {
		return nil, err
	}
	secret, err := tsigSecret(filepath.Join(dir, "acme.tsig"))
	if err != nil {
		return nil, err
	}
	return &acmeSetup{server: srv, dns: dns, tsigSecret: secret, dir: dir}, nil
}

// tsigSecret reads the lab's TSIG secret from path, or makes one (32 random bytes, base64).
func tsigSecret(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	k := make([]byte, 32)
	rand.Read(k)
	s := base64.StdEncoding.EncodeToString(k)
	if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the lab's tsig key: %w", err)
	}
	return s, nil
}

// startPebble starts Pebble in the DNS host's namespace and waits until it serves its directory
// (an edge that ordered before would wait a minute for its retry).
func startPebble(st *State, a *acmeSetup, dnsNode topo.Node) error {
	p, err := StartProcessEnv(st.Prefix, "pebble", dnsNode.NS, a.server.Env, a.server.Argv...)
	if err != nil {
		return err
	}
	st.Procs = append(st.Procs, p)
	st.Running["pebble"] = "pebble"
	hc, err := a.server.Client(namednetns.Dialer(dnsNode.NS, &net.Dialer{Timeout: time.Second}))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.server.WaitReady(ctx, hc); err != nil {
		return fmt.Errorf("lab up: %w (see %s)", err, p.Log)
	}
	// The edge's first order publishes its record at the DNS stop: let it answer first.
	d := namednetns.Dialer(dnsNode.NS, &net.Dialer{Timeout: time.Second})
	for {
		c, err := d(ctx, "tcp", a.dns.String())
		if err == nil {
			c.Close()
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("lab up: the DNS stop does not answer on %s: %w (see dns.log in %s)", a.dns, err, StateDir(st.Prefix))
		}
		time.Sleep(100 * time.Millisecond)
	}
	st.ACME, st.pebble = &ACMEState{Directory: a.server.Directory, Names: []string{StaticName, AppName}}, a.server
	return nil
}

// waitCertificate waits until the edge serves static.lab.test, and every L7 proxy app.lab.test,
// with a certificate that chains to Pebble's issuing root, saves that root for the demo's
// clients and notes the certificates.
func waitCertificate(st *State, d time.Duration) error {
	dnsNode, _ := st.Topo.Node("dns")
	srv := st.pebble
	hc, err := srv.Client(namednetns.Dialer(dnsNode.NS, &net.Dialer{Timeout: time.Second}))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	root, err := srv.Get(ctx, hc, "/roots/0")
	if err != nil {
		return fmt.Errorf("fetch pebble's issuing root: %w (see pebble.log in %s)", err, StateDir(st.Prefix))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(root) {
		return fmt.Errorf("pebble's issuing root is not PEM: %q", root)
	}
	type server struct {
		node topo.Node
		name string
	}
	edgeNode, _ := st.Topo.Node("edge")
	servers := []server{{edgeNode, StaticName}}
	for _, n := range st.Topo.ByRole(topo.L7) {
		if st.Running[n.Name] == "l7" {
			servers = append(servers, server{n, AppName})
		}
	}
	var notes []string
	for _, s := range servers {
		leaf, err := waitServerCert(ctx, s.node, s.name, pool)
		if err != nil {
			return fmt.Errorf("%s serves no certificate for %s from pebble after %s: %w (see %s.log, dns.log and pebble.log in %s)", s.node.Name, s.name, d, err, s.node.Name, StateDir(st.Prefix))
		}
		notes = append(notes, fmt.Sprintf("%s serves %s (serial %x, until %s)", s.node.Name, s.name, leaf.SerialNumber, leaf.NotAfter.UTC().Format(time.RFC3339)))
	}
	p := filepath.Join(StateDir(st.Prefix), "acme-root.pem")
	if err := os.WriteFile(p, root, 0o600); err != nil {
		return fmt.Errorf("write pebble's issuing root: %w", err)
	}
	st.ACME.Root = p
	st.Notes = append(st.Notes, fmt.Sprintf("https: certificates Pebble issued by ACME dns-01 through the lab's DNS stop: %s; their root: %s", strings.Join(notes, "; "), p))
	return nil
}

// waitServerCert dials port 443 of node n, in its namespace, for name until it serves a
// certificate that verifies against roots, or ctx ends.
func waitServerCert(ctx context.Context, n topo.Node, name string, roots *x509.CertPool) (*x509.Certificate, error) {
	dial := namednetns.Dialer(n.NS, &net.Dialer{Timeout: time.Second})
	addr := netip.AddrPortFrom(n.Addr4, tlsPort).String()
	for {
		leaf, err := serverCert(ctx, dial, addr, name, roots)
		if err == nil {
			return leaf, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// serverCert dials addr for name and returns the certificate it serves, verified against roots.
func serverCert(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), addr, name string, roots *x509.CertPool) (*x509.Certificate, error) {
	raw, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := tls.Client(raw, &tls.Config{ServerName: name, RootCAs: roots})
	defer c.Close()
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.HandshakeContext(hctx); err != nil {
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0], nil
}

// ClientTLS is the TLS configuration of the demo's HTTPS clients: Pebble's issuing root.
func (st *State) ClientTLS() (*tls.Config, error) {
	if st.ACME == nil || st.ACME.Root == "" {
		return nil, errors.New("the lab has no ACME certificate")
	}
	b, err := os.ReadFile(st.ACME.Root)
	if err != nil {
		return nil, fmt.Errorf("read pebble's issuing root: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("read pebble's issuing root %s: no PEM certificate", st.ACME.Root)
	}
	return &tls.Config{RootCAs: pool}, nil
}
