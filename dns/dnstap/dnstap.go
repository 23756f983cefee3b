// Package dnstap logs the DNS stop's queries and responses as dnstap messages (the protobuf
// schema of dnstap.info) over Frame Streams to a Unix or TCP socket, the way Knot, NSD and BIND
// do: AUTH_QUERY and AUTH_RESPONSE, each with the wire message, the client's and the server's
// addresses and the times. The answer path only copies the messages into a bounded queue and
// never waits: a full queue drops the entry and counts it. One writer goroutine encodes, writes
// and reconnects when the reader goes away.
package dnstap

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	dt "github.com/dnstap/golang-dnstap"
	framestream "github.com/farsightsec/golang-framestream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
)

// Protocol is the transport a query came over.
type Protocol = dt.SocketProtocol

// Transports of the messages.
const (
	UDP = dt.SocketProtocol_UDP
	TCP = dt.SocketProtocol_TCP
	DoT = dt.SocketProtocol_DOT
)

// Options configure a Tap.
type Options struct {
	// Network is "unix" or "tcp"; Address the socket path or host:port of the reader.
	Network, Address string
	// Identity and Version go into every message (the server's name and software version).
	Identity, Version string
	// Queries and Responses choose which messages are logged.
	Queries, Responses bool
	// Queue bounds the entries waiting for the writer (default 16384).
	Queue int
	// Retry is the wait before reconnecting to a reader that is gone or absent (default 1s).
	Retry time.Duration
	// Log receives connection errors (at most one per failure, not one per message).
	Log *slog.Logger
	// Registry receives switchyard_dns_dnstap_*.
	Registry prometheus.Registerer
}

// entry is one answered query: both messages are built from it by the writer.
type entry struct {
	proto     Protocol
	src, dst  netip.AddrPort
	qt, rt    time.Time
	query     []byte
	response  []byte
	hasQuery  bool
	hasAnswer bool
}

// Tap is a running dnstap output. Its methods are safe for concurrent use; a nil Tap logs
// nothing.
type Tap struct {
	opt     Options
	queue   chan *entry
	pool    sync.Pool
	sent    prometheus.Counter
	dropped prometheus.Counter
	conns   *prometheus.CounterVec
	up      prometheus.Gauge
	done    chan struct{}
	cancel  context.CancelFunc
}

// New checks opt and registers the metrics; Start runs the writer.
func New(opt Options) (*Tap, error) {
	if opt.Network != "unix" && opt.Network != "tcp" {
		return nil, fmt.Errorf("new dnstap: network %q: use unix (socket:) or tcp (tcp:)", opt.Network)
	}
	if opt.Queue <= 0 {
		opt.Queue = 16384
	}
	if opt.Retry <= 0 {
		opt.Retry = time.Second
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	t := &Tap{opt: opt, queue: make(chan *entry, opt.Queue), done: make(chan struct{})}
	t.pool.New = func() any { return new(entry) }
	t.sent = prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_dns_dnstap_sent_total",
		Help: "dnstap messages written to the reader."})
	t.dropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_dns_dnstap_dropped_total",
		Help: "dnstap messages dropped: the queue was full (reader slow or absent) or the write failed."})
	t.conns = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_dns_dnstap_connects_total",
		Help: "Connections to the dnstap reader by result (ok, error)."}, []string{"result"})
	t.up = prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_dns_dnstap_connected",
		Help: "1 while connected to the dnstap reader."})
	if opt.Registry != nil {
		for _, c := range []prometheus.Collector{t.sent, t.dropped, t.conns, t.up} {
			if err := opt.Registry.Register(c); err != nil {
				return nil, fmt.Errorf("register dnstap metrics: %w", err)
			}
		}
	}
	return t, nil
}

// Start runs the writer until ctx ends or Close.
func (t *Tap) Start(ctx context.Context) {
	ctx, t.cancel = context.WithCancel(ctx)
	go t.run(ctx)
}

// Close stops the writer, flushing what it holds when connected, and waits for it.
func (t *Tap) Close() {
	if t == nil || t.cancel == nil {
		return
	}
	t.cancel()
	<-t.done
}

// Enabled reports whether Log records anything (the caller may then skip taking times).
func (t *Tap) Enabled() bool { return t != nil && (t.opt.Queries || t.opt.Responses) }

// Log queues the query received at qt from src on dst and its response (nil when none was
// sent). It copies both messages and returns at once; a full queue drops the entry.
func (t *Tap) Log(p Protocol, src, dst netip.AddrPort, qt time.Time, query, response []byte) {
	if !t.Enabled() {
		return
	}
	e := t.pool.Get().(*entry)
	e.proto, e.src, e.dst, e.qt, e.rt = p, src, dst, qt, time.Now()
	e.hasQuery, e.hasAnswer = t.opt.Queries, t.opt.Responses && response != nil
	e.query, e.response = e.query[:0], e.response[:0]
	if e.hasQuery {
		e.query = append(e.query, query...)
	}
	if e.hasAnswer {
		e.response = append(e.response, response...)
	}
	select {
	case t.queue <- e:
	default:
		n := 0
		if e.hasQuery {
			n++
		}
		if e.hasAnswer {
			n++
		}
		t.dropped.Add(float64(n))
		t.put(e)
	}
}

