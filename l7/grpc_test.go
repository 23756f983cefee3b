package l7

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchyard/switchyard/internal/testutil"
)

// The gRPC tests run grpc-go's own client and server (the interop suite's TestService) through
// the proxy: every listener kind (h2c, h2 over TLS) to every HTTP/2 pool kind (h2c, h2), so
// trailers, grpc-status, binary metadata, flow control and streaming both ways are carried by
// the real thing, not by hand-written frames.

// grpcService is the interop TestService: payloads of the asked sizes, metadata echoed
// (x-grpc-test-echo-initial in the response head, x-grpc-test-echo-trailing-bin in the
// trailers), and the status a request asks for.
type grpcService struct {
	testgrpc.UnimplementedTestServiceServer
}

func echoMetadata(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-grpc-test-echo-initial"); len(v) > 0 {
		if err := grpc.SetHeader(ctx, metadata.Pairs("x-grpc-test-echo-initial", v[0])); err != nil {
			return err
		}
	}
	if v := md.Get("x-grpc-test-echo-trailing-bin"); len(v) > 0 {
		grpc.SetTrailer(ctx, metadata.Pairs("x-grpc-test-echo-trailing-bin", v[0]))
	}
	return nil
}

func payload(n int32) *testgrpc.Payload {
	return &testgrpc.Payload{Body: bytes.Repeat([]byte{'g'}, int(n))}
}

func asked(st *testgrpc.EchoStatus) error {
	if st == nil || st.Code == 0 {
		return nil
	}
	return status.Error(codes.Code(st.Code), st.Message)
}

// sleepingCalls counts the calls asked to sleep (x-sleep) that are sleeping in a backend now.
var sleepingCalls atomic.Int32

func (grpcService) UnaryCall(ctx context.Context, in *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("x-sleep")) > 0 {
		sleepingCalls.Add(1)
		defer sleepingCalls.Add(-1)
		d, _ := time.ParseDuration(md.Get("x-sleep")[0])
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err := echoMetadata(ctx); err != nil {
		return nil, err
	}
	if err := asked(in.ResponseStatus); err != nil {
		return nil, err
	}
	return &testgrpc.SimpleResponse{Payload: payload(in.ResponseSize)}, nil
}

func (grpcService) StreamingOutputCall(in *testgrpc.StreamingOutputCallRequest, stream testgrpc.TestService_StreamingOutputCallServer) error {
	for _, p := range in.ResponseParameters {
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: payload(p.Size)}); err != nil {
			return err
		}
	}
	return asked(in.ResponseStatus)
}

func (grpcService) StreamingInputCall(stream testgrpc.TestService_StreamingInputCallServer) error {
	var sum int32
	for {
		in, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: sum})
		}
		if err != nil {
			return err
		}
		sum += int32(len(in.Payload.GetBody()))
	}
}

func (grpcService) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	if err := echoMetadata(stream.Context()); err != nil {
		return err
	}
	for {
		in, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := asked(in.ResponseStatus); err != nil {
			return err
		}
		for _, p := range in.ResponseParameters {
			if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: payload(p.Size)}); err != nil {
				return err
			}
		}
	}
}

// startGRPCBackend serves grpcService on loopback, over TLS (h2) or cleartext (h2c).
func startGRPCBackend(t *testing.T, withTLS bool) string {
	t.Helper()
	addr, _ := startGRPCBackendHealth(t, withTLS)
	return addr
}

// startGRPCBackendHealth is startGRPCBackend with grpc-go's standard health service, whose
// statuses the test sets.
func startGRPCBackendHealth(t *testing.T, withTLS bool) (string, *grpchealth.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(8 << 20), grpc.MaxSendMsgSize(8 << 20)}
	if withTLS {
		cp, kp, _ := testutil.WriteCert(t, t.TempDir(), "backend.test")
		cert, err := tls.LoadX509KeyPair(cp, kp)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	}
	srv := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(srv, grpcService{})
	hs := grpchealth.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String(), hs
}

