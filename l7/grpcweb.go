package l7

import (
	"net/http"
	"strconv"

	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/internal/h2"
	"github.com/switchyard/switchyard/l7/core"
)

// gRPC-Web (binary; PROTOCOL-WEB.md): a browser's gRPC call, over HTTP/1.1 or HTTP/2, whose
// response trailers come as a last frame of the body (flag 0x80) since a browser cannot read
// HTTP trailers. A call to an h2 or h2c pool is translated on the way (as Envoy's grpc_web
// filter does): the backend gets plain gRPC (Content-Type application/grpc..., TE: trailers),
// the client gets its messages as they come and the trailers as that last frame. The exchange
// is the gRPC one (h2Leg): grpc-timeout, retries on grpc_status, and the proxy's own failures
// answered in gRPC-Web's form (grpc-status in the head of an empty 200). A call to an http1
// pool passes untouched (its backend speaks gRPC-Web itself); so does the base64 form
// (application/grpc-web-text).

// toGRPC turns a gRPC-Web request's fields into a gRPC request's.
func toGRPC(h http.Header) {
	h["Content-Type"] = []string{core.GRPCWebToGRPC(h.Get("Content-Type"))}
	h["Te"] = []string{"trailers"}
	delete(h, "X-Grpc-Web")
}

// toGRPCWeb turns a gRPC response's head into a gRPC-Web one's: its Content-Type, and, unless
// it is a trailers-only answer (its status in the head, which gRPC-Web reads there too), a body
// of unknown length, since the trailers' frame will follow the messages. It reports whether
// that frame is due.
func toGRPCWeb(resp *http.Response) bool {
	resp.Header["Content-Type"] = []string{core.GRPCToGRPCWeb(resp.Header.Get("Content-Type"))}
	if resp.Header.Get("Grpc-Status") != "" {
		return false
	}
	delete(resp.Header, "Content-Length")
	resp.ContentLength = -1
	return true
}

// endBody ends a response body relayed from an HTTP/2 upstream with its trailers: as trailers
// (an HTTP/2 trailer block, or a chunked trailer section), or for gRPC-Web as the body's last
// frame.
func (gc *goConn) endBody(trailers []h1.Field) error {
	body := &gc.body
	if gc.webTrailers {
		gc.webFrame = core.AppendGRPCWebTrailers(gc.webFrame[:0], trailers)
		_, out, _ := body.Next(gc.webFrame)
		if err := gc.sendBody(out); err != nil {
			return err
		}
		trailers = nil
	}
	return gc.sendBody(body.Finish(trailers))
}

// grpcWebError answers a gRPC-Web call the proxy fails itself: HTTP 200 with no body and the
// gRPC status that stands for code in the head (a gRPC-Web client reads a trailers-only answer
// there).
func (cc *clientConn) grpcWebError(code int, msg string, extra []byte, closeConn bool) error {
	status := strconv.AppendInt(nil, int64(grpcStatusOf(code, extra)), 10)
	message := []byte(core.GRPCMessage(msg))
	if cc.stream != nil {
		b := h2.AppendStatus(cc.block[:0], http.StatusOK)
		b = h2.AppendField(b, hContentType, grpcWebType)
		b = h2.AppendField(b, hGRPCStatus, status)
		b = h2.AppendField(b, hGRPCMessage, message)
		cc.block = b
		return cc.stream.Respond(b, nil, true)
	}
	b := append(cc.out[:0], "HTTP/1.1 200 OK\r\nContent-Type: "...)
	b = append(append(b, grpcWebType...), "\r\nGrpc-Status: "...)
	b = append(append(b, status...), "\r\nGrpc-Message: "...)
	b = append(append(b, message...), "\r\nContent-Length: 0\r\n"...)
	if closeConn {
		b = append(b, "Connection: close\r\n"...)
	}
	cc.out = append(b, "\r\n"...)
	_, err := cc.w.Write(cc.out)
	return err
}

var grpcWebType = []byte("application/grpc-web+proto")
