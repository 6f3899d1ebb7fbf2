package ports

import (
	"context"
	"time"
)

// Channel delivers notifications of one type (email, webhook, Slack, ...).
// Built-in and third-party channels run as plugins; the plugin host adapts
// them to this interface. The core calls Deliver from many goroutines at once.
type Channel interface {
	// Deliver makes one delivery attempt and classifies it. It never panics
	// on bad input: a missing setting or an empty target list is a Permanent
	// result. When ctx is cancelled it returns promptly; the core then does
	// not count the attempt.
	Deliver(ctx context.Context, d Delivery) Result
}

// ChannelRegistry finds the channel that delivers a notification type.
type ChannelRegistry interface {
	// Channel returns the channel for typ, or false when there is none.
	Channel(typ string) (Channel, bool)
}

// ChannelMap is the simplest ChannelRegistry: a map from type to channel.
type ChannelMap map[string]Channel

// Channel implements ChannelRegistry.
func (m ChannelMap) Channel(typ string) (Channel, bool) {
	c, ok := m[typ]
	return c, ok
}

// Delivery is what a channel needs for one attempt.
type Delivery struct {
	// Notification is the row being delivered.
	Notification Notification
	// Targets are the list's targets resolved at delivery time (addresses,
	// webhook URLs).
	Targets []string
	// Settings are the channel's settings; secret values are references
	// (env:NAME, file:/path) resolved at delivery time by the channel's
	// adapter, which also resolves a target given as a reference, each
	// within what the configuration allows.
	Settings map[string]string
	// RateLimit caps deliveries per second through this channel (the
	// channel settings' RateLimit); 0 means unlimited. The channel's adapter
	// enforces it.
	RateLimit float64
}

// Outcome classifies a delivery attempt.
type Outcome string

const (
	// OutcomeSuccess: delivered; the row becomes Delivered.
	OutcomeSuccess Outcome = "Success"
	// OutcomeTransient: may succeed later; the row is retried per the retry
	// policy and parks when retries are exhausted.
	OutcomeTransient Outcome = "Transient"
	// OutcomePermanent: will never succeed as is; the row parks at once.
	OutcomePermanent Outcome = "Permanent"
	// OutcomeInterrupted is never a channel's answer: the core records it
	// on an attempt a shutdown cut short after some target was delivered
	// (the others stay due at once, no retry is counted). It is no failure:
	// Store.Throughput does not count it.
	OutcomeInterrupted Outcome = "Interrupted"
)

// Result is a channel's answer to one Delivery. It does not say whom the
// notification went to: the core records the delivery's targets as the
// list holds them (a reference stays a reference), never a value a channel
// returns, which could be a secret the channel resolved or made up.
type Result struct {
	Outcome Outcome
	// Error describes a failure. It never holds a secret or an address.
	Error string
	// RetryAfter, when positive on a Transient result, is the earliest the
	// next attempt may run (an HTTP Retry-After, say).
	RetryAfter time.Duration
	// NotAttempted, on a Transient result, says that no attempt was made:
	// the channel's rate limit or concurrency bound left no room before the
	// deadline, or its process was restarting. The row goes back untouched
	// (no retry counted, no audit record) and is claimed again after
	// RetryAfter.
	NotAttempted bool
	// Targets, when not empty, answers target by target: Targets[i] is the
	// outcome for Delivery.Targets[i], and there is one per target. Empty,
	// the result's Outcome, Error and RetryAfter apply to every target (a
	// channel that answers one outcome for the whole delivery).
	Targets []TargetResult
}

// TargetResult is a channel's answer for one target of a Delivery.
type TargetResult struct {
	Outcome Outcome
	// Error describes its failure. It never holds a secret or an address.
	Error string
	// RetryAfter, when positive on a Transient result, is the earliest the
	// next attempt to it may run.
	RetryAfter time.Duration
}

// PluginStatus is the state of one channel plugin process: what the plugin
// host reports, the metrics export and the operator page shows.
type PluginStatus struct {
	// Type is the channel type the plugin delivers ("email", "webhook", …).
	Type string
	// Name and Version are what the plugin describes itself with.
	Name    string
	Version string
	// Command is the plugin's executable.
	Command string
	// Running is false while the process is down (between a crash and its
	// restart).
	Running bool
	PID     int
	// Started is when the current process started.
	Started time.Time
	// Restarts counts the restarts after crashes since the host started,
	// those of a process that stopped answering included.
	Restarts int
	// StoppedAnswering counts the processes the host killed (and
	// restarted) because they stopped answering its pings (hung).
	StoppedAnswering int
}