// grpcCombos are the listener and pool kinds a gRPC call can take through the proxy.
var grpcCombos = []struct {
	name     string
	listener engine
	pool     string // the pool's protocol settings
	poolTLS  bool
}{
	{"h2c-to-h2c", engine{name: "h2c", h2: true}, "protocol: h2c", false},
	{"h2c-to-h2", engine{name: "h2c", h2: true}, "protocol: h2, insecure_skip_verify: true", true},
	{"tls-to-h2c", engine{name: "h2tls", h2: true, tls: true}, "protocol: h2c", false},
	{"tls-to-h2", engine{name: "h2tls", h2: true, tls: true}, "protocol: h2, insecure_skip_verify: true", true},
}

// dialGRPC is a grpc-go client of the proxy p (TLS without verification on a TLS listener).
func dialGRPC(t *testing.T, p *engineProxy) testgrpc.TestServiceClient {
	t.Helper()
	creds := insecure.NewCredentials()
	if p.tls {
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // test certificate
	}
	cc, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20), grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

// TestGRPCThroughEveryCombination: unary (4 MiB each way), metadata and binary trailers,
// an error status with its message, server-, client- and bidirectional streaming, through every
// listener kind to every HTTP/2 pool kind, every call on the request core's own HTTP/2
// connections (forward_h2.go), none through net/http.
func TestGRPCThroughEveryCombination(t *testing.T) {
	for _, c := range grpcCombos {
		t.Run(c.name, func(t *testing.T) {
			backend := startGRPCBackend(t, c.poolTLS)
			p := c.listener.start(t, oneRoute(", "+c.pool, backend))
			tc := dialGRPC(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			grpcUnary(ctx, t, tc)
			grpcStatus(ctx, t, tc)
			grpcServerStreaming(ctx, t, tc)
			grpcClientStreaming(ctx, t, tc)
			grpcBidi(ctx, t, tc)
			if core, nh := p.s.served.of(engineH2), p.s.served.of(engineNetHTTP); core == 0 || nh != 0 {
				t.Errorf("the h2 engine served %d calls and net/http %d: every call belongs to the core", core, nh)
			}
		})
	}
}

func grpcUnary(ctx context.Context, t *testing.T, tc testgrpc.TestServiceClient) {
	t.Helper()
	const big = 4 << 20
	trailing := string([]byte{0, 1, 2, 0xfe, 0xff})
	ctx = metadata.AppendToOutgoingContext(ctx, "x-grpc-test-echo-initial", "hello", "x-grpc-test-echo-trailing-bin", trailing)
	var hdr, trl metadata.MD
	resp, err := tc.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: big, Payload: payload(big)}, grpc.Header(&hdr), grpc.Trailer(&trl))
	if err != nil {
		t.Fatalf("unary call (4 MiB each way): %v", err)
	}
	if n := len(resp.Payload.GetBody()); n != big {
		t.Errorf("unary: got %d payload bytes, want %d", n, big)
	}
	if v := hdr.Get("x-grpc-test-echo-initial"); len(v) != 1 || v[0] != "hello" {
		t.Errorf("unary: initial metadata %v, want hello", v)
	}
	if v := trl.Get("x-grpc-test-echo-trailing-bin"); len(v) != 1 || v[0] != trailing {
		t.Errorf("unary: binary trailing metadata %q, want %q", v, trailing)
	}
}

func grpcStatus(ctx context.Context, t *testing.T, tc testgrpc.TestServiceClient) {
	t.Helper()
	msg := "no such thing \t\n (ünïcode, 100% sure)"
	_, err := tc.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseStatus: &testgrpc.EchoStatus{Code: int32(codes.NotFound), Message: msg}})
	if st, _ := status.FromError(err); st.Code() != codes.NotFound || st.Message() != msg {
		t.Errorf("error status: got %v %q, want NotFound %q", st.Code(), st.Message(), msg)
	}
}

