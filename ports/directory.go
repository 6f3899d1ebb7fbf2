package ports

import (
	"context"
	"time"
)

// Directory resolves notification lists and channel settings (C6). The core
// reads it at ingest (a list's type) and at delivery (targets and settings).
type Directory interface {
	// List returns the named list, or an error wrapping ErrNotFound.
	List(ctx context.Context, name string) (List, error)

	// ChannelSettings returns the settings of the channel of type typ, or an
	// error wrapping ErrNotFound when none are configured (the core then uses
	// the default retry policy and empty settings).
	ChannelSettings(ctx context.Context, typ string) (ChannelSettings, error)
}

// List is a typed notification list.
type List struct {
	Name string
	// Type is the channel type that delivers to this list ("email", ...).
	Type string
	// Targets are type-specific: e-mail addresses, webhook URLs.
	Targets []string
}

// ChannelSettings configure one channel type.
type ChannelSettings struct {
	Type string
	// Settings are channel-specific (host, port, tls, from, ...). Secret
	// values are references: env:NAME or file:/path.
	Settings map[string]string
	// Retry is the channel's retry policy.
	Retry RetrySettings
	// RateLimit caps deliveries per second through this channel; 0 means
	// unlimited.
	RateLimit float64
}

// Backoff names a retry schedule.
type Backoff string

const (
	// BackoffFixed waits Interval between attempts (the default).
	BackoffFixed Backoff = "fixed"
	// BackoffExponential doubles the wait after each failure, from Interval
	// up to MaxInterval, with jitter (each wait is drawn between half and
	// all of its nominal value).
	BackoffExponential Backoff = "exponential"
)

// RetrySettings are a channel's retry policy settings. MaxRetries counts
// failed attempts: the row parks when its RetryCount reaches it. Non-positive
// MaxRetries or Interval fall back to 10 retries and 1 minute (with a warning).
// A MaxInterval below Interval (zero, say) means 100 × Interval.
type RetrySettings struct {
	Backoff     Backoff
	MaxRetries  int
	Interval    time.Duration
	MaxInterval time.Duration
}
