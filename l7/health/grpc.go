package health

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard/switchyard/l7/balance"
)

// grpcCheckPath is the standard gRPC health-checking method (grpc/doc/health-checking.md).
const grpcCheckPath = "/grpc.health.v1.Health/Check"

// maxHealthAnswer bounds the answer a check reads (a HealthCheckResponse is a few bytes).
const maxHealthAnswer = 4 << 10

// probeGRPC calls grpc.health.v1.Health/Check on b over the pool's own HTTP/2 transport (the
// connections, TLS settings and protocol that real requests use), with the message types of
// the health protocol's own proto package, and wants SERVING with grpc-status 0.
func (c *Checker) probeGRPC(ctx context.Context, b *balance.Backend) error {
	msg, err := proto.Marshal(&healthpb.HealthCheckRequest{Service: c.check.Service})
	if err != nil {
		return fmt.Errorf("encode health request: %w", err)
	}
	body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg))) // uncompressed, length
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.check.Scheme+"://"+b.Address+grpcCheckPath,
		bytes.NewReader(append(body, msg...)))
	if err != nil {
		return fmt.Errorf("build health request: %w", err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("probe %s: %w", b.Address, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxHealthAnswer))
	if err != nil {
		return fmt.Errorf("probe %s: read answer: %w", b.Address, err)
	}
	grpcStatus := resp.Trailer.Get("Grpc-Status")
	if grpcStatus == "" {
		grpcStatus = resp.Header.Get("Grpc-Status") // trailers-only answer
	}
	if resp.StatusCode != http.StatusOK || grpcStatus != "0" {
		return fmt.Errorf("probe %s: HTTP %d grpc-status %q (%s)", b.Address, resp.StatusCode, grpcStatus,
			resp.Trailer.Get("Grpc-Message")+resp.Header.Get("Grpc-Message"))
	}
	if len(answer) < 5 || answer[0] != 0 || int(binary.BigEndian.Uint32(answer[1:5])) != len(answer)-5 {
		return fmt.Errorf("probe %s: not one uncompressed gRPC message (%d bytes)", b.Address, len(answer))
	}
	var hr healthpb.HealthCheckResponse
	if err := proto.Unmarshal(answer[5:], &hr); err != nil {
		return fmt.Errorf("probe %s: decode health answer: %w", b.Address, err)
	}
	if hr.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("probe %s: service %q is %v", b.Address, c.check.Service, hr.Status)
	}
	return nil
}
