package lab

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/lab/app"
)

// KeepAlive is one HTTP/1.1 keep-alive connection from a namespace, driven request by request,
// so that a test knows exactly which TCP connection carries each request.
type KeepAlive struct {
	Conn net.Conn
	// Timeout bounds each request (Do) from its write to the end of its answer; 0 is 10 s.
	Timeout time.Duration
	br      *bufio.Reader
}

// DialKeepAlive opens a keep-alive connection from namespace ns to addr.
func DialKeepAlive(ns, addr string) (*KeepAlive, error) {
	return DialKeepAliveWithin(ns, addr, 5*time.Second)
}

// DialKeepAliveWithin is DialKeepAlive with a dial timeout.
func DialKeepAliveWithin(ns, addr string, timeout time.Duration) (*KeepAlive, error) {
	c, err := namednetns.Dialer(ns, &net.Dialer{Timeout: timeout})(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &KeepAlive{Conn: c, br: bufio.NewReader(c)}, nil
}

// Do sends one request on the connection and returns the answering backend's name.
func (k *KeepAlive) Do(path string) (string, error) {
	t := k.Timeout
	if t == 0 {
		t = 10 * time.Second
	}
	k.Conn.SetDeadline(time.Now().Add(t))
	if _, err := fmt.Fprintf(k.Conn, "GET %s HTTP/1.1\r\nHost: vip\r\n\r\n", path); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var sink bytes.Buffer
	sink.ReadFrom(resp.Body)
	if resp.StatusCode != 200 {
		return resp.Header.Get(app.Header), fmt.Errorf("status %d", resp.StatusCode)
	}
	return resp.Header.Get(app.Header), nil
}
