package edgelab

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// BytesRow is one request of the edge-bytes measurement ("Bytes on the Wire").
type BytesRow struct {
	// Request names it: "origin direct" or "edge TR900011 r1".
	Request string
	// Edge is the X-Cache the edge answered (MISS, HIT), "-" for the direct request.
	Edge string
	// Body, Header and Wire are the response's body bytes, header bytes (status line, fields
	// and the blank line, as curl's size_header counts them) and their sum.
	Body, Header, Wire int
	// Fields are the response's header lines, in the order received, for the explanation.
	Fields []string
}

// BytesResult is the whole measurement with both processes' counters.
type BytesResult struct {
	Rows []BytesRow
	// EdgeRequests, EdgeHits, EdgeMisses, EdgeOriginRequests and EdgeOriginBytes are the
	// edge's own counters after the run.
	EdgeRequests, EdgeHits, EdgeMisses, EdgeOriginRequests, EdgeOriginBytes int64
	// OriginRequests is the origin's own request counter (the direct request included).
	OriginRequests int64
}

// bytesOrigin is the lesson's origin: /tracking/NUM answered with a 480-byte JSON body. It adds
// Cache-Control: max-age=60, which the lesson's toy edge does not need (it caches everything)
// and an RFC 9111 cache does.
func bytesOrigin(requests *atomic.Int64) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		num := strings.TrimPrefix(r.URL.Path, "/tracking/")
		head := fmt.Sprintf(`{"tracking":%q,"state":"in-transit","zone":"b34"}`, num)
		body := head + strings.Repeat(" ", max(0, BodyBytes-len(head)))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Header().Set("Cache-Control", "max-age=60")
		io.WriteString(w, body)
	}))
}

// RunBytes runs the lesson's measurement against a real origin and a real switchyard edge on
// loopback: one request straight to the origin, then TR900011 and TR900012 three times each
// through the edge, each on a new connection, as curl makes them.
func RunBytes(ctx context.Context) (BytesResult, error) {
	var res BytesResult
	var originRequests atomic.Int64
	o := bytesOrigin(&originRequests)
	defer o.Close()
	e, err := startEdge(o.URL, 0)
	if err != nil {
		return res, fmt.Errorf("run edge-bytes: %w", err)
	}
	defer e.Close()
	originAddr := strings.TrimPrefix(o.URL, "http://")
	row, err := measureWire(ctx, originAddr, "/tracking/TR900010")
	if err != nil {
		return res, err
	}
	row.Request, row.Edge = "origin direct", "-"
	res.Rows = append(res.Rows, row)
	for round := 1; round <= 3; round++ {
		for _, num := range []string{"TR900011", "TR900012"} {
			row, err := measureWire(ctx, e.Addr(), "/tracking/"+num)
			if err != nil {
				return res, err
			}
			row.Request = fmt.Sprintf("edge %s r%d", num, round)
			res.Rows = append(res.Rows, row)
		}
	}
	st := e.Stats()
	res.EdgeHits, res.EdgeMisses = st.Hits.Load(), st.Misses.Load()
	res.EdgeRequests = res.EdgeHits + res.EdgeMisses + st.StaleServed.Load() + st.Revalidated.Load() + st.Bypassed.Load()
	res.EdgeOriginRequests, res.EdgeOriginBytes = st.OriginRequests.Load(), st.OriginBytes.Load()
	res.OriginRequests = originRequests.Load()
	return res, nil
}

// measureWire sends one GET with curl's request header on a new connection and counts the
// response's header and body bytes as they arrive on the socket.
func measureWire(ctx context.Context, addr, path string) (BytesRow, error) {
	var row BytesRow
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return row, fmt.Errorf("measure %s%s: %w", addr, path, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n", path, addr)
	br := bufio.NewReader(c)
	length := -1
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return row, fmt.Errorf("measure %s%s: read header: %w", addr, path, err)
		}
		row.Header += len(line)
		text := strings.TrimRight(line, "\r\n")
		if text == "" {
			break
		}
		row.Fields = append(row.Fields, text)
		name, value, _ := strings.Cut(text, ":")
		switch strings.ToLower(name) {
		case "content-length":
			length, _ = strconv.Atoi(strings.TrimSpace(value))
		case "x-cache":
			row.Edge = strings.TrimSpace(value)
		}
	}
	if length < 0 {
		return row, fmt.Errorf("measure %s%s: no Content-Length in the response", addr, path)
	}
	body, err := io.ReadAll(io.LimitReader(br, int64(length)))
	if err != nil || len(body) != length || !bytes.HasPrefix(body, []byte(`{"tracking"`)) {
		return row, fmt.Errorf("measure %s%s: body %d of %d bytes: %v", addr, path, len(body), length, err)
	}
	row.Body, row.Wire = length, row.Header+length
	return row, nil
}
