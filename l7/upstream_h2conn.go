package l7

import (
	"net"
	"runtime"
	"sync"
	"time"
)

// batchConn is an HTTP/2 upstream connection whose writes are gathered: net/http's HTTP/2
// client flushes every frame it writes (a request's HEADERS, then its DATA, each WINDOW_UPDATE),
// one system call each, and on loopback each wakes the backend. Write appends to a buffer and
// returns; a writer goroutine sends whatever the streams appended meanwhile in one write, as
// package h2's server connection does for its client writes. Past maxPending bytes not yet
// written, Write waits for the writer (backpressure as a blocking write gives). A write that
// fails closes the connection: the client's reader sees it and fails the streams, as it fails
// them when a write of its own fails.
type batchConn struct {
	net.Conn

	mu      sync.Mutex
	ready   sync.Cond // the writer waits for bytes
	drained sync.Cond // writers past maxPending and Close wait for the writer
	buf     []byte
	spare   []byte
	writing bool  // the writer is writing a batch
	err     error // the first write's failure, or net.ErrClosed once closed
}

// batchPending bounds the bytes a batchConn holds unwritten.
const batchPending = 256 << 10

func newBatchConn(c net.Conn) *batchConn {
	bc := &batchConn{Conn: c}
	bc.ready.L, bc.drained.L = &bc.mu, &bc.mu
	go bc.writeLoop()
	return bc
}

// Write queues p for the writer.
func (bc *batchConn) Write(p []byte) (int, error) {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	for bc.err == nil && len(bc.buf) > batchPending {
		bc.drained.Wait()
	}
	if bc.err != nil {
		return 0, bc.err
	}
	bc.buf = append(bc.buf, p...)
	bc.ready.Signal()
	return len(p), nil
}

func (bc *batchConn) writeLoop() {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	for {
		for bc.err == nil && len(bc.buf) == 0 {
			bc.ready.Wait()
		}
		if bc.err != nil {
			return
		}
		// Let the streams that are about to write append first (a request's DATA after its
		// HEADERS, other streams' frames): yield while the buffer still grows, a few times.
		for i, n := 0, -1; i < 3 && len(bc.buf) > n && len(bc.buf) < 32<<10 && bc.err == nil; i++ {
			n = len(bc.buf)
			bc.mu.Unlock()
			runtime.Gosched()
			bc.mu.Lock()
		}
		b := bc.buf
		bc.buf, bc.spare = bc.spare[:0], nil
		bc.writing = true
		bc.mu.Unlock()
		_, err := bc.Conn.Write(b)
		bc.mu.Lock()
		bc.writing = false
		if cap(b) <= batchPending {
			bc.spare = b[:0]
		}
		if err != nil && bc.err == nil {
			bc.err = err
			bc.Conn.Close()
		}
		bc.drained.Broadcast()
	}
}

// Close sends what is queued (a GOAWAY the client sends as it closes) within a second, then
// closes.
func (bc *batchConn) Close() error {
	bc.mu.Lock()
	first := bc.err == nil
	if first {
		bc.err = net.ErrClosed
	}
	if bc.writing || len(bc.buf) > 0 {
		_ = bc.Conn.SetWriteDeadline(time.Now().Add(time.Second))
	}
	for bc.writing {
		bc.drained.Wait()
	}
	rest := bc.buf
	bc.buf = nil
	bc.ready.Broadcast()
	bc.drained.Broadcast()
	bc.mu.Unlock()
	if first && len(rest) > 0 {
		_, _ = bc.Conn.Write(rest)
	}
	return bc.Conn.Close()
}
