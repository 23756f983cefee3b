//go:build !linux

package l7

import (
	"errors"
	"net"

	"github.com/switchyard/switchyard/internal/h1"
)

// evLoop exists on Linux only (epoll); elsewhere the goroutine engine serves every connection.
type evLoop struct{}

func (s *Server) startLoops() bool { return false }

func (s *Server) serveLoop(*net.TCPListener, string, *h1.Handover) error {
	return errors.New("event loops need Linux")
}

func (s *Server) closeLoops(bool) int { return 0 }

func (s *Server) dropIdleLoops() {}

func (s *Server) stopLoops() {}

// newTLSWire is the socket itself: without loops no connection moves.
func newTLSWire(c net.Conn) net.Conn { return c }

func (s *Server) tlsToLoop(*goConn) bool { return false }
