package connlimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
)

// The connection cap: an explicit max_connections under the descriptor room is kept, values
// above the room become the room (the limit minus its reserve), and 0 the room or, where
// upstream connections share it, half of it.
func TestCap(t *testing.T) {
	for i, c := range []struct {
		configured int
		limit      uint64
		want       int64
		shared     int64 // the cap where upstream connections share the room
	}{
		{0, 20000, 15000, 7500}, {100, 20000, 100, 100}, {50000, 20000, 15000, 15000}, {0, 128, 64, 32},
		{0, 0, 0, 0}, {7, 0, 7, 7}, {0, 50, 1, 1},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if got := Cap(c.configured, c.limit); got != c.want {
				t.Errorf("max_connections %d under limit %d: cap %d, want %d", c.configured, c.limit, got, c.want)
			}
			if got := SharedCap(c.configured, c.limit); got != c.shared {
				t.Errorf("max_connections %d under limit %d, shared with upstreams: cap %d, want %d", c.configured, c.limit, got, c.shared)
			}
		})
	}
}

// Clients and upstreams share the room; the cap bounds clients alone, and what is refused is
// not counted.
func TestBudgetSharesTheRoom(t *testing.T) {
	b := New(Config{Limit: 64 + 10, MaxConnections: 6, Upstreams: true}) // room 10, at most 6 clients
	var refused, shed int
	b.OnRefuse = func() { refused++ }
	b.OnShed = func() { shed++ }
	for range 6 {
		if !b.Admit() {
			t.Fatal("a client under the cap was refused")
		}
	}
	if b.Admit() || refused != 1 {
		t.Fatalf("a seventh client over max_connections 6 was admitted (refused %d)", refused)
	}
	for range 4 {
		if !b.Take() {
			t.Fatal("an upstream connection within the room was refused")
		}
	}
	if b.Take() || shed != 1 {
		t.Fatalf("an upstream connection past the room was taken (shed %d)", shed)
	}
	b.Done() // a client leaves: its place is the room's, not only the clients'
	if !b.Take() || b.Admit() {
		t.Fatal("a freed place did not go to the first taker")
	}
	if b.Clients() != 5 || b.Upstreams() != 5 {
		t.Fatalf("counted %d clients and %d upstreams, want 5 and 5", b.Clients(), b.Upstreams())
	}
}

// Dial counts a connection until its first Close, gives the place back when the dial fails, and
// fails past the room with an error that reads as EMFILE (a local shortage).
func TestDial(t *testing.T) {
	b := New(Config{Limit: 64 + 1, Upstreams: true}) // room 1
	a, z := net.Pipe()
	defer z.Close()
	fail := errors.New("refused")
	dial := b.Dial(func(context.Context, string, string) (net.Conn, error) {
		if a == nil {
			return nil, fail
		}
		c := a
		a = nil
		return c, nil
	})
	c, err := dial(context.Background(), "tcp", "x")
	if err != nil || b.Upstreams() != 1 {
		t.Fatalf("dial: %v, %d counted", err, b.Upstreams())
	}
	if _, err := dial(context.Background(), "tcp", "x"); !errors.Is(err, ErrExhausted) || !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("dial past the room: %v, want ErrExhausted (EMFILE)", err)
	}
	c.Close()
	c.Close()
	if b.Upstreams() != 0 {
		t.Fatalf("%d counted after two closes, want 0", b.Upstreams())
	}
	if _, err := dial(context.Background(), "tcp", "x"); !errors.Is(err, fail) || b.Upstreams() != 0 {
		t.Fatalf("a failed dial: %v, %d counted", err, b.Upstreams())
	}
}

// A Take that finds the room used up runs Reclaim (idle connections given back) and tries once
// more; Reclaim runs at most once per ReclaimEvery.
func TestTakeReclaims(t *testing.T) {
	b := New(Config{Limit: 64 + 1, Upstreams: true}) // room 1
	idle, runs := 0, 0
	b.Reclaim = func() {
		runs++
		for ; idle > 0; idle-- {
			b.Give()
		}
	}
	if !b.Take() {
		t.Fatal("the first upstream connection was refused")
	}
	idle = 1 // it is pooled, idle
	if !b.Take() || runs != 1 {
		t.Fatalf("a dial past the room with an idle connection to close: reclaim ran %d times", runs)
	}
	if b.Take() || runs != 1 {
		t.Fatalf("reclaim ran %d times within ReclaimEvery, want 1", runs)
	}
}