func grpcServerStreaming(ctx context.Context, t *testing.T, tc testgrpc.TestServiceClient) {
	t.Helper()
	sizes := []int32{1, 31415, 0, 1 << 20, 2653}
	req := &testgrpc.StreamingOutputCallRequest{}
	for _, n := range sizes {
		req.ResponseParameters = append(req.ResponseParameters, &testgrpc.ResponseParameters{Size: n})
	}
	stream, err := tc.StreamingOutputCall(ctx, req)
	if err != nil {
		t.Fatalf("server streaming: %v", err)
	}
	for i, n := range sizes {
		m, err := stream.Recv()
		if err != nil {
			t.Fatalf("server streaming: message %d: %v", i, err)
		}
		if len(m.Payload.GetBody()) != int(n) {
			t.Errorf("server streaming: message %d has %d bytes, want %d", i, len(m.Payload.GetBody()), n)
		}
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("server streaming: after the last message: %v, want io.EOF (status OK in the trailers)", err)
	}
}

func grpcClientStreaming(ctx context.Context, t *testing.T, tc testgrpc.TestServiceClient) {
	t.Helper()
	stream, err := tc.StreamingInputCall(ctx)
	if err != nil {
		t.Fatalf("client streaming: %v", err)
	}
	var sum int32
	for _, n := range []int32{27182, 8, 1828, 45904, 3 << 20} {
		if err := stream.Send(&testgrpc.StreamingInputCallRequest{Payload: payload(n)}); err != nil {
			t.Fatalf("client streaming: send: %v", err)
		}
		sum += n
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		t.Fatalf("client streaming: close: %v", err)
	}
	if resp.AggregatedPayloadSize != sum {
		t.Errorf("client streaming: aggregated %d, want %d", resp.AggregatedPayloadSize, sum)
	}
}

