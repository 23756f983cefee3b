package limit

import (
	"sync"
	"testing"
	"time"
)

func TestGateShedsPastLimit(t *testing.T) {
	g := NewGate(3)
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if g.TryAcquire() {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if admitted != 3 || g.InFlight() != 3 {
		t.Errorf("admitted %d (in flight %d), want 3", admitted, g.InFlight())
	}
	g.Release()
	if !g.TryAcquire() {
		t.Error("slot released but not reusable")
	}
	if !NewGate(0).TryAcquire() {
		t.Error("limit 0 should mean unlimited")
	}
}

func TestBucketsRefill(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewBuckets(2, 3)
	b.now = func() time.Time { return now }
	got := ""
	for i := 0; i < 4; i++ {
		if b.Allow("k") {
			got += "y"
		} else {
			got += "n"
		}
	}
	if got != "yyyn" {
		t.Errorf("burst of 3: %s", got)
	}
	if !b.Allow("other") {
		t.Error("keys share a bucket")
	}
	now = now.Add(500 * time.Millisecond) // 2/s -> one token
	if !b.Allow("k") || b.Allow("k") {
		t.Error("refill after 500ms at 2/s should give exactly one token")
	}
	now = now.Add(2 * time.Minute)
	b.Allow("new")
	if b.Len() != 1 {
		t.Errorf("idle full buckets not swept: %d keys", b.Len())
	}
	if b.RetryAfter() != 500*time.Millisecond {
		t.Errorf("retry after %v", b.RetryAfter())
	}
}

func TestRetryBudget(t *testing.T) {
	now := time.Unix(2000, 0)
	b := NewRetryBudget(20, 2)
	b.now = func() time.Time { return now }
	// With no traffic only the minimum is allowed.
	if !b.TryRetry() || !b.TryRetry() || b.TryRetry() {
		t.Error("minimum of 2 retries per window not enforced")
	}
	now = now.Add(3 * time.Second) // window resets
	for i := 0; i < 100; i++ {
		b.Request()
	}
	n := 0
	for b.TryRetry() {
		n++
	}
	if n != 20 {
		t.Errorf("retries allowed at 100 requests and 20%% = %d, want 20", n)
	}
	now = now.Add(time.Second) // previous second still counts
	if b.TryRetry() {
		t.Error("the previous second's retries must still count against the budget")
	}
}
