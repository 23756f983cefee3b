package main

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

func client(t *testing.T, code codes.Code) testgrpc.TestServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := newServer(code)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

// UnaryCall answers the size asked for; -code answers that status; oversized asks are refused.
func TestUnaryCall(t *testing.T) {
	c := client(t, codes.OK)
	out, err := c.UnaryCall(context.Background(), &testgrpc.SimpleRequest{ResponseSize: 512})
	if err != nil || len(out.GetPayload().GetBody()) != 512 {
		t.Fatalf("UnaryCall: %v, %d bytes; want OK with 512", err, len(out.GetPayload().GetBody()))
	}
	if _, err := c.UnaryCall(context.Background(), &testgrpc.SimpleRequest{ResponseSize: maxResponse + 1}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("oversized ask: %v, want InvalidArgument", err)
	}
	if _, err := client(t, codes.Unavailable).UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("-code 14: %v, want Unavailable", err)
	}
}
