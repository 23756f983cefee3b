package tlsconf

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3/acme"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard/switchyard/internal/certstore"
	tu "github.com/switchyard/switchyard/internal/testutil"
)

func TestValidateACME(t *testing.T) {
	good := func() *ACME {
		return &ACME{Directory: "https://ca.example/dir", Domains: []string{"www.example.com"}, Storage: "/tmp/x"}
	}
	for _, tc := range []struct {
		name, path, want string
		edit             func(a *ACME)
	}{
		{"ok", "", "", func(a *ACME) {}},
		{"no directory", "tls.acme.directory", "empty", func(a *ACME) { a.Directory = "" }},
		{"http directory", "tls.acme.directory", "not an https URL", func(a *ACME) { a.Directory = "http://ca.example/dir" }},
		{"no domains", "tls.acme.domains", "list the names", func(a *ACME) { a.Domains = nil }},
		{"wildcard", "tls.acme.domains[1]", "configure dns01", func(a *ACME) { a.Domains = append(a.Domains, "*.example.com") }},
		{"dns01", "", "", func(a *ACME) {
			a.Domains = append(a.Domains, "*.example.com")
			a.DNS01 = &DNS01{Server: "10.0.0.53:53", TSIG: TSIGKey{Name: "acme", Secret: "YWNtZQ=="}}
		}},
		{"wildcard inside", "tls.acme.domains[0]", "one leading label", func(a *ACME) {
			a.Domains, a.DNS01 = []string{"www.*.example.com"}, &DNS01{Server: "10.0.0.53:53", TSIG: TSIGKey{Name: "acme", Secret: "YWNtZQ=="}}
		}},
		{"dns-01 without dns01", "tls.acme.challenges[0]", "dns-01 needs dns01", func(a *ACME) { a.Challenges = []string{"dns-01"} }},
		{"http-01 with dns01", "tls.acme.challenges[0]", "used alone", func(a *ACME) {
			a.Challenges, a.DNS01 = []string{"http-01"}, &DNS01{Server: "10.0.0.53:53", TSIG: TSIGKey{Name: "acme", Secret: "YWNtZQ=="}}
		}},
		{"dns01 server", "tls.acme.dns01.server", "not host:port", func(a *ACME) { a.DNS01 = &DNS01{Server: "ns1", TSIG: TSIGKey{Name: "acme", Secret: "YWNtZQ=="}} }},
		{"dns01 no key", "tls.acme.dns01.tsig.name", "empty", func(a *ACME) { a.DNS01 = &DNS01{Server: "10.0.0.53:53"} }},
		{"dns01 secret", "tls.acme.dns01.tsig.secret", "not base64", func(a *ACME) {
			a.DNS01 = &DNS01{Server: "10.0.0.53:53", TSIG: TSIGKey{Name: "acme", Secret: "!!"}}
		}},
		{"dns01 algorithm", "tls.acme.dns01.tsig.algorithm", "hmac-sha256 or hmac-sha512", func(a *ACME) {
			a.DNS01 = &DNS01{Server: "10.0.0.53:53", TSIG: TSIGKey{Name: "acme", Algorithm: "hmac-md5", Secret: "YWNtZQ=="}}
		}},
		{"ip", "tls.acme.domains[0]", "not a DNS name", func(a *ACME) { a.Domains = []string{"10.0.0.1"} }},
		{"port", "tls.acme.domains[0]", "not a DNS name", func(a *ACME) { a.Domains = []string{"www.example.com:443"} }},
		{"unknown challenge", "tls.acme.challenges[1]", `unknown challenge "dns-02"; use http-01, tls-alpn-01 or dns-01`, func(a *ACME) { a.Challenges = []string{"http-01", "dns-02"} }},
		{"no storage", "tls.acme.storage", "kept across restarts", func(a *ACME) { a.Storage = "" }},
		{"bad email", "tls.acme.email", "not an email", func(a *ACME) { a.Email = "ops" }},
		{"etcd", "", "", func(a *ACME) {
			a.Storage, a.StorageKeyFile = "etcd://10.0.0.1:2379/sy/prod", "/etc/switchyard/acme.key"
		}},
		{"etcd without key", "tls.acme.storage_key_file", "head -c 32 /dev/urandom", func(a *ACME) { a.Storage = "etcd://10.0.0.1:2379/sy/prod" }},
		{"etcd without prefix", "tls.acme.storage", "etcd://HOST:PORT", func(a *ACME) { a.Storage, a.StorageKeyFile = "etcd://10.0.0.1:2379", "/k" }},
		{"key with directory", "tls.acme.storage_key_file", "not encrypted", func(a *ACME) { a.StorageKeyFile = "/k" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := good()
			tc.edit(a)
			path, problem, ok := (&Config{ACME: a}).Validate("tls")
			if ok != (tc.path == "") || path != tc.path || !strings.Contains(problem, tc.want) {
				t.Fatalf("Validate = %q, %q, %v; want %q containing %q", path, problem, ok, tc.path, tc.want)
			}
		})
	}
	if _, _, ok := (&Config{}).Validate("tls"); ok {
		t.Fatal("a tls: block with neither certificates nor acme passed")
	}
}

