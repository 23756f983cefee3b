package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type echoReq struct {
	Name string `json:"name"`
}

func TestServeAndCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "lb.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, %v: want 0600 (root-only)", st.Mode(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ops := map[string]Handler{
		"echo": Handle(func(_ context.Context, r echoReq) (echoReq, error) {
			if r.Name == "missing" {
				return r, NotFound(fmt.Errorf("unknown vip %q", r.Name))
			}
			if r.Name == "" {
				return r, errors.New("name: give one")
			}
			return echoReq{Name: "hello " + r.Name}, nil
		}),
	}
	go func() { done <- Serve(ctx, ln, ops, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	c := NewClient(path)
	var out echoReq
	if err := c.Call(ctx, "echo", echoReq{Name: "web"}, &out); err != nil || out.Name != "hello web" {
		t.Fatalf("call: %v %+v", err, out)
	}
	var ae *Error
	if err := c.Call(ctx, "echo", echoReq{Name: "missing"}, &out); !errors.As(err, &ae) || ae.Status != 404 || !strings.Contains(err.Error(), "unknown vip") {
		t.Fatalf("not found: %v", err)
	}
	if err := c.Call(ctx, "echo", echoReq{}, &out); !errors.As(err, &ae) || ae.Status != 400 || err.Error() != "name: give one" {
		t.Fatalf("bad request: %v", err)
	}
	if err := c.Call(ctx, "echo", map[string]string{"nmae": "x"}, &out); err == nil || !strings.Contains(err.Error(), "same version") {
		t.Fatalf("unknown field: %v", err)
	}
	if err := c.Call(ctx, "nope", Empty{}, nil); err == nil || !strings.Contains(err.Error(), "unknown operation") {
		t.Fatalf("unknown op: %v", err)
	}
	// A second daemon on the same socket is refused while the first answers.
	if _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "another daemon answers") {
		t.Fatalf("second listen: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The daemon is gone: a stale file is replaced by the next Listen.
	os.WriteFile(path, nil, 0o600)
	ln2, err := Listen(path)
	if err != nil {
		t.Fatalf("listen over a stale file: %v", err)
	}
	ln2.Close()
}

func TestClientExplainsConnectionErrors(t *testing.T) {
	dir := t.TempDir()
	err := NewClient(filepath.Join(dir, "none.sock")).Call(context.Background(), "status", Empty{}, nil)
	if err == nil || !strings.Contains(err.Error(), "daemon not running: no control socket") {
		t.Fatalf("missing socket: %v", err)
	}
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	err = NewClient(stale).Call(context.Background(), "status", Empty{}, nil)
	if err == nil || !strings.Contains(err.Error(), "nothing listens") {
		t.Fatalf("stale socket: %v", err)
	}
}
