package tlsconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3"
	"github.com/mholt/acmez/v3/acme"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/control/store"
	"github.com/switchyard/switchyard/internal/certstore"
)

// Certificates by ACME (RFC 8555). The protocol is not written here: caddyserver/certmagic
// (the library Caddy runs, v0.25.6) places the orders, answers the challenges through the
// stops' own listeners, keeps certificates and account keys in a storage directory (or, for a
// fleet, in etcd: internal/certstore, where its locks let one node order a name), renews them
// before expiry (by ACME Renewal Info, RFC 9773, where the CA offers it, else at a third of the
// lifetime left), staples OCSP where the certificate names a responder, and swaps renewed
// certificates into the listener's GetCertificate without a restart. A failed renewal leaves the
// certificate in use untouched and is retried with backoff (1 min, 2 min, ... 6 h).
//
// Certmagic was chosen over writing the protocol on golang.org/x/crypto/acme (autocert has no
// ARI, no TLS-ALPN-01 on a listener of our own, no storage locks for a fleet) and over lego
// (a client toolkit: renewal, storage and hot swap would still be ours to write).

// ACME is a listener's `tls.acme:` block.
type ACME struct {
	// Directory is the CA's ACME directory URL (https), e.g.
	// https://acme-v02.api.letsencrypt.org/directory. Setting it agrees to the CA's terms.
	Directory string `yaml:"directory"`
	// Email is the account's contact address for the CA's expiry and incident notices (optional).
	Email string `yaml:"email"`
	// Domains are the names to obtain certificates for, one certificate per name.
	Domains []string `yaml:"domains"`
	// Challenges are the ACME challenge types to answer: http-01 (on the stop's plain HTTP
	// listener, which the CA reaches on port 80) and tls-alpn-01 (on this TLS listener, port
	// 443); default: both. With dns01 set, dns-01 alone (CAs validate one per name anyway).
	Challenges []string `yaml:"challenges"`
	// DNS01 publishes dns-01 answers by RFC 2136 updates (dns01.go): wildcard names need it.
	DNS01 *DNS01 `yaml:"dns01"`
	// CARoot is a PEM file of roots to trust for the directory's own HTTPS (a test or private
	// CA); the system roots otherwise.
	CARoot string `yaml:"ca_root"`
	// Storage holds certificates, keys and the ACME account across restarts: a directory, or
	// an etcd store, etcd://HOST:PORT[,HOST:PORT...]/PREFIX (keys under PREFIX/acme/), that a
	// fleet shares so that one node orders each name and every node serves the certificate.
	Storage string `yaml:"storage"`
	// StorageKeyFile is the file of the 32-byte key (raw, or 64 hex characters) that encrypts
	// what an etcd storage holds; required with one, the same file on every node.
	StorageKeyFile string `yaml:"storage_key_file"`
}

// The challenge types ACME.Challenges accepts.
const (
	HTTP01         = "http-01"
	TLSALPN1       = "tls-alpn-01"
	DNS01Challenge = "dns-01"
)

// HTTPChallengePath is where the CA fetches HTTP-01 answers (RFC 8555 8.3).
const HTTPChallengePath = "/.well-known/acme-challenge/"

// Uses reports whether challenge (HTTP01 or TLSALPN1) is enabled.
func (a *ACME) Uses(challenge string) bool {
	if a.DNS01 != nil {
		return challenge == DNS01Challenge // certmagic answers dns-01 alone when it has a solver
	}
	return len(a.Challenges) == 0 || slices.Contains(a.Challenges, challenge)
}

