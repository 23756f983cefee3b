package l7

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/l7/balance"
	"github.com/switchyard/switchyard/l7/core"
)

// h2Leg sends requests to an h2 or h2c pool as streams on the core's own HTTP/2 connections
// (h2Upstreams), the response streaming back with its trailers, whatever the client speaks
// (goConn.forward runs its steps). A gRPC call's deadline is its client's grpc-timeout when shorter
// than the route's, and a stream the client resets ends its upstream stream too.
type h2Leg struct {
	gc     *goConn
	rq     *routed
	until  time.Time
	ctx    context.Context
	cancel context.CancelFunc
	rb     core.RequestBody
	upload *clientBody // the rest of a body still arriving, read by the transport
	// the current attempt: its backend, its connection with a stream reserved (until the
	// round trip takes it), its request, its response and how that ends once relayed
	b    *balance.Backend
	cc   *http.ClientConn
	req  *http.Request
	resp *http.Response
	end  func()
}

// newH2Leg starts the leg of a request to an HTTP/2 pool, due by deadline.
func (gc *goConn) newH2Leg(rq *routed, deadline time.Time) *h2Leg {
	if d, ok := gc.grpcTimeout(rq); ok && rq.start.Add(d).Before(deadline) {
		deadline = rq.start.Add(d)
	}
	l := &h2Leg{gc: gc, rq: rq, until: deadline}
	l.ctx, l.cancel = context.WithDeadline(context.Background(), deadline)
	if gc.stream != nil {
		gc.stream.OnReset(l.cancel)
	}
	return l
}

func (l *h2Leg) deadline() time.Time { return l.until }

func (l *h2Leg) prepare() (int, bool, *h1.Rejection) {
	gc := l.gc
	l.rb = gc.requestBody(true)
	gc.reqBuf = gc.reqBuf[:0]
	bodyLen, whole, rej := gc.bufferBody(&l.rb)
	if rej == nil && !whole {
		l.upload = &clientBody{gc: gc, rb: &l.rb}
	}
	return bodyLen, whole, rej
}

// connect takes a connection to b with a stream reserved; fresh is not needed (net/http's
// ClientConn moves a request the backend refused before processing it, GOAWAY or
// REFUSED_STREAM, itself).
func (l *h2Leg) connect(b *balance.Backend, _ bool) error {
	cc, err := l.rq.rt.pool.h2up.get(l.ctx, b)
	l.b, l.cc = b, cc
	return err
}

// send builds the request of the attempt; the connection's transport sends it as the round
// trip (await) starts.
func (l *h2Leg) send() error {
	l.req = l.gc.h2Request(l.rq, l.b, &l.rb, l.upload)
	return nil
}

// await sends the request on the reserved stream and waits for the response head.
func (l *h2Leg) await() (int, string, error) {
	cc := l.cc
	l.cc = nil // the round trip takes the reservation
	resp, end, err := roundTripH2(l.ctx, cc, l.req, l.upload != nil, l.rq.rt.pool.cfg.Timeouts.Header)
	if err != nil {
		if l.ctx.Err() == context.Canceled {
			err = errors.Join(err, context.Canceled) // the client reset its stream
		}
		return 0, "", err
	}
	l.resp, l.end = resp, end
	grpcStatus := ""
	if l.rq.RI.GRPC || l.gc.grpcWeb {
		grpcStatus = resp.Header.Get("Grpc-Status") // a trailers-only answer: nothing streamed yet
	}
	return resp.StatusCode, grpcStatus, nil
}

// abandon gives back a stream reserved and not used, or drops a response unread.
func (l *h2Leg) abandon() (reused, gotBytes bool) {
	if l.cc != nil {
		l.cc.Release()
		l.cc = nil
	}
	if l.resp != nil {
		l.resp.Body.Close()
		l.end()
		l.resp, l.end = nil, nil
	}
	return false, false
}

func (l *h2Leg) relay(t *tries) (int, int64, bool) {
	code, n, err := l.gc.relayH2(l.resp, l.rq.Method, l.rq.RI.GRPC || l.gc.grpcWeb)
	l.end()
	t.relayed(code, err)
	switch {
	case clientCaused(err):
		return 499, n, false
	case err != nil:
		return code, n, false
	}
	// A body the upstream did not read to its end leaves the client's connection out of step.
	return code, n, l.upload == nil || l.upload.detach()
}

