package core

import (
	"net/http"
	"testing"

	"github.com/switchyard/switchyard/l7/balance"
	"github.com/switchyard/switchyard/l7/limit"
	"github.com/switchyard/switchyard/l7/route"
)

func TestMatcherRoutesAndRefusesWhatIsNotForTheCore(t *testing.T) {
	table, err := route.Compile([]route.Spec{{Name: "api", PathPrefix: "/api"}, {Name: "rest"}})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMatcher("192.0.2.1:1234")
	rq, ok := m.Route(table, parse(t, "POST /api/../api/x?q=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n"), false)
	if !ok || rq.Index != 0 || rq.Clean != "/api/x" || string(rq.Target) != "/api/x?q=1" || !rq.HasBody || rq.Method != "POST" {
		t.Errorf("routed %+v ok=%v", rq, ok)
	}
	if m.Req.Host != "a" || m.Req.URL.RawQuery != "q=1" {
		t.Errorf("request for matching: host %q query %q", m.Req.Host, m.Req.URL.RawQuery)
	}
	for _, raw := range []string{
		"GET / HTTP/1.0\r\nHost: a\r\n\r\n",         // another version
		"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", // absolute form
		"GET / HTTP/1.1\r\n\r\n",                    // no Host
		"GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n",
		"GET /a%2fb HTTP/1.1\r\nHost: a\r\n\r\n", // an encoded slash
	} {
		if _, ok := m.Route(table, parse(t, raw), false); ok {
			t.Errorf("%q taken by the core", raw)
		}
	}
}

func TestAdmissionOrderAndRelease(t *testing.T) {
	b1, b2 := balance.NewBackend("192.0.2.1:80", 1), balance.NewBackend("192.0.2.2:80", 1)
	global, pool := limit.NewGate(2), limit.NewGate(1)
	a := Admission{Global: global, Pool: pool, Budget: limit.NewRetryBudget(100, 10),
		Picker: balance.NewRoundRobin([]*balance.Backend{b1, b2})}
	r := &http.Request{}
	b, v := a.Admit(r)
	if v != Admitted || b == nil || b.InFlight() != 1 {
		t.Fatalf("first: %v %v", b, v)
	}
	if _, v := a.Admit(r); v != ShedPool || global.InFlight() != 1 {
		t.Errorf("pool full: %v, global in flight %d (must be given back)", v, global.InFlight())
	}
	var spent []bool
	nb := a.Retry(r, b, []*balance.Backend{b}, nil, func(ok bool) { spent = append(spent, ok) })
	if nb == nil || nb == b || b.InFlight() != 0 || nb.InFlight() != 1 || len(spent) != 1 || !spent[0] {
		t.Errorf("retry went to %v (from %v), spent %v", nb, b, spent)
	}
	a.Release(nb)
	if global.InFlight() != 0 || pool.InFlight() != 0 || nb.InFlight() != 0 {
		t.Errorf("release left global %d pool %d backend %d", global.InFlight(), pool.InFlight(), nb.InFlight())
	}
	b1.SetDraining(true)
	b2.SetDraining(true)
	if _, v := a.Admit(r); v != NoBackend || global.InFlight() != 0 || pool.InFlight() != 0 {
		t.Errorf("no backend: %v, gates %d %d", v, global.InFlight(), pool.InFlight())
	}
	a.Limiter, a.KeyOf = limit.NewBuckets(1, 1), func(*http.Request) string { return "k" }
	b1.SetDraining(false)
	if b, v := a.Admit(r); v != Admitted {
		t.Fatalf("with a token: %v", v)
	} else {
		a.Release(b)
	}
	if _, v := a.Admit(r); v != RateLimited || global.InFlight() != 0 {
		t.Errorf("empty bucket: %v", v)
	}
	full := limit.NewGate(1)
	full.TryAcquire()
	a.Global = full
	if _, v := a.Admit(r); v != ShedGlobal {
		t.Errorf("global full: %v", v)
	}
}