// serveACME serves cs on a plain HTTP listener at httpAddr (HTTP-01, 404 otherwise) and a TLS
// listener at tlsAddr, until the test ends.
func serveACME(t *testing.T, cs *Certs, httpAddr, tlsAddr string) {
	t.Helper()
	for _, addr := range []string{httpAddr, tlsAddr} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !cs.HandleHTTPChallenge(w, r) {
				http.NotFound(w, r)
			}
		})}
		if addr == tlsAddr {
			ln = tls.NewListener(ln, cs.TLS)
		}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
}

// TestACMEObtainAndRevoke: an HTTP-01 order against Pebble ends with the issued certificate
// served for the name, counted; Revoke revokes it at the CA.
func TestACMEObtainAndRevoke(t *testing.T) {
	httpAddr, tlsAddr := tu.FreeAddr(t), tu.FreeAddr(t)
	p := tu.StartPebble(t, tu.PebbleOptions{HTTPPort: tu.Port(t, httpAddr), TLSPort: tu.Port(t, tlsAddr)})
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	cfg := &Config{ACME: &ACME{Directory: p.Directory, CARoot: p.CARoot, Domains: []string{"rev.switchyard.test"},
		Challenges: []string{HTTP01}, Storage: t.TempDir()}}
	cs, err := Open(cfg, Options{Metrics: m}, "http/1.1")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	serveACME(t, cs, httpAddr, tlsAddr)
	if err := cs.Manage(httpAddr, tlsAddr); err != nil {
		t.Fatal(err)
	}
	roots := p.Roots(t)
	var cert *x509.Certificate
	tu.Eventually(t, 30*time.Second, func() bool { cert, err = tu.LeafCert(tlsAddr, "rev.switchyard.test", roots); return err == nil },
		"no certificate from pebble served for rev.switchyard.test")
	if got := testutil.ToFloat64(m.obtained.WithLabelValues("rev.switchyard.test", "obtain")); got != 1 {
		t.Fatalf("switchyard_tls_acme_obtained_total{op=obtain} = %v, want 1", got)
	}
	if st := p.Status(t, cert.SerialNumber); st != "Valid" {
		t.Fatalf("pebble says %q before revocation", st)
	}
	if err := cs.Revoke(context.Background(), "rev.switchyard.test"); err != nil {
		t.Fatal(err)
	}
	if st := p.Status(t, cert.SerialNumber); st != "Revoked" {
		t.Fatalf("pebble says %q after Revoke, want Revoked", st)
	}
}

// TestACMEEtcdStorageKey: an etcd storage with a key file that is no key fails Open, naming the
// fix.
func TestACMEEtcdStorageKey(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "acme.key")
	if err := os.WriteFile(bad, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &Config{ACME: &ACME{Directory: "https://127.0.0.1:1/dir", Domains: []string{"www.switchyard.test"},
		Storage: "etcd://127.0.0.1:1/sy/x", StorageKeyFile: bad}}
	if _, err := Open(cfg, Options{}); err == nil || !strings.Contains(err.Error(), "head -c 32 /dev/urandom") {
		t.Fatalf("open with a bad key file: %v", err)
	}
}

// fleetNode is one stop of a fleet: its own Certs, metrics and listeners.
type fleetNode struct {
	cs                *Certs
	reg               *prometheus.Registry
	httpAddr, tlsAddr string
}

