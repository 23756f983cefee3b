// Package staticsplit is the static-content split of the content-delivery lesson ("Static
// Content Hosting", seed 000) on the lab: a page of twenty assets loaded once with every request
// on the app's name (www.lab.test: DNS -> L7 VIP -> `l7 run` -> app server) and once with the
// assets on the content name (static.lab.test: DNS -> `edge run`, whose misses go the same way),
// counting what reaches the app servers. It is `switchyard lab experiment run static-split`.
package staticsplit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"time"

	mdns "github.com/miekg/dns"

	sydns "github.com/switchyard/switchyard/dns"
	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/app"
	"github.com/switchyard/switchyard/lab/topo"
)

// Params size a run.
type Params struct {
	// Prefix names the lab's namespaces ("" takes a fresh one); the run removes the lab.
	Prefix string
	// Pages is the number of page loads per arrangement.
	Pages int
}

// Load is one page load and what the app servers and the edge saw of it.
type Load struct {
	Arrangement string `json:"arrangement"` // combined or split
	Page        int    `json:"page"`
	// Requests the client made (the shell, 19 assets, the tracking query).
	Requests int `json:"requests"`
	// AppRequests is the app servers' own request counters (summed) for this page load.
	AppRequests int64 `json:"app_requests"`
	// AppBytes is the body bytes of the answers that came from an app server (every answer but
	// the edge's hits).
	AppBytes int `json:"app_bytes"`
	// EdgeHits and EdgeMisses are the X-Cache answers of the edge.
	EdgeHits   int `json:"edge_hits"`
	EdgeMisses int `json:"edge_misses"`
}

// Name is a lab name as the lab's DNS server answers it.
type Name struct {
	Name    string       `json:"name"`
	TTL     uint32       `json:"ttl"`
	Answers []netip.Addr `json:"answers"`
}

// Result is the whole run.
type Result struct {
	Loads       []Load `json:"loads"`
	WWW, Static Name   `json:"-"`
	Names       []Name `json:"names"`
	AssetBytes  int    `json:"asset_bytes"`
}

// Run brings up a small lab (1 client, 1 balancer driven directly, 1 backend, 1 L7 proxy, the
// DNS server and the edge, as `lab up` runs them), loads the page in both arrangements and
// removes the lab.
func Run(ctx context.Context, p Params) (*Result, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("static-split: needs root (network namespaces and BPF): run it as root")
	}
	if p.Pages < 2 {
		return nil, errors.New("static-split: at least 2 page loads per arrangement (the first split load fills the edge)")
	}
	if p.Prefix == "" {
		p.Prefix = lab.TempPrefix("ss")
	}
	exe, err := lab.Binary()
	if err != nil {
		return nil, err
	}
	defer lab.Destroy(p.Prefix)
	spec := lab.Spec{Prefix: p.Prefix, Clients: 1, Balancers: 1, Backends: 1, L7: 1, DNS: true, Edge: true}
	st, err := lab.Up(lab.UpOptions{Spec: spec, Exe: exe, Balancer: lab.ModeDirect,
		Stops: map[string]bool{"dns": true, "edge": true, "l7": true}})
	if err != nil {
		return nil, fmt.Errorf("static-split: %w", err)
	}
	l := st.Lab()
	dnsNode, _ := l.Topo.Node("dns")
	r := &runner{client: l.Client(1), dns: dnsNode.Addr4, backends: l.Topo.ByRole(topo.Backend)}
	r.hc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: lab.DialViaDNS(r.client, r.dns), MaxIdleConnsPerHost: 8, DisableCompression: true}}
	defer r.hc.CloseIdleConnections()
	if err := r.ready(ctx); err != nil {
		return nil, fmt.Errorf("static-split: %w (logs in %s)", err, lab.StateDir(p.Prefix))
	}
	res := &Result{}
	for _, a := range Assets() {
		res.AssetBytes += a.Bytes
	}
	for _, n := range []string{lab.WWWName, lab.StaticName} {
		name, err := r.resolve(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("static-split: %w", err)
		}
		res.Names = append(res.Names, name)
	}
	res.WWW, res.Static = res.Names[0], res.Names[1]
	for _, arr := range []string{"combined", "split"} {
		base := "http://" + lab.WWWName
		if arr == "split" {
			base = "http://" + lab.StaticName
		}
		for i := 1; i <= p.Pages; i++ {
			ld, err := r.page(ctx, base)
			if err != nil {
				return nil, fmt.Errorf("static-split: %s page %d: %w", arr, i, err)
			}
			ld.Arrangement, ld.Page = arr, i
			res.Loads = append(res.Loads, ld)
		}
	}
	return res, nil
}

