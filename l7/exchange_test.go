package l7

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"
)

var stepNames = [...]string{xConnect: "connect", xSend: "send", xAwait: "await", xRetry: "retry",
	xRelay: "relay", xAnswer: "answer", xDone: "done"}

// The exchange's sequence (tries.after), which every engine follows: each row is a step's end
// and the step that must follow, with the backend the request is then at.
func TestExchangeSequence(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
listeners: [{address: "127.0.0.1:23300"}]
routes: [{name: r, pool: p, retry: {attempts: 2, on_status: [503]}}]
pools: [{name: p, backends: [{address: "127.0.0.1:23310"}, {address: "127.0.0.1:23311"}, {address: "127.0.0.1:23312"}],
  retry_budget: {percent: 100, min_per_second: 100}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(cfg, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	rt := s.state.Load().routes[0]
	req, _ := http.NewRequest(http.MethodGet, "http://a/x", nil)
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	written := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}
	now := time.Now()

	type row struct {
		name  string
		from  xstep
		o     outcome
		want  xstep
		fresh bool // the next connection must be a new one
		moved bool // the request went to another backend
	}
	run := func(t *testing.T, rows []row) {
		var tr tries
		tr.start(s, rt, rt.retry, req, rt.pool.backends[0])
		tr.hold(true, rt.retry.Replayable(http.MethodGet, 0, true), now.Add(time.Minute))
		for _, r := range rows {
			before := tr.backend()
			got := tr.after(r.from, r.o, now)
			if got != r.want || tr.fresh != r.fresh || (tr.backend() != before) != r.moved {
				t.Fatalf("%s: after(%s) = %s fresh=%v moved=%v, want %s fresh=%v moved=%v", r.name, stepNames[r.from],
					stepNames[got], tr.fresh, tr.backend() != before, stepNames[r.want], r.fresh, r.moved)
			}
		}
	}
	t.Run("happy", func(t *testing.T) {
		run(t, []row{
			{name: "connected", from: xConnect, want: xSend},
			{name: "sent", from: xSend, want: xAwait},
			{name: "a head", from: xAwait, o: outcome{code: 200}, want: xRelay},
			{name: "relayed", from: xRelay, want: xDone},
		})
	})
	t.Run("replay, retry, give up", func(t *testing.T) {
		run(t, []row{
			{name: "a pooled connection the backend had closed", from: xSend, o: outcome{err: written, reused: true}, want: xConnect, fresh: true},
			{name: "replayed once only", from: xAwait, o: outcome{err: io.EOF, reused: true}, want: xConnect, moved: true},
			{name: "a status the route retries", from: xAwait, o: outcome{code: 503}, want: xRetry, moved: true},
			{name: "dropped", from: xRetry, want: xConnect},
			{name: "no attempt left", from: xConnect, o: outcome{err: refused}, want: xAnswer},
			{name: "answered", from: xAnswer, want: xDone},
		})
	})
	t.Run("the client's doing", func(t *testing.T) {
		run(t, []row{
			{name: "client gone", from: xAwait, o: outcome{err: errors.Join(io.EOF, context.Canceled), reused: true}, want: xAnswer},
		})
	})
	t.Run("a response byte read", func(t *testing.T) {
		run(t, []row{
			{name: "not replayed", from: xAwait, o: outcome{err: io.ErrUnexpectedEOF, reused: true, gotBytes: true}, want: xConnect, moved: true},
			{name: "a status the route retries", from: xAwait, o: outcome{code: 503}, want: xRetry, moved: true},
			{name: "dropped", from: xRetry, want: xConnect},
			{name: "the same status, no attempt left", from: xAwait, o: outcome{code: 503}, want: xRelay},
		})
	})
}
