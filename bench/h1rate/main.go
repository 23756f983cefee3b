// Command h1rate is the fixed-rate HTTP/1.1 load generator of bench/edge.sh's latency row: GET
// requests for -url at -rate a second in all, over -c keep-alive connections (one request at a
// time on each; -m must be 1), for -d or until -n requests (bench/loadstat's Pace: a request's
// latency counts from its release, so a server that stalls shows in the percentiles with the
// backlog it caused). wrk cannot do this: it sends as fast as answers come, so when two servers
// answer at different rates their percentiles are taken at different loads, and on a machine
// whose cores the load generator shares, the faster server's tail is mostly the generator's own
// wait for a core. Every answer is checked: HTTP/1.1, status 200 and, with -size, exactly that
// many body bytes (Content-Length); any other answer, a connection error or a timeout fails the
// run (exit 1, naming the first). It prints one line of key=value pairs (bench/loadstat's).
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/switchyard/switchyard/bench/loadstat"
)

type options struct {
	loadstat.Options
	url  string
	rate float64
	size int64 // expected body length; -1: any
}

// conn is one keep-alive connection and its reader; body is the buffer answers are read into.
// A server that ends the connection with "Connection: close" (nginx does after 1,000 requests)
// gets a new one before the next request, as wrk and browsers do; the dial counts in that
// request's latency.
type conn struct {
	addr string
	c    net.Conn
	r    *bufio.Reader
	body []byte
}

func main() {
	var o options
	flag.StringVar(&o.url, "url", "", "http URL to GET")
	flag.Float64Var(&o.rate, "rate", 1000, "requests a second offered, in all")
	flag.Int64Var(&o.size, "size", -1, "expected body length in bytes (-1: any)")
	o.Register(flag.CommandLine, "keep-alive connections", "requests")
	flag.Parse()
	u, err := url.Parse(o.url)
	if err == nil && (u.Scheme != "http" || u.Host == "") {
		err = fmt.Errorf("-url %q: want http://HOST:PORT/PATH", o.url)
	}
	if err == nil {
		err = o.Check()
	}
	if err == nil && (o.Concurrency != 1 || o.rate <= 0 || o.rate > 200_000) {
		err = fmt.Errorf("-m %d -rate %g: want -m 1 (one request at a time per connection) and a rate of 1..200000", o.Concurrency, o.rate)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "h1rate:", err)
		os.Exit(2)
	}
	r, err := load(o, u)
	if err != nil {
		fmt.Fprintln(os.Stderr, "h1rate:", err)
		os.Exit(1)
	}
	r.Exit("h1rate")
}

// load dials the connections and runs the paced load over them.
func load(o options, u *url.URL) (*loadstat.Run, error) {
	conns := make([]*conn, o.Conns)
	for i := range conns {
		conns[i] = &conn{addr: u.Host, body: make([]byte, 64<<10)}
		if err := conns[i].dial(o.Timeout); err != nil {
			return nil, err
		}
		defer func() {
			if conns[i].c != nil {
				conns[i].c.Close()
			}
		}()
	}
	req := []byte("GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\n\r\n")
	r := loadstat.NewRun(o.Options)
	r.Pace(len(conns), o.rate, func(i int) (loadstat.Outcome, string) {
		return conns[i].get(req, o.size, o.Timeout)
	})
	return r, nil
}

// dial opens the connection (again, after the server closed it).
func (c *conn) dial(timeout time.Duration) error {
	nc, err := net.DialTimeout("tcp", c.addr, timeout)
	if err != nil {
		return fmt.Errorf("dial %s: %w", c.addr, err)
	}
	c.c = nc
	if c.r == nil {
		c.r = bufio.NewReaderSize(nc, 16<<10)
	}
	c.r.Reset(nc)
	return nil
}

// get sends req and reads the whole answer, checking it.
func (c *conn) get(req []byte, size int64, timeout time.Duration) (loadstat.Outcome, string) {
	if c.c == nil {
		if err := c.dial(timeout); err != nil {
			return loadstat.Classify(err), err.Error()
		}
	}
	if err := c.c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return loadstat.Error, err.Error()
	}
	if _, err := c.c.Write(req); err != nil {
		return loadstat.Classify(err), "send: " + err.Error()
	}
	n, closing, err := c.head()
	if err != nil {
		var bad badAnswer
		if errors.As(err, &bad) {
			return loadstat.Bad, bad.Error()
		}
		return loadstat.Classify(err), "answer: " + err.Error()
	}
	if size >= 0 && n != size {
		return loadstat.Bad, fmt.Sprintf("answer of %d body bytes, want %d", n, size)
	}
	for n > 0 {
		k, err := c.r.Read(c.body[:min(n, int64(len(c.body)))])
		if err != nil {
			return loadstat.Classify(err), "body: " + err.Error()
		}
		n -= int64(k)
	}
	if closing {
		c.c.Close()
		c.c = nil
	}
	return loadstat.OK, ""
}

// badAnswer is an answer that came but is not a 200 with a length.
type badAnswer string

func (b badAnswer) Error() string { return string(b) }

// head reads the status line and the header fields and returns the body's length and whether
// the server closes the connection after this answer.
func (c *conn) head() (length int64, closing bool, err error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
		return 0, false, badAnswer(fmt.Sprintf("status line %q, want HTTP/1.1 200", bytes.TrimSpace(line)))
	}
	length = -1
	for {
		line, err = c.r.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		switch {
		case !ok:
		case bytes.EqualFold(name, []byte("Content-Length")):
			length, err = strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
			if err != nil || length < 0 {
				return 0, false, badAnswer(fmt.Sprintf("Content-Length %q", value))
			}
		case bytes.EqualFold(name, []byte("Connection")):
			closing = bytes.EqualFold(bytes.TrimSpace(value), []byte("close"))
		}
	}
	if length < 0 {
		return 0, false, badAnswer("an answer without Content-Length (chunked answers are not read here)")
	}
	return length, closing, nil
}