func (l *h2Leg) done() {
	if l.upload != nil {
		l.upload.detach()
	}
	if l.gc.stream != nil {
		l.gc.stream.OnReset(nil)
	}
	l.cancel()
}

// errHeaderTimeout is a response head that did not come within the pool's header timeout.
var errHeaderTimeout = fmt.Errorf("await response head: %w", os.ErrDeadlineExceeded)

// h2Request is the request of an attempt at b as an HTTP/2 stream's: the head from the core's
// rules, a body held whole (gc.reqBuf) sent again on each try, one still arriving following
// what came with the head from upload, and the trailers.
func (gc *goConn) h2Request(rq *routed, b *balance.Backend, rb *core.RequestBody, upload *clientBody) *http.Request {
	p := rq.rt.pool
	req := &http.Request{Method: rq.Method, Proto: "HTTP/2.0", ProtoMajor: 2,
		URL:  &url.URL{Scheme: p.scheme, Host: b.Address, Opaque: string(rq.Target)},
		Host: string(rq.RI.HostUpstream()), Header: make(http.Header, len(gc.head.Fields)+5)}
	core.UpstreamFields(nil, &gc.head, &rq.RI, gc.client(), rq.rt.requestHeaders,
		func(out, name, value []byte) []byte {
			k := http.CanonicalHeaderKey(string(name))
			req.Header[k] = append(req.Header[k], string(value))
			return out
		})
	if gc.grpcWeb {
		toGRPC(req.Header)
	}
	req.ContentLength = int64(len(gc.reqBuf))
	if len(gc.reqBuf) > 0 {
		req.Body = io.NopCloser(&byteReader{b: gc.reqBuf})
	}
	if upload != nil {
		req.ContentLength = gc.head.ContentLength
		req.Body = io.NopCloser(io.MultiReader(&byteReader{b: gc.reqBuf}, upload))
	}
	if gc.head.Chunked {
		// Trailers follow a body of unknown length (an HTTP/1.1 client's chunked trailers, an
		// HTTP/2 client's trailer block): those of a body held whole now, a streamed one's
		// filled in by upload at its end (the transport sends what the map holds once the body
		// is read).
		req.Trailer = http.Header{}
		// The names the client announced (its Trailer field) are announced upstream too: an
		// HTTP/2 server may keep only announced trailer fields.
		for _, f := range gc.head.Fields {
			if bytes.EqualFold(f.Name, []byte("Trailer")) {
				for _, name := range strings.Split(string(f.Value), ",") {
					if name = strings.TrimSpace(name); name != "" && h1.TrailerAllowed([]byte(name)) {
						req.Trailer[http.CanonicalHeaderKey(name)] = nil
					}
				}
			}
		}
		for _, f := range rb.Trailers(nil) {
			req.Trailer.Add(string(f.Name), string(f.Value))
		}
		if upload != nil {
			upload.trailer = req.Trailer
		}
	}
	return req
}

// roundTripH2 sends req on cc's reserved stream and returns the response head, and done, which
// ends the attempt once its response has been relayed. The head of a request sent whole
// (streamed false) must come within header.
func roundTripH2(ctx context.Context, cc *http.ClientConn, req *http.Request, streamed bool, header time.Duration) (*http.Response, func(), error) {
	actx, cancel := context.WithCancel(ctx)
	// The header timeout runs from a body sent whole; a streamed upload is bounded by the total
	// timeout only (the backend may answer only once it has all of it), as on HTTP/1.1 pools.
	late := time.AfterFunc(header, cancel)
	if streamed {
		late.Stop()
	}
	resp, err := cc.RoundTrip(req.WithContext(actx))
	fired := !streamed && !late.Stop()
	switch {
	case err == nil && !fired:
		return resp, cancel, nil
	case err == nil: // the head came just as the timeout cancelled the stream
		resp.Body.Close()
		err = errHeaderTimeout
	case fired && ctx.Err() == nil:
		err = errHeaderTimeout
	case ctx.Err() == context.DeadlineExceeded:
		err = context.DeadlineExceeded
	}
	cancel()
	return nil, nil, err
}

