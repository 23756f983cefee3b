package lab

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Readiness of the Mini-CDN. Its parts start in dependency order, each once the one it
// forwards to answers: an edge answers /healthz by asking the origin, so an edge started before
// the origin listens fails the router's first probes, and two failed probes (fall 2) take it out
// of the ring until the next probe a second later. `lab up --cdn` then returned with an edge out
// of the ring, and a test killing that edge at once saw no request reach it.

// CDNRouterAdmin is the router's admin endpoint inside the CDN's namespace (GET /backends).
const CDNRouterAdmin = "127.0.10.1:9901"

// waitHTTP waits until url answers 200 through hc.
func waitHTTP(hc *http.Client, url string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		resp, err := hc.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer 200 within %s: %w", url, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CDNBackend is one edge as the router sees it (the router's GET /backends).
type CDNBackend struct {
	Address string `json:"address"`
	Healthy bool   `json:"healthy"`
	Ejected bool   `json:"ejected"`
}

// CDNRouterBackends asks the router's admin endpoint for its view of the edges.
func CDNRouterBackends(hc *http.Client) ([]CDNBackend, error) {
	resp, err := hc.Get("http://" + CDNRouterAdmin + "/backends")
	if err != nil {
		return nil, fmt.Errorf("ask the router for its backends: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("ask the router for its backends: status %d", resp.StatusCode)
	}
	var bs []CDNBackend
	if err := json.NewDecoder(resp.Body).Decode(&bs); err != nil {
		return nil, fmt.Errorf("decode the router's backends: %w", err)
	}
	return bs, nil
}

// waitRing waits until the router has every edge of c in its ring (healthy, not ejected).
func waitRing(hc *http.Client, c *CDNState, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		bs, err := CDNRouterBackends(hc)
		if err == nil {
			in := 0
			for _, b := range bs {
				if b.Healthy && !b.Ejected {
					in++
				}
			}
			if in == len(c.Edges) {
				return nil
			}
			err = fmt.Errorf("%d of %d edges in the ring: %+v", in, len(c.Edges), bs)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the router did not have every edge in its ring within %s: %w", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
