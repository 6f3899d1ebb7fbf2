package guard

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxLimiterKeys bounds the callers a KeyedLimiter keeps a bucket for.
const maxLimiterKeys = 16384

// KeyedLimiter is a token bucket per caller (golang.org/x/time/rate): each
// key may spend Rate tokens a second on average and Burst at once. It keeps
// at most a bounded number of keys: a bucket that has been full for a while
// is forgotten (a new one starts full too, so forgetting changes nothing),
// and when every bucket is in use a new key shares one overflow bucket, so a
// flood of distinct keys costs fixed memory and is limited as one caller.
// Safe for concurrent use.
type KeyedLimiter struct {
	limit rate.Limit
	burst int
	now   func() time.Time

	mu       sync.Mutex
	buckets  map[string]*rate.Limiter
	overflow *rate.Limiter
	swept    time.Time // when bucket last looked for full buckets to forget
}

// NewKeyedLimiter returns a limiter of perSecond tokens a second and burst
// at once for each key. perSecond <= 0 means no limit.
func NewKeyedLimiter(perSecond float64, burst int) *KeyedLimiter {
	l := rate.Inf
	if perSecond > 0 {
		l = rate.Limit(perSecond)
	}
	if burst < 1 {
		burst = 1
	}
	return &KeyedLimiter{
		limit:    l,
		burst:    burst,
		now:      time.Now,
		buckets:  make(map[string]*rate.Limiter),
		overflow: rate.NewLimiter(l, burst),
	}
}

// Allow reports whether key may spend one token now, and spends it if so.
func (k *KeyedLimiter) Allow(key string) bool { return k.AllowN(key, 1) }

// AllowN reports whether key may spend n tokens now, and spends them if so.
// n larger than the burst is never allowed: callers that spend by size
// (bytes) need a burst at least as large as the largest request they accept.
func (k *KeyedLimiter) AllowN(key string, n int) bool {
	if k.limit == rate.Inf {
		return true
	}
	now := k.now()
	return k.bucket(key, now).AllowN(now, n)
}

// RetryAfter returns how long key must wait before n tokens are available
// (0 when they are now), without spending any; n larger than the burst
// answers how long the bucket takes to fill.
func (k *KeyedLimiter) RetryAfter(key string, n int) time.Duration {
	if k.limit == rate.Inf {
		return 0
	}
	now := k.now()
	b := k.bucket(key, now)
	missing := float64(min(n, k.burst)) - b.TokensAt(now)
	if missing <= 0 {
		return 0
	}
	return time.Duration(missing / float64(k.limit) * float64(time.Second))
}

// bucket returns key's bucket, making room for it when needed.
func (k *KeyedLimiter) bucket(key string, now time.Time) *rate.Limiter {
	k.mu.Lock()
	defer k.mu.Unlock()
	if b, ok := k.buckets[key]; ok {
		return b
	}
	// Look for full buckets to forget at most once a second, so that a full
	// table costs no scan per call.
	if len(k.buckets) >= maxLimiterKeys && now.Sub(k.swept) >= time.Second {
		k.swept = now
		for key, b := range k.buckets {
			if b.TokensAt(now) >= float64(k.burst) {
				delete(k.buckets, key)
			}
		}
	}
	if len(k.buckets) >= maxLimiterKeys {
		return k.overflow
	}
	b := rate.NewLimiter(k.limit, k.burst)
	k.buckets[key] = b
	return b
}
