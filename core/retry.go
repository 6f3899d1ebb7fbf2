package core

import (
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/siteline/outbox/ports"
)

// RetryPolicy decides what follows a transient failure.
type RetryPolicy interface {
	// Next is called after a row's failures-th failed attempt (failures >= 1).
	// It returns how long to wait before the next attempt, or ok=false when
	// the row must park instead.
	Next(failures int) (delay time.Duration, ok bool)
}

// The defaults of unset (zero) retry settings, also the fallbacks for
// negative ones: ten retries a minute apart.
const (
	FallbackMaxRetries = 10
	FallbackInterval   = time.Minute
)

// FixedRetry waits Interval between attempts and parks after MaxRetries
// failures. It is the default policy.
type FixedRetry struct {
	MaxRetries int
	Interval   time.Duration
}

// Next implements RetryPolicy.
func (p FixedRetry) Next(failures int) (time.Duration, bool) {
	if failures >= p.MaxRetries {
		return 0, false
	}
	return p.Interval, true
}

// ExponentialRetry doubles the wait after each failure, from Interval up to
// MaxInterval, and draws each wait between half and all of that value so that
// rows failing together do not retry together.
type ExponentialRetry struct {
	MaxRetries  int
	Interval    time.Duration
	MaxInterval time.Duration
	// Rand returns a number in [0, 1); nil means math/rand/v2.
	Rand func() float64
}

// Next implements RetryPolicy.
func (p ExponentialRetry) Next(failures int) (time.Duration, bool) {
	if failures >= p.MaxRetries {
		return 0, false
	}
	d := p.Interval
	for i := 1; i < failures && d < p.MaxInterval; i++ {
		d *= 2
	}
	d = min(d, p.MaxInterval)
	r := rand.Float64
	if p.Rand != nil {
		r = p.Rand
	}
	half := d / 2
	return half + time.Duration(r()*float64(d-half)), true
}

// NewRetryPolicy builds the policy of a channel's settings. Zero
// MaxRetries or Interval are unset (a channel without settings has both
// zero) and take FallbackMaxRetries and FallbackInterval silently. Negative
// ones are a misconfiguration: they take the same values with a warning, so
// the channel still retries instead of parking everything at once.
func NewRetryPolicy(s ports.RetrySettings, channel string, log *slog.Logger) RetryPolicy {
	if s.MaxRetries < 0 {
		log.Warn("retry policy: max retries is negative; using the default",
			"channel", channel, "max_retries", s.MaxRetries, "default", FallbackMaxRetries)
	}
	if s.MaxRetries <= 0 {
		s.MaxRetries = FallbackMaxRetries
	}
	if s.Interval < 0 {
		log.Warn("retry policy: interval is negative; using the default",
			"channel", channel, "interval", s.Interval.String(), "default", FallbackInterval.String())
	}
	if s.Interval <= 0 {
		s.Interval = FallbackInterval
	}
	if s.Backoff == ports.BackoffExponential {
		if s.MaxInterval < s.Interval {
			s.MaxInterval = 100 * s.Interval
		}
		return ExponentialRetry{MaxRetries: s.MaxRetries, Interval: s.Interval, MaxInterval: s.MaxInterval}
	}
	return FixedRetry{MaxRetries: s.MaxRetries, Interval: s.Interval}
}
