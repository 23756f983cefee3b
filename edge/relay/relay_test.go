package relay

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// TestRelayAddsDelay: an echo round trip through a relay with a 20 ms one-way delay takes at
// least 40 ms, the bytes arrive intact, and Close ends the relayed connection.
func TestRelayAddsDelay(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	r, err := Start("127.0.0.1:0", ln.Addr().String(), 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := 0; i < 3; i++ {
		start := time.Now()
		c.Write([]byte("ping\n"))
		line, err := br.ReadString('\n')
		if err != nil || line != "ping\n" {
			t.Fatalf("echo: %q %v", line, err)
		}
		if d := time.Since(start); d < 40*time.Millisecond || d > 500*time.Millisecond {
			t.Fatalf("round trip %v, want about 40 ms", d)
		}
	}
	r.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := br.ReadString('\n'); err == nil {
		t.Fatal("connection still open after Close")
	}
}
