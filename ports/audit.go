package ports

import (
	"context"
	"time"
)

// AuditLog keeps the history of each notification: every delivery attempt
// with its duration and outcome, every terminal status and every operator
// action, each with its actor. (Ingest is recorded by the row itself; the core
// presents it as the first record of a history.) The SQL store adapter implements it in
// the same database as the Store. ports/storetest covers it.
type AuditLog interface {
	// Append stores records. It is all or nothing.
	Append(ctx context.Context, records []AuditRecord) error

	// History returns the records of one notification, oldest first (At
	// ascending, then in the order they were appended). Unknown ids yield an
	// empty slice, not an error.
	History(ctx context.Context, notificationID string) ([]AuditRecord, error)

	// Forget deletes the records of the given notifications (after a purge).
	Forget(ctx context.Context, notificationIDs []string) error
}

// AuditKind says what an audit record records.
type AuditKind string

const (
	// AuditIngested records central accepting the notification from a site.
	// The core derives it from the row (CreatedAt, SourceSite); it is not
	// appended to the log.
	AuditIngested AuditKind = "Ingested"
	// AuditAttempted records one delivery attempt: its Outcome, Duration and
	// Error, and in Status the row's status after the attempt.
	AuditAttempted AuditKind = "Attempted"
	// AuditDelivered, AuditParked and AuditDiscarded record the row reaching
	// that terminal status. The dispatcher writes no Delivered record for
	// an attempt that delivered the row and left no error to tell (the
	// row kept none from earlier attempts): its Attempted record, Status
	// Delivered, says it all. So a row's settling record is its Delivered
	// or Parked record, or that Attempted record, whose Status is the row's.
	// It is the last of the row's history: the records of an attempt are
	// written with its outcome (see Store.Record).
	AuditDelivered AuditKind = "Delivered"
	// AuditParked is also an operator parking a Retrying row (Actor the
	// operator).
	AuditParked    AuditKind = "Parked"
	AuditDiscarded AuditKind = "Discarded"
	// AuditRetried records an operator's Retry: a Parked row back to
	// Pending, or a Retrying row made due at once (Retry now, Status
	// Retrying).
	AuditRetried AuditKind = "Retried"
)

// ActorSystem is the actor of records the dispatcher writes.
const ActorSystem = "system"

// AuditRecord is one entry of a notification's history.
type AuditRecord struct {
	NotificationID string
	At             time.Time
	Kind           AuditKind
	// Actor is who caused it: ActorSystem, "site:<id>", or an operator name.
	Actor string
	// Outcome is set on Attempted records.
	Outcome Outcome
	// Status is the notification's status after the event.
	Status Status
	// Duration is the attempt's duration on Attempted records.
	Duration time.Duration
	// Error is the failure text, if any.
	Error string
	// SourceSite and Type are the notification's, which the core copies
	// onto every record it writes (the dispatcher's Attempted, Delivered
	// and Parked, an operator's Parked, Retried and Discarded) so that
	// Store.Throughput counts failures and parkings per site and type from
	// the log alone; empty on records from before they were kept.
	SourceSite string
	Type       string
	// Targets are, on Attempted records, the targets the attempt went to,
	// each with its own outcome; nil on other records and on records from
	// before targets were tracked one by one.
	Targets []AuditTarget
}

// AuditTarget is one target of an attempt, as an Attempted record keeps it.
type AuditTarget struct {
	// Target is as the list held it (a reference stays a reference).
	Target  string
	Outcome Outcome
	// Error is its failure text; empty on Success.
	Error string
}
