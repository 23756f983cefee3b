package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/lab/app"
	"github.com/switchyard/switchyard/lab/topo"
)

// HTTP/3 through the balancer with connection migration: a client in a client namespace
// resolves app.lab.test with the lab's DNS, opens one QUIC connection to the L7 VIP on 443 (the
// balancer's QUIC VIP l7quic, lab.go) and asks over it; then, mid-connection, it moves the
// connection to a new UDP socket (a new local port: what a NAT rebinding or a phone changing
// networks looks like to the balancer) and asks again, several times. The balancer has no flow
// for the new 4-tuple, so it routes each moved packet by the server ID the L7 instance wrote in
// its connection IDs (quic_lb in the L7 configuration, stops.go): every answer comes through the
// same L7 instance, which the app server's X-Peer names.

// H3Step is one request of the migrating client: the local address it was sent from, the L7
// instance it came through and the app server that answered.
type H3Step struct {
	Local string `json:"local"`
	L7    string `json:"l7"`
	App   string `json:"app"`
}

// H3Report is what H3Migration saw: one step per request (the first before any move) and the
// packets the balancer daemons routed by connection ID meanwhile (-1 without daemons to ask).
type H3Report struct {
	Steps  []H3Step `json:"steps"`
	Routed int64    `json:"quic_cid_routed"`
}

// SameL7 reports whether every step came through one L7 instance.
func (r H3Report) SameL7() bool {
	for _, s := range r.Steps {
		if s.L7 == "" || s.L7 != r.Steps[0].L7 {
			return false
		}
	}
	return len(r.Steps) > 0
}

// String is the report in one line for the demo.
func (r H3Report) String() string {
	var b strings.Builder
	for i, s := range r.Steps {
		if i > 0 {
			b.WriteString(", moved to ")
		}
		fmt.Fprintf(&b, "%s -> %s (%s)", s.Local, s.L7, s.App)
	}
	verdict := "the same L7 instance after every move"
	if !r.SameL7() {
		verdict = "NOT the same L7 instance after every move"
	}
	routed := ""
	if r.Routed >= 0 {
		routed = fmt.Sprintf("; the balancer routed %d packets by connection ID (the first of each new address: its flow entry takes the rest)", r.Routed)
	}
	return fmt.Sprintf("%s: %s%s", verdict, b.String(), routed)
}

// H3Migration runs the migrating HTTP/3 client from client c with moves moves; the lab must
// serve app.lab.test (its ACME root saved: State.ClientTLS).
func H3Migration(ctx context.Context, st *State, c topo.Node, moves int) (H3Report, error) {
	rep := H3Report{Routed: -1}
	tc, err := st.ClientTLS()
	if err != nil {
		return rep, err
	}
	tc.ServerName, tc.NextProtos = AppName, []string{http3.NextProtoH3}
	dns, ok := st.Topo.Node("dns")
	if !ok {
		return rep, errors.New("http/3 migration: the lab has no DNS host to resolve " + AppName)
	}
	ip, err := resolveViaDNS(ctx, c, dns.Addr4, AppName)
	if err != nil {
		return rep, err
	}
	routed0, counted := quicRouted(ctx, st)
	var trs []*quic.Transport
	defer func() {
		for _, tr := range trs {
			tr.Close()
		}
	}()
	socket := func() (*quic.Transport, error) {
		pc, err := namednetns.ListenPacket(c.NS, "udp4", netip.AddrPortFrom(c.Addr4, 0).String())
		if err != nil {
			return nil, fmt.Errorf("open a udp socket in %s: %w", c.NS, err)
		}
		tr := &quic.Transport{Conn: pc}
		trs = append(trs, tr)
		return tr, nil
	}
	tr, err := socket()
	if err != nil {
		return rep, err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second) // the whole exchange: dial, moves and requests
	defer cancel()
	conn, err := tr.Dial(dctx, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, tlsPort)), tc, &quic.Config{MaxIdleTimeout: 10 * time.Second})
	if err != nil {
		return rep, fmt.Errorf("dial %s (%s) over QUIC from %s: %w", AppName, ip, c.Name, err)
	}
	defer conn.CloseWithError(0, "done")
	cc := (&http3.Transport{}).NewClientConn(conn)
	for i := 0; i <= moves; i++ {
		if i > 0 {
			if tr, err = socket(); err != nil {
				return rep, err
			}
			if err := movePath(dctx, conn, tr); err != nil {
				return rep, fmt.Errorf("move %d: %w", i, err)
			}
		}
		step, err := h3Get(dctx, st, cc, fmt.Sprintf("https://%s/h3/%d", AppName, i))
		if err != nil {
			return rep, fmt.Errorf("request %d (after %d moves): %w", i+1, i, err)
		}
		step.Local = tr.Conn.LocalAddr().String()
		rep.Steps = append(rep.Steps, step)
	}
	if routed1, ok := quicRouted(ctx, st); ok && counted {
		rep.Routed = int64(routed1 - routed0)
	}
	return rep, nil
}

// movePath moves conn to the socket of tr: probe the new path, then switch to it.
func movePath(ctx context.Context, conn *quic.Conn, tr *quic.Transport) error {
	p, err := conn.AddPath(tr)
	if err != nil {
		return fmt.Errorf("add the path from %s: %w", tr.Conn.LocalAddr(), err)
	}
	if err := p.Probe(ctx); err != nil {
		return fmt.Errorf("probe the path from %s: %w", tr.Conn.LocalAddr(), err)
	}
	if err := p.Switch(); err != nil {
		return fmt.Errorf("switch to the path from %s: %w", tr.Conn.LocalAddr(), err)
	}
	return nil
}

// h3Get asks url over cc and names the L7 instance (from the app's X-Peer) and the app server.
func h3Get(ctx context.Context, st *State, cc *http3.ClientConn, url string) (H3Step, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return H3Step{}, err
	}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		return H3Step{}, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return H3Step{}, fmt.Errorf("status %d", resp.StatusCode)
	}
	step := H3Step{L7: resp.Header.Get(app.PeerHeader), App: resp.Header.Get(app.Header)}
	for _, n := range st.Topo.ByRole(topo.L7) {
		if n.Addr4.String() == step.L7 {
			step.L7 = n.Name
		}
	}
	return step, nil
}

// quicRouted sums the balancer daemons' quic_cid_routed packets; false without a daemon that
// answers (direct mode).
func quicRouted(ctx context.Context, st *State) (uint64, bool) {
	var n uint64
	ok := false
	for _, sock := range st.Sockets {
		var s api.Stats
		if err := api.NewClient(sock).Call(ctx, api.OpStats, api.Empty{}, &s); err != nil {
			continue
		}
		n, ok = n+s.Counters["quic_cid_routed"].Packets, true
	}
	return n, ok
}
