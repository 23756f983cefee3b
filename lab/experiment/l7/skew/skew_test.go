package skew

import (
	"context"
	"testing"
)

// The lesson's uneven mix through the L7 tier: per-request decisions remove the request skew.
func TestUnevenMixHasNoRequestSkew(t *testing.T) {
	res, err := Run(context.Background(), []int{1, 2, 4, 8, 16, 32}, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 63 || res.ClientConnections != 6 {
		t.Fatalf("requests %d over %d client connections, want 63 over 6", res.Requests, res.ClientConnections)
	}
	for _, r := range res.Replicas {
		if r.Requests != 21 {
			t.Errorf("replica %s got %d requests, want 21", r.Name, r.Requests)
		}
	}
	if res.RequestSkew() != 1 || res.DecisionsPerRequest() != 1 {
		t.Errorf("request skew %.2f, decisions/request %.3f; want 1.00 and 1.000", res.RequestSkew(), res.DecisionsPerRequest())
	}
	if res.ConnectionSkew() != 1 {
		t.Errorf("upstream connection skew %.2f, want 1.00 (one pooled connection per replica)", res.ConnectionSkew())
	}
}

func TestSplitPoolsSeparateReadsAndWrites(t *testing.T) {
	res, err := Run(context.Background(), []int{1, 2, 4, 8, 16, 32}, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Replicas {
		for p := range r.Paths {
			if (r.Pool == "reads") != (p == "/tracking") {
				t.Errorf("replica %s in pool %s saw %s", r.Name, r.Pool, p)
			}
		}
	}
	if res.Replicas[2].Requests != 31 || res.Replicas[0].Requests+res.Replicas[1].Requests != 32 {
		t.Errorf("split = %d/%d/%d, want 32 reads over k1,k2 and 31 writes on k3",
			res.Replicas[0].Requests, res.Replicas[1].Requests, res.Replicas[2].Requests)
	}
}
