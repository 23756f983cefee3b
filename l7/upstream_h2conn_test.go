package l7

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// countingConn is a real TCP connection that counts its writes; the first one waits for
// release, so the test knows what queues behind it.
type countingConn struct {
	net.Conn
	mu      sync.Mutex
	writes  int
	release chan struct{}
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	first := c.writes == 1
	c.mu.Unlock()
	if first {
		<-c.release
	}
	return c.Conn.Write(p)
}

func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestBatchConnGathersWrites: frames written while the connection's writer is busy go out
// together in its next write, in order, and Close sends what is still queued.
func TestBatchConnGathersWrites(t *testing.T) {
	client, server := tcpPair(t)
	cc := &countingConn{Conn: client, release: make(chan struct{})}
	bc := newBatchConn(cc)
	frames := []string{"HEADERS.", "DATA.", "WINDOW_UPDATE.", "RST_STREAM."}
	for _, f := range frames[:3] {
		if n, err := bc.Write([]byte(f)); err != nil || n != len(f) {
			t.Fatalf("write %q: %d, %v", f, n, err)
		}
		if f == frames[0] {
			// Wait until the writer holds the first frame, so the next two queue behind it.
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				cc.mu.Lock()
				n := cc.writes
				cc.mu.Unlock()
				if n == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the writer did not start")
				}
			}
		}
	}
	close(cc.release)
	want := frames[0] + frames[1] + frames[2]
	got := make([]byte, len(want))
	_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(server, got); err != nil || string(got) != want {
		t.Fatalf("backend read %q, %v; want %q", got, err, want)
	}
	cc.mu.Lock()
	writes := cc.writes
	cc.mu.Unlock()
	if writes != 2 {
		t.Fatalf("%d writes on the socket for 3 frames, 1 in flight: want 2 (the queued ones together)", writes)
	}
	if _, err := bc.Write([]byte(frames[3])); err != nil {
		t.Fatal(err)
	}
	bc.Close()
	rest, err := io.ReadAll(server)
	if err != nil || string(rest) != frames[3] {
		t.Fatalf("after close the backend read %q, %v; want %q", rest, err, frames[3])
	}
	if _, err := bc.Write([]byte("late")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v, want net.ErrClosed", err)
	}
}

// TestBatchConnWriteFailureCloses: once a write to the backend fails, the connection is
// closed (its reader sees the end) and later writes fail.
func TestBatchConnWriteFailureCloses(t *testing.T) {
	client, server := tcpPair(t)
	bc := newBatchConn(client)
	_ = client.(*net.TCPConn).CloseWrite() // every later write on the socket fails
	if _, err := bc.Write([]byte("HEADERS.")); err != nil {
		t.Fatalf("queued write: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := bc.Write([]byte("DATA.")); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("writes still succeed after the socket's write failed")
		}
		time.Sleep(time.Millisecond)
	}
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := client.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after the failed write: %v, want the connection closed", err)
	}
	_ = server
}
