// Package lograte rate-limits warnings by message, so that a fault hitting every request writes
// one line a second, not one per request.
package lograte

import (
	"log/slog"
	"sync"
	"time"
)

// Limiter keeps a warning written per failed request (or connection) from flooding the log
// when every one fails the same way: out of descriptors (EMFILE) every upstream dial fails, a
// handshake flood fails every handshake, and a line each would bury the log. Each message is
// written at most once per interval, carrying how many of it were suppressed since the last.
// The zero value writes each message at most once a second.
type Limiter struct {
	Every time.Duration    // default one second
	Now   func() time.Time // default time.Now; tests move it

	mu   sync.Mutex
	msgs map[string]*warnState // by message: the callers' messages are constants, so few
}

type warnState struct {
	next       time.Time // no line of this message before then
	suppressed int
}

// Warn writes msg with args to log unless it was written less than an interval ago, in which
// case it is only counted.
func (l *Limiter) Warn(log *slog.Logger, msg string, args ...any) {
	now := time.Now()
	if l.Now != nil {
		now = l.Now()
	}
	every := l.Every
	if every <= 0 {
		every = time.Second
	}
	l.mu.Lock()
	if l.msgs == nil {
		l.msgs = map[string]*warnState{}
	}
	st := l.msgs[msg]
	if st == nil {
		st = &warnState{}
		l.msgs[msg] = st
	}
	if now.Before(st.next) {
		st.suppressed++
		l.mu.Unlock()
		return
	}
	n := st.suppressed
	st.suppressed, st.next = 0, now.Add(every)
	l.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	log.Warn(msg, args...)
}
