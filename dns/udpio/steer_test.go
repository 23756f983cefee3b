package udpio

import (
	"net"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// With steering by CPU, every datagram sent from a thread pinned to CPU c (loopback delivers on
// the sender's CPU) lands on socket c of the group; with the kernel's hash, one flow lands on one
// socket whatever the CPU, so the test fails without the program.
func TestSteerByCPU(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
	conns, tcp, err := Bind("127.0.0.1:0", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	for _, c := range conns {
		defer c.Close()
	}
	if err := steerByCPU(conns); err != nil {
		t.Fatal(err)
	}
	for cpu := 0; cpu < 2; cpu++ {
		sendFromCPU(t, cpu, conns[0].LocalAddr().(*net.UDPAddr), 10)
		for i, c := range conns {
			got := drain(c)
			want := 0
			if i == cpu {
				want = 10
			}
			if got != want {
				t.Fatalf("sent 10 from CPU %d: socket %d got %d, want %d", cpu, i, got, want)
			}
		}
	}
}

// sendFromCPU sends n datagrams to dst from a thread pinned to cpu, from one source port.
func sendFromCPU(t *testing.T, cpu int, dst *net.UDPAddr, n int) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the thread is discarded when the goroutine ends locked
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			errc <- err
			return
		}
		c, err := net.DialUDP("udp", nil, dst)
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		for i := 0; i < n; i++ {
			if _, err := c.Write([]byte("steer")); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatalf("send from cpu %d: %v", cpu, err)
	}
}

// drain counts the datagrams queued on c, waiting briefly for stragglers.
func drain(c *net.UDPConn) int {
	buf := make([]byte, 64)
	n := 0
	for {
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := c.Read(buf); err != nil {
			return n
		}
		n++
	}
}
