package l7

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// TestWebSocketOverHTTP2: a WebSocket client over HTTP/2 (RFC 8441 extended CONNECT; Python's
// h2 and wsproto, two real implementations) reaches an HTTP/1.1 WebSocket backend (x/net's
// websocket server, which checks the Upgrade handshake) through h2c and TLS listeners, and
// plays ping-pong through it: the proxy answers the client 200 once the backend switched
// protocols, then carries the frames both ways.
func TestWebSocketOverHTTP2(t *testing.T) {
	py := pythonWith(t, "h2, wsproto", "python3-h2 python3-wsproto")
	echo := httptest.NewServer(websocket.Handler(func(ws *websocket.Conn) {
		io.Copy(ws, ws)
		ws.Close() // answers the client's close frame with its own
	}))
	t.Cleanup(echo.Close)
	for _, e := range h2Engines {
		t.Run(e.name, func(t *testing.T) {
			p := e.start(t, oneRoute("", echo.Listener.Addr().String()))
			p.viaNetHTTP = true // extended CONNECT takes net/http's upgrade path (docs/l7.md)
			args := []string{"testdata/ws_h2_client.py", p.addr}
			if e.tls {
				args = append(args, "tls")
			}
			args = append(args, "/ws", "hello", "über", "third")
			out, err := exec.Command(py, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("client: %v\n%s", err, out)
			}
			var got struct {
				ConnectProtocol bool     `json:"connect_protocol"`
				Status          string   `json:"status"`
				Echoes          []string `json:"echoes"`
				Closed          any      `json:"closed"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("client output: %v\n%s", err, out)
			}
			if !got.ConnectProtocol || got.Status != "200" || fmt.Sprint(got.Echoes) != "[hello über third]" || got.Closed != float64(1000) {
				t.Fatalf("client saw %+v; want extended CONNECT offered, 200, three echoes and a clean close (1000)", got)
			}
		})
	}
}

// TestWebSocketToHTTP2Backend: WebSocket clients of both kinds reach an HTTP/2 backend that
// takes WebSocket only as RFC 8441 extended CONNECT (python-hyper's h2 and wsproto, another
// implementation than ours) through an h2c pool, on every engine: an HTTP/2 client's extended
// CONNECT is carried as one; an HTTP/1.1 client's Upgrade (x/net's websocket client, which
// checks the Sec-WebSocket-Accept it gets) becomes one. A path the backend refuses comes back
// as the backend's 404.
func TestWebSocketToHTTP2Backend(t *testing.T) {
	py := pythonWith(t, "h2, wsproto", "python3-h2 python3-wsproto")
	backend := startPythonServer(t, py, "testdata/ws_h2_server.py")
	forEachEngineAndH2(t, func(t *testing.T, e engine) {
		p := e.start(t, oneRoute(", protocol: h2c", e.backend(backend)))
		p.viaNetHTTP = true // upgrades and extended CONNECT take net/http's upgrade path (docs/l7.md)
		if e.h2 {
			args := []string{"testdata/ws_h2_client.py", p.addr}
			if e.tls {
				args = append(args, "tls")
			}
			out, err := exec.Command(py, append(args, "/ws", "hello", "über")...).CombinedOutput()
			if err != nil {
				t.Fatalf("client: %v\n%s", err, out)
			}
			if want := `{"connect_protocol": true, "status": "200", "echoes": ["hello", "\u00fcber"], "closed": 1000}`; strings.TrimSpace(string(out)) != want {
				t.Fatalf("client saw %s, want %s", out, want)
			}
			out, _ = exec.Command(py, append(args, "/nowhere", "x")...).CombinedOutput()
			if !strings.Contains(string(out), `"status": "404"`) {
				t.Fatalf("a path the backend refuses: client saw %s, want the backend's 404", out)
			}
			return
		}
		cfg, err := websocket.NewConfig(strings.Replace(p.base(), "http", "ws", 1)+"/ws", "http://origin.test/")
		if err != nil {
			t.Fatal(err)
		}
		cfg.TlsConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // test certificate
		ws, err := websocket.DialConfig(cfg)
		if err != nil {
			t.Fatalf("dial websocket through the proxy: %v", err)
		}
		defer ws.Close()
		for _, msg := range []string{"hello", "über"} {
			if err := websocket.Message.Send(ws, msg); err != nil {
				t.Fatal(err)
			}
			var got string
			ws.SetDeadline(time.Now().Add(5 * time.Second))
			if err := websocket.Message.Receive(ws, &got); err != nil || got != msg {
				t.Fatalf("echo %q, %v; want %q", got, err, msg)
			}
		}
	})
}
