package testutil

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard/switchyard/internal/pebble"
)

// PebbleVersion is the Pebble (github.com/letsencrypt/pebble/v2, Let's Encrypt's ACME test
// server) the ACME tests run.
const PebbleVersion = pebble.Version

// Pebble is a running Pebble ACME server on loopback. Its validation authority resolves every
// name to 127.0.0.1 (a DNS server of the test's own), so the names a test orders reach the
// stop under test on the challenge ports it was given.
type Pebble struct {
	// Directory is the ACME directory URL.
	Directory string
	// CARoot is the PEM file of the root Pebble's own HTTPS certificate chains to: the acme
	// ca_root that lets a client talk to it.
	CARoot string

	srv  *pebble.Server
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

// StartPebble builds Pebble (once, into the user cache directory: internal/pebble) and runs it
// until the test ends (or Stop).
func StartPebble(t testing.TB, o PebbleOptions) *Pebble {
	t.Helper()
	bin, err := pebble.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	dnsAddr := o.DNSServer
	if dnsAddr == "" {
		dnsAddr = loopbackDNS(t)
	}
	srv, err := pebble.Prepare(bin, t.TempDir(), pebble.Options{Listen: FreeAddr(t), Mgmt: FreeAddr(t),
		HTTPPort: o.HTTPPort, TLSPort: o.TLSPort, Validity: o.Validity, DNSServer: dnsAddr})
	if err != nil {
		t.Fatal(err)
	}
	p := &Pebble{Directory: srv.Directory, CARoot: srv.CARoot, srv: srv, out: &SyncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(srv.Argv[0], srv.Argv[1:]...)
	p.cmd.Env = append(os.Environ(), srv.Env...)
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
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.WaitReady(ctx, p.client(t)); err != nil {
		t.Fatalf("%v within 20s:\n%s", err, p.out.String())
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
	pem, err := p.srv.Get(context.Background(), p.client(t), "/roots/0")
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
	b, err := p.srv.Get(context.Background(), p.client(t), "/cert-status-by-serial/"+serial.Text(16))
	if err != nil {
		return ""
	}
	var st struct{ Status string }
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("pebble cert status: %v: %q", err, b)
	}
	return st.Status
}

// client is an HTTPS client trusting Pebble's own certificate.
func (p *Pebble) client(t testing.TB) *http.Client {
	t.Helper()
	hc, err := p.srv.Client(nil)
	if err != nil {
		t.Fatal(err)
	}
	return hc
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

// PortFree reports whether port is free now for both UDP and TCP on 127.0.0.1 (a DNS server
// binds both on the same port).
func PortFree(port int) bool {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	defer u.Close()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	l.Close()
	return true
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
