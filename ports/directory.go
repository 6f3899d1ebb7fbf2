package ports

import (
	"context"
	"time"
)

// Directory resolves notification lists and channel settings. The core
// reads it at ingest (a list's type) and at delivery (targets and settings).
type Directory interface {
	// List returns the named list, or an error wrapping ErrNotFound.
	List(ctx context.Context, name string) (List, error)

	// ChannelSettings returns the settings of the channel of type typ, or an
	// error wrapping ErrNotFound when none are configured (the core then uses
	// the default retry policy and empty settings).
	ChannelSettings(ctx context.Context, typ string) (ChannelSettings, error)
}

// DirectoryAdmin manages the lists and channel settings a Directory resolves:
// the admin API, the CLI, and central seeding them from its configuration use
// it. Every method is safe for concurrent use. Values handed in and returned
// are copies: changing them afterwards changes nothing stored.
type DirectoryAdmin interface {
	Directory

	// PutList creates the list l.Name or replaces it whole. An invalid list
	// (see List.Validate) is refused with an error wrapping ErrInvalid that
	// names each broken rule, and nothing is written.
	PutList(ctx context.Context, l List) error

	// DeleteList deletes the named list, or returns an error wrapping
	// ErrNotFound when there is none.
	DeleteList(ctx context.Context, name string) error

	// Lists returns every list, sorted by name (byte order).
	Lists(ctx context.Context) ([]List, error)

	// PutChannel creates the settings of channel type c.Type or replaces them
	// whole. Invalid settings (see ChannelSettings.Validate) are refused with
	// an error wrapping ErrInvalid, and nothing is written.
	PutChannel(ctx context.Context, c ChannelSettings) error

	// DeleteChannel deletes the settings of channel type typ, or returns an
	// error wrapping ErrNotFound when there are none.
	DeleteChannel(ctx context.Context, typ string) error

	// Channels returns the settings of every channel type, sorted by type
	// (byte order).
	Channels(ctx context.Context) ([]ChannelSettings, error)
}

// DirectoryEditor is the driving port of changes to the directory: the admin
// API and central's seeding from its configuration call it, naming who
// changes what; core.DirectoryEditor implements it over a DirectoryAdmin and
// an AdminAudit. Each change is written to the directory, then recorded in
// the admin audit log with its actor and a summary that holds no secret (no
// target, no clear value of a secret setting). A put that changes nothing
// records nothing.
//
// Errors are the DirectoryAdmin's. When the change was made but its record
// could not be written, the error says so (and wraps no sentinel: the
// caller sees an internal error, the log has the record).
type DirectoryEditor interface {
	// PutList creates or replaces the list l.Name and returns it as stored.
	PutList(ctx context.Context, actor string, l List) (List, error)
	// CreateList creates the list l.Name as PutList does, or returns an
	// error wrapping ErrConflict when a list of that name exists already
	// (checked and written as one step against the editor's other puts).
	CreateList(ctx context.Context, actor string, l List) (List, error)
	// DeleteList deletes the named list.
	DeleteList(ctx context.Context, actor, name string) error
	// PutChannel creates or replaces the settings of c.Type and returns
	// them as stored.
	PutChannel(ctx context.Context, actor string, c ChannelSettings) (ChannelSettings, error)
	// DeleteChannel deletes the settings of channel type typ.
	DeleteChannel(ctx context.Context, actor, typ string) error
}

// List is a typed notification list.
type List struct {
	Name string
	// Type is the channel type that delivers to this list ("email", ...).
	Type string
	// Targets are type-specific: e-mail addresses, webhook URLs. A target may
	// be a reference (env:NAME or file:/path), since a webhook URL may carry
	// a token; the channel resolves it at delivery time.
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
// A MaxInterval below Interval (zero, say) means 100 × Interval. Interval and
// MaxInterval are whole milliseconds (see ChannelSettings.Validate), the
// precision a directory keeps.
type RetrySettings struct {
	Backoff     Backoff
	MaxRetries  int
	Interval    time.Duration
	MaxInterval time.Duration
}
