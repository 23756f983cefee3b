// Package l4exp runs the L4 lessons' measurements on the real system: the lab's namespaces,
// switchyard's XDP forwarder and real HTTP servers. lab/experiment registers them and prints
// their tables beside the lessons' figures.
package l4exp

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/app"
	"github.com/switchyard/switchyard/lab/fwd"
	"github.com/switchyard/switchyard/lab/topo"
	"github.com/switchyard/switchyard/maps"
)

// SkewRow is one backend's line of the skew table.
type SkewRow struct {
	Backend  string         `json:"backend"`
	Conns    int64          `json:"connections"`
	Requests int64          `json:"requests"`
	Paths    map[string]int `json:"paths"`
}

// SkewRun is one client mix through the forwarder.
type SkewRun struct {
	Mix []int `json:"mix"`
	// Ports says how the clients' source ports were chosen: "round-robin" (chosen so that
	// Maglev's pick equals the lesson's round robin) or "ephemeral" (the kernel's).
	Ports     string    `json:"ports"`
	Rows      []SkewRow `json:"rows"`
	Requests  int       `json:"requests"`
	Decisions uint64    `json:"decisions"`
	ConnSkew  float64   `json:"connection_skew"`
	ReqSkew   float64   `json:"request_skew"`
	// VIPBytes is what the forwarder counted toward the VIP (requests, ACKs, handshakes).
	VIPBytes uint64 `json:"vip_bytes"`
}

// SkewMixes are the lesson's two client mixes: the same six clients, even and uneven shares.
var SkewMixes = [][]int{{10, 10, 10, 10, 10, 10}, {1, 2, 4, 8, 16, 32}}

// skewLab is the experiment's lab: six clients, one balancer, three backends.
type skewLab struct {
	l     *lab.Lab
	fw    *fwd.Forwarder
	apps  map[string]*app.Server
	bes   []topo.Node
	used  map[string]map[int]bool // client -> source ports already used (TIME_WAIT)
	ring  []uint32
	addrs map[uint32]netip.Addr
}

