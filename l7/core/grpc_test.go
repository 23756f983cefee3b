package core

import (
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/h1"
)

func TestIsGRPC(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/grpc": true, "application/grpc+proto": true, "Application/GRPC; charset=x": true,
		"application/grpc-web": false, "application/grpcx": false, "application/json": false, "": false,
	} {
		if IsGRPC(ct) != want {
			t.Errorf("IsGRPC(%q) = %v, want %v", ct, !want, want)
		}
	}
}

func TestGRPCTimeout(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"1H": time.Hour, "2M": 2 * time.Minute, "300m": 300 * time.Millisecond, "5S": 5 * time.Second,
		"7u": 7 * time.Microsecond, "99999999n": 99999999, "99999999H": 1<<63 - 1,
	} {
		if got, ok := GRPCTimeout(v); !ok || got != want {
			t.Errorf("GRPCTimeout(%q) = %v %v, want %v", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "S", "100", "123456789S", "1x", "-1S", "+1S", "1.5S"} {
		if got, ok := GRPCTimeout(v); ok {
			t.Errorf("GRPCTimeout(%q) = %v, want refused", v, got)
		}
	}
}

func TestGRPCStatusAndMessage(t *testing.T) {
	for _, c := range []struct {
		http int
		shed bool
		want int
	}{{503, true, GRPCResourceExhausted}, {503, false, GRPCUnavailable}, {502, false, GRPCUnavailable},
		{504, false, GRPCDeadlineExceeded}, {404, false, GRPCUnimplemented}, {429, false, GRPCResourceExhausted},
		{400, false, GRPCInternal}, {418, false, GRPCUnknown}} {
		if got := GRPCStatus(c.http, c.shed); got != c.want {
			t.Errorf("GRPCStatus(%d, %v) = %d, want %d", c.http, c.shed, got, c.want)
		}
	}
	if got := GRPCMessage("100% sûr\n"); got != "100%25 s%C3%BBr%0A" {
		t.Errorf("GRPCMessage: %q", got)
	}
}

func TestGRPCWebTypesAndTrailers(t *testing.T) {
	for ct, want := range map[string]bool{"application/grpc-web": true, "application/grpc-web+proto": true,
		"Application/gRPC-Web; charset=utf-8": true, "application/grpc-web-text": false, "application/grpc": false} {
		if got := IsGRPCWeb(ct); got != want {
			t.Errorf("IsGRPCWeb(%q) = %v, want %v", ct, got, want)
		}
	}
	if got := GRPCWebToGRPC("application/grpc-web+proto"); got != "application/grpc+proto" {
		t.Errorf("to gRPC: %q", got)
	}
	if got := GRPCToGRPCWeb("application/grpc"); got != "application/grpc-web" {
		t.Errorf("to gRPC-Web: %q", got)
	}
	got := AppendGRPCWebTrailers([]byte("x"), []h1.Field{{Name: []byte("Grpc-Status"), Value: []byte("0")}})
	want := "x\x80\x00\x00\x00\x10grpc-status: 0\r\n"
	if string(got) != want {
		t.Errorf("trailer frame %q, want %q", got, want)
	}
}
