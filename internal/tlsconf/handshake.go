package tlsconf

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/internal/lograte"
)

// Handshakes runs the server handshakes of a stop's TLS listeners and accounts for the ones
// that fail: a handshake flood, clients that stall mid-handshake and malformed ClientHellos
// show in switchyard_tls_handshake_failures_total{reason} and in one log line per reason at
// most once a second (with how many were suppressed), never in a line per connection. Each
// handshake runs on the connection's own goroutine within its deadline, so a slow or hostile
// client costs its own goroutine and descriptor (bounded by max_connections), never another
// client's handshake.
type Handshakes struct {
	failures *prometheus.CounterVec
	log      *slog.Logger
	warns    lograte.Limiter
}

// The reasons a server handshake fails.
const (
	HandshakeTimeout  = "timeout"       // not finished within the deadline: a slow or stalled client
	HandshakeClosed   = "client_closed" // the client went away (EOF, reset)
	HandshakeNotTLS   = "not_tls"       // the first bytes are not a TLS record (plain HTTP to the TLS port)
	HandshakeRefused  = "refused"       // a valid ClientHello with nothing in common (version, suites, SNI)
	HandshakeProtocol = "malformed"     // a malformed or oversized handshake message
)

// NewHandshakes registers switchyard_tls_handshake_failures_total on reg.
func NewHandshakes(reg prometheus.Registerer, log *slog.Logger) *Handshakes {
	h := &Handshakes{log: log, failures: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_tls_handshake_failures_total",
		Help: "TLS server handshakes that failed, by reason: timeout, client_closed, not_tls, refused, malformed.",
	}, []string{"reason"})}
	for _, r := range []string{HandshakeTimeout, HandshakeClosed, HandshakeNotTLS, HandshakeRefused, HandshakeProtocol} {
		h.failures.WithLabelValues(r)
	}
	reg.MustRegister(h.failures)
	return h
}

// Run performs c's server handshake within timeout. A failure is counted and logged (rate
// limited) and returned; the caller closes the connection. The timeout is the connection's
// deadline, cleared once the handshake is done: a context's timer, its cancellation and the
// close crypto/tls hooks to it cost more CPU a handshake (docs/measurements/edge.md,
// "handshake profile") and cut a slow client no sooner.
func (h *Handshakes) Run(c *tls.Conn, timeout time.Duration) error {
	err := c.SetDeadline(time.Now().Add(timeout))
	if err == nil {
		err = c.Handshake()
	}
	if err == nil {
		return c.SetDeadline(time.Time{})
	}
	reason := HandshakeReason(err)
	h.failures.WithLabelValues(reason).Inc()
	if reason != HandshakeClosed {
		// One line a second per reason: the message names it (lograte counts by message).
		h.warns.Warn(h.log, "tls handshake failed: "+reason, "client", c.RemoteAddr().String(), "err", err)
	}
	return err
}

// HandshakeReason classifies a server handshake's error (one of the Handshake* reasons).
func HandshakeReason(err error) string {
	var rh tls.RecordHeaderError
	var alert tls.AlertError
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return HandshakeTimeout
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed):
		return HandshakeClosed
	case errors.As(err, &rh) && strings.Contains(rh.Msg, "does not look like a TLS handshake"):
		return HandshakeNotTLS
	case errors.As(err, &alert) || refusedHello(err.Error()):
		return HandshakeRefused
	}
	return HandshakeProtocol
}

// refusedHello reports crypto/tls's errors for a well-formed ClientHello the listener cannot
// serve (it sends the alert and returns a plain error).
func refusedHello(msg string) bool {
	for _, s := range []string{"unsupported versions", "no cipher suite", "no certificate", "no mutually supported",
		"no application protocol", "unsupported elliptic curves", "no supported"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
