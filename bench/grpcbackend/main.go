// Command grpcbackend is the gRPC backend of bench/l7.sh's grpc row: grpc-go serving the interop
// TestService (google.golang.org/grpc/interop/grpc_testing) over h2c on -listen. UnaryCall
// answers a payload of the requested response_size (zero bytes, up to 1 MiB, no allocation per
// call); with -code it answers that gRPC status instead, so the bench's checks can be seen to
// fail. Every other method is unimplemented.
package main

import (
	"context"
	"flag"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

const maxResponse = 1 << 20

type server struct {
	testgrpc.UnimplementedTestServiceServer
	code  codes.Code
	zeros []byte
}

func (s *server) UnaryCall(_ context.Context, in *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if s.code != codes.OK {
		return nil, status.Errorf(s.code, "grpcbackend: answering %s as asked (-code)", s.code)
	}
	n := int(in.GetResponseSize())
	if n < 0 || n > maxResponse {
		return nil, status.Errorf(codes.InvalidArgument, "response_size %d: want 0..%d", n, maxResponse)
	}
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: s.zeros[:n]}}, nil
}

// newServer is the gRPC server answering code (codes.OK: the payloads).
func newServer(code codes.Code) *grpc.Server {
	g := grpc.NewServer(grpc.MaxConcurrentStreams(1000))
	testgrpc.RegisterTestServiceServer(g, &server{code: code, zeros: make([]byte, maxResponse)})
	return g
}

func main() {
	listen := flag.String("listen", "127.0.0.1:18210", "h2c address to serve on")
	code := flag.Uint("code", 0, "gRPC status code to answer every call with (0: OK)")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(newServer(codes.Code(*code)).Serve(ln))
}
