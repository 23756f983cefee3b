package dns

import (
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Accept back-off: after a failed accept (EMFILE, ENFILE, ENOBUFS...) the loop waits before the
// next try, doubling from acceptBackoffMin up to acceptBackoffMax, so a server out of descriptors
// does not spin on a connection the kernel keeps queued (a soak measured 83-106% of a core).
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// backoff is an exponential, capped delay; ok resets it.
type backoff struct {
	min, max, cur time.Duration
}

// next returns the delay to wait after one more failure.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur
}

func (b *backoff) ok() { b.cur = 0 }

// rateLog logs at most one line per interval for a repeating fault and counts the lines it
// held back, so a storm of errors gives a steady trickle with the total in it.
type rateLog struct {
	log      *slog.Logger
	interval time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (r *rateLog) warn(msg string, args ...any) {
	r.mu.Lock()
	now := time.Now()
	if !r.last.IsZero() && now.Sub(r.last) < r.interval {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	r.mu.Unlock()
	r.log.Warn(msg, append(args, "suppressed_since_last", n)...)
}

// minNoFile is the descriptor limit below which the server warns at start: each TCP client,
// health probe, transfer and NOTIFY holds one.
const minNoFile = 4096

// raiseNoFile raises the soft RLIMIT_NOFILE to the hard limit, so the server runs out of
// descriptors as late as the operator allows, and warns when even the hard limit is low. It
// returns the soft limit in force.
func raiseNoFile(log *slog.Logger) uint64 {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		log.Warn("read descriptor limit", "err", err)
		return 0
	}
	if r.Cur < r.Max {
		old := r.Cur
		r.Cur = r.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
			log.Warn("raise descriptor limit: keeping the soft limit", "soft", old, "hard", r.Max, "err", err)
			r.Cur = old
		} else {
			log.Info("raised descriptor limit to the hard limit", "from", old, "to", r.Cur)
		}
	}
	if r.Cur < minNoFile {
		log.Warn("descriptor limit is low; raise it (ulimit -n, systemd LimitNOFILE=)", "limit", r.Cur, "want_at_least", minNoFile)
	}
	return r.Cur
}

// healthLocalError logs (rate-limited) a probe that failed on this machine rather than at the
// target; the checker does not count it against the site.
func (s *Server) healthLocalError(key string, err error) {
	s.localWarn.warn("dns health probe failed for a local reason; not counted against the target",
		"target", key, "err", err)
}
