package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// AdminClient calls one edge's admin API.
type AdminClient struct {
	// Base is the admin API's base URL, e.g. "http://127.0.0.1:9091".
	Base string
	// Token is the bearer token (admin.token of that edge).
	Token string
	// HTTP is the client used; nil means a client with a 60 s timeout.
	HTTP *http.Client

	pushPath string // PushPathHeader of a forwarded push (edge/pushforward.go)
}

// Purge purges entries on the edge.
func (c AdminClient) Purge(ctx context.Context, p PurgeRequest) (PurgeResult, error) {
	var res PurgeResult
	return res, c.call(ctx, http.MethodPost, "/purge", p, &res)
}

// FleetPurge follows a fleet purge's progress (the job a purge with Fleet returned).
func (c AdminClient) FleetPurge(ctx context.Context, job string) (FleetPurgeStatus, error) {
	var res FleetPurgeStatus
	return res, c.call(ctx, http.MethodGet, "/purge/"+job, nil, &res)
}

// Push prewarms URLs on the edge.
func (c AdminClient) Push(ctx context.Context, p PushRequest) ([]PushResult, error) {
	var res []PushResult
	return res, c.call(ctx, http.MethodPost, "/push", p, &res)
}

// Stats fetches the edge's stats report.
func (c AdminClient) Stats(ctx context.Context) (StatsReport, error) {
	var res StatsReport
	return res, c.call(ctx, http.MethodGet, "/stats", nil, &res)
}

func (c AdminClient) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode %s request: %w", path, err)
		}
		body = bytes.NewReader(b)
	}
	return c.send(ctx, method, path, "application/json", body, out)
}

// send makes one admin call with a body of the given type and decodes the JSON answer into out.
func (c AdminClient) send(ctx context.Context, method, path, contentType string, body io.Reader, out any) error {
	base := strings.TrimSuffix(c.Base, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return fmt.Errorf("call %s%s: %w", c.Base, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", contentType)
	if c.pushPath != "" {
		req.Header.Set(PushPathHeader, c.pushPath)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 60 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("call %s%s: %w", c.Base, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode == http.StatusUnauthorized {
		return fmt.Errorf("call %s%s: unauthorized; pass the edge's admin.token with --token-file FILE or SWITCHYARD_EDGE_TOKEN", c.Base, path)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("call %s%s: %s: %s", c.Base, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decode %s%s response: %w", c.Base, path, err)
	}
	return nil
}