// byteReader reads a held body (bytes.Reader without its allocation per try).
type byteReader struct {
	b []byte
	i int
}

func (r *byteReader) Read(p []byte) (int, error) {
	if r.i == len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.i:])
	r.i += n
	return n, nil
}

// clientBody is the rest of a request body as it arrives from the client, its data alone (rb
// decodes the client's framing), for an HTTP/2 upstream's transport to read; the client's
// failure is errClientBody. detach takes it back from the transport before the connection (or
// stream) serves anything else.
type clientBody struct {
	gc      *goConn
	rb      *core.RequestBody
	trailer http.Header // where the body's trailer fields go once it ends (nil: dropped)

	mu      sync.Mutex
	idle    sync.Cond
	reading bool
	stopped bool
}

func (cb *clientBody) Read(p []byte) (int, error) {
	cb.mu.Lock()
	if cb.stopped {
		cb.mu.Unlock()
		return 0, errClientBody
	}
	cb.reading = true
	cb.mu.Unlock()
	n, err := cb.read(p)
	cb.mu.Lock()
	cb.reading = false
	if cb.idle.L != nil {
		cb.idle.Broadcast()
	}
	cb.mu.Unlock()
	return n, err
}

func (cb *clientBody) read(p []byte) (int, error) {
	in := &cb.gc.in
	for {
		if cb.rb.Done() {
			if cb.trailer != nil {
				for _, f := range cb.rb.Trailers(nil) {
					cb.trailer.Add(string(f.Name), string(f.Value))
				}
				cb.trailer = nil
			}
			return 0, io.EOF
		}
		if len(in.Buffered()) == 0 {
			if err := in.Fill(len(in.Buf)); err != nil {
				if _, ok := cb.rb.End(cb.gc.requestTrailers()); ok && errors.Is(err, io.EOF) {
					continue // done: its trailers go out above
				}
				return 0, errClientBody
			}
		}
		// At most len(p) bytes in: the data out is never longer, so it is copied whole before
		// the buffer it may point into is refilled.
		data := in.Buffered()
		n, out, rej := cb.rb.Next(data[:min(len(data), len(p))])
		if rej != nil {
			return 0, rej
		}
		k := copy(p, out)
		in.Consume(n)
		if k > 0 {
			return k, nil
		}
	}
}

// detach stops the transport reading the body: a read under way is woken (a deadline in the
// past) and waited for, later ones fail. It reports whether the body had been read whole.
func (cb *clientBody) detach() bool {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if !cb.stopped {
		cb.stopped = true
		cb.idle.L = &cb.mu
		for cb.reading {
			_ = cb.gc.c.SetReadDeadline(time.Unix(1, 0))
			cb.idle.Wait()
		}
	}
	return cb.rb.Done()
}

