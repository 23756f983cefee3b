package fleetexp

import (
	"fmt"
	"sync"
	"time"

	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/topo"
)

// pool is a set of established keep-alive connections to the web VIP, each with the backend
// that answered its first request. A connection that fails once is broken for good: it is
// counted once and not used again.
type pool struct {
	conns  []*lab.KeepAlive
	first  []string
	broken []bool
}

// openPool opens n connections spread over the clients, a first request on each, workers at a
// time.
func openPool(clients []topo.Node, addr string, n, workers int) (*pool, error) {
	p := &pool{conns: make([]*lab.KeepAlive, n), first: make([]string, n), broken: make([]bool, n)}
	errs := parallel(n, workers, func(i int) error {
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
			p.close()
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

// round makes one request on every live connection.
func (p *pool) round(tag string, workers int) Round {
	start := time.Now()
	var mu sync.Mutex
	r := Round{}
	parallel(len(p.conns), workers, func(i int) error {
		mu.Lock()
		dead := p.broken[i]
		mu.Unlock()
		if dead {
			return nil
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

// alive is the number of connections not broken so far.
func (p *pool) alive() int {
	n := 0
	for _, b := range p.broken {
		if !b {
			n++
		}
	}
	return n
}

func (p *pool) close() {
	for _, c := range p.conns {
		if c != nil {
			c.Conn.Close()
		}
	}
}

// parallel runs f(0..n-1) on workers goroutines and returns each call's error.
func parallel(n, workers int, f func(i int) error) []error {
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

// newConns opens new connections at a fixed rate (each: connect, one request, close) until
// stopped or max are started, and records when each started and whether it failed.
type newConns struct {
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

func startNewConns(client topo.Node, addr string, rate, max int) *newConns {
	g := &newConns{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(g.done)
		var wg sync.WaitGroup
		defer wg.Wait()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; i < max; i++ {
			select {
			case <-g.stop:
				return
			case <-tick.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				nc := newConn{start: time.Now()}
				c, err := lab.DialKeepAlive(client.NS, addr)
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

// finish stops the generator and waits for the connections under way (again: nothing).
func (g *newConns) finish() {
	g.once.Do(func() { close(g.stop) })
	<-g.done
}

// count is how many connections started in [from, to) and how many of them failed, and the
// slowest one's time.
func (g *newConns) count(from, to time.Time) (started, failed int, slowest time.Duration) {
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