// validate reports the first problem under field (e.g. "listeners[0].tls.acme"), naming the fix.
func (a *ACME) validate(field string) (path, problem string, ok bool) {
	u, err := url.Parse(a.Directory)
	switch {
	case a.Directory == "":
		return field + ".directory", "empty; set the CA's ACME directory URL, e.g. https://acme-v02.api.letsencrypt.org/directory", false
	case err != nil || u.Scheme != "https" || u.Host == "":
		return field + ".directory", fmt.Sprintf("%q is not an https URL; ACME directories are served over https (write https://host/path)", a.Directory), false
	case len(a.Domains) == 0:
		return field + ".domains", "empty; list the names to obtain certificates for, e.g. [www.example.com]", false
	case a.Storage == "":
		return field + ".storage", "empty; set a directory kept across restarts (e.g. /var/lib/switchyard/acme), or a fleet's etcd://HOST:PORT/PREFIX: without it every start would order anew and hit the CA's rate limits", false
	case certstore.IsURL(a.Storage):
		if _, err := store.ParseURL(a.Storage); err != nil {
			return field + ".storage", err.Error(), false
		}
		if a.StorageKeyFile == "" {
			return field + ".storage_key_file", "empty; an etcd storage holds private keys, encrypted with the key in this file: make one with `head -c 32 /dev/urandom > /etc/switchyard/acme.key` and give every node the same copy", false
		}
	case a.StorageKeyFile != "":
		return field + ".storage_key_file", "set with a directory storage, which is not encrypted; leave it out, or set storage to an etcd:// URL", false
	}
	if a.Email != "" && !strings.Contains(a.Email, "@") {
		return field + ".email", fmt.Sprintf("%q is not an email address; write e.g. ops@example.com or leave it out", a.Email), false
	}
	for i, d := range a.Domains {
		p := fmt.Sprintf("%s.domains[%d]", field, i)
		switch {
		case strings.Contains(d, "*") && a.DNS01 == nil:
			return p, fmt.Sprintf("%q: wildcard names need the dns-01 challenge; configure dns01 (an RFC 2136 primary and its TSIG key), or list each name", d), false
		case strings.Contains(d, "*") && (!strings.HasPrefix(d, "*.") || strings.Count(d, "*") > 1):
			return p, fmt.Sprintf("%q: a wildcard is one leading label, like *.example.com", d), false
		case net.ParseIP(d) != nil || !certmagic.SubjectQualifiesForCert(d) || strings.Contains(d, ":"):
			return p, fmt.Sprintf("%q is not a DNS name; write a host name like www.example.com (no port, no scheme)", d), false
		}
	}
	for i, c := range a.Challenges {
		switch {
		case c == DNS01Challenge && a.DNS01 == nil:
			return fmt.Sprintf("%s.challenges[%d]", field, i), "dns-01 needs dns01: the RFC 2136 primary to publish the answers on and its TSIG key", false
		case c == DNS01Challenge:
		case a.DNS01 != nil:
			return fmt.Sprintf("%s.challenges[%d]", field, i), fmt.Sprintf("%q with dns01: a dns-01 solver is used alone; remove challenges, or dns01", c), false
		case c != HTTP01 && c != TLSALPN1:
			return fmt.Sprintf("%s.challenges[%d]", field, i), fmt.Sprintf("unknown challenge %q; use http-01, tls-alpn-01 or dns-01 (with dns01)", c), false
		}
	}
	if a.DNS01 != nil {
		return a.DNS01.validate(field + ".dns01")
	}
	return "", "", true
}

// Metrics counts ACME outcomes of a stop's listeners; make one per stop with NewMetrics.
type Metrics struct {
	failures *prometheus.CounterVec
	obtained *prometheus.CounterVec
}

// NewMetrics registers switchyard_tls_acme_failures_total and switchyard_tls_acme_obtained_total
// on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_tls_acme_failures_total",
			Help: "ACME certificate orders that failed, by name and op (obtain, renew); each is retried with backoff and the certificate in use is kept.",
		}, []string{"domain", "op"}),
		obtained: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_tls_acme_obtained_total",
			Help: "Certificates the ACME CA issued, by name and op (obtain, renew).",
		}, []string{"domain", "op"}),
	}
	reg.MustRegister(m.failures, m.obtained)
	return m
}

// Options is what a stop gives Open besides the tls: block.
type Options struct {
	Log     *slog.Logger // default slog.Default()
	Metrics *Metrics     // nil: not counted
}

// MaintenanceInterval is how often the certificates are checked for renewal (certmagic's
// default); tests shorten it to see renewals of short-lived certificates.
var MaintenanceInterval = certmagic.DefaultRenewCheckInterval

// EtcdOptions tune an etcd storage (certstore's defaults: locks on 30 s leases, 10 s per read
// or write); tests shorten them.
var EtcdOptions certstore.Options

// Certs is a TLS listener's certificates: the files, and with acme: those certmagic obtains and
// renews. Its TLS configuration serves both, chosen by SNI.
type Certs struct {
	// TLS is the listener's server configuration.
	TLS *tls.Config

	acme    *ACME
	magic   *certmagic.Config
	issuer  *certmagic.ACMEIssuer
	cache   *certmagic.Cache
	names   map[string]bool // the ACME domains, lower case
	log     *slog.Logger
	metrics *Metrics
	etcd    *certstore.Storage // an etcd storage's client, closed with the Certs; nil for a directory
	tickets *tls.Config        // holds the fleet's session-ticket keys (tickets.go); nil without etcd
	cancel  context.CancelFunc
	closed  sync.Once
}

