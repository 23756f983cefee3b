package lab

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/lab/app"
	"github.com/switchyard/switchyard/lab/topo"
)

// StartApps runs an app server for every backend inside this process, on sockets opened in the
// backends' namespaces (HTTP on port 80, UDP echo on port 7 of
// the host's address and of each VIP on its loopback), until ctx ends. Tests and
// experiments use it to read and steer the servers without a process per backend.
func (l *Lab) StartApps(ctx context.Context) (map[string]*app.Server, error) {
	out := map[string]*app.Server{}
	for _, n := range l.Topo.ByRole(topo.Backend) {
		s, err := StartApp(ctx, n)
		if err != nil {
			return nil, err
		}
		out[n.Name] = s
	}
	return out, nil
}

// StartApp runs one app server in-process on a node's namespace.
func StartApp(ctx context.Context, n topo.Node) (*app.Server, error) {
	ln, err := namednetns.Listen(n.NS, "tcp", ":80")
	if err != nil {
		return nil, fmt.Errorf("listen in %s: %w", n.NS, err)
	}
	var udp []net.PacketConn
	for _, a := range append([]netip.Addr{n.Addr4}, n.Loopback...) {
		uc, err := namednetns.ListenPacket(n.NS, "udp", netip.AddrPortFrom(a, 7).String())
		if err != nil {
			ln.Close()
			for _, u := range udp {
				u.Close()
			}
			return nil, fmt.Errorf("listen udp in %s: %w", n.NS, err)
		}
		udp = append(udp, uc)
	}
	s := app.New(n.Name)
	go s.Run(ctx, ln, udp...)
	return s, nil
}

// HTTPClient is an HTTP client whose connections start in a client namespace. With keepAlive
// false every request opens a new connection.
func HTTPClient(n topo.Node, keepAlive bool, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		DialContext:         namednetns.Dialer(n.NS, &net.Dialer{Timeout: timeout}),
		DisableKeepAlives:   !keepAlive,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     time.Minute,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}