// grpcBidi plays ping-pong: each answer must arrive before the next request is sent, so the
// proxy must stream both directions at once.
func grpcBidi(ctx context.Context, t *testing.T, tc testgrpc.TestServiceClient) {
	t.Helper()
	stream, err := tc.FullDuplexCall(ctx)
	if err != nil {
		t.Fatalf("bidi: %v", err)
	}
	for i, n := range []int32{31415, 9, 2653, 58979, 1 << 20} {
		req := &testgrpc.StreamingOutputCallRequest{ResponseParameters: []*testgrpc.ResponseParameters{{Size: n}}, Payload: payload(n)}
		if err := stream.Send(req); err != nil {
			t.Fatalf("bidi: send %d: %v", i, err)
		}
		m, err := stream.Recv()
		if err != nil {
			t.Fatalf("bidi: receive %d: %v", i, err)
		}
		if len(m.Payload.GetBody()) != int(n) {
			t.Fatalf("bidi: answer %d has %d bytes, want %d", i, len(m.Payload.GetBody()), n)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("bidi: after close: %v, want io.EOF", err)
	}
}

// TestGRPCProxyFailures: what the proxy itself fails is answered as gRPC clients read it, HTTP
// 200 with grpc-status in the trailers-only form: no route UNIMPLEMENTED, a shed request
// RESOURCE_EXHAUSTED, a backend that refuses connections UNAVAILABLE.
func TestGRPCProxyFailures(t *testing.T) {
	for _, e := range h2Engines {
		t.Run(e.name, func(t *testing.T) {
			backend := startGRPCBackend(t, false)
			dead, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			deadAddr := dead.Addr().String()
			dead.Close()
			p := e.start(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes:
  - {name: unary, pool: one, match: {path: {exact: /grpc.testing.TestService/UnaryCall}}}
  - {name: dead, pool: dead, match: {path: {exact: /grpc.testing.TestService/StreamingInputCall}}}
pools:
  - {name: one, protocol: h2c, max_in_flight: 1, backends: [{address: %q}]}
  - {name: dead, protocol: h2c, backends: [{address: %q}]}
`, backend, deadAddr))
			tc := dialGRPC(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			want := func(what string, err error, code codes.Code) {
				t.Helper()
				if st, _ := status.FromError(err); st.Code() != code || st.Message() == "" {
					t.Errorf("%s: %v %q, want %v with a message", what, st.Code(), st.Message(), code)
				}
			}
			_, err = tc.EmptyCall(ctx, &testgrpc.Empty{})
			want("no route", err, codes.Unimplemented)

			stream, err := tc.StreamingInputCall(ctx)
			if err == nil {
				_, err = stream.CloseAndRecv()
			}
			want("refused connection", err, codes.Unavailable)

			held := make(chan error, 1)
			slow := metadata.AppendToOutgoingContext(ctx, "x-sleep", "2s")
			go func() { _, err := tc.UnaryCall(slow, &testgrpc.SimpleRequest{}); held <- err }()
			// Only once the slow call holds the pool's one place (it sleeps in the backend) does a
			// second call come: probing earlier could take the place from the slow call itself.
			testutil.Eventually(t, 5*time.Second, func() bool { return sleepingCalls.Load() > 0 },
				"the slow call never reached the backend")
			_, err = tc.UnaryCall(ctx, &testgrpc.SimpleRequest{})
			want("shed (pool max_in_flight)", err, codes.ResourceExhausted)
			if err := <-held; err != nil {
				t.Errorf("the call that held the pool: %v", err)
			}
		})
	}
}

// grpcRaw sends one gRPC-shaped request with an HTTP/2 client that enforces no deadline of its
// own, so what bounds the exchange is the proxy.
func grpcRaw(t *testing.T, base string, hdr ...string) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequest("POST", base+"/svc/Method", bytes.NewReader([]byte{0, 0, 0, 0, 0}))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := h2Client(base).Do(req)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

// TestGRPCTimeoutBoundsTheExchange: a backend that ignores grpc-timeout is cut by the proxy at
// the client's deadline, which then answers DEADLINE_EXCEEDED.
func TestGRPCTimeoutBoundsTheExchange(t *testing.T) {
	b := startBackend(t, "slow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
		}
	}))
	for _, e := range h2Engines {
		t.Run(e.name, func(t *testing.T) {
			p := e.start(t, oneRoute(", protocol: h2c", b.addr))
			start := time.Now()
			resp, _, err := grpcRaw(t, p.base(), "Grpc-Timeout", "300m")
			if took := time.Since(start); err != nil || took > 3*time.Second {
				t.Fatalf("answered after %v (%v); want the 300 ms grpc-timeout to bound it", took, err)
			}
			if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "4" {
				t.Fatalf("got %d grpc-status %q, want 200 with grpc-status 4 (DEADLINE_EXCEEDED)", resp.StatusCode, resp.Header.Get("Grpc-Status"))
			}
		})
	}
}

// TestResponseCutMidBody: a backend that resets its stream after part of the body: a gRPC
// client gets UNAVAILABLE in the trailers, any other client a reset stream, never a clean end.
func TestResponseCutMidBody(t *testing.T) {
	b := startBackend(t, "cut", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		w.Write(bytes.Repeat([]byte{'x'}, 1000))
		http.NewResponseController(w).Flush()
		time.Sleep(50 * time.Millisecond)
		panic(http.ErrAbortHandler)
	}))
	for _, e := range h2Engines {
		t.Run(e.name, func(t *testing.T) {
			p := e.start(t, oneRoute(", protocol: h2c", b.addr))
			resp, body, err := grpcRaw(t, p.base())
			if err != nil || resp.Trailer.Get("Grpc-Status") != "14" {
				t.Errorf("gRPC: body %d bytes, %v, trailers %v; want the body's end with grpc-status 14", len(body), err, resp.Trailer)
			}
			req, _ := http.NewRequest("GET", p.base()+"/file", nil)
			resp, err = h2Client(p.base()).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil {
				t.Errorf("plain HTTP/2: a body cut after %d bytes ended cleanly; want a stream error", len(body))
			}
		})
	}
}

// TestClientAbortsDoNotEject: clients that give up on requests to a slow backend (HTTP/2
// streams reset, HTTP/1.0 connections closed with RST) do not make it an outlier, on the core's
// HTTP/1.1 pools and on HTTP/2 pools alike.
func TestClientAbortsDoNotEject(t *testing.T) {
	for _, pool := range []string{"", ", protocol: h2c"} {
		for _, e := range h2Engines {
			t.Run(e.name+pool, func(t *testing.T) {
				b := startBackend(t, "b1", nil)
				b.delay.Store(int64(2 * time.Second))
				p := e.start(t, oneRoute(pool+", outlier: {consecutive_errors: 3, ejection_time: 1m, max_ejected_percent: 100}", b.addr))
				c := h2Client(p.base())
				for i := range 9 {
					ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
					req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/abort/%d", p.base(), i), nil)
					if resp, err := c.Do(req); err == nil {
						resp.Body.Close()
						t.Fatalf("request %d was answered (%d); want the client to give up first", i, resp.StatusCode)
					}
					cancel()
				}
				if !e.tls {
					for range 9 {
						conn, err := net.Dial("tcp", p.addr)
						if err != nil {
							t.Fatal(err)
						}
						io.WriteString(conn, "GET /abort HTTP/1.0\r\n\r\n")
						time.Sleep(50 * time.Millisecond)
						conn.(*net.TCPConn).SetLinger(0)
						conn.Close() // RST
					}
				}
				b.delay.Store(0)
				time.Sleep(100 * time.Millisecond)
				resp, body := get(t, h2Client(p.base()), "GET", p.base()+"/after", nil)
				if resp.StatusCode != 200 {
					t.Fatalf("after the aborts: %d %q; want 200 (a client's abort is not the backend's failure)", resp.StatusCode, body)
				}
			})
		}
	}
}

// base is the proxy's URL (https:// on a TLS listener).
func (p *engineProxy) base() string {
	if p.tls {
		return "https://" + p.addr
	}
	return "http://" + p.addr
}

// TestGRPCHealthCheck: a gRPC pool's active check is the standard grpc.health.v1 Check, over
// cleartext and TLS: a service that reports NOT_SERVING leaves rotation (calls get
// UNAVAILABLE), and comes back when it reports SERVING again.
func TestGRPCHealthCheck(t *testing.T) {
	for _, c := range []struct {
		name, pool string
		tls        bool
	}{{"h2c", "protocol: h2c", false}, {"h2", "protocol: h2, insecure_skip_verify: true", true}} {
		t.Run(c.name, func(t *testing.T) {
			const svc = "grpc.testing.TestService"
			addr, hs := startGRPCBackendHealth(t, c.tls)
			hs.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
			p := engine{name: "h2c", h2: true}.start(t, oneRoute(", "+c.pool+
				", health: {type: grpc, service: "+svc+", interval: 100ms, timeout: 90ms, rise: 1, fall: 1}", addr))
			tc := dialGRPC(t, p)
			call := func() codes.Code {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := tc.UnaryCall(ctx, &testgrpc.SimpleRequest{})
				return status.Code(err)
			}
			testutil.Eventually(t, 5*time.Second, func() bool { return call() == codes.OK }, "calls never succeeded with the service SERVING")
			hs.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
			testutil.Eventually(t, 5*time.Second, func() bool { return call() == codes.Unavailable },
				"the backend stayed in rotation with its service NOT_SERVING")
			hs.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
			testutil.Eventually(t, 5*time.Second, func() bool { return call() == codes.OK },
				"the backend did not come back once SERVING again")
		})
	}
}

// TestGRPCHealthConfigErrors: a grpc check needs an HTTP/2 pool and takes no path.
func TestGRPCHealthConfigErrors(t *testing.T) {
	for pool, want := range map[string]string{
		"health: {type: grpc}":                          "set the pool's protocol to h2c or h2",
		"protocol: h2c, health: {type: grpc, path: /x}": "remove path",
		"health: {type: tcp}":                           `unknown "tcp"; use http or grpc`,
		"health: {service: foo}":                        "set type: grpc",
	} {
		_, err := ParseConfig([]byte(oneRoute(", "+pool, "127.0.0.1:1")))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", pool, err, want)
		}
	}
}

// TestGRPCPythonClient: a second gRPC implementation, Python's grpcio (Debian's
// python3-grpcio), through an h2c listener to h2c and h2 pools: unary with binary trailing
// metadata, an error status, and the three streaming kinds.
func TestGRPCPythonClient(t *testing.T) {
	py := pythonWith(t, "grpc", "python3-grpcio")
	for _, c := range grpcCombos[:2] {
		t.Run(c.name, func(t *testing.T) {
			p := c.listener.start(t, oneRoute(", "+c.pool, startGRPCBackend(t, c.poolTLS)))
			out, err := exec.Command(py, "testdata/grpc_client.py", p.addr).CombinedOutput()
			if err != nil {
				t.Fatalf("python grpc client: %v\n%s", err, out)
			}
			var got struct {
				UnaryBytes           int     `json:"unary_bytes"`
				TrailingBin          [][]int `json:"trailing_bin"`
				Status               string  `json:"status"`
				StatusDetails        string  `json:"status_details"`
				ServerStreamMessages int     `json:"server_stream_messages"`
				Aggregated           int     `json:"aggregated"`
				DuplexMessages       int     `json:"duplex_messages"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("client output: %v\n%s", err, out)
			}
			if got.UnaryBytes < 1<<20 || fmt.Sprint(got.TrailingBin) != "[[0 1 254]]" || got.Status != "NOT_FOUND" ||
				got.StatusDetails != "nope" || got.ServerStreamMessages != 4 || got.Aggregated != 27182+8+1828+45904 || got.DuplexMessages != 4 {
				t.Fatalf("python grpc client saw %+v", got)
			}
		})
	}
}

// unavailableService answers every unary call UNAVAILABLE (trailers-only) and counts them.
type unavailableService struct {
	testgrpc.UnimplementedTestServiceServer
	calls *atomic.Int32
}

func (s unavailableService) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.calls.Add(1)
	return nil, status.Error(codes.Unavailable, "draining")
}