// ACMETLS1 is the ALPN protocol of TLS-ALPN-01 validation handshakes (RFC 8737); a listener
// that sets its own NextProtos keeps it when the configuration offered it.
const ACMETLS1 = acmez.ACMETLS1Protocol

// Open reads the certificate files and, with acme:, prepares certmagic (nothing is ordered
// yet) into a server configuration offering alpn. Call Manage once the stop's listeners are
// open, and Close when they are.
func Open(c *Config, o Options, alpn ...string) (*Certs, error) {
	tc, err := Load(c, alpn...)
	if err != nil || c.ACME == nil {
		return &Certs{TLS: tc}, err
	}
	cs := &Certs{TLS: tc, acme: c.ACME, log: o.Log, metrics: o.Metrics, names: map[string]bool{}}
	if cs.log == nil {
		cs.log = slog.Default()
	}
	for _, d := range c.ACME.Domains {
		cs.names[strings.ToLower(d)] = true
	}
	if err := cs.newMagic(); err != nil {
		return nil, err
	}
	if c.ACME.Uses(TLSALPN1) {
		tc.NextProtos = append(tc.NextProtos, ACMETLS1)
	}
	tc.GetCertificate = cs.getCertificate
	if cs.etcd != nil {
		cs.shareTicketsOn(tc)
	}
	return cs, nil
}

// newMagic builds the certmagic cache, configuration and ACME issuer; they log through cs.log.
func (cs *Certs) newMagic() error {
	a := cs.acme
	var roots *x509.CertPool
	if a.CARoot != "" {
		pem, err := os.ReadFile(a.CARoot)
		if err != nil {
			return fmt.Errorf("read acme ca_root: %w (check the path, or leave ca_root out to trust the system roots)", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("read acme ca_root %s: no PEM certificate in it (give the CA's root certificate in PEM)", a.CARoot)
		}
	}
	var storage certmagic.Storage
	if certstore.IsURL(a.Storage) {
		st, err := certstore.Open(a.Storage, a.StorageKeyFile, EtcdOptions)
		if err != nil {
			return fmt.Errorf("open acme storage: %w", err)
		}
		cs.etcd, storage = st, st
	} else {
		if err := os.MkdirAll(a.Storage, 0o700); err != nil {
			return fmt.Errorf("create acme storage: %w (give a directory switchyard may write)", err)
		}
		storage = &certmagic.FileStorage{Path: a.Storage}
	}
	zl := zapToSlog(cs.log.With("acme", a.Directory))
	cs.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert:   func(certmagic.Certificate) (*certmagic.Config, error) { return cs.magic, nil },
		RenewCheckInterval: MaintenanceInterval,
		Logger:             zl,
	})
	cs.magic = certmagic.New(cs.cache, certmagic.Config{
		Storage: storage,
		Logger:  zl,
		OnEvent: cs.onEvent,
	})
	tmpl := certmagic.ACMEIssuer{
		CA: a.Directory, Email: a.Email, Agreed: true, TrustedRoots: roots, Logger: zl,
		DisableHTTPChallenge:    !a.Uses(HTTP01),
		DisableTLSALPNChallenge: !a.Uses(TLSALPN1),
	}
	if a.DNS01 != nil {
		tmpl.DNS01Solver = a.DNS01.solver()
	}
	cs.issuer = certmagic.NewACMEIssuer(cs.magic, tmpl)
	cs.magic.Issuers = []certmagic.Issuer{checkedIssuer{cs.issuer}} // chaincheck.go
	return nil
}

