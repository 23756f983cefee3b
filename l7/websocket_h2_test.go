package l7

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os/exec"
	"testing"

	"golang.org/x/net/websocket"
)

// TestWebSocketOverHTTP2: a WebSocket client over HTTP/2 (RFC 8441 extended CONNECT; Python's
// h2 and wsproto, two real implementations) reaches an HTTP/1.1 WebSocket backend (x/net's
// websocket server, which checks the Upgrade handshake) through h2c and TLS listeners, and
// plays ping-pong through it: the proxy answers the client 200 once the backend switched
// protocols, then carries the frames both ways.
func TestWebSocketOverHTTP2(t *testing.T) {
	py := ""
	for _, cand := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(cand, "-c", "import h2, wsproto").Run() == nil {
			py = cand
			break
		}
	}
	if py == "" {
		t.Skip("needs python3 with h2 and wsproto (apt-get install python3-h2 python3-wsproto; `make deps` does)")
	}
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