// Assets are the page's files (the app server's).
func Assets() []app.Asset { return app.Assets }

type runner struct {
	client   topo.Node
	dns      netip.Addr
	backends []topo.Node
	hc       *http.Client
}

// ready waits until both names answer through every stop (paths the app does not count), and
// www.lab.test's failover name has checked its sites (one answer).
func (r *runner) ready(ctx context.Context) error {
	deadline := time.Now().Add(45 * time.Second)
	for _, u := range []string{"http://" + lab.WWWName + "/health", "http://" + lab.StaticName + "/health"} {
		for {
			resp, err := r.get(ctx, u)
			if err == nil && resp.StatusCode == http.StatusOK {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("%s did not answer 200 within 45 s: %v", u, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if n, err := r.resolve(ctx, lab.WWWName); err == nil && len(n.Answers) == 1 {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s still answers both sites after 45 s: its health checks do not pass", lab.WWWName)
}

type answer struct {
	StatusCode int
	Body       []byte
	Cache      string
}

func (r *runner) get(ctx context.Context, u string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return answer{}, err
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{StatusCode: resp.StatusCode, Body: b, Cache: resp.Header.Get("X-Cache")}, err
}

// resolve asks the lab's DNS server for a name's A records from the client namespace.
func (r *runner) resolve(ctx context.Context, name string) (Name, error) {
	out := Name{Name: name}
	err := namednetns.DoNamed(r.client.NS, func() error {
		m, _, err := sydns.Query(ctx, netip.AddrPortFrom(r.dns, 53).String(), name, mdns.TypeA, sydns.QueryOptions{})
		if err != nil {
			return err
		}
		for _, rr := range m.Answer {
			if a, ok := rr.(*mdns.A); ok {
				addr, _ := netip.AddrFromSlice(a.A.To4())
				out.Answers, out.TTL = append(out.Answers, addr), rr.Header().Ttl
			}
		}
		if len(out.Answers) == 0 {
			return fmt.Errorf("no A record in %v", m)
		}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("resolve %s at the lab's DNS %s: %w", name, r.dns, err)
	}
	return out, nil
}

// appRequests sums the app servers' request counters; reset zeroes them first.
func (r *runner) appRequests(ctx context.Context, reset bool) (int64, error) {
	var sum int64
	for _, b := range r.backends {
		base := "http://" + b.Addr4.String() + app.AdminPrefix
		if reset {
			if _, err := r.get(ctx, base+"reset"); err != nil {
				return 0, fmt.Errorf("reset %s's counters: %w", b.Name, err)
			}
			continue
		}
		a, err := r.get(ctx, base+"counters")
		if err != nil {
			return 0, fmt.Errorf("read %s's counters: %w", b.Name, err)
		}
		var c app.Counters
		if err := json.Unmarshal(a.Body, &c); err != nil {
			return 0, fmt.Errorf("read %s's counters: %w", b.Name, err)
		}
		sum += c.Requests
	}
	return sum, nil
}

var refs = regexp.MustCompile(`(?:src|href|data-api)="([^"]+)"`)

// page loads the page as a browser without a cache would: the shell from base, every asset it
// references (relative to the shell), then its tracking query (on the app's name).
func (r *runner) page(ctx context.Context, base string) (Load, error) {
	var ld Load
	if _, err := r.appRequests(ctx, true); err != nil {
		return ld, err
	}
	shell, err := url.Parse(base + "/asset/" + app.ShellAsset)
	if err != nil {
		return ld, err
	}
	queue := []*url.URL{shell}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		a, err := r.get(ctx, u.String())
		if err != nil || a.StatusCode != http.StatusOK {
			return ld, fmt.Errorf("GET %s: status %d: %v", u, a.StatusCode, err)
		}
		ld.Requests++
		switch a.Cache {
		case "HIT":
			ld.EdgeHits++
		case "MISS":
			ld.EdgeMisses++
		}
		if a.Cache != "HIT" {
			ld.AppBytes += len(a.Body)
		}
		if u == shell {
			for _, m := range refs.FindAllSubmatch(a.Body, -1) {
				ref, err := shell.Parse(string(m[1]))
				if err != nil {
					return ld, fmt.Errorf("the shell references %q: %w", m[1], err)
				}
				queue = append(queue, ref)
			}
		}
	}
	ld.AppRequests, err = r.appRequests(ctx, false)
	return ld, err
}
