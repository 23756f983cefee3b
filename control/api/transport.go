package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Error is an error answered by the daemon.
type Error struct {
	// Status is the HTTP status: 400 for bad input, 404 for unknown VIP or backend, 500 else.
	Status int
	Msg    string
}

// Error is the daemon's message.
func (e *Error) Error() string { return e.Msg }

// NotFound makes a 404 error (unknown VIP or backend).
func NotFound(err error) error { return &Error{Status: http.StatusNotFound, Msg: err.Error()} }

// Handler serves one operation: it decodes its request from raw and returns the result.
type Handler func(ctx context.Context, raw json.RawMessage) (any, error)

// Handle adapts a typed function to a Handler.
func Handle[Req any, Resp any](f func(context.Context, Req) (Resp, error)) Handler {
	return func(ctx context.Context, raw json.RawMessage) (any, error) {
		var req Req
		if len(raw) > 0 {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				return nil, &Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("decode request: %v (is the CLI the same version as the daemon?)", err)}
			}
		}
		return f(ctx, req)
	}
}

// Listen opens the root-only control socket at path. A stale socket file left by a daemon that
// died is replaced; a socket another daemon answers on is an error.
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return nil, fmt.Errorf("listen on %s: another daemon answers there: stop it, or give this one another --socket", path)
	}
	_ = os.Remove(path)
	// umask-free: create, then restrict before anyone can connect in the meantime.
	old := syscall.Umask(0o077)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("restrict socket %s: %w", path, err)
	}
	return ln, nil
}

// Serve answers operations on ln until ctx ends, and returns once the calls in flight are done.
func Serve(ctx context.Context, ln net.Listener, ops map[string]Handler, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		op := strings.TrimPrefix(r.URL.Path, "/v1/")
		h, ok := ops[op]
		if !ok {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("unknown operation %q: is the CLI the same version as the daemon?", op)})
			return
		}
		if r.Method != http.MethodPost {
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "use POST"})
			return
		}
		raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "read request: " + err.Error()})
			return
		}
		res, err := h(r.Context(), raw)
		if err != nil {
			status := http.StatusBadRequest
			var ae *Error
			if errors.As(err, &ae) {
				status = ae.Status
			}
			log.Info("api call failed", "op", op, "err", err)
			writeJSON(w, status, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.Serve(ln)
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve control socket: %w", err)
	}
	// Serve returns as Shutdown begins; wait for the calls in flight, which use the owner's
	// handles, before the owner closes them.
	<-stopped
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Client calls a daemon.
type Client struct {
	path string
	hc   *http.Client
}

// NewClient makes a client of the daemon at the socket path.
func NewClient(path string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	return &Client{path: path, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// Call performs one operation and decodes its result into resp (which may be nil).
func (c *Client) Call(ctx context.Context, op string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://switchyard/v1/"+op, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("call %s: %w", op, err)
	}
	hresp, err := c.hc.Do(hreq)
	if err != nil {
		return c.explain(err)
	}
	defer hresp.Body.Close()
	b, err := io.ReadAll(hresp.Body)
	if err != nil {
		return fmt.Errorf("read answer of %s: %w", op, err)
	}
	if hresp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return &Error{Status: hresp.StatusCode, Msg: e.Error}
	}
	if resp == nil {
		return nil
	}
	if err := json.Unmarshal(b, resp); err != nil {
		return fmt.Errorf("decode answer of %s: %w", op, err)
	}
	return nil
}

// explain turns a connection error into what the operator should do.
func (c *Client) explain(err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("daemon not running: no control socket at %s: start it with `switchyard lb run --config FILE`, or give its socket with --socket or SWITCHYARD_SOCKET", c.path)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("daemon not running: nothing listens on %s (a stale socket): start it with `switchyard lb run`", c.path)
	case errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EACCES):
		return fmt.Errorf("not root: the control socket %s is root-only: run the command as root (sudo)", c.path)
	}
	return fmt.Errorf("call daemon at %s: %w", c.path, err)
}