// Manage loads the stored certificates and starts obtaining the missing ones and renewing them
// in the background, answering the challenges on the stop's listeners: httpAddr, its plain
// HTTP listener (http-01; "" without one), and tlsAddr, this TLS listener (tls-alpn-01). A CA
// that cannot be reached does not fail it: the failure is logged and counted and the order
// retried, while every other name and listener serves. Nor does an etcd storage that cannot be
// reached: its names are managed once it answers.
func (cs *Certs) Manage(httpAddr, tlsAddr string) error {
	if cs == nil || cs.magic == nil {
		return nil
	}
	// certmagic answers a challenge on a listener of its own unless the port is taken; pointing
	// it at the stop's listeners keeps it from binding anything: they answer (HandleHTTPChallenge,
	// GetCertificate).
	if host, port, err := net.SplitHostPort(tlsAddr); err == nil {
		cs.issuer.ListenHost = host
		cs.issuer.AltTLSALPNPort, _ = strconv.Atoi(port)
	}
	if _, port, err := net.SplitHostPort(httpAddr); err == nil {
		cs.issuer.AltHTTPPort, _ = strconv.Atoi(port)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cs.cancel = cancel
	if cs.etcd != nil {
		go cs.manageOnceReachable(ctx)
		go cs.shareTickets(ctx) // tickets.go
		return nil
	}
	if err := cs.magic.ManageAsync(ctx, cs.acme.Domains); err != nil {
		cancel()
		return fmt.Errorf("manage acme certificates: %w (check acme.storage)", err)
	}
	cs.log.Info("tls acme managing certificates", "domains", cs.acme.Domains, "directory", cs.acme.Directory)
	return nil
}

// manageOnceReachable is Manage's ManageAsync on an etcd storage, once etcd answers and the key
// file opens what it holds (checked every 1 s, doubling to 1 min, until the Certs close).
// certmagic loads each stored certificate once, in the background, and a name whose load fails
// (etcd down at start) it only logs and never tries again: the name would go unserved until a
// restart. A wrong key file would fail every load the same way.
func (cs *Certs) manageOnceReachable(ctx context.Context) {
	for wait := time.Second; ; wait = min(2*wait, time.Minute) {
		err := cs.etcd.Check(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			break
		}
		cs.log.Error("tls acme storage failed, will retry", "error", err, "retrying_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
	// ManageAsync fails only on a configuration certmagic refuses, which Open's checks keep out.
	if err := cs.magic.ManageAsync(ctx, cs.acme.Domains); err != nil {
		cs.log.Error("tls acme manage failed", "error", err)
		return
	}
	cs.log.Info("tls acme managing certificates", "domains", cs.acme.Domains, "directory", cs.acme.Directory, "storage", cs.etcd.String())
}

// getCertificate serves the ACME names (and TLS-ALPN-01 validation handshakes) from certmagic
// and leaves every other name to the files, chosen by SNI as without ACME.
func (cs *Certs) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if len(cs.TLS.Certificates) > 0 && !cs.covers(strings.ToLower(hello.ServerName)) {
		return nil, nil // crypto/tls picks among the files
	}
	return cs.magic.GetCertificate(hello)
}

// covers reports whether name is one of the ACME domains, itself or under a wildcard (one
// label, RFC 6125 6.4.3).
func (cs *Certs) covers(name string) bool {
	if cs.names[name] {
		return true
	}
	_, parent, ok := strings.Cut(name, ".")
	return ok && cs.names["*."+parent]
}

// HandleHTTPChallenge answers the CA's HTTP-01 request and reports true, or reports false for
// any other request. The stops call it before their own handling of plain HTTP requests.
func (cs *Certs) HandleHTTPChallenge(w http.ResponseWriter, r *http.Request) bool {
	if cs == nil || cs.issuer == nil {
		return false
	}
	return cs.issuer.HandleHTTPChallenge(w, r)
}

// Revoke revokes domain's certificate at the CA and deletes it from storage; the listener
// serves it until the next start (or until certmagic learns of it by OCSP or ARI and renews).
func (cs *Certs) Revoke(ctx context.Context, domain string) error {
	if cs == nil || cs.magic == nil {
		return fmt.Errorf("revoke %s: the listener has no acme: block", domain)
	}
	if err := cs.magic.RevokeCert(ctx, domain, acme.ReasonUnspecified, true); err != nil {
		return fmt.Errorf("revoke %s: %w", domain, err)
	}
	return nil
}

// Close stops obtaining and renewing and closes an etcd storage's client; it may be called more
// than once.
func (cs *Certs) Close() {
	if cs == nil || cs.cache == nil {
		return
	}
	cs.closed.Do(func() {
		if cs.cancel != nil {
			cs.cancel()
		}
		cs.cache.Stop()
		if cs.etcd != nil {
			// A lock an ending job still holds is released by its lease (certstore.Options.LockTTL).
			cs.etcd.Close()
		}
	})
}

// onEvent counts certmagic's outcomes. certmagic logs them itself (through zapToSlog): a
// failure as "tls acme will retry" with the error, the attempt and the next retry.
func (cs *Certs) onEvent(_ context.Context, event string, data map[string]any) error {
	if cs.metrics == nil || (event != "cert_obtained" && event != "cert_failed") {
		return nil
	}
	op := "obtain"
	if renewal, _ := data["renewal"].(bool); renewal {
		op = "renew"
	}
	domain, _ := data["identifier"].(string)
	if event == "cert_failed" {
		cs.metrics.failures.WithLabelValues(domain, op).Inc()
	} else {
		cs.metrics.obtained.WithLabelValues(domain, op).Inc()
	}
	return nil
}