// put returns e to the pool unless its buffers grew large (a transfer-sized message).
func (t *Tap) put(e *entry) {
	if cap(e.query)+cap(e.response) <= 8192 {
		t.pool.Put(e)
	}
}

// run connects, writes the queue's entries and reconnects after a failure, until ctx ends.
func (t *Tap) run(ctx context.Context) {
	defer close(t.done)
	var failed bool
	for ctx.Err() == nil {
		w, conn, err := t.connect(ctx)
		if err != nil {
			t.conns.WithLabelValues("error").Inc()
			if !failed { // one line per outage, not one per retry
				t.opt.Log.Warn("dnstap: connect to reader failed; messages are dropped until it is back",
					"addr", t.opt.Address, "err", err)
			}
			failed = true
			select {
			case <-ctx.Done():
			case <-time.After(t.opt.Retry):
			}
			continue
		}
		t.conns.WithLabelValues("ok").Inc()
		t.up.Set(1)
		t.opt.Log.Info("dnstap: connected to reader", "addr", t.opt.Address)
		failed = false
		err = t.write(ctx, w)
		t.up.Set(0)
		if err != nil {
			t.opt.Log.Warn("dnstap: write to reader failed; reconnecting", "addr", t.opt.Address, "err", err)
			failed = true
		} else {
			w.Close() // ctx ended: send the stop frame
		}
		conn.Close()
	}
}

// connect dials the reader and does the bidirectional Frame Streams handshake.
func (t *Tap) connect(ctx context.Context) (*framestream.Writer, net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, t.opt.Network, t.opt.Address)
	if err != nil {
		return nil, nil, fmt.Errorf("dial dnstap reader: %w", err)
	}
	w, err := framestream.NewWriter(conn, &framestream.WriterOptions{
		ContentTypes: [][]byte{dt.FSContentType}, Bidirectional: true, Timeout: 5 * time.Second})
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("frame streams handshake with dnstap reader: %w", err)
	}
	return w, conn, nil
}

// write sends queued entries until ctx ends (nil) or a write fails; it flushes whenever the
// queue runs empty, so a quiet server's messages do not wait in the buffer.
func (t *Tap) write(ctx context.Context, w *framestream.Writer) error {
	var buf []byte
	for {
		var e *entry
		select {
		case e = <-t.queue:
		default:
			if err := w.Flush(); err != nil {
				return fmt.Errorf("flush: %w", err)
			}
			select {
			case e = <-t.queue:
			case <-ctx.Done():
				return nil
			}
		}
		n, err := t.writeEntry(w, e, &buf)
		t.sent.Add(float64(n))
		if err != nil {
			t.dropped.Inc()
			return err
		}
	}
}

// writeEntry encodes and writes e's messages; it returns how many were written.
func (t *Tap) writeEntry(w *framestream.Writer, e *entry, buf *[]byte) (int, error) {
	defer t.put(e)
	n := 0
	for _, resp := range []bool{false, true} {
		if (!resp && !e.hasQuery) || (resp && !e.hasAnswer) {
			continue
		}
		var err error
		*buf, err = proto.MarshalOptions{}.MarshalAppend((*buf)[:0], t.message(e, resp))
		if err != nil {
			return n, fmt.Errorf("encode dnstap message: %w", err)
		}
		if _, err := w.WriteFrame(*buf); err != nil {
			return n, fmt.Errorf("write frame: %w", err)
		}
		n++
	}
	return n, nil
}

// message is the dnstap frame of e's query (resp false) or response.
func (t *Tap) message(e *entry, resp bool) *dt.Dnstap {
	typ, mtyp := dt.Dnstap_MESSAGE, dt.Message_AUTH_QUERY
	fam := dt.SocketFamily_INET
	if e.src.Addr().Is6() {
		fam = dt.SocketFamily_INET6
	}
	qs, qn := uint64(e.qt.Unix()), uint32(e.qt.Nanosecond())
	m := &dt.Message{Type: &mtyp, SocketFamily: &fam, SocketProtocol: &e.proto,
		QueryAddress: e.src.Addr().AsSlice(), QueryPort: ptr(uint32(e.src.Port())),
		ResponseAddress: e.dst.Addr().AsSlice(), ResponsePort: ptr(uint32(e.dst.Port())),
		QueryTimeSec: &qs, QueryTimeNsec: &qn}
	if resp {
		mtyp = dt.Message_AUTH_RESPONSE
		rs, rn := uint64(e.rt.Unix()), uint32(e.rt.Nanosecond())
		m.ResponseTimeSec, m.ResponseTimeNsec, m.ResponseMessage = &rs, &rn, e.response
	} else {
		m.QueryMessage = e.query
	}
	d := &dt.Dnstap{Type: &typ, Message: m}
	if t.opt.Identity != "" {
		d.Identity = []byte(t.opt.Identity)
	}
	if t.opt.Version != "" {
		d.Version = []byte(t.opt.Version)
	}
	return d
}

func ptr[T any](v T) *T { return &v }
