package ports

import (
	"encoding/json"
	"time"
)

// Status is where a notification is in its lifecycle. The legal moves between
// statuses are enforced by the core (core.Move); ARCHITECTURE.md draws them.
type Status string

const (
	// StatusForwarding is reported by a site for a notification still in its
	// replicated buffer, not yet acknowledged by central. Central never
	// stores it.
	StatusForwarding Status = "Forwarding"

	// StatusPending means central ingested the notification and it awaits
	// its first delivery attempt.
	StatusPending Status = "Pending"

	// StatusRetrying means an attempt failed transiently; NextAttemptAt
	// schedules the next one.
	StatusRetrying Status = "Retrying"

	// StatusDelivered is terminal: the channel accepted the notification;
	// DeliveredAt and ResolvedTargets are set.
	StatusDelivered Status = "Delivered"

	// StatusParked is terminal-not-delivered: a permanent failure, retries
	// exhausted, expiry, an unknown list or no channel for the type.
	// LastError says which. An operator may Retry or Discard it.
	StatusParked Status = "Parked"

	// StatusDiscarded is terminal: an operator discarded a Parked
	// notification. The row is kept for the audit record.
	StatusDiscarded Status = "Discarded"

	// StatusUnknown is what a status query answers for an id nobody knows.
	StatusUnknown Status = "Unknown"
)

// CentralStatuses lists the statuses a central row can hold, in lifecycle order.
var CentralStatuses = []Status{StatusPending, StatusRetrying, StatusDelivered, StatusParked, StatusDiscarded}

// Terminal reports whether no delivery will be attempted for s again without an
// operator: Delivered, Parked and Discarded.
func (s Status) Terminal() bool {
	return s == StatusDelivered || s == StatusParked || s == StatusDiscarded
}

// Due reports whether the dispatcher may pick a row in status s (Pending or
// Retrying; a Retrying row also needs NextAttemptAt <= now).
func (s Status) Due() bool { return s == StatusPending || s == StatusRetrying }

// Valid reports whether s is one of the statuses a central row can hold.
func (s Status) Valid() bool {
	for _, c := range CentralStatuses {
		if s == c {
			return true
		}
	}
	return false
}

// Notification is one row of the Notifications table: the single audit source
// of what was asked, where it came from and what became of it.
type Notification struct {
	// ID is the notification id generated at the site: a UUID in canonical
	// lowercase text form. It is the idempotency key of ingest.
	ID string
	// Type is its list's type ("email", "webhook", ...) at ingest; empty
	// when the list was unknown then. Dispatch always delivers through the
	// list's type at the time of delivery, never through another channel.
	Type string
	// List is the name of the notification list it is addressed to.
	List string
	// Subject and Body are plain text.
	Subject string
	Body    string
	// TypeData is optional channel-specific JSON; nil when absent.
	TypeData json.RawMessage
	// Priority orders dispatch: higher first; 0 is the default. Ingest
	// accepts MinPriority to MaxPriority.
	Priority int

	// Status is the lifecycle status.
	Status Status
	// RetryCount counts the transient failures so far (a permanent failure
	// parks the row without counting).
	RetryCount int
	// LastError is the reason of the most recent failure or park; empty otherwise.
	LastError string
	// ResolvedTargets is who the notification went to: the targets
	// delivered so far, as the list held them (a reference stays a
	// reference), in the list's order.
	ResolvedTargets []string
	// Targets is the fate of each target an attempt went to, in the order
	// they were first attempted; nil before the first attempt, and for rows
	// from before targets were tracked one by one (their status is then
	// their targets' as one group).
	Targets []TargetState

	// Provenance, carried from the site.
	SourceSite        string
	SourceInstance    string
	SourceScript      string
	ExecutionID       string
	ParentExecutionID string
	SiteEnqueuedAt    time.Time

	// CreatedAt is when central ingested the row.
	CreatedAt time.Time
	// UpdatedAt is when the row last changed status or recorded an attempt.
	UpdatedAt time.Time
	// LastAttemptAt, NextAttemptAt and DeliveredAt are the delivery timestamps.
	LastAttemptAt time.Time
	NextAttemptAt time.Time
	DeliveredAt   time.Time
	// ExpiresAt, when set, parks the row with reason "expired" instead of
	// delivering it after that instant.
	ExpiresAt time.Time

	// ClaimedBy and ClaimedUntil are the dispatch lease: the dispatcher that
	// holds the row and until when. Empty and zero when unleased.
	ClaimedBy    string
	ClaimedUntil time.Time
}

// TargetStatus is where one target of a notification is.
type TargetStatus string

const (
	// TargetDelivered: the channel handed the notification over to this
	// target. No later attempt goes to it.
	TargetDelivered TargetStatus = "Delivered"
	// TargetRetrying: its last attempt failed transiently; it is tried
	// again with the notification's next attempt.
	TargetRetrying TargetStatus = "Retrying"
	// TargetFailed: it failed permanently, or was still failing when the
	// retries ran out. No attempt goes to it until an operator retries the
	// notification.
	TargetFailed TargetStatus = "Failed"
	// TargetDropped: it was no longer in the list, undelivered, when the
	// notification was attempted again (an operator corrected the list).
	// It is kept for the record and never tried again unless the list
	// holds it again.
	TargetDropped TargetStatus = "Dropped"
)

// TargetState is the fate of one target of a notification.
type TargetState struct {
	// Target is the target as the list held it: an address, a URL, or a
	// reference (env:NAME, file:PATH), never the value a reference resolved
	// to.
	Target string
	Status TargetStatus
	// Attempts counts the delivery attempts that went to it.
	Attempts int
	// LastError is the reason of its most recent failure; empty when none
	// failed.
	LastError string
	// LastAttemptAt is when an attempt last went to it, DeliveredAt when it
	// was delivered (zero until then).
	LastAttemptAt time.Time
	DeliveredAt   time.Time
}
