package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/switchyard/switchyard/bench/loadstat"
)

// backend answers UnaryCall with size payload bytes (whatever was asked), or code when not OK.
type backend struct {
	testgrpc.UnimplementedTestServiceServer
	size int
	code codes.Code
}

func (b *backend) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if b.code != codes.OK {
		return nil, status.Error(b.code, "as asked")
	}
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: make([]byte, b.size)}}, nil
}

func serve(t *testing.T, b *backend) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(g, b)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

func run(t *testing.T, addr string) *loadstat.Run {
	t.Helper()
	r, err := load(options{addr: addr, req: 64, resp: 512, Options: loadstat.Options{Conns: 2, Concurrency: 4,
		Duration: 300 * time.Millisecond, Requests: 1_000_000, Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r.Line())
	return r
}

func TestGood(t *testing.T) {
	if err := run(t, serve(t, &backend{size: 512})).Verdict(); err != nil {
		t.Fatal(err)
	}
}

// Every non-OK status fails the run, naming it.
func TestNonOKFails(t *testing.T) {
	for _, code := range []codes.Code{codes.Internal, codes.ResourceExhausted, codes.Unavailable} {
		err := run(t, serve(t, &backend{size: 512, code: code})).Verdict()
		if err == nil || !strings.Contains(err.Error(), "status "+code.String()) {
			t.Fatalf("%s: verdict %v, want a failure naming the status", code, err)
		}
	}
}

// An OK answer with a payload of another length fails the run.
func TestWrongLengthFails(t *testing.T) {
	err := run(t, serve(t, &backend{size: 100})).Verdict()
	if err == nil || !strings.Contains(err.Error(), "payload of 100 bytes, want 512") {
		t.Fatalf("verdict %v, want a failure naming the payload length", err)
	}
}

// Nothing listening fails the run.
func TestNoServerFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	r, err := load(options{addr: addr, resp: 1, Options: loadstat.Options{Conns: 1, Concurrency: 1,
		Duration: 100 * time.Millisecond, Requests: 10, Timeout: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict() == nil {
		t.Fatal("a run against no server passed")
	}
}
