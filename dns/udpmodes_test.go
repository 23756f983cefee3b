package dns

import (
	"net"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/udpio"
)

// gatherCounter returns the value of the counter metric name of srv (0 when absent).
func gatherCounter(t *testing.T, srv *Server, name string) float64 {
	t.Helper()
	mfs, err := srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// Every wait mode answers a burst of queries sent on one socket, counts them in the batch
// metrics (datagrams >= queries, batches <= datagrams), and closes within a deadline, also the
// thread mode, whose workers sit in poll(2) outside the netpoller.
func TestUDPWaitModes(t *testing.T) {
	for _, mode := range []udpio.Wait{udpio.WaitNetpoll, udpio.WaitThread, udpio.WaitSpin} {
		t.Run(string(mode), func(t *testing.T) {
			srv := startServer(t, testConfig(t), Options{UDPWait: mode})
			c, err := net.Dial("udp", srv.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			const n = 200
			m := new(mdns.Msg)
			m.SetQuestion("www.example.org.", mdns.TypeA)
			got := map[uint16]bool{}
			buf := make([]byte, 1500)
			for round := 0; round < 5 && len(got) < n; round++ {
				for id := 0; id < n; id++ { // a burst: several datagrams queued per recvmmsg
					if got[uint16(id)] {
						continue
					}
					m.Id = uint16(id)
					raw, _ := m.Pack()
					c.Write(raw)
				}
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				for len(got) < n {
					k, err := c.Read(buf)
					if err != nil {
						break
					}
					var r mdns.Msg
					if r.Unpack(buf[:k]) == nil && r.Rcode == mdns.RcodeSuccess && len(r.Answer) == 1 {
						got[r.Id] = true
					}
				}
			}
			if len(got) < n {
				t.Fatalf("%d of %d queries answered", len(got), n)
			}
			dg := gatherCounter(t, srv, "switchyard_dns_udp_recv_datagrams_total")
			calls := gatherCounter(t, srv, "switchyard_dns_udp_recv_batches_total")
			if dg < n || calls < 1 || calls > dg {
				t.Fatalf("batch metrics: %v datagrams in %v batches, want >= %d datagrams", dg, calls, n)
			}
			done := make(chan struct{})
			go func() { srv.Close(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Close did not return within 10 s")
			}
		})
	}
}
