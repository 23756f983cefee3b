package edge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchyard/switchyard/control/store"
)

// Purges across a fleet. A purge sent to one edge with "fleet": true is applied there and then
// sent on to every member of the fleet (admin.fleet: the peers listed, and the edges registered
// in the etcd store when one is set), each retried with backoff until it has applied it, the
// member has left the fleet (its store registration expired: not live), or retry_for has
// passed. GET /purge/{id} says which members have applied it and which have not, and why.

// FleetConfig is admin.fleet.
type FleetConfig struct {
	// Peers are members listed by hand (admin address and token, as admin.push_to).
	Peers []PushPeer `yaml:"peers"`
	// Store is an etcd store (etcd://HOST:PORT[,...]/PREFIX) where every edge of the fleet
	// registers its Advertise address, under PREFIX/edges/, for as long as it runs.
	Store string `yaml:"store"`
	// Advertise is this edge's admin address as the other members reach it (with store).
	Advertise string `yaml:"advertise"`
	// Token (or TokenFile) is the admin token of the members found in the store: one for the
	// fleet.
	Token     string `yaml:"token"`
	TokenFile string `yaml:"token_file"`
	// RetryFor bounds how long a purge is retried on a member that does not apply it (default 10m).
	RetryFor Duration `yaml:"retry_for"`
}

// validate checks admin.fleet and reads its token files.
func (f *FleetConfig) validate(adminListen string) error {
	if f == nil {
		return nil
	}
	if adminListen == "" {
		return &fieldError{"admin.fleet", "set without admin.listen; fleet purges arrive on the admin API, so configure it"}
	}
	peers := AdminConfig{Listen: adminListen, PushTo: f.Peers}
	if err := peers.validatePushPeers(); err != nil {
		var fe *fieldError
		if errors.As(err, &fe) {
			fe.field = strings.Replace(fe.field, "admin.push_to", "admin.fleet.peers", 1)
		}
		return err
	}
	f.Peers = peers.PushTo
	if f.Store == "" {
		if len(f.Peers) == 0 {
			return &fieldError{"admin.fleet", "has neither peers nor store; list the other edges' admin addresses, or give the etcd store they register in"}
		}
		return nil
	}
	if _, err := store.ParseURL(f.Store); err != nil {
		return &fieldError{"admin.fleet.store", err.Error()}
	}
	if f.Advertise == "" {
		return &fieldError{"admin.fleet.advertise", "missing with store; give this edge's admin address as the other edges reach it, like 10.0.0.1:9091"}
	}
	if f.Token == "" && f.TokenFile != "" {
		b, err := os.ReadFile(f.TokenFile)
		if err != nil {
			return &fieldError{"admin.fleet.token_file", fmt.Sprintf("read token: %v", err)}
		}
		f.Token = strings.TrimSpace(string(b))
	}
	if f.Token == "" {
		return &fieldError{"admin.fleet.token", "missing with store; the members' admin API needs the fleet's bearer token (token or token_file)"}
	}
	return nil
}

// FleetPurgeStatus is what GET /purge/{id} answers.
type FleetPurgeStatus struct {
	ID      string         `json:"id"`
	Started time.Time      `json:"started"`
	Done    bool           `json:"done"` // every member applied it, left, or was given up on
	Members []MemberStatus `json:"members"`
}

// MemberStatus is one member's part in a fleet purge.
type MemberStatus struct {
	Admin    string `json:"admin"`
	State    string `json:"state"` // pending, applied, gone (left the fleet), failed (retry_for passed)
	Attempts int    `json:"attempts"`
	Error    string `json:"error,omitempty"` // the last attempt's
}

// fleet is an edge's membership and its fleet purges in flight or recent.
type fleet struct {
	cfg   *FleetConfig
	self  string
	store *store.Store // nil without admin.fleet.store
	lease clientv3.LeaseID

	mu   sync.Mutex
	jobs map[string]*FleetPurgeStatus
	ids  []string // oldest first: at most 256 kept
	wg   sync.WaitGroup
	stop chan struct{}
}

func newFleet(cfg *FleetConfig, self string) (*fleet, error) {
	f := &fleet{cfg: cfg, self: self, jobs: map[string]*FleetPurgeStatus{}, stop: make(chan struct{})}
	if cfg.Store == "" {
		return f, nil
	}
	u, _ := store.ParseURL(cfg.Store) // validated
	st, err := store.Open(u, store.Options{})
	if err != nil {
		return nil, fmt.Errorf("open fleet store: %w", err)
	}
	f.store = st
	f.wg.Add(1)
	go f.register(u.Prefix + "/edges/" + self)
	return f, nil
}

