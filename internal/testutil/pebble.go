package testutil

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// PebbleVersion is the Pebble (github.com/letsencrypt/pebble/v2, Let's Encrypt's ACME test
// server) the ACME tests run.
const PebbleVersion = "v2.10.3"

// Pebble is a running Pebble ACME server on loopback. Its validation authority resolves every
// name to 127.0.0.1 (a DNS server of the test's own), so the names a test orders reach the
// stop under test on the challenge ports it was given.
type Pebble struct {
	// Directory is the ACME directory URL.
	Directory string
	// CARoot is the PEM file of the root Pebble's own HTTPS certificate chains to: the acme
	// ca_root that lets a client talk to it.
	CARoot string

	mgmt string
	cmd  *exec.Cmd
	out  *SyncBuffer
	done chan struct{}
}

// PebbleOptions are the ports Pebble validates challenges on and its certificates' lifetime.
type PebbleOptions struct {
	HTTPPort, TLSPort int           // the stop's plain and TLS listener ports
	Validity          time.Duration // 0: Pebble's default (90 days)
	// DNSServer is the server Pebble resolves with (dns-01's TXT lookups: the DNS stop under
	// test); "" is one of the test's own that answers 127.0.0.1 for every name.
	DNSServer string
}

// StartPebble builds Pebble (once, into the user cache directory) and runs it until the test
// ends (or Stop).
func StartPebble(t testing.TB, o PebbleOptions) *Pebble {
	t.Helper()
	bin, mod := pebbleBuild(t)
	dir := t.TempDir()
	dnsAddr := o.DNSServer
	if dnsAddr == "" {
		dnsAddr = loopbackDNS(t)
	}
	listen, mgmt := FreeAddr(t), FreeAddr(t)
	profile := map[string]any{"description": "switchyard tests", "validityPeriod": int(o.Validity.Seconds())}
	conf := map[string]any{"pebble": map[string]any{
		"listenAddress": listen, "managementListenAddress": mgmt,
		"certificate": filepath.Join(mod, "test/certs/localhost/cert.pem"),
		"privateKey":  filepath.Join(mod, "test/certs/localhost/key.pem"),
		"httpPort":    o.HTTPPort, "tlsPort": o.TLSPort, "keyAlgorithm": "ecdsa",
		"profiles": map[string]any{"default": profile},
	}}
	b, _ := json.Marshal(conf)
	cfgPath := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	p := &Pebble{Directory: "https://" + listen + "/dir", CARoot: filepath.Join(mod, "test/certs/pebble.minica.pem"),
		mgmt: mgmt, out: &SyncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "-config", cfgPath, "-dnsserver", dnsAddr)
	// No random validation sleeps, no rejected nonces: the tests wait on issuance, not on chance.
	p.cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start pebble: %v", err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("pebble output:\n%s", p.out.String())
		}
	})
	if !poll(20*time.Second, func() bool { _, err := p.get("https://" + listen + "/dir"); return err == nil }) {
		t.Fatalf("pebble did not serve its directory within 20s:\n%s", p.out.String())
	}
	return p
}

// Stop ends Pebble: the CA is down from now on.
func (p *Pebble) Stop() {
	if p.cmd.Process != nil {
		p.cmd.Process.Kill()
		<-p.done
	}
}

// Roots is a pool holding Pebble's issuing root, to verify the certificates it issues.
func (p *Pebble) Roots(t testing.TB) *x509.CertPool {
	t.Helper()
	pem, err := p.get("https://" + p.mgmt + "/roots/0")
	if err != nil {
		t.Fatalf("fetch pebble's root: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("pebble's root is not PEM: %q", pem)
	}
	return pool
}

// Status is Pebble's status of the certificate with serial: "Valid", "Revoked" or "" (unknown).
func (p *Pebble) Status(t testing.TB, serial *big.Int) string {
	t.Helper()
	b, err := p.get("https://" + p.mgmt + "/cert-status-by-serial/" + serial.Text(16))
	if err != nil {
		return ""
	}
	var st struct{ Status string }
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("pebble cert status: %v: %q", err, b)
	}
	return st.Status
}

// get fetches url from Pebble, trusting its test root.
func (p *Pebble) get(url string) ([]byte, error) {
	pem, err := os.ReadFile(p.CARoot)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", url, resp.Status)
	}
	return b, err
}

var pebbleOnce struct {
	sync.Once
	bin, mod string
	err      error
}

// pebbleBuild builds cmd/pebble of PebbleVersion into the user cache directory (kept across
// runs; the Go module proxy or module cache supplies the source) and returns the binary and the
// module's directory (for its test certificates).
func pebbleBuild(t testing.TB) (bin, mod string) {
	t.Helper()
	pebbleOnce.Do(func() {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		gobin := filepath.Join(cache, "switchyard", "pebble-"+PebbleVersion)
		pkg := "github.com/letsencrypt/pebble/v2"
		// Outside this module, so that Pebble and its dependencies stay out of go.mod.
		env := append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=", "GOWORK=off")
		var out bytes.Buffer
		dl := exec.Command("go", "mod", "download", "-json", pkg+"@"+PebbleVersion)
		dl.Dir, dl.Env, dl.Stderr = os.TempDir(), env, &out
		b, err := dl.Output()
		var info struct{ Dir string }
		if err == nil {
			err = json.Unmarshal(b, &info)
		}
		if err != nil {
			pebbleOnce.err = fmt.Errorf("download pebble %s: %v: %s (the Go module proxy or module cache must have it)", PebbleVersion, err, out.String())
			return
		}
		pebbleOnce.mod, pebbleOnce.bin = info.Dir, filepath.Join(gobin, "pebble")
		if _, err := os.Stat(pebbleOnce.bin); err == nil {
			return
		}
		in := exec.Command("go", "install", pkg+"/cmd/pebble@"+PebbleVersion)
		in.Dir, in.Env, in.Stdout, in.Stderr = os.TempDir(), env, &out, &out
		if err := in.Run(); err != nil {
			pebbleOnce.err = fmt.Errorf("build pebble %s: %v: %s", PebbleVersion, err, out.String())
		}
	})
	if pebbleOnce.err != nil {
		t.Fatal(pebbleOnce.err)
	}
	return pebbleOnce.bin, pebbleOnce.mod
}

// loopbackDNS serves, over TCP (Pebble's resolver asks over TCP) until the test ends, A
// 127.0.0.1 for every name and no other record.
func loopbackDNS(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{Listener: ln, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if len(r.Question) == 1 && r.Question[0].Qtype == dns.TypeA {
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A: net.IPv4(127, 0, 0, 1)}}
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return ln.Addr().String()
}

// FreeAddr is a loopback address with a port free at the time of the call, for servers whose
// port another program must know before they start (e.g. Pebble's challenge ports).
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Port is addr's port.
func Port(t testing.TB, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Fatalf("no port in %q", addr)
	}
	return n
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers (a process's output, a logger) and
// the test reading it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Counter sums the counters named name in g whose labels include the given name-value pairs.
func Counter(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m.GetLabel(), labels[i], labels[i+1]) {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func hasLabel(pairs []*dto.LabelPair, name, value string) bool {
	for _, p := range pairs {
		if p.GetName() == name && p.GetValue() == value {
			return true
		}
	}
	return false
}

// LeafCert dials addr for the TLS name server, trusting roots, and returns the certificate it
// served.
func LeafCert(addr, server string, roots *x509.CertPool) (*x509.Certificate, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{ServerName: server, RootCAs: roots})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}