// relayH2 streams an HTTP/2 upstream's response to the client: the head, the body, and the
// trailers (a trailer frame to an HTTP/2 client, a chunked trailer section to an HTTP/1.1 one;
// a body of known length ends without them on HTTP/1.1). A body cut short by the upstream ends a gRPC
// call with UNAVAILABLE in its trailers, anything else by resetting the stream or closing the
// connection, never as if it were whole.
func (gc *goConn) relayH2(resp *http.Response, method string, grpc bool) (int, int64, error) {
	defer resp.Body.Close()
	code := resp.StatusCode
	gc.webTrailers = gc.grpcWeb && toGRPCWeb(resp)
	gc.headOf(resp)
	gc.tokens = gc.tokens[:0]
	fr := core.ResponseFraming(method, code, &gc.rhead)
	startFr := fr
	if gc.stream != nil && fr == core.LengthBody && resp.ContentLength > 0 {
		// HTTP/2 to HTTP/2: the upstream stream's end, not its length, ends the body (the
		// transport holds the data to the length), so trailers after a sized body come through.
		// (An empty one keeps its end on the head: gRPC's trailers-only answer is one frame.)
		fr = core.CloseBody
	}
	clientFr, decode := gc.startEncoding(code, startFr)
	body := &gc.body
	body.Reset(fr, resp.ContentLength, decode)
	gc.startResponse(code, clientFr, nil)
	if err := gc.sendStart(); err != nil {
		return code, 0, errors.Join(errClientGone, err)
	}
	if gc.relay == nil {
		gc.relay = make([]byte, 16<<10)
	}
	var n int64
	for !body.Done() {
		k, rerr := resp.Body.Read(gc.relay)
		if k > 0 {
			_, out, _ := body.Next(gc.relay[:k])
			n += int64(k)
			if err := gc.sendBody(out); err != nil {
				return code, n, errors.Join(errClientGone, err)
			}
		}
		switch {
		case rerr == io.EOF && fr == core.CloseBody:
			if err := gc.endBody(trailerFields(resp.Trailer)); err != nil {
				return code, n, errors.Join(errClientGone, err)
			}
			return code, n, nil
		case rerr != nil && !body.Done():
			failed := grpcFields(core.GRPCUnavailable, "upstream failed mid-response: "+rerr.Error())
			switch {
			case gc.webTrailers:
				_ = gc.endBody(failed) // a gRPC-Web body ends with its status, as a gRPC stream does
			case grpc && gc.stream != nil:
				_ = gc.stream.Trailers(gc.h2Trailers(failed))
			}
			return code, n, errors.Join(core.ErrUpstream, rerr)
		}
	}
	return code, n, nil
}

// headOf fills gc.rhead with the response head of resp, as an HTTP/1.1 upstream's would be
// parsed, so that one set of rules builds the client's head (core.ResponseHead,
// clientConn.h2ResponseHead).
func (gc *goConn) headOf(resp *http.Response) {
	b := append(gc.rheadBuf[:0], "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(resp.StatusCode), 10)
	b = append(append(b, ' '), core.StatusText(resp.StatusCode)...)
	line := len(b)
	spans := gc.rspans[:0]
	field := func(name, v string) {
		n := len(b)
		b = append(b, name...)
		spans = append(spans, [3]int{n, len(b), len(b) + len(v)})
		b = append(b, v...)
	}
	for name, values := range resp.Header {
		for _, v := range values {
			field(name, v)
		}
	}
	if _, ok := resp.Header["Content-Length"]; !ok && resp.ContentLength >= 0 {
		// A length the stream's end gave (HEADERS that end it: an empty body) but no field
		// says: an HTTP/1.1 client needs the field, or it would read until the close.
		field("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	h := &gc.rhead
	h.Line, h.Fields = b[:line], h.Fields[:0]
	for _, sp := range spans {
		h.Fields = append(h.Fields, h1.Field{Name: b[sp[0]:sp[1]], Value: b[sp[1]:sp[2]]})
	}
	h.ContentLength, h.Chunked, h.TransferEncoding, h.Upgrade = resp.ContentLength, false, nil, false
	gc.rheadBuf, gc.rspans = b, spans
}

// trailerFields are an HTTP/2 response's trailers as fields (body.Finish screens them).
func trailerFields(tr http.Header) []h1.Field {
	var out []h1.Field
	for name, values := range tr {
		for _, v := range values {
			out = append(out, h1.Field{Name: []byte(name), Value: []byte(v)})
		}
	}
	return out
}

// grpcFields are the trailer fields of a gRPC status the proxy gives.
func grpcFields(status int, msg string) []h1.Field {
	return []h1.Field{{Name: []byte("grpc-status"), Value: strconv.AppendInt(nil, int64(status), 10)},
		{Name: []byte("grpc-message"), Value: []byte(core.GRPCMessage(msg))}}
}

// grpcTimeout is a gRPC request's grpc-timeout: the deadline its client gives the whole call.
func (gc *goConn) grpcTimeout(rq *routed) (time.Duration, bool) {
	if !rq.RI.GRPC && !gc.grpcWeb {
		return 0, false
	}
	for _, f := range gc.head.Fields {
		if bytes.EqualFold(f.Name, []byte("grpc-timeout")) {
			return core.GRPCTimeout(string(f.Value))
		}
	}
	return 0, false
}
