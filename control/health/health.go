// Package health probes backends (TCP connect, HTTP GET) and turns the results into a healthy or
// unhealthy state with rise and fall counts, so that one lost probe does not move traffic.
package health

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Probe modes (docs/xdp.md, "Health checks through the tunnel").
const (
	// ModeTunnel probes the VIP through the tunnel toward the backend, as real traffic arrives:
	// a backend without the VIP on lo, or without the decap program, fails.
	ModeTunnel = "tunnel"
	// ModeDirect probes the backend's own address: it proves the host is up, not that it serves
	// the VIP.
	ModeDirect = "direct"
)

// tunnelMSS is the MSS a tunnel probe announces: its packets grow by the outer header (40 bytes
// at most) on the way out, and must still fit the link.
const tunnelMSS = 1200

// Spec is one check: what to probe and how often.
type Spec struct {
	// Type is "tcp" or "http".
	Type string
	// Addr is the backend address and the probed port.
	Addr netip.AddrPort
	// Mode is ModeDirect (probe Addr; the empty mode is direct) or ModeTunnel (probe Target).
	Mode string
	// Target is what a tunnel probe connects to: the VIP and the probed port. Its packets carry
	// Mark (SO_MARK), which the balancer's probe encapsulator maps to the backend, and leave
	// through Device (SO_BINDTODEVICE), the balanced interface.
	Target netip.AddrPort
	Mark   uint32
	Device string
	// Path and ExpectStatus apply to http.
	Path         string
	ExpectStatus int
	Interval     time.Duration
	Timeout      time.Duration
	Rise, Fall   int
}

// Status is the state of one check as shown to operators.
type Status struct {
	Healthy bool `json:"healthy"`
	// Checked is false until the first probe finished.
	Checked bool `json:"checked"`
	// Successes and Failures in a row (one of them is 0).
	Successes int `json:"successes"`
	Failures  int `json:"failures"`
	// LastError is the error of the last failed probe.
	LastError string    `json:"last_error,omitempty"`
	LastCheck time.Time `json:"last_check,omitempty"`
	// Since is when the state last changed.
	Since time.Time `json:"since"`
}

// Machine is the rise/fall state machine of one backend. A backend starts healthy: a restarted
// daemon must not empty rings before its first probes return.
type Machine struct {
	rise, fall int
	st         Status
}

// NewMachine starts a healthy machine.
func NewMachine(rise, fall int, now time.Time) *Machine {
	if rise < 1 {
		rise = 1
	}
	if fall < 1 {
		fall = 1
	}
	return &Machine{rise: rise, fall: fall, st: Status{Healthy: true, Since: now}}
}

// Observe records one probe result and reports whether the healthy state changed.
func (m *Machine) Observe(err error, now time.Time) bool {
	m.st.Checked = true
	m.st.LastCheck = now
	if err == nil {
		m.st.Successes++
		m.st.Failures = 0
		m.st.LastError = ""
		if !m.st.Healthy && m.st.Successes >= m.rise {
			m.st.Healthy, m.st.Since = true, now
			return true
		}
		return false
	}
	m.st.Failures++
	m.st.Successes = 0
	m.st.LastError = err.Error()
	if m.st.Healthy && m.st.Failures >= m.fall {
		m.st.Healthy, m.st.Since = false, now
		return true
	}
	return false
}

// Status is the current state.
func (m *Machine) Status() Status { return m.st }

// dialAddr is where the probe connects: the backend (direct) or the VIP (tunnel).
func (s Spec) dialAddr() netip.AddrPort {
	if s.Mode == ModeTunnel {
		return s.Target
	}
	return s.Addr
}

// dialer makes the probe's sockets: plain for direct probes; marked, bound to the balanced
// interface and with a small MSS for tunnel probes.
func (s Spec) dialer() *net.Dialer {
	if s.Mode != ModeTunnel {
		return &net.Dialer{}
	}
	return &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(s.Mark)); serr != nil {
				serr = fmt.Errorf("set SO_MARK %#x: %w", s.Mark, serr)
				return
			}
			if s.Device != "" {
				if serr = unix.BindToDevice(int(fd), s.Device); serr != nil {
					serr = fmt.Errorf("bind to %s: %w", s.Device, serr)
					return
				}
			}
			if serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG, tunnelMSS); serr != nil {
				serr = fmt.Errorf("set TCP_MAXSEG: %w", serr)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
}

// ProbeMode is the spec's mode: ModeDirect when unset.
func (s Spec) ProbeMode() string {
	if s.Mode == ModeTunnel {
		return ModeTunnel
	}
	return ModeDirect
}

// via names the probed path in errors: "10.0.0.5:80", or "198.18.100.1:80 via 10.0.0.5".
func (s Spec) via() string {
	if s.Mode == ModeTunnel {
		return s.Target.String() + " via " + s.Addr.Addr().String()
	}
	return s.Addr.String()
}

// Probe runs one check against the backend.
func Probe(ctx context.Context, s Spec) error {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	dial := s.dialer()
	switch s.Type {
	case "tcp":
		c, err := dial.DialContext(ctx, "tcp", s.dialAddr().String())
		if err != nil {
			return fmt.Errorf("tcp connect %s: %w", s.via(), err)
		}
		return c.Close()
	case "http":
		url := "http://" + s.dialAddr().String() + s.Path
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("http get %s: %w", url, err)
		}
		req.Header.Set("User-Agent", "switchyard-lb-health")
		// A fresh transport per probe: a pooled connection would prove nothing about accepting.
		tr := &http.Transport{DisableKeepAlives: true, Proxy: nil, DialContext: dial.DialContext}
		defer tr.CloseIdleConnections()
		what := url
		if s.Mode == ModeTunnel {
			what += " via " + s.Addr.Addr().String()
		}
		resp, err := (&http.Client{Transport: tr, CheckRedirect: noRedirect}).Do(req)
		if err != nil {
			return fmt.Errorf("http get %s: %w", what, err)
		}
		resp.Body.Close()
		if resp.StatusCode != s.ExpectStatus {
			return fmt.Errorf("http get %s: status %d, expected %d", what, resp.StatusCode, s.ExpectStatus)
		}
		return nil
	}
	return fmt.Errorf("probe %s: unknown check type %q", s.via(), s.Type)
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Key names one checked backend of one VIP.
type Key struct {
	VIP     string
	Backend netip.Addr
}

