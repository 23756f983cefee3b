// Command grpcload is the gRPC load generator of bench/l7.sh's grpc row: -c HTTP/2 connections
// (each its own grpc-go ClientConn, h2c), -m unary calls in flight on each, for -d or until -n
// calls in all, whichever comes first. Each call is grpc.testing.TestService/UnaryCall (the
// interop service of google.golang.org/grpc/interop/grpc_testing) with a -req byte payload,
// asking for a -resp byte answer. Before the window opens each connection makes one call (its
// connection; checked, not timed). Every call is checked: status OK and exactly -resp payload
// bytes; any other status (the proxy's or the backend's), a wrong length, a transport error or a
// deadline fails the run (exit 1, naming the first). It prints one line of key=value pairs
// (bench/loadstat: requests, ok, bad, errors, timeouts, rps, p50_ms, p99_ms, elapsed).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/switchyard/switchyard/bench/loadstat"
)

type options struct {
	loadstat.Options
	addr      string
	req, resp int
}

func main() {
	var o options
	flag.StringVar(&o.addr, "addr", "127.0.0.1:18211", "h2c address of the server or proxy")
	o.Register(flag.CommandLine, "HTTP/2 connections", "calls")
	flag.IntVar(&o.req, "req", 64, "request payload bytes")
	flag.IntVar(&o.resp, "resp", 512, "response payload bytes asked for (and checked)")
	flag.Parse()
	if err := o.Check(); err != nil {
		fmt.Fprintln(os.Stderr, "grpcload: bounded runs only:", err)
		os.Exit(2)
	}
	if o.req < 0 || o.req > 1<<20 || o.resp < 0 || o.resp > 1<<20 {
		fmt.Fprintln(os.Stderr, "grpcload: -req and -resp: 0..1048576 bytes")
		os.Exit(2)
	}
	r, err := load(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpcload:", err)
		os.Exit(1)
	}
	r.Exit("grpcload")
}

// load runs the connections and returns the run's counts.
func load(o options) (*loadstat.Run, error) {
	r := loadstat.NewRun(o.Options)
	clients := make([]testgrpc.TestServiceClient, o.Conns)
	for i := range clients {
		cc, err := grpc.NewClient("passthrough:///"+o.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		defer cc.Close()
		clients[i] = testgrpc.NewTestServiceClient(cc)
	}
	in := &testgrpc.SimpleRequest{ResponseSize: int32(o.resp), Payload: &testgrpc.Payload{Body: make([]byte, o.req)}}
	r.Drive(len(clients), func(i int) (loadstat.Outcome, string) { return call(clients[i], o, in) })
	return r, nil
}

// call makes one unary call and checks its answer.
func call(c testgrpc.TestServiceClient, o options, in *testgrpc.SimpleRequest) (loadstat.Outcome, string) {
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	out, err := c.UnaryCall(ctx, in)
	if err != nil {
		st := status.Convert(err)
		what := fmt.Sprintf("status %s: %s", st.Code(), st.Message())
		switch st.Code() {
		case codes.DeadlineExceeded:
			return loadstat.Timeout, what
		case codes.Unavailable, codes.Canceled:
			// No answer from the far end: the connection or stream failed.
			return loadstat.Error, what
		}
		return loadstat.Bad, what
	}
	if n := len(out.GetPayload().GetBody()); n != o.resp {
		return loadstat.Bad, fmt.Sprintf("payload of %d bytes, want %d", n, o.resp)
	}
	return loadstat.OK, ""
}