// A route's retry.grpc_status retries a call a backend answered with one of those statuses in
// trailers-only form, on another backend; without it the client sees the backend's status.
func TestGRPCRetryOnStatus(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, unavailableService{calls: &calls})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	good := startGRPCBackend(t, false)
	for _, retry := range []string{"", ", retry: {attempts: 1, non_idempotent: true, buffer_body: 4096, grpc_status: [UNAVAILABLE]}"} {
		p := engine{name: "h2c", h2: true}.start(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p%s}]
pools: [{name: p, protocol: h2c, balance: round_robin, backends: [{address: %q}, {address: %q}]}]
`, retry, ln.Addr().String(), good))
		tc := dialGRPC(t, p)
		unavailable := 0
		for range 6 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := tc.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 10})
			cancel()
			switch status.Code(err) {
			case codes.OK:
			case codes.Unavailable:
				unavailable++
			default:
				t.Fatalf("retry %q: %v", retry, err)
			}
		}
		if retry == "" && unavailable == 0 {
			t.Error("without grpc_status every call succeeded: the failing backend was never picked")
		}
		if retry != "" && unavailable != 0 {
			t.Errorf("with grpc_status %d of 6 calls ended UNAVAILABLE, want 0 (each retried on the other backend)", unavailable)
		}
	}
	if calls.Load() == 0 {
		t.Error("the failing backend was never called")
	}
}