// TestACMEFleetOrdersOnce: two nodes sharing one etcd storage, started together for the same
// name, get ONE certificate from the CA: one orders it under the storage's lock, the other
// waits, finds it stored and serves it too. A challenge one node started is answered by another
// from the storage alone.
func TestACMEFleetOrdersOnce(t *testing.T) {
	defer func(r time.Duration) { TicketRefresh = r }(TicketRefresh)
	TicketRefresh = 100 * time.Millisecond
	e := tu.StartEtcd(t)
	key := make([]byte, 32)
	rand.Read(key)
	keyFile := filepath.Join(t.TempDir(), "acme.key")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	const name = "fleet.switchyard.test"
	nodes := make([]*fleetNode, 2)
	for i := range nodes {
		nodes[i] = &fleetNode{reg: prometheus.NewRegistry(), httpAddr: tu.FreeAddr(t), tlsAddr: tu.FreeAddr(t)}
	}
	// Pebble validates on one HTTP port, node 0's: as behind a load balancer, the node asked
	// need not be the node that ordered.
	p := tu.StartPebble(t, tu.PebbleOptions{HTTPPort: tu.Port(t, nodes[0].httpAddr), TLSPort: tu.Port(t, nodes[0].tlsAddr)})
	for i, n := range nodes {
		cfg := &Config{ACME: &ACME{Directory: p.Directory, CARoot: p.CARoot, Domains: []string{name}, Challenges: []string{HTTP01},
			Storage: "etcd://" + e.Endpoint + "/sy/fleet", StorageKeyFile: keyFile}}
		cs, err := Open(cfg, Options{Metrics: NewMetrics(n.reg), Log: slog.Default().With("node", i)}, "http/1.1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cs.Close)
		n.cs = cs
		serveACME(t, cs, n.httpAddr, n.tlsAddr)
	}
	for _, n := range nodes {
		if err := n.cs.Manage(n.httpAddr, n.tlsAddr); err != nil {
			t.Fatal(err)
		}
	}
	roots := p.Roots(t)
	serials := make([]string, len(nodes))
	for i, n := range nodes {
		var cert *x509.Certificate
		var err error
		tu.Eventually(t, 60*time.Second, func() bool { cert, err = tu.LeafCert(n.tlsAddr, name, roots); return err == nil },
			"node %d serves no certificate from pebble for %s: %v", i, name, func() any { return err })
		serials[i] = cert.SerialNumber.Text(16)
	}
	if serials[0] != serials[1] {
		t.Fatalf("the nodes serve different certificates: serials %s and %s (each ordered its own)", serials[0], serials[1])
	}
	var obtained float64
	for _, n := range nodes {
		obtained += tu.Counter(t, n.reg, "switchyard_tls_acme_obtained_total", "domain", name)
	}
	if obtained != 1 {
		t.Fatalf("switchyard_tls_acme_obtained_total summed over the fleet = %v, want 1 order for %s", obtained, name)
	}

	// The fleet shares its session-ticket keys: a session from node 0 resumes on node 1.
	cache := tls.NewLRUClientSessionCache(8)
	tc := &tls.Config{ServerName: name, RootCAs: roots, ClientSessionCache: cache, NextProtos: []string{"http/1.1"}}
	visit := func(addr string) bool {
		c, err := tls.Dial("tcp", addr, tc)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+name+"\r\n\r\n") // the answer brings the ticket along
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		c.Read(make([]byte, 512))
		return c.ConnectionState().DidResume
	}
	tu.Eventually(t, 10*time.Second, func() bool { visit(nodes[0].tlsAddr); return visit(nodes[1].tlsAddr) },
		"a session from node 0 never resumed on node 1 (session-ticket keys not shared)")

	// certmagic keeps the challenges this process started in memory, which both nodes of this
	// test share; a challenge written to the storage only (as another process would) must be
	// answered from etcd.
	chal := acme.Challenge{Type: acme.ChallengeTypeHTTP01, Token: "dGVzdHRva2Vu", KeyAuthorization: "dGVzdHRva2Vu.thumbprint",
		Identifier: acme.Identifier{Type: "dns", Value: "other.switchyard.test"}}
	b, _ := json.Marshal(chal)
	tokenKey := path.Join("acme", certmagic.StorageKeys.Safe(nodes[1].cs.issuer.IssuerKey()), "challenge_tokens", "other.switchyard.test.json")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nodes[1].cs.magic.Storage.Store(ctx, tokenKey, b); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "http://"+nodes[0].httpAddr+chal.HTTP01ResourcePath(), nil)
	req.Host = "other.switchyard.test"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != chal.KeyAuthorization {
		t.Fatalf("node 0 answered a challenge in the storage with %s %q, want 200 %q", resp.Status, body, chal.KeyAuthorization)
	}
}

// TestACMEEtcdDownAtStart: an etcd storage that does not answer does not fail or hold up
// Manage (the stop starts and serves); the certificate is obtained once etcd is back, though it
// stayed down longer than a storage read waits (certmagic gives up on a name whose first load
// fails).
func TestACMEEtcdDownAtStart(t *testing.T) {
	defer func(o certstore.Options) { EtcdOptions = o }(EtcdOptions)
	EtcdOptions.OpTimeout = 500 * time.Millisecond
	e := tu.StartEtcd(t)
	e.Stop()
	keyFile := filepath.Join(t.TempDir(), "acme.key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("ab", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	httpAddr, tlsAddr := tu.FreeAddr(t), tu.FreeAddr(t)
	p := tu.StartPebble(t, tu.PebbleOptions{HTTPPort: tu.Port(t, httpAddr), TLSPort: tu.Port(t, tlsAddr)})
	const name = "late.switchyard.test"
	cfg := &Config{ACME: &ACME{Directory: p.Directory, CARoot: p.CARoot, Domains: []string{name}, Challenges: []string{HTTP01},
		Storage: "etcd://" + e.Endpoint + "/sy/late", StorageKeyFile: keyFile}}
	cs, err := Open(cfg, Options{}, "http/1.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cs.Close)
	serveACME(t, cs, httpAddr, tlsAddr)
	start := time.Now()
	if err := cs.Manage(httpAddr, tlsAddr); err != nil {
		t.Fatalf("manage with etcd down: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("manage with etcd down took %v: the start waits on the store", d)
	}
	time.Sleep(2 * time.Second) // down for several read timeouts
	e.Start(t)
	roots := p.Roots(t)
	tu.Eventually(t, 90*time.Second, func() bool { _, err = tu.LeafCert(tlsAddr, name, roots); return err == nil },
		"no certificate for %s after etcd came back: %v", name, func() any { return err })
}