// register keeps this edge's registration alive (a lease of 10 s, renewed), and registers
// again when etcd was unreachable: a member is live while its key exists.
func (f *fleet) register(key string) {
	defer f.wg.Done()
	cli := f.store.Client()
	for {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-f.stop:
			case <-ctx.Done():
			}
			cancel()
		}()
		lease, err := cli.Grant(ctx, 10)
		if err == nil {
			_, err = cli.Put(ctx, key, f.cfg.Advertise, clientv3.WithLease(lease.ID))
		}
		if err == nil {
			var ka <-chan *clientv3.LeaseKeepAliveResponse
			if ka, err = cli.KeepAlive(ctx, lease.ID); err == nil {
				for range ka {
				}
			}
		}
		cancel()
		select {
		case <-f.stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// members are the live members other than this edge: the peers listed and those registered.
func (f *fleet) members(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range f.cfg.Peers {
		out[p.Admin] = p.Token
	}
	if f.store == nil {
		return out, nil
	}
	u, _ := store.ParseURL(f.cfg.Store)
	resp, err := f.store.Client().Get(ctx, u.Prefix+"/edges/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read fleet members from %s: %w", f.cfg.Store, err)
	}
	for _, kv := range resp.Kvs {
		if addr := string(kv.Value); addr != f.cfg.Advertise {
			out[addr] = f.cfg.Token
		}
	}
	return out, nil
}

func (f *fleet) close() {
	close(f.stop)
	if f.store != nil {
		f.store.Close()
	}
	f.wg.Wait()
}

// start sends p on to every member and returns the purge's id; the sending goes on in the
// background.
func (f *fleet) start(p PurgeRequest) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	members, err := f.members(ctx)
	cancel()
	if err != nil {
		return "", err
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	job := &FleetPurgeStatus{ID: hex.EncodeToString(b), Started: time.Now()}
	addrs := make([]string, 0, len(members))
	for a := range members {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	for _, a := range addrs {
		job.Members = append(job.Members, MemberStatus{Admin: a, State: "pending"})
	}
	job.Done = len(addrs) == 0
	f.mu.Lock()
	f.jobs[job.ID] = job
	f.ids = append(f.ids, job.ID)
	if len(f.ids) > 256 {
		delete(f.jobs, f.ids[0])
		f.ids = f.ids[1:]
	}
	f.mu.Unlock()
	for i, a := range addrs {
		f.wg.Add(1)
		go f.send(job, i, AdminClient{Base: a, Token: members[a]}, p)
	}
	return job.ID, nil
}

// send retries the purge on one member until it applies it, leaves the fleet, or retry_for
// passes (backoff 100 ms doubling to 5 s).
func (f *fleet) send(job *FleetPurgeStatus, i int, c AdminClient, p PurgeRequest) {
	defer f.wg.Done()
	retryFor := time.Duration(f.cfg.RetryFor)
	if retryFor <= 0 {
		retryFor = 10 * time.Minute
	}
	deadline := time.Now().Add(retryFor)
	wait := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Purge(ctx, p)
		state := "applied"
		if err != nil {
			state = "pending"
			if time.Now().After(deadline) {
				state = "failed"
			} else if members, merr := f.members(ctx); merr == nil {
				if _, live := members[c.Base]; !live {
					state = "gone"
				}
			}
		}
		cancel()
		f.update(job, i, state, err)
		if state != "pending" {
			return
		}
		select {
		case <-f.stop:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func (f *fleet) update(job *FleetPurgeStatus, i int, state string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := &job.Members[i]
	m.State, m.Attempts, m.Error = state, m.Attempts+1, ""
	if err != nil {
		m.Error = err.Error()
	}
	job.Done = !slices.ContainsFunc(job.Members, func(m MemberStatus) bool { return m.State == "pending" })
}

// status is a copy of a fleet purge's status.
func (f *fleet) status(id string) (FleetPurgeStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[id]
	if !ok {
		return FleetPurgeStatus{}, false
	}
	c := *j
	c.Members = slices.Clone(j.Members)
	return c, true
}

// handleFleetStatus serves GET /purge/{id}.
func (e *Edge) handleFleetStatus(w http.ResponseWriter, r *http.Request) {
	if e.fleet == nil {
		http.Error(w, "no fleet: configure admin.fleet", http.StatusNotFound)
		return
	}
	st, ok := e.fleet.status(r.PathValue("id"))
	if !ok {
		http.Error(w, "no fleet purge "+r.PathValue("id")+" (only the last 256 are kept)", http.StatusNotFound)
		return
	}
	writeJSON(w, st)
}
