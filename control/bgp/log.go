package bgp

import (
	"context"
	"log/slog"
)

// gobgpLogger routes GoBGP's logs to the daemon's slog handler with component=gobgp. GoBGP's info
// messages (every state change, every retry) go out as debug: the speaker logs the session
// changes itself.
func gobgpLogger(log *slog.Logger) *slog.Logger {
	return slog.New(demote{log.Handler()}).With("component", "gobgp")
}

// demote lowers info records to debug.
type demote struct{ h slog.Handler }

func (d demote) Enabled(ctx context.Context, l slog.Level) bool { return d.h.Enabled(ctx, lower(l)) }

func (d demote) Handle(ctx context.Context, r slog.Record) error {
	r.Level = lower(r.Level)
	return d.h.Handle(ctx, r)
}

func (d demote) WithAttrs(as []slog.Attr) slog.Handler { return demote{d.h.WithAttrs(as)} }
func (d demote) WithGroup(name string) slog.Handler    { return demote{d.h.WithGroup(name)} }

func lower(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}
