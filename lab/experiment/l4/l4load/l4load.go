// Package l4load drives real TCP load through a lab's VIP for the L4 experiments: a pool of
// established keep-alive connections asked request by request, and new connections opened at a
// fixed rate. fleetexp (balancers failing) and l4exp (a SYN flood) measure what survives.
package l4load

import (
	"fmt"
	"sync"
	"time"

	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/topo"
)

// Pool is a set of established keep-alive connections to the web VIP, each with the backend
// that answered its first request. A connection that fails once is broken for good: it is
// counted once and not used again.
type Pool struct {
	conns  []*lab.KeepAlive
	first  []string
	broken []bool
}

// OpenPool opens n connections spread over the clients, a first request on each, workers at a
// time.
func OpenPool(clients []topo.Node, addr string, n, workers int) (*Pool, error) {
	p := &Pool{conns: make([]*lab.KeepAlive, n), first: make([]string, n), broken: make([]bool, n)}
	errs := Parallel(n, workers, func(i int) error {
		c, err := lab.DialKeepAlive(clients[i%len(clients)].NS, addr)
		if err != nil {
			return fmt.Errorf("connection %d to %s: %w", i, addr, err)
		}
		p.conns[i] = c
		if p.first[i], err = c.Do(fmt.Sprintf("/open/%d", i)); err != nil {
			return fmt.Errorf("connection %d to %s, first request: %w", i, addr, err)
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

// Round counts one request on every connection that was not broken before.
type Round struct {
	Tried int `json:"tried"`
	OK    int `json:"ok"`
	// Broke failed now (error, or answered by another backend: its socket is gone there).
	Broke int           `json:"broke"`
	Took  time.Duration `json:"took_ns"`
}

// Round makes one request on every live connection.
func (p *Pool) Round(tag string, workers int) Round { return p.RoundOver(tag, workers, 0) }

// RoundOver is Round with the requests spread evenly over d: connection i's request starts no
// earlier than i*d/n after the call (workers must cover the rate: n/d requests a second).
func (p *Pool) RoundOver(tag string, workers int, d time.Duration) Round {
	start := time.Now()
	var mu sync.Mutex
	r := Round{}
	n := len(p.conns)
	Parallel(n, workers, func(i int) error {
		mu.Lock()
		dead := p.broken[i]
		mu.Unlock()
		if dead {
			return nil
		}
		if d > 0 {
			time.Sleep(time.Until(start.Add(d * time.Duration(i) / time.Duration(n))))
		}
		be, err := p.conns[i].Do(fmt.Sprintf("/%s/%d", tag, i))
		mu.Lock()
		defer mu.Unlock()
		r.Tried++
		if err != nil || be != p.first[i] {
			p.broken[i] = true
			r.Broke++
			return nil
		}
		r.OK++
		return nil
	})
	r.Took = time.Since(start)
	return r
}

// Alive is the number of connections not broken so far.
func (p *Pool) Alive() int {
	n := 0
	for _, b := range p.broken {
		if !b {
			n++
		}
	}
	return n
}

func (p *Pool) Close() {
	for _, c := range p.conns {
		if c != nil {
			c.Conn.Close()
		}
	}
}

// Parallel runs f(0..n-1) on workers goroutines and returns each call's error.
func Parallel(n, workers int, f func(i int) error) []error {
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = f(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return errs
}

// NewConns opens new connections at a fixed rate (each: connect, one request, close) until
// stopped or max are started, and records when each started and whether it failed. A timeout
// above 0 bounds each connection's dial and its request (0: 5 s and 10 s).
type NewConns struct {
	stop chan struct{}
	done chan struct{}
	once sync.Once
	mu   sync.Mutex
	runs []newConn
}

type newConn struct {
	start time.Time
	took  time.Duration
	err   error
}

// StartNewConns starts opening connections from client to addr, rate a second, at most limit.
func StartNewConns(client topo.Node, addr string, rate, limit int, timeout time.Duration) *NewConns {
	g := &NewConns{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(g.done)
		var wg sync.WaitGroup
		defer wg.Wait()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; i < limit; i++ {
			select {
			case <-g.stop:
				return
			case <-tick.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				nc := newConn{start: time.Now()}
				var c *lab.KeepAlive
				var err error
				if timeout > 0 {
					deadline := nc.start.Add(timeout)
					if c, err = lab.DialKeepAliveWithin(client.NS, addr, timeout); err == nil {
						c.Timeout = max(time.Millisecond, time.Until(deadline)) // 0 would mean 10 s
					}
				} else {
					c, err = lab.DialKeepAlive(client.NS, addr)
				}
				if err == nil {
					_, err = c.Do("/new")
					c.Conn.Close()
				}
				nc.took, nc.err = time.Since(nc.start), err
				g.mu.Lock()
				g.runs = append(g.runs, nc)
				g.mu.Unlock()
			}()
		}
	}()
	return g
}

// Finish stops the generator and waits for the connections under way (again: nothing).
func (g *NewConns) Finish() {
	g.once.Do(func() { close(g.stop) })
	<-g.done
}

// Count is how many connections started in [from, to) and how many of them failed, and the
// slowest one's time.
func (g *NewConns) Count(from, to time.Time) (started, failed int, slowest time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range g.runs {
		if r.start.Before(from) || !r.start.Before(to) {
			continue
		}
		started++
		if r.err != nil {
			failed++
		}
		slowest = max(slowest, r.took)
	}
	return started, failed, slowest
}