// Skew runs every mix twice: with source ports chosen so that the forwarder's Maglev picks
// backends in the lesson's round-robin order (deterministic, comparable to the lesson), and
// with ephemeral ports (what Maglev does with six connections), repeated `ephemeral` times.
func Skew(ctx context.Context, ephemeral int) ([]SkewRun, error) {
	l, err := lab.Plan(lab.Spec{Prefix: lab.TempPrefix("xs"), Clients: 6, Balancers: 1, Backends: 3})
	if err != nil {
		return nil, err
	}
	defer lab.Destroy(l.Topo.Prefix)
	if err := l.Build(); err != nil {
		return nil, err
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &skewLab{l: l, bes: l.Topo.ByRole(topo.Backend), used: map[string]map[int]bool{}}
	if s.apps, err = l.StartApps(actx); err != nil {
		return nil, err
	}
	if s.fw, err = l.StartForwarder(l.Balancer(), 65537); err != nil {
		return nil, err
	}
	defer s.fw.Close()
	if s.ring, err = s.fw.Maps.Ring(l.VIP("web").ID); err != nil {
		return nil, err
	}
	s.addrs = s.fw.BackendAddrs()
	var out []SkewRun
	for _, mix := range SkewMixes {
		r, err := s.run(ctx, mix, true)
		if err != nil {
			return out, err
		}
		out = append(out, r)
		for i := 0; i < ephemeral; i++ {
			r, err := s.run(ctx, mix, false)
			if err != nil {
				return out, err
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// predict is the backend Maglev gives a new flow from src to the web VIP.
func (s *skewLab) predict(src netip.AddrPort) netip.Addr {
	f := maps.Flow{Src: src, Dst: netip.AddrPortFrom(lab.WebVIP4, 80), Proto: maps.TCP}
	return s.addrs[s.ring[maps.Slot(f, 0, uint32(len(s.ring)))]]
}

// pickPort finds an unused source port of client c whose flow Maglev sends to backend be.
func (s *skewLab) pickPort(c topo.Node, be topo.Node) (int, error) {
	if s.used[c.Name] == nil {
		s.used[c.Name] = map[int]bool{}
	}
	for p := 20000; p < 60000; p++ {
		if s.used[c.Name][p] {
			continue
		}
		if s.predict(netip.AddrPortFrom(c.Addr4, uint16(p))) == be.Addr4 {
			s.used[c.Name][p] = true
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free source port of %s maps to %s", c.Name, be.Name)
}

func (s *skewLab) run(ctx context.Context, mix []int, roundRobin bool) (SkewRun, error) {
	r := SkewRun{Mix: mix, Ports: "ephemeral"}
	if roundRobin {
		r.Ports = "round-robin"
	}
	for _, a := range s.apps {
		a.Reset()
	}
	vipID := s.l.VIP("web").ID
	if err := s.fw.Maps.ResetCounters(); err != nil {
		return r, err
	}
	if err := s.fw.Maps.ResetVIPStats(vipID); err != nil {
		return r, err
	}
	clients := s.l.Topo.ByRole(topo.Client)
	// Clients run in sequence, as in the lesson: connection order is deterministic.
	for i, share := range mix {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		c := clients[i%len(clients)]
		d := &net.Dialer{Timeout: 5 * time.Second}
		want := ""
		if roundRobin {
			be := s.bes[i%len(s.bes)]
			p, err := s.pickPort(c, be)
			if err != nil {
				return r, err
			}
			d.LocalAddr = &net.TCPAddr{IP: c.Addr4.AsSlice(), Port: p}
			want = be.Name
		}
		tr := &http.Transport{DialContext: namednetns.Dialer(c.NS, d), MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}
		hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		for j := 0; j < share; j++ {
			path := "/tracking"
			if j%2 == 1 {
				path = "/event"
			}
			resp, err := hc.Get(fmt.Sprintf("http://%s%s?no=I%d-%d", lab.WebVIP4, path, i, j))
			if err != nil {
				return r, fmt.Errorf("client %d request %d: %w", i, j, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if got := resp.Header.Get(app.Header); want != "" && got != want {
				return r, fmt.Errorf("client %d: Maglev sent the connection to %s, the Go model of its hash predicted %s", i, got, want)
			}
			r.Requests++
		}
		tr.CloseIdleConnections()
	}
	ct, err := s.fw.Maps.Counters()
	if err != nil {
		return r, err
	}
	r.Decisions = ct["conntrack_miss_syn"].Packets
	vs, err := s.fw.Maps.VIPStats(vipID)
	if err != nil {
		return r, err
	}
	r.VIPBytes = vs.Bytes
	for _, be := range s.bes {
		c := s.apps[be.Name].Counters()
		r.Rows = append(r.Rows, SkewRow{Backend: be.Name, Conns: c.Conns, Requests: c.Requests, Paths: c.Paths})
	}
	r.ConnSkew = skew(r.Rows, func(x SkewRow) int64 { return x.Conns })
	r.ReqSkew = skew(r.Rows, func(x SkewRow) int64 { return x.Requests })
	return r, nil
}

// skew is max/min of a column, as the lesson computes it (an idle backend makes it infinite).
func skew(rows []SkewRow, f func(SkewRow) int64) float64 {
	var vals []int64
	for _, r := range rows {
		vals = append(vals, f(r))
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	if vals[0] == 0 {
		return -1
	}
	return float64(vals[len(vals)-1]) / float64(vals[0])
}

// FormatSkew renders a skew value; an idle backend's is shown as "inf".
func FormatSkew(v float64) string {
	if v < 0 {
		return "inf"
	}
	return fmt.Sprintf("%.2f", v)
}

// MixString renders a mix as the lesson does: 1,2,4,8,16,32.
func MixString(m []int) string {
	s := make([]string, len(m))
	for i, v := range m {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ",")
}