// String renders "vip backend".
func (k Key) String() string { return k.VIP + " " + k.Backend.String() }

// Change is a state change reported to the owner.
type Change struct {
	Key     Key
	Healthy bool
	Err     string
}

// Manager runs one checker goroutine per checked backend and reports changes on a channel.
type Manager struct {
	mu       sync.Mutex
	checks   map[Key]*check
	changes  chan Change
	probe    func(context.Context, Spec) error
	now      func() time.Time
	parent   context.Context
	probeCnt map[probeCount]uint64
}

// probeCount keys the probe counters: a mode and a result.
type probeCount struct{ mode, result string }

type check struct {
	spec   Spec
	m      *Machine
	cancel context.CancelFunc
	done   chan struct{}
}

// NewManager makes a manager whose checkers live until ctx ends. Changes are sent on the
// returned manager's Changes channel; the owner must read it.
func NewManager(ctx context.Context) *Manager {
	return &Manager{checks: map[Key]*check{}, changes: make(chan Change, 64), probe: Probe, now: time.Now, parent: ctx, probeCnt: map[probeCount]uint64{}}
}

// SetProbe replaces the probe function (tests use a controllable one).
func (mg *Manager) SetProbe(p func(context.Context, Spec) error) { mg.probe = p }

// Changes delivers state changes.
func (mg *Manager) Changes() <-chan Change { return mg.changes }

// Sync makes the running checks exactly want: new keys start (healthy), removed keys stop, and
// keys whose spec changed restart with their current state kept.
func (mg *Manager) Sync(want map[Key]Spec) {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	for k, c := range mg.checks {
		if s, ok := want[k]; !ok || s != c.spec {
			c.cancel()
			if !ok {
				delete(mg.checks, k)
			}
		}
	}
	for k, s := range want {
		old, ok := mg.checks[k]
		if ok && old.spec == s {
			continue
		}
		m := NewMachine(s.Rise, s.Fall, mg.now())
		if ok {
			m = old.m
			m.rise, m.fall = max(s.Rise, 1), max(s.Fall, 1)
		}
		ctx, cancel := context.WithCancel(mg.parent)
		c := &check{spec: s, m: m, cancel: cancel, done: make(chan struct{})}
		mg.checks[k] = c
		go mg.run(ctx, k, c)
	}
}

func (mg *Manager) run(ctx context.Context, k Key, c *check) {
	defer close(c.done)
	t := time.NewTicker(c.spec.Interval)
	defer t.Stop()
	for {
		err := mg.probe(ctx, c.spec)
		if ctx.Err() != nil {
			return
		}
		mg.mu.Lock()
		changed := c.m.Observe(err, mg.now())
		res := "ok"
		if err != nil {
			res = "fail"
		}
		mg.probeCnt[probeCount{c.spec.ProbeMode(), res}]++
		st := c.m.Status()
		mg.mu.Unlock()
		if changed {
			select {
			case mg.changes <- Change{Key: k, Healthy: st.Healthy, Err: st.LastError}:
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// Healthy reports a backend's state; a backend without a check is healthy.
func (mg *Manager) Healthy(k Key) bool {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	c, ok := mg.checks[k]
	return !ok || c.m.Status().Healthy
}

// Status returns the state of one check and whether it is checked at all.
func (mg *Manager) Status(k Key) (Status, bool) {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	c, ok := mg.checks[k]
	if !ok {
		return Status{}, false
	}
	return c.m.Status(), true
}

// Specs returns the spec of every running check.
func (mg *Manager) Specs() map[Key]Spec {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	out := make(map[Key]Spec, len(mg.checks))
	for k, c := range mg.checks {
		out[k] = c.spec
	}
	return out
}

// ProbeCounts returns how many probes succeeded and failed so far.
func (mg *Manager) ProbeCounts() (ok, fail uint64) {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	for k, n := range mg.probeCnt {
		if k.result == "ok" {
			ok += n
		} else {
			fail += n
		}
	}
	return ok, fail
}

// ProbeCountsByMode returns the probe counts of one mode (ModeDirect or ModeTunnel).
func (mg *Manager) ProbeCountsByMode(mode string) (ok, fail uint64) {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	return mg.probeCnt[probeCount{mode, "ok"}], mg.probeCnt[probeCount{mode, "fail"}]
}

// Stop ends every check and waits for the checkers to return.
func (mg *Manager) Stop() {
	mg.mu.Lock()
	var done []chan struct{}
	for k, c := range mg.checks {
		c.cancel()
		done = append(done, c.done)
		delete(mg.checks, k)
	}
	mg.mu.Unlock()
	for _, d := range done {
		<-d
	}
}

// Describe renders a spec for logs and the health command.
func (s Spec) Describe() string {
	d := s.Type + " " + s.dialAddr().String()
	if s.Type == "http" {
		d += s.Path + " expect " + strconv.Itoa(s.ExpectStatus)
	}
	if s.Mode == ModeTunnel {
		d += " via " + s.Addr.Addr().String()
	}
	return d
}
