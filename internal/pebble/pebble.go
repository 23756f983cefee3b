// Package pebble builds and configures Pebble (github.com/letsencrypt/pebble/v2, Let's Encrypt's
// ACME test server), the CA the ACME tests and the lab order certificates from. It is the one way
// switchyard runs Pebble: the tests (internal/testutil) start it as a child process, the lab in
// a network namespace of its own.
package pebble

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Version is the Pebble release switchyard runs.
const Version = "v2.10.3"

const module = "github.com/letsencrypt/pebble/v2"

var built struct {
	sync.Mutex
	bin string
}

// Build returns the path of the pebble binary of Version, building it with the `go` on PATH the
// first time into the user cache directory (~/.cache/switchyard/pebble-VERSION, kept across
// runs), from the Go module proxy or the module cache: about a minute on two cores, then none.
// It says so on progress (nil: silent) when it has to build.
func Build(progress io.Writer) (string, error) {
	built.Lock()
	defer built.Unlock()
	if built.bin != "" {
		return built.bin, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	gobin := filepath.Join(cache, "switchyard", "pebble-"+Version)
	bin := filepath.Join(gobin, "pebble")
	if _, err := os.Stat(bin); err == nil {
		built.bin = bin
		return bin, nil
	}
	if _, err := exec.LookPath("go"); err != nil {
		return "", fmt.Errorf("build pebble %s: no go on PATH (run through `make`, which puts its go first, or install Go)", Version)
	}
	if progress != nil {
		fmt.Fprintf(progress, "building Pebble %s (the lab's ACME CA) into %s, once\n", Version, gobin)
	}
	var out bytes.Buffer
	// Outside this module, so that Pebble and its dependencies stay out of go.mod.
	in := exec.Command("go", "install", module+"/cmd/pebble@"+Version)
	in.Dir, in.Stdout, in.Stderr = os.TempDir(), &out, &out
	in.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=", "GOWORK=off")
	if err := in.Run(); err != nil {
		return "", fmt.Errorf("build pebble %s: %w: %s (the Go module proxy or module cache must have %s)", Version, err, out.String(), module)
	}
	built.bin = bin
	return bin, nil
}

// Options say where Pebble listens, where it validates and what it issues.
type Options struct {
	// Listen is the ACME directory's host:port; Mgmt the management interface's (its issuing
	// roots, certificate status).
	Listen, Mgmt string
	// HTTPPort and TLSPort are the ports Pebble validates http-01 and tls-alpn-01 on.
	HTTPPort, TLSPort int
	// Validity is the lifetime of the certificates it issues (0: Pebble's default, 90 days).
	Validity time.Duration
	// DNSServer is the DNS server Pebble resolves with (host:port, asked over TCP): the names
	// it validates and the dns-01 TXT records.
	DNSServer string
}

// Server is a Pebble ready to start: its command line and what a client needs to reach it.
type Server struct {
	// Directory is the ACME directory URL.
	Directory string
	// CARoot is the PEM file of Pebble's own HTTPS certificate: the root an ACME client's
	// ca_root names.
	CARoot string
	// Argv and Env are Pebble's command line and what it adds to the environment.
	Argv, Env []string

	mgmt string
}

// Prepare writes Pebble's configuration and its HTTPS certificate (for the hosts of Listen and
// Mgmt; one already in dir is kept, so a running Pebble stays trusted) into dir.
func Prepare(bin, dir string, o Options) (*Server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pebble directory: %w", err)
	}
	certPath, keyPath := filepath.Join(dir, "https.pem"), filepath.Join(dir, "https.key")
	if _, err := os.Stat(keyPath); err != nil {
		if err := writeHTTPSCert(certPath, keyPath, o.Listen, o.Mgmt); err != nil {
			return nil, err
		}
	}
	profile := map[string]any{"description": "switchyard", "validityPeriod": int(o.Validity.Seconds())}
	conf := map[string]any{"pebble": map[string]any{
		"listenAddress": o.Listen, "managementListenAddress": o.Mgmt,
		"certificate": certPath, "privateKey": keyPath,
		"httpPort": o.HTTPPort, "tlsPort": o.TLSPort, "keyAlgorithm": "ecdsa",
		"profiles": map[string]any{"default": profile},
	}}
	b, err := json.Marshal(conf)
	if err != nil {
		return nil, fmt.Errorf("encode pebble config: %w", err)
	}
	cfgPath := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return nil, fmt.Errorf("write pebble config: %w", err)
	}
	return &Server{Directory: "https://" + o.Listen + "/dir", CARoot: certPath, mgmt: o.Mgmt,
		Argv: []string{bin, "-config", cfgPath, "-dnsserver", o.DNSServer},
		// No random validation sleeps, no rejected nonces: orders wait on issuance, not on chance.
		Env: []string{"PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0"}}, nil
}

// writeHTTPSCert writes a self-signed ECDSA P-256 certificate (its own root) for the hosts of
// the given addresses, valid for ten years.
func writeHTTPSCert(certPath, keyPath string, addrs ...string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate pebble https key: %w", err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "switchyard pebble"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true}
	for _, a := range addrs {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return fmt.Errorf("pebble address %q: %w (write host:port)", a, err)
		}
		ip := net.ParseIP(host)
		switch {
		case ip != nil && !slices.ContainsFunc(tmpl.IPAddresses, ip.Equal):
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		case ip == nil && !slices.Contains(tmpl.DNSNames, host):
			tmpl.DNSNames = append(tmpl.DNSNames, host)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("make pebble https certificate: %w", err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode pebble https key: %w", err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return fmt.Errorf("write pebble https key: %w", err)
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write pebble https certificate: %w", err)
	}
	return nil
}

// Client is an HTTPS client that trusts Pebble's own certificate, dialing with dial (nil: the
// default dialer; the lab dials inside Pebble's namespace).
func (s *Server) Client(dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*http.Client, error) {
	b, err := os.ReadFile(s.CARoot)
	if err != nil {
		return nil, fmt.Errorf("read pebble's https root: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("read pebble's https root %s: no PEM certificate in it", s.CARoot)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dial,
		TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}, nil
}

// Get fetches path from Pebble's management interface (/roots/0: the issuing root,
// /cert-status-by-serial/HEX) with hc (Client).
func (s *Server) Get(ctx context.Context, hc *http.Client, path string) ([]byte, error) {
	return get(ctx, hc, "https://"+s.mgmt+path)
}

// WaitReady polls the ACME directory until Pebble serves it or ctx ends.
func (s *Server) WaitReady(ctx context.Context, hc *http.Client) error {
	for {
		_, err := get(ctx, hc, s.Directory)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pebble did not serve its directory %s: %w", s.Directory, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func get(ctx context.Context, hc *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return b, err
}
