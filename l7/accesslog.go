package l7

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"log/syslog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The access log: one line a request, every engine's through logAccess. `access_log` names
// where (stdout, stderr, syslog, a file reopened on SIGUSR1 for logrotate, or off) and
// `access_log_format` how: json (the default), text (slog's key=value), or a template of
// nginx-style variables, e.g. `$remote_addr - [$time_local] "$request" $status $body_bytes_sent`.

// accessEntry is what is logged of one request.
type accessEntry struct {
	client, method, host, path, proto string
	status                            int
	bytes                             int64
	duration                          time.Duration
	route, pool, backend              string
	attempts                          int
}

// accessVars are the template's variables, each writing its part of an entry.
var accessVars = map[string]func(b []byte, e *accessEntry, now time.Time) []byte{
	"remote_addr":  func(b []byte, e *accessEntry, _ time.Time) []byte { return append(b, hostOf(e.client)...) },
	"time_iso8601": func(b []byte, _ *accessEntry, now time.Time) []byte { return now.AppendFormat(b, time.RFC3339) },
	"time_local": func(b []byte, _ *accessEntry, now time.Time) []byte {
		return now.AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
	},
	"request": func(b []byte, e *accessEntry, _ time.Time) []byte {
		return append(append(append(append(append(b, e.method...), ' '), e.path...), ' '), e.proto...)
	},
	"request_method":  func(b []byte, e *accessEntry, _ time.Time) []byte { return append(b, e.method...) },
	"request_uri":     func(b []byte, e *accessEntry, _ time.Time) []byte { return append(b, e.path...) },
	"host":            func(b []byte, e *accessEntry, _ time.Time) []byte { return append(b, e.host...) },
	"server_protocol": func(b []byte, e *accessEntry, _ time.Time) []byte { return append(b, e.proto...) },
	"status":          func(b []byte, e *accessEntry, _ time.Time) []byte { return strconv.AppendInt(b, int64(e.status), 10) },
	"body_bytes_sent": func(b []byte, e *accessEntry, _ time.Time) []byte { return strconv.AppendInt(b, e.bytes, 10) },
	"request_time": func(b []byte, e *accessEntry, _ time.Time) []byte {
		return strconv.AppendFloat(b, e.duration.Seconds(), 'f', 3, 64)
	},
	"upstream_addr": func(b []byte, e *accessEntry, _ time.Time) []byte { return append(b, dash(e.backend)...) },
	"route":         func(b []byte, e *accessEntry, _ time.Time) []byte { return append(b, dash(e.route)...) },
	"pool":          func(b []byte, e *accessEntry, _ time.Time) []byte { return append(b, dash(e.pool)...) },
	"attempts":      func(b []byte, e *accessEntry, _ time.Time) []byte { return strconv.AppendInt(b, int64(e.attempts), 10) },
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func hostOf(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// accessPart is a template's literal text or variable.
type accessPart struct {
	text string
	v    func(b []byte, e *accessEntry, now time.Time) []byte
}

// parseAccessFormat compiles a template; an unknown variable is an error naming the known ones.
func parseAccessFormat(f string) ([]accessPart, error) {
	var parts []accessPart
	for len(f) > 0 {
		i := strings.IndexByte(f, '$')
		if i < 0 {
			parts = append(parts, accessPart{text: f})
			break
		}
		if i > 0 {
			parts = append(parts, accessPart{text: f[:i]})
		}
		f = f[i+1:]
		j := 0
		for j < len(f) && (f[j] == '_' || 'a' <= f[j] && f[j] <= 'z' || '0' <= f[j] && f[j] <= '9') {
			j++
		}
		v, ok := accessVars[f[:j]]
		if !ok {
			names := make([]string, 0, len(accessVars))
			for n := range accessVars {
				names = append(names, "$"+n)
			}
			slices.Sort(names)
			return nil, fmt.Errorf("unknown variable $%s; use %s", f[:j], strings.Join(names, ", "))
		}
		parts = append(parts, accessPart{v: v})
		f = f[j:]
	}
	return parts, nil
}

// accessLog writes the access log in its format.
type accessLog struct {
	slog     *slog.Logger // json and text
	template []accessPart // a template
	out      io.Writer    // the template's destination
	file     *reopenFile  // a file destination, for Reopen and Close
	mu       sync.Mutex
	buf      []byte
}

// openAccessLog opens dest in format (both validated with the configuration).
func openAccessLog(dest, format string) (*accessLog, error) {
	var w io.Writer
	a := &accessLog{}
	switch dest {
	case "", "off":
		return nil, nil
	case "stdout":
		w = os.Stdout
	case "stderr":
		w = os.Stderr
	case "syslog":
		sw, err := syslog.New(syslog.LOG_INFO|syslog.LOG_LOCAL0, "switchyard-l7")
		if err != nil {
			return nil, fmt.Errorf("open access log: syslog: %w (is a syslog daemon listening on /dev/log?)", err)
		}
		w = sw
	default:
		f, err := openReopenFile(dest)
		if err != nil {
			return nil, err
		}
		a.file, w = f, f
	}
	switch format {
	case "", "json":
		a.slog = slog.New(slog.NewJSONHandler(w, nil))
	case "text":
		a.slog = slog.New(slog.NewTextHandler(w, nil))
	default:
		parts, err := parseAccessFormat(format)
		if err != nil {
			return nil, fmt.Errorf("access_log_format: %w", err)
		}
		a.template, a.out = parts, w
	}
	return a, nil
}

// log writes e's line.
func (a *accessLog) log(e *accessEntry) {
	if a.slog != nil {
		a.slog.LogAttrs(context.Background(), slog.LevelInfo, "request",
			slog.String("client", e.client), slog.String("method", e.method), slog.String("host", e.host),
			slog.String("path", e.path), slog.String("proto", e.proto), slog.Int("status", e.status),
			slog.Int64("bytes", e.bytes), slog.Duration("duration", e.duration), slog.String("route", e.route),
			slog.String("pool", e.pool), slog.String("backend", e.backend), slog.Int("attempts", e.attempts))
		return
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.buf[:0]
	for _, p := range a.template {
		if p.v != nil {
			b = p.v(b, e, now)
		} else {
			b = append(b, p.text...)
		}
	}
	a.buf = append(b, '\n')
	_, _ = a.out.Write(a.buf)
}

// Reopen reopens a file destination (after logrotate moved it); others need nothing.
func (a *accessLog) Reopen() error {
	if a == nil || a.file == nil {
		return nil
	}
	return a.file.reopen()
}

// Close closes a file destination.
func (a *accessLog) Close() error {
	if a == nil || a.file == nil {
		return nil
	}
	return a.file.Close()
}

// reopenFile is an append-only file that can be reopened under its path.
type reopenFile struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

func openReopenFile(path string) (*reopenFile, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open access log: %w", err)
	}
	return &reopenFile{path: path, f: f}, nil
}

func (r *reopenFile) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Write(p)
}

func (r *reopenFile) reopen() error {
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("reopen access log: %w (the old file stays in use)", err)
	}
	r.mu.Lock()
	old := r.f
	r.f = f
	r.mu.Unlock()
	return old.Close()
}

func (r *reopenFile) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Close()
}
