package l4exp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/topo"
)

// HealthRun is one run of the health-check measurement.
type HealthRun struct {
	Health   bool `json:"health_checks"`
	Sent     int  `json:"sent"`
	Answered int  `json:"answered"`
	// Before/After split the counts at the moment the replica died.
	AnsweredBefore int `json:"answered_before"`
	SentAfter      int `json:"sent_after"`
	AnsweredAfter  int `json:"answered_after"`
	// Window is the time from the kill to the last failed request (0: none failed).
	Window time.Duration `json:"window_ns"`
}

// HealthOptions size the measurement.
type HealthOptions struct {
	// Requests in total, one new connection each, Gap apart; the replica dies after a third.
	Requests int
	Gap      time.Duration
}

// LessonHealth is the lesson's health check (assumption Y3): every 200 ms, one failure marks a
// replica down; the lesson's check has a 100 ms timeout.
func LessonHealth() *config.HealthCheck {
	return &config.HealthCheck{Type: "http", Port: 80, Path: "/health", ExpectStatus: 200,
		Interval: config.Duration(200 * time.Millisecond), Timeout: config.Duration(100 * time.Millisecond), Rise: 1, Fall: 1}
}

// HealthCheck runs the lesson's setup twice on the real system, with and without the
// daemon's health checks: three backends behind the XDP VIP, a client sending requests in
// sequence, and one backend's app process killed after a third of them.
func HealthCheck(ctx context.Context, o HealthOptions) ([]HealthRun, error) {
	bin, err := lab.Binary()
	if err != nil {
		return nil, err
	}
	var out []HealthRun
	for _, on := range []bool{false, true} {
		r, err := healthRun(ctx, bin, on, o)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

func healthRun(ctx context.Context, bin string, on bool, o HealthOptions) (HealthRun, error) {
	r := HealthRun{Health: on}
	spec := lab.Spec{Prefix: lab.TempPrefix("xh"), Clients: 1, Balancers: 1, Backends: 3}
	defer lab.Destroy(spec.Prefix)
	st, err := lab.Up(lab.UpOptions{Spec: spec, Exe: bin, Balancer: lab.ModeDaemon, Health: LessonHealth(), NoHealth: !on})
	if err != nil {
		return r, err
	}
	l := st.Lab()
	c := lab.HTTPClient(l.Client(1), false, 5*time.Second)
	bes := l.Topo.ByRole(topo.Backend)
	if err := waitBackends(c, spec.Prefix, bes); err != nil {
		return r, err
	}
	time.Sleep(time.Second) // a few health rounds: every backend healthy
	victim := bes[1]
	var killed time.Time
	var lastFail time.Time
	for i := 0; i < o.Requests; i++ {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		if i == o.Requests/3 {
			// The replica dies abruptly (SIGKILL right after SIGTERM) while the client keeps
			// sending: waiting for it here would give the health checker a head start.
			killed = time.Now()
			go lab.StopProcess(spec.Prefix, victim.Name, 0)
		}
		ok := get200(ctx, c, fmt.Sprintf("http://%s/tracking?no=%d", lab.WebVIP4, i))
		r.Sent++
		if !killed.IsZero() {
			r.SentAfter++
		}
		if ok {
			r.Answered++
			if killed.IsZero() {
				r.AnsweredBefore++
			} else {
				r.AnsweredAfter++
			}
		} else if !killed.IsZero() {
			lastFail = time.Now()
		}
		time.Sleep(o.Gap)
	}
	if !lastFail.IsZero() {
		r.Window = lastFail.Sub(killed)
	}
	return r, nil
}

// waitBackends waits until every backend's app server answers (the processes' start), up to
// 15 s.
func waitBackends(c *http.Client, prefix string, bes []topo.Node) error {
	deadline := time.Now().Add(15 * time.Second)
	for _, be := range bes {
		for {
			if _, err := lab.FetchCounters(c, be); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("backend %s did not start (see %s)", be.Name, lab.StateDir(prefix))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func get200(ctx context.Context, c *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
