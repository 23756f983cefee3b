package edge

import (
	"log/slog"
	"sync"
	"time"
)

// warnLimit keeps a warning written per failed request from flooding the log when every request
// fails the same way: out of descriptors (EMFILE), every upstream dial and disk read fails and
// the edge wrote one WARN per request; an origin that is down does the same. Each message is
// written at most once per interval, carrying how many of it were suppressed since the last.
// The zero value writes each message at most once a second.
type warnLimit struct {
	every time.Duration    // default one second
	now   func() time.Time // default time.Now; tests move it

	mu   sync.Mutex
	msgs map[string]*warnState // by message: the edge's messages are constants, so few
}

type warnState struct {
	next       time.Time // no line of this message before then
	suppressed int
}

// warn writes msg with args to log unless it was written less than an interval ago, in which
// case it is only counted.
func (l *warnLimit) warn(log *slog.Logger, msg string, args ...any) {
	now := time.Now()
	if l.now != nil {
		now = l.now()
	}
	every := l.every
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

// warn is a per-request warning, rate-limited (warnLimit).
func (e *Edge) warn(msg string, args ...any) { e.warns.warn(e.log, msg, args...) }
