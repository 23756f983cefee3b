package dns

import (
	"net/netip"
	"sync"
	"time"

	"github.com/switchyard/switchyard/dns/config"
)

// limiter is a small response-rate limiter: a token bucket per client network (/24 for IPv4,
// /56 for IPv6), the unit reflection attacks spoof from. Limited queries are dropped, or every
// Slip-th one gets a truncated answer so genuine clients behind the network retry over TCP.
type limiter struct {
	rate float64
	slip int

	mu      sync.Mutex
	buckets map[netip.Prefix]*bucket
	swept   time.Time
}

type bucket struct {
	tokens  float64
	last    time.Time
	limited int
}

type rrlAction int

const (
	rrlAllow rrlAction = iota
	rrlDrop
	rrlSlip
)

func newLimiter(c config.RateLimit) *limiter {
	if c.ResponsesPerSecond <= 0 {
		return nil
	}
	return &limiter{rate: float64(c.ResponsesPerSecond), slip: c.Slip, buckets: map[netip.Prefix]*bucket{}}
}

func (l *limiter) allow(src netip.Addr) rrlAction {
	bits := 24
	if src.Is6() {
		bits = 56
	}
	key, _ := src.Prefix(bits)
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) > 10*time.Second {
		// Forget idle networks so a spoofed flood from many sources cannot grow the map forever.
		for k, b := range l.buckets {
			if now.Sub(b.last) > 10*time.Second {
				delete(l.buckets, k)
			}
		}
		l.swept = now
	}
	b, ok := l.buckets[key]
	if !ok {
		b = &bucket{tokens: l.rate, last: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.rate, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return rrlAllow
	}
	b.limited++
	if l.slip > 0 && b.limited%l.slip == 0 {
		return rrlSlip
	}
	return rrlDrop
}
