package h1

import (
	"io"
	"net"
	"testing"
)

func TestHandOver(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	l := NewHandover(a.LocalAddr())
	go func() { l.Deliver(&PrefixConn{Conn: a, Pre: []byte("GET / ")}) }()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	go func() { b.Write([]byte("HTTP/1.1")); b.Close() }()
	got, _ := io.ReadAll(c)
	if string(got) != "GET / HTTP/1.1" {
		t.Fatalf("read %q", got)
	}
	l.Close()
	if _, err := l.Accept(); err == nil {
		t.Fatal("accept after close")
	}
	if l.Deliver(b) {
		t.Fatal("deliver after close")
	}
}
