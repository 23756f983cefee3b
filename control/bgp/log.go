package bgp

import (
	"log/slog"

	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
)

// logger routes GoBGP's logs to slog. GoBGP's info messages (every state change, every
// retry) go out as debug, except the session state changes, which the daemon logs itself.
type logger struct {
	log   *slog.Logger
	level gobgplog.LogLevel
}

func (l *logger) attrs(f gobgplog.Fields) []any {
	out := make([]any, 0, 2*len(f)+2)
	out = append(out, "component", "gobgp")
	for k, v := range f {
		out = append(out, k, v)
	}
	return out
}

func (l *logger) Panic(msg string, f gobgplog.Fields) { l.log.Error(msg, l.attrs(f)...); panic(msg) }
func (l *logger) Fatal(msg string, f gobgplog.Fields) { l.log.Error(msg, l.attrs(f)...) }
func (l *logger) Error(msg string, f gobgplog.Fields) { l.log.Error(msg, l.attrs(f)...) }
func (l *logger) Warn(msg string, f gobgplog.Fields)  { l.log.Warn(msg, l.attrs(f)...) }
func (l *logger) Info(msg string, f gobgplog.Fields)  { l.log.Debug(msg, l.attrs(f)...) }
func (l *logger) Debug(msg string, f gobgplog.Fields) { l.log.Debug(msg, l.attrs(f)...) }

// SetLevel records the level GoBGP asks for; slog's handler filters.
func (l *logger) SetLevel(level gobgplog.LogLevel) { l.level = level }

// GetLevel is the level GoBGP filters its own messages with (debug: slog filters).
func (l *logger) GetLevel() gobgplog.LogLevel { return gobgplog.DebugLevel }
