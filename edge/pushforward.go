package edge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// Forwarding pushed objects. An object pushed to one edge (PUT /object) is stored there and sent
// on, through the same authenticated endpoint, to every edge listed in admin.push_to (its lower
// tiers and peers), which store it and send it on to theirs. So an origin pushes to its upper
// tier once and the object reaches the whole tree, each edge authenticating with the token of
// the next. Each forwarded push carries PushPathHeader, the instance IDs of the edges it has
// been through: an edge that finds its own ID there has the object already (the peers form a
// loop) and answers ALREADY without storing or forwarding, and a path of maxPushHops stops.

// PushPathHeader lists, on a forwarded PUT /object, the instance IDs of the edges the object
// passed through, comma-separated, the sender's last.
const PushPathHeader = "X-Switchyard-Push-Path"

// maxPushHops bounds how many edges a pushed object is forwarded through.
const maxPushHops = 16

// pushForwardTimeout bounds one forward (the next edge's own forwards included).
const pushForwardTimeout = 30 * time.Second

// PushPeer is an edge that pushed objects are forwarded to (admin.push_to).
type PushPeer struct {
	// Admin is the peer's admin API address, host:port or a base URL.
	Admin string `yaml:"admin"`
	// Token is the peer's admin.token.
	Token string `yaml:"token"`
	// TokenFile names a file holding the peer's token, an alternative to Token.
	TokenFile string `yaml:"token_file"`
}

// validatePushPeers checks admin.push_to and reads token files.
func (c *AdminConfig) validatePushPeers() error {
	for i := range c.PushTo {
		p := &c.PushTo[i]
		at := fmt.Sprintf("admin.push_to.%d", i+1)
		if p.Admin == "" {
			return &fieldError{at + ".admin", "missing; give the peer edge's admin address, like 10.0.0.2:9091"}
		}
		if p.Token == "" && p.TokenFile != "" {
			b, err := os.ReadFile(p.TokenFile)
			if err != nil {
				return &fieldError{at + ".token_file", fmt.Sprintf("read token: %v", err)}
			}
			p.Token = strings.TrimSpace(string(b))
		}
		if p.Token == "" {
			return &fieldError{at + ".token", "missing; the peer's admin API needs its bearer token (token or token_file)"}
		}
	}
	if len(c.PushTo) > 0 && c.Listen == "" {
		return &fieldError{"admin.push_to", "set without admin.listen; pushes arrive on the admin API, so configure it"}
	}
	return nil
}

// SetPushPeers replaces the edges pushed objects are forwarded to (admin.push_to), for a
// reload or for peers whose admin addresses are known only once they have started.
func (e *Edge) SetPushPeers(peers []PushPeer) {
	p := append([]PushPeer(nil), peers...)
	e.pushPeers.Store(&p)
}

// newInstanceID returns the random ID this edge puts in PushPathHeader.
func newInstanceID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// pushPathOf returns the IDs in a request's PushPathHeader.
func pushPathOf(r *http.Request) []string {
	var ids []string
	for _, v := range r.Header.Values(PushPathHeader) {
		for _, id := range strings.Split(v, ",") {
			if id = strings.TrimSpace(id); id != "" {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// forwardPush sends a stored pushed object to every push peer, in parallel, and returns what
// each answered. path is the PushPathHeader the object arrived with.
func (e *Edge) forwardPush(ctx context.Context, rawURL string, status int, header http.Header, body []byte, path []string) []PushResult {
	peers := *e.pushPeers.Load()
	if len(peers) == 0 || len(path)+1 >= maxPushHops {
		return nil
	}
	next := strings.Join(append(append([]string(nil), path...), e.id), ",")
	ctx, cancel := context.WithTimeout(ctx, pushForwardTimeout)
	defer cancel()
	out := make([]PushResult, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := AdminClient{Base: p.Admin, Token: p.Token, pushPath: next}
			res, err := cl.PushObject(ctx, rawURL, status, header, body)
			if err != nil {
				res = PushResult{URL: rawURL, Error: err.Error()}
				e.stats.PushForwardErrors.Add(1)
				e.warn("forward pushed object", "url", rawURL, "peer", p.Admin, "err", err)
			} else {
				e.stats.PushForwarded.Add(1)
			}
			res.Peer = p.Admin
			out[i] = res
		}()
	}
	wg.Wait()
	return out
}
