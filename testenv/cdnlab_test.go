package testenv

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/cdn"
)

// cdnAnswer is one answer through the Mini-CDN's router.
type cdnAnswer struct {
	code                             int
	cache, failover, shed, retryWait string
	err                              error
}

func cdnDo(hc *http.Client, method, url string) cdnAnswer {
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader("upload")
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return cdnAnswer{err: err}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return cdnAnswer{err: err}
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return cdnAnswer{code: resp.StatusCode, cache: resp.Header.Get("X-Cache"), failover: resp.Header.Get("X-Edge-Failover"),
		shed: resp.Header.Get("X-Load-Shed"), retryWait: resp.Header.Get("Retry-After"), err: err}
}

// cdnAll sends GET url(i) for i in [0, n) from workers clients and returns the answers in order.
func cdnAll(hc *http.Client, n, workers int, url func(int) string) []cdnAnswer {
	out := make([]cdnAnswer, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = cdnDo(hc, http.MethodGet, url(i))
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

func originRequests(t *testing.T, hc *http.Client, c *lab.CDNState) int {
	t.Helper()
	resp, err := hc.Get("http://" + c.Origin + cdn.OriginStatsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("origin counter %q: %v", b, err)
	}
	return n
}

// killEdge ends edge i of the CDN as a crash does (SIGKILL) and waits until it is gone.
func killEdge(t *testing.T, st *lab.State, i int) {
	t.Helper()
	for _, p := range st.Procs {
		if p.Name != lab.CDNEdgeProc(i) {
			continue
		}
		if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %s (pid %d): %v", p.Name, p.PID, err)
		}
		testutil.Eventually(t, 10*time.Second, func() bool {
			_, err := os.Stat("/proc/" + strconv.Itoa(p.PID))
			return os.IsNotExist(err)
		}, "%s did not exit", p.Name)
		return
	}
	t.Fatalf("no process %s in the lab's state", lab.CDNEdgeProc(i))
}

// TestLabCDN: `lab up --cdn` runs the Mini-CDN as real processes (`l7 run` router, three `edge
// run`, `lab origin`), again without restarting them, and a plain lab up on its prefix is refused. Consistent placement: a second pass over every file is all hits and the
// origin saw each file once. Above the in-flight budget the router sheds with X-Load-Shed: 1 and
// Retry-After, and every edge stays in the ring. An edge killed (SIGKILL): POSTs to its keys fail and are never retried, every GET succeeds
// (some retried once with X-Edge-Failover: 1), the ring drops the edge after its probes fail,
// only its keys moved, and `lab status` shows it dead; `lab down` leaves nothing.
func TestLabCDN(t *testing.T) {
	testutil.RequireLab(t)
	bin := switchyardBin(t)
	prefix := uniquePrefix()
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range []string{"cdn-router", "cdn-edge1", "cdn-edge2", "cdn-origin"} {
				b, _ := os.ReadFile(filepath.Join(lab.StateDir(prefix), n+".log"))
				t.Logf("%s log:\n%s", n, b)
			}
		}
		lab.Destroy(prefix)
	})
	st, err := lab.UpCDN(prefix, bin)
	if err != nil {
		t.Fatal(err)
	}
	again, err := lab.UpCDN(prefix, bin) // idempotent: what runs keeps running
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range again.Procs {
		if p.PID != st.Procs[i].PID {
			t.Errorf("a second lab up --cdn restarted %s (pid %d, was %d)", p.Name, p.PID, st.Procs[i].PID)
		}
	}
	if _, err := lab.Up(lab.UpOptions{Spec: lab.Spec{Prefix: prefix, Clients: 1, Balancers: 1, Backends: 1}, Exe: bin, Balancer: lab.ModeDirect}); err == nil || !strings.Contains(err.Error(), "--cdn") {
		t.Errorf("lab up over the Mini-CDN's prefix: %v, want a refusal naming --cdn", err)
	}
	c := st.CDN
	hc := lab.CDNClient(c, 10*time.Second)
	defer hc.CloseIdleConnections()
	router := "http://" + c.Router
	file := func(i int) string { return router + cdn.FilePath(i) }

	for pass, want := range []string{"MISS", "HIT"} {
		for i, a := range cdnAll(hc, lab.CDNFiles, 8, file) {
			if a.err != nil || a.code != 200 || a.cache != want || a.failover != "" {
				t.Fatalf("pass %d, file %d: %+v, want 200 %s without failover (the ring keeps a file on one edge)", pass+1, i, a, want)
			}
		}
	}
	if n := originRequests(t, hc, c); n != lab.CDNFiles {
		t.Errorf("the origin saw %d requests for %d files, want each once", n, lab.CDNFiles)
	}

	// 48 clients at once on an uncacheable path the origin answers in 300 ms: the budget is 16.
	// Before the kill on purpose: the burst must leave every edge in the ring (checked below).
	// A kill that once found edge 2 already out was lab up returning before the router's probes
	// had every edge in (an edge started before the origin listened), not the burst.
	ok, shed := 0, 0
	for i, a := range cdnAll(hc, 48, 48, func(i int) string { return router + "/slow/" + strconv.Itoa(i) }) {
		switch {
		case a.err == nil && a.code == 200:
			ok++
		case a.err == nil && a.code == 503 && a.shed == "1" && a.retryWait != "":
			shed++
		default:
			t.Errorf("slow request %d: %+v, want 200 or a 503 with X-Load-Shed: 1 and Retry-After", i, a)
		}
	}
	if ok == 0 || shed == 0 || ok > lab.CDNBudget {
		t.Errorf("48 at once over a budget of %d: %d served, %d shed; want some of each, at most the budget served", lab.CDNBudget, ok, shed)
	}

	// The kill below must find edge 2 in the ring, after the burst too: a burst beyond the
	// budget is answered by the router itself and must not take an edge out.
	bs, err := lab.CDNRouterBackends(hc)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if !b.Healthy || b.Ejected {
			t.Fatalf("before the kill the router has an edge out of its ring: %+v; want all %d in", bs, len(c.Edges))
		}
	}
	before := originRequests(t, hc, c)
	killEdge(t, st, 2)
	postErrors := 0
	for i := 0; i < 30; i++ { // while edge 2 is still a ring member (probes every 1 s, fall 2)
		a := cdnDo(hc, http.MethodPost, router+"/upload/"+strconv.Itoa(i))
		if a.failover != "" {
			t.Errorf("POST %d carries X-Edge-Failover %q: a POST must never be retried", i, a.failover)
		}
		if a.err != nil || a.code != 200 {
			postErrors++
		}
	}
	failedOver := -1
	for i, a := range cdnAll(hc, lab.CDNFiles, 8, file) {
		if a.err != nil || a.code != 200 {
			t.Errorf("GET file %d after the kill: %+v, want 200 (retried on another edge)", i, a)
		}
		if a.failover == "1" {
			failedOver = i
		}
	}
	if postErrors == 0 || failedOver < 0 {
		t.Fatalf("after the kill: %d of 30 POSTs failed, last failover file %d; want some POSTs to fail and some GETs to fail over", postErrors, failedOver)
	}
	testutil.Eventually(t, 15*time.Second, func() bool {
		a := cdnDo(hc, http.MethodGet, file(failedOver))
		return a.err == nil && a.code == 200 && a.failover == ""
	}, "the ring did not drop the dead edge")
	moved := originRequests(t, hc, c) - before
	if moved == 0 || moved > lab.CDNFiles/2 {
		t.Errorf("%d files refetched after the kill, want only the dead edge's (about a third of %d)", moved, lab.CDNFiles)
	}
	hits := 0
	for _, a := range cdnAll(hc, lab.CDNFiles, 8, file) {
		if a.err == nil && a.code == 200 && a.failover == "" && a.cache == "HIT" {
			hits++
		}
	}
	if hits < lab.CDNFiles*9/10 {
		t.Errorf("a pass once the ring dropped the edge: %d of %d hits, want >= 90%%", hits, lab.CDNFiles)
	}

	s, err := lab.GetStatus(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if s.Up || s.CDN == nil || len(s.Namespaces) != 1 || s.Namespaces[0].Processes[lab.CDNEdgeProc(2)] != 0 || s.Namespaces[0].Processes["cdn-router"] == 0 {
		t.Errorf("lab status after the kill: %+v, want the CDN degraded with edge 2 dead and the router running", s)
	}
	if err := lab.Destroy(prefix); err != nil {
		t.Fatal(err)
	}
	if namednetns.Exists(c.NS) {
		t.Errorf("namespace %s left after lab down", c.NS)
	}
	if _, err := os.Stat(lab.StateDir(prefix)); !os.IsNotExist(err) {
		t.Errorf("state dir left after lab down: %v", err)
	}
}
