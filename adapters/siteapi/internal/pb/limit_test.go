package pb

import (
	"testing"
	"time"
)

func TestRateLimitedRoundTrip(t *testing.T) {
	for _, d := range []time.Duration{0, time.Microsecond, 20 * time.Millisecond, 3 * time.Second} {
		got, ok := RetryAfter(RateLimited(50, 200, d))
		if !ok || got != max(d.Truncate(time.Millisecond), time.Millisecond) {
			t.Errorf("RetryAfter(RateLimited(%s)) = %s, %v", d, got, ok)
		}
	}
	for _, msg := range []string{"", "grpc: received message larger than max (5000 vs. 4096)",
		"rate limit of the site API; retry in xms", "rate limit of the site API; retry in -5ms",
		"rate limit of the site API; retry in 99999999999ms"} {
		if d, ok := RetryAfter(msg); ok {
			t.Errorf("RetryAfter(%q) = %s, true", msg, d)
		}
	}
}

// FuzzRetryAfter: the client reads the hint of any message a node sends
// without panicking, and a hint it accepts is within an hour.
func FuzzRetryAfter(f *testing.F) {
	f.Add(RateLimited(50, 200, 120*time.Millisecond))
	f.Add("rate limit of the site API; retry in ms")
	f.Add("")
	f.Fuzz(func(t *testing.T, msg string) {
		if d, ok := RetryAfter(msg); ok && (d < 0 || d > time.Hour) {
			t.Fatalf("RetryAfter(%q) = %s", msg, d)
		}
	})
}
