package testenv

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/topo"
)

// TestVIPReachesEveryBackend: HTTP to the VIP over many new connections reaches every backend
// (Maglev spreads new connections evenly).
func TestVIPReachesEveryBackend(t *testing.T) {
	l := testLab(t, 3)
	withApps(t, l)
	withForwarder(t, l)
	c := lab.HTTPClient(l.Client(1), false, 10*time.Second)
	url := fmt.Sprintf("http://%s/", lab.WebVIP4)
	seen := map[string]int{}
	for i := 0; i < 150; i++ {
		code, be, _, err := get(c, url+fmt.Sprint("page", i))
		if err != nil || code != 200 {
			t.Fatalf("request %d: code %d, err %v", i, code, err)
		}
		seen[be]++
	}
	t.Logf("150 connections: %v", seen)
	for _, n := range []string{"be1", "be2", "be3"} {
		if seen[n] < 20 {
			t.Errorf("backend %s got %d of 150 connections, want >= 20 (Maglev spreads evenly)", n, seen[n])
		}
	}
}

// TestDirectServerReturn: a client downloads 8 MB through the VIP; the balancer's interface
// receives only the requests and ACKs (a small fraction), the replies go backend -> client.
func TestDirectServerReturn(t *testing.T) {
	l := testLab(t, 2)
	withApps(t, l)
	withForwarder(t, l)
	lb := l.Balancer()
	before, err := topo.LinkStats(lb.NS, lb.Iface)
	if err != nil {
		t.Fatal(err)
	}
	c := lab.HTTPClient(l.Client(1), true, 20*time.Second)
	const size, n = 1 << 20, 8
	for i := 0; i < n; i++ {
		code, _, body, err := get(c, fmt.Sprintf("http://%s/bytes?n=%d", lab.WebVIP4, size))
		if err != nil || code != 200 || len(body) != size {
			t.Fatalf("download %d: code %d, %d bytes, err %v", i, code, len(body), err)
		}
	}
	after, err := topo.LinkStats(lb.NS, lb.Iface)
	if err != nil {
		t.Fatal(err)
	}
	rx := after.RxBytes - before.RxBytes
	t.Logf("client downloaded %d bytes; balancer received %d bytes, sent %d", size*n, rx, after.TxBytes-before.TxBytes)
	if rx > size*n/10 {
		t.Errorf("balancer received %d bytes for %d downloaded: replies are not going straight to the client", rx, size*n)
	}
	if rx == 0 {
		t.Errorf("balancer received nothing: the requests did not go through it")
	}
}

// TestIPv6VIP: an IPv6 VIP (IP6IP6 to IPv6 backend addresses) reaches every backend.
func TestIPv6VIP(t *testing.T) {
	l := testLab(t, 2)
	withApps(t, l)
	withForwarder(t, l)
	c := lab.HTTPClient(l.Client(1), false, 10*time.Second)
	seen := map[string]int{}
	for i := 0; i < 60; i++ {
		code, be, _, err := get(c, fmt.Sprintf("http://[%s]/v6/%d", lab.WebVIP6, i))
		if err != nil || code != 200 {
			t.Fatalf("request %d: code %d, err %v", i, code, err)
		}
		seen[be]++
	}
	if len(seen) != 2 {
		t.Errorf("IPv6 VIP reached %v, want both backends", seen)
	}
	bes := l.Topo.ByRole(topo.Backend)
	ct, err := lab.DecapCounters(bes[0])
	if err != nil {
		t.Fatal(err)
	}
	if ct["decap_ip6ip6"].Packets == 0 {
		t.Errorf("backend %s decapsulated no IP6IP6 packet: %v", bes[0].Name, ct)
	}
}

// TestUDPVIP: a UDP VIP echoes through the balancer, every datagram of one flow to the same
// backend, and different flows to different backends.
func TestUDPVIP(t *testing.T) {
	l := testLab(t, 3)
	withApps(t, l)
	withForwarder(t, l)
	dial := namednetns.Dialer(l.Client(1).NS, nil)
	seen := map[string]int{}
	for flow := 0; flow < 30; flow++ {
		conn, err := dial(context.Background(), "udp", fmt.Sprintf("%s:7", lab.WebVIP4))
		if err != nil {
			t.Fatal(err)
		}
		first := ""
		for i := 0; i < 3; i++ {
			conn.SetDeadline(time.Now().Add(3 * time.Second))
			if _, err := conn.Write([]byte(fmt.Sprintf("hello %d", i))); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 1500)
			n, err := conn.Read(buf)
			if err != nil {
				t.Fatalf("flow %d datagram %d: no echo: %v", flow, i, err)
			}
			name, rest, _ := strings.Cut(string(buf[:n]), " ")
			if rest != fmt.Sprintf("hello %d", i) {
				t.Fatalf("echo %q", buf[:n])
			}
			if first == "" {
				first = name
			} else if name != first {
				t.Fatalf("flow %d moved from %s to %s", flow, first, name)
			}
		}
		seen[first]++
		conn.Close()
	}
	if len(seen) < 3 {
		t.Errorf("30 UDP flows reached %v, want all three backends", seen)
	}
}

// TestPathMTU: a client sending full-size packets (a 256 KiB upload; 1500-byte packets would be
// 1520 once encapsulated) gets ICMP fragmentation-needed from the balancer, lowers its path MTU
// and the upload completes, for IPv4 and IPv6.
func TestPathMTU(t *testing.T) {
	l := testLab(t, 2)
	withApps(t, l)
	f := withForwarder(t, l)
	c := lab.HTTPClient(l.Client(1), false, 20*time.Second)
	body := strings.Repeat("y", 256<<10)
	for _, vip := range []string{lab.WebVIP4.String(), "[" + lab.WebVIP6.String() + "]"} {
		before, _ := f.Maps.Counters()
		resp, err := c.Post("http://"+vip+"/upload", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatalf("upload to %s: %v", vip, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasSuffix(strings.TrimSpace(string(b)), fmt.Sprint(len(body))) {
			t.Fatalf("upload to %s: %d %q", vip, resp.StatusCode, b)
		}
		after, _ := f.Maps.Counters()
		sent := after["icmp_toobig_sent"].Packets - before["icmp_toobig_sent"].Packets
		t.Logf("%s: %d ICMP too-big sent, upload of %d bytes answered %q", vip, sent, len(body), strings.TrimSpace(string(b)))
		if sent == 0 {
			t.Errorf("%s: the balancer sent no ICMP too-big for full-size packets", vip)
		}
	}
}
