package l7

import (
	"bytes"
	"fmt"
)

// A route's retry.failover_header marks a response that a retry fetched from another backend
// (the mini-CDN router's X-Edge-Failover): the request core adds the line to the response head,
// net/http's path sets it in RoundTrip.

// checkFailoverHeader accepts "" or an HTTP field name (RFC 9110 token characters).
func checkFailoverHeader(name string) error {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '-' || c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
			return fmt.Errorf("%q is not a header field name; write it like X-Edge-Failover", name)
		}
	}
	return nil
}

// failoverLine is the header line a retried response carries, nil without failover_header.
func (rt *routeRT) failoverLine() []byte {
	if rt.cfg.Retry == nil || rt.cfg.Retry.FailoverHeader == "" {
		return nil
	}
	return []byte(rt.cfg.Retry.FailoverHeader + ": 1\r\n")
}

// withLine inserts a header line (when not nil) before the blank line that ends a response head.
func withLine(head, line []byte) []byte {
	if line == nil || !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		return head
	}
	n := len(head) - 2
	head = append(head[:n], line...)
	return append(head, "\r\n"...)
}
