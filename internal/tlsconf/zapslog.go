package tlsconf

import (
	"context"
	"log/slog"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapToSlog is a zap logger (certmagic's) that writes to log, so that ACME lines land where the
// stop's other lines do. certmagic's retry line ("will retry", retrying_in) gains next_retry,
// the time of the next attempt.
func zapToSlog(log *slog.Logger) *zap.Logger {
	return zap.New(&slogCore{log: log})
}

// slogCore is a zapcore.Core over a slog.Logger.
type slogCore struct {
	log   *slog.Logger
	attrs []any
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	return c.log.Enabled(context.Background(), slogLevel(l))
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, attrs: append(append([]any(nil), c.attrs...), fieldAttrs(fields)...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	attrs := append(append([]any(nil), c.attrs...), fieldAttrs(fields)...)
	msg := "tls acme " + e.Message
	for _, f := range fields {
		if f.Key == "retrying_in" && f.Type == zapcore.DurationType {
			attrs = append(attrs, "next_retry", e.Time.Add(time.Duration(f.Integer)).UTC().Format(time.RFC3339))
		}
	}
	c.log.Log(context.Background(), slogLevel(e.Level), msg, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

// fieldAttrs turns zap fields into slog key-value pairs.
func fieldAttrs(fields []zapcore.Field) []any {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]any, 0, 2*len(enc.Fields))
	for _, f := range fields { // in zap's order, not the map's
		if v, ok := enc.Fields[f.Key]; ok {
			attrs = append(attrs, f.Key, v)
		}
	}
	return attrs
}

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}
