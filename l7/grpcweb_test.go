package l7

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// TestGRPCWeb: a real gRPC-Web client (connect-go's, WithGRPCWeb) over HTTP/1.1 and HTTP/2,
// plain and over TLS, calls grpc-go's interop TestService behind an h2c pool: a unary call with
// binary trailing metadata, an error status with its message, a server stream, and the proxy's
// own failure (a refused backend) read as UNAVAILABLE; none through net/http.
func TestGRPCWeb(t *testing.T) {
	backend := startGRPCBackend(t, false)
	dead := closedAddr(t)
	cfg := fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes:
  - {name: dead, pool: dead, match: {path: {exact: /grpc.testing.TestService/EmptyCall}}}
  - {name: all, pool: grpc}
pools:
  - {name: grpc, protocol: h2c, backends: [{address: %q}]}
  - {name: dead, protocol: h2c, backends: [{address: %q}]}
`, backend, dead)
	for _, e := range []engine{{name: "loops"}, {name: "tls", tls: true}, {name: "h2c", h2: true}, {name: "h2tls", h2: true, tls: true}} {
		t.Run(e.name, func(t *testing.T) {
			p := e.start(t, cfg)
			client := newTestClient()
			if e.h2 {
				client = h2Client(p.base())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			grpcWebUnary(ctx, t, client, p.base())
			grpcWebStream(ctx, t, client, p.base())
			empty := connect.NewClient[testgrpc.Empty, testgrpc.Empty](client, p.base()+"/grpc.testing.TestService/EmptyCall", connect.WithGRPCWeb())
			if _, err := empty.CallUnary(ctx, connect.NewRequest(&testgrpc.Empty{})); connect.CodeOf(err) != connect.CodeUnavailable {
				t.Errorf("a call to a refused backend: %v, want unavailable", err)
			}
			if n := p.s.served.of(engineNetHTTP); n != 0 {
				t.Errorf("net/http served %d gRPC-Web calls; every one belongs to the core", n)
			}
		})
	}
}

func grpcWebUnary(ctx context.Context, t *testing.T, client *http.Client, base string) {
	t.Helper()
	unary := connect.NewClient[testgrpc.SimpleRequest, testgrpc.SimpleResponse](client,
		base+"/grpc.testing.TestService/UnaryCall", connect.WithGRPCWeb())
	req := connect.NewRequest(&testgrpc.SimpleRequest{ResponseSize: 100 << 10, Payload: payload(100 << 10)})
	trailing := []byte{0, 1, 2, 0xfe, 0xff}
	req.Header().Set("X-Grpc-Test-Echo-Trailing-Bin", connect.EncodeBinaryHeader(trailing))
	resp, err := unary.CallUnary(ctx, req)
	if err != nil {
		t.Fatalf("unary call: %v", err)
	}
	if n := len(resp.Msg.GetPayload().GetBody()); n != 100<<10 {
		t.Errorf("unary call: %d bytes, want %d", n, 100<<10)
	}
	got, err := connect.DecodeBinaryHeader(resp.Trailer().Get("X-Grpc-Test-Echo-Trailing-Bin"))
	if err != nil || string(got) != string(trailing) {
		t.Errorf("binary trailing metadata %x (%v), want %x", got, err, trailing)
	}
	bad := connect.NewRequest(&testgrpc.SimpleRequest{ResponseStatus: &testgrpc.EchoStatus{Code: 5, Message: "not here"}})
	_, err = unary.CallUnary(ctx, bad)
	var ce *connect.Error
	if connect.CodeOf(err) != connect.CodeNotFound || !asConnect(err, &ce) || ce.Message() != "not here" {
		t.Errorf("error status: %v, want not_found with its message", err)
	}
}

func grpcWebStream(ctx context.Context, t *testing.T, client *http.Client, base string) {
	t.Helper()
	out := connect.NewClient[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse](client,
		base+"/grpc.testing.TestService/StreamingOutputCall", connect.WithGRPCWeb())
	stream, err := out.CallServerStream(ctx, connect.NewRequest(&testgrpc.StreamingOutputCallRequest{
		ResponseParameters: []*testgrpc.ResponseParameters{{Size: 10}, {Size: 20 << 10}, {Size: 30}}}))
	if err != nil {
		t.Fatalf("server stream: %v", err)
	}
	var sizes []int
	for stream.Receive() {
		sizes = append(sizes, len(stream.Msg().GetPayload().GetBody()))
	}
	if err := stream.Err(); err != nil || fmt.Sprint(sizes) != "[10 20480 30]" {
		t.Errorf("server stream: messages %v, %v; want [10 20480 30] and a clean end", sizes, err)
	}
	stream.Close()
}

func asConnect(err error, ce **connect.Error) bool {
	e, ok := err.(*connect.Error)
	*ce = e
	return ok
}
