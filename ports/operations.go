package ports

import (
	"context"
	"encoding/json"
	"time"
)

// A site buffers, besides notifications, cached operations that scripts
// hand it: calls to external systems (an ERP, a historian, over HTTP) and
// writes to databases (an INSERT into a plant database). Each has a tracked
// operation id and a tracking row, the site's authoritative record of its
// status; while it waits for a retry, the row also holds the message to
// deliver. Unlike a notification, which goes to central, a cached operation
// is delivered by the site itself, retried at its target's fixed interval,
// and parks at the site when its retries run out.

// OpKind is the category of a cached operation.
type OpKind string

const (
	// OpCall is a call to a method of an external system.
	OpCall OpKind = "ExternalCall"
	// OpWrite is a write to a database connection: SQL with parameters.
	OpWrite OpKind = "DatabaseWrite"
)

// OpStatus is where a cached operation is.
type OpStatus string

const (
	// OpPending: its first attempt failed transiently; it is buffered and
	// waits for its first retry.
	OpPending OpStatus = "Pending"
	// OpRetrying: buffered, retried at least once, due again at
	// NextAttemptAt.
	OpRetrying OpStatus = "Retrying"
	// OpParked: buffered, its retries ran out. An operator may Retry it
	// (back to Retrying, due at once) or Discard it.
	OpParked OpStatus = "Parked"
	// OpDelivered is terminal: the target accepted it.
	OpDelivered OpStatus = "Delivered"
	// OpFailed is terminal: the target refused it for good (an HTTP 4xx, a
	// constraint violation); the error went back to the script.
	OpFailed OpStatus = "Failed"
	// OpDiscarded is terminal: an operator discarded it while parked.
	OpDiscarded OpStatus = "Discarded"
)

// OpStatuses lists the statuses of a cached operation, in lifecycle order.
var OpStatuses = []OpStatus{OpPending, OpRetrying, OpParked, OpDelivered, OpFailed, OpDiscarded}

// Terminal reports whether nothing more happens to an operation in status
// s: Delivered, Failed or Discarded.
func (s OpStatus) Terminal() bool { return s == OpDelivered || s == OpFailed || s == OpDiscarded }

// Buffered reports whether an operation in status s holds a message to
// deliver: Pending, Retrying or Parked.
func (s OpStatus) Buffered() bool { return s == OpPending || s == OpRetrying || s == OpParked }

// Valid reports whether s is one of OpStatuses.
func (s OpStatus) Valid() bool {
	for _, v := range OpStatuses {
		if s == v {
			return true
		}
	}
	return false
}

// Operation is one cached operation: its tracking row and, while it is
// buffered, the message to deliver.
type Operation struct {
	// ID is the tracked operation id: a UUID (version 7) the caller made and
	// keeps across its retries, so that a call repeated after a lost answer
	// is one operation.
	ID   string
	Kind OpKind
	// Target is the external system's name (OpCall) or the database
	// connection's name (OpWrite); Method is the system's method (OpCall
	// only). Together they are the row's target summary.
	Target string
	Method string

	Status OpStatus
	// RetryCount counts the retries made after the first attempt.
	RetryCount int
	// LastError is the reason of the most recent failure; empty when none.
	LastError string
	// NextAttemptAt is when a Pending or Retrying operation is next due.
	NextAttemptAt time.Time

	// Provenance of the script that made the call.
	SourceInstance    string
	SourceScript      string
	ExecutionID       string
	ParentExecutionID string

	// CreatedAt is when the script made the call, UpdatedAt the last change,
	// TerminalAt when it became Delivered, Failed or Discarded (zero
	// before).
	CreatedAt  time.Time
	UpdatedAt  time.Time
	TerminalAt time.Time

	// Payload is what to deliver; it is kept while the operation is
	// buffered and dropped once it is terminal.
	Payload OpPayload

	// Version counts the committed changes of the row, from 1.
	Version uint64
}

// Summary is the operation's target summary: "system.method" for a call,
// the connection's name for a write.
func (o Operation) Summary() string {
	if o.Method != "" {
		return o.Target + "." + o.Method
	}
	return o.Target
}

// OpPayload is the message of a cached operation.
type OpPayload struct {
	// Params are a call's parameters: a JSON object whose members the
	// method's definition places in its path, query or body.
	Params json.RawMessage
	// SQL and Args are a write's statement and its parameters (a JSON array
	// of strings, numbers, booleans and nulls, bound in order); values are
	// never spliced into the text.
	SQL  string
	Args json.RawMessage
}

// OpChange is one change a site commits to an operation: the row as it
// must become, provided the stored row's status is From ("" when the
// operation must not be stored yet).
type OpChange struct {
	From OpStatus
	Op   Operation
}

// OpStore is a site's replicated store of cached operations: the tracking
// table and, for the rows that are buffered, their messages, in one.
// adapters/raftbuffer implements it over the site's Raft group beside the
// notification buffer, adapters/membuffer in memory; ports/opstoretest is
// the contract every implementation passes.
//
// Writes (Put, Purge) succeed only on the node that can commit them (the
// Raft leader) and return once committed to a quorum and applied locally;
// elsewhere they fail with an error wrapping ErrUnavailable and change
// nothing. Reads answer from the local copy.
type OpStore interface {
	// Put commits changes in order. A change applies only when the stored
	// row's status is its From (an absent row's is ""); it then replaces
	// the row whole, with Version one more than the stored row's, and a
	// terminal row keeps no payload. Put reports, per change, whether it
	// applied.
	Put(ctx context.Context, changes []OpChange) (applied []bool, err error)

	// Get returns one operation, or an error wrapping ErrNotFound.
	Get(ctx context.Context, id string) (Operation, error)

	// Due returns up to limit operations that are Pending or Retrying with
	// NextAttemptAt at or before now, earliest first (then by id).
	Due(ctx context.Context, now time.Time, limit int) ([]Operation, error)

	// List returns one page of operations matching f, newest first
	// (CreatedAt descending, then ID descending), with keyset paging as
	// Store.Query: page.After is the previous page's Next cursor.
	List(ctx context.Context, f OpFilter, page PageRequest) (OpPage, error)

	// Purge commits the removal of up to limit terminal operations whose
	// TerminalAt is before cutoff, and returns how many it removed.
	Purge(ctx context.Context, cutoff time.Time, limit int) (int, error)

	// OpStats counts the operations by kind and status.
	OpStats(ctx context.Context) (OpStats, error)

	// Changes reads the change feed: up to limit operations in the order
	// of their last change, after the position after ("" for the start).
	// A row appears once, at its last change; a purged row no longer
	// appears. Positions and the epoch are the same on every node, and a
	// position is opaque: a malformed one, or a limit below 1, is
	// ErrInvalid. It answers from the local copy.
	Changes(ctx context.Context, after string, limit int) (OpChanges, error)
}

// OpChanges is one page of a site's change feed.
type OpChanges struct {
	Items []Operation
	// Next is the position of the last item, or the request's position
	// when there is none: the next page is read after it.
	Next string
	// Epoch names the feed: fixed by the first operation the store ever
	// held, the same on every node of a group and different between two
	// groups (a site whose data was wiped starts a new feed). Empty while
	// the store has never held an operation, and in a store kept before
	// the feed existed until its first change since (a reader that sees
	// the epoch change reads the feed again from the start).
	Epoch string
}

// OpFilter selects operations. Zero fields do not filter; set fields are
// ANDed.
type OpFilter struct {
	Kind     OpKind
	Statuses []OpStatus
	// Target keeps operations of that system or connection.
	Target string
	// CreatedFrom (inclusive) and CreatedTo (exclusive) bound CreatedAt.
	CreatedFrom time.Time
	CreatedTo   time.Time
}

// OpPage is one page of operations.
type OpPage struct {
	Items []Operation
	// Next is the cursor of the following page, or "" when this is the last.
	Next string
}

// OpStats counts operations per kind.
type OpStats struct {
	Kinds []OpKindStats
}

// OpKindStats are the counts of one kind of operation.
type OpKindStats struct {
	Kind OpKind
	// Backlog counts the Pending and Retrying operations, Parked the parked
	// ones; OldestBufferedAt is the CreatedAt of the oldest buffered one
	// (zero when none).
	Backlog          int64
	Parked           int64
	OldestBufferedAt time.Time
	// Terminal counts the Delivered, Failed and Discarded rows kept until
	// the purge.
	Terminal int64
}

// OpResult is a target's answer to one attempt of a cached operation.
type OpResult struct {
	// Outcome: Success delivered it; Transient may pass (a connection
	// refused, a timeout, an HTTP 5xx, 408 or 429, a deadlock); Permanent
	// will recur (another HTTP 4xx, a constraint or syntax error).
	Outcome Outcome
	// Error describes a failure, without secrets.
	Error string
	// RetryAfter, when positive on a Transient result, is the earliest the
	// next attempt may run (an HTTP Retry-After).
	RetryAfter time.Duration
	// Answer is the target's answer on Success, for the script: a call's
	// response body (JSON), a write's rows affected.
	Answer json.RawMessage
}

// OpPolicy is the retry policy of a target: a fixed interval between
// retries, and how many retries before the operation parks.
type OpPolicy struct {
	MaxRetries int
	Interval   time.Duration
}

// OpGateway delivers cached operations to their targets: the external
// systems and database connections defined in the site's configuration.
type OpGateway interface {
	// Check validates an operation before anything is committed: its
	// target (and method) is defined and its payload fits. It returns an
	// error wrapping ErrInvalid that says what is wrong.
	Check(op Operation) error

	// Policy returns the retry policy of an operation's target.
	Policy(kind OpKind, target string) (OpPolicy, error)

	// Attempt makes one attempt, bounded by ctx and the target's own
	// timeout, and classifies it. A call carries the operation's ID as its
	// idempotency key; a write in exactly-once mode records it in the
	// database, in the write's own transaction, and an attempt that finds
	// it recorded does nothing and succeeds.
	Attempt(ctx context.Context, op Operation) OpResult
}

// Operations is the driving port of a site node's cached operations: what
// the site API, the CLI and the acceptance tests call. core.Site
// implements it. Errors wrap ErrInvalid for bad input (nothing is
// committed), ErrNotFound for an unknown id, ErrConflict for an operator
// action on an operation that is not Parked, and ErrUnavailable when the
// node cannot commit now (no Raft leader); the request may then be
// repeated with the same id.
type Operations interface {
	// CachedCall makes a call to a method of an external system at once.
	// On success the operation is Delivered and the outcome carries the
	// system's answer; on a transient failure it is buffered (Pending) and
	// retried at the system's interval; on a permanent failure it is
	// Failed and the outcome carries the error. A call repeated with the
	// same ID is one operation: the repeat answers its current state and
	// attempts nothing.
	CachedCall(ctx context.Context, req CallRequest) (OpOutcome, error)

	// CachedWrite is CachedCall for a write to a database connection.
	CachedWrite(ctx context.Context, req WriteRequest) (OpOutcome, error)

	// Tracking returns the operations of ids the site knows; unknown ids
	// are absent from the map. It is answered from the node's own copy,
	// with central out of reach.
	Tracking(ctx context.Context, ids []string) (map[string]Operation, error)

	// ListOperations returns one page of operations matching f.
	ListOperations(ctx context.Context, f OpFilter, page PageRequest) (OpPage, error)

	// RetryOperation moves a Parked operation back to Retrying, due at
	// once, with its retry count reset.
	RetryOperation(ctx context.Context, id string) (Operation, error)

	// DiscardOperation moves a Parked operation to Discarded.
	DiscardOperation(ctx context.Context, id string) (Operation, error)
}

// OpSource is the provenance of the script that makes a cached operation.
type OpSource struct {
	SourceInstance    string
	SourceScript      string
	ExecutionID       string
	ParentExecutionID string
}

// CallRequest is a cached call as a script hands it to its site.
type CallRequest struct {
	// ID is the tracked operation id, a UUID the caller made (version 7
	// preferred) and keeps across its retries; empty, the site makes one.
	ID string
	// System and Method name a method of an external system the site's
	// configuration defines.
	System string
	Method string
	// Params is a JSON object of the method's parameters.
	Params json.RawMessage
	OpSource
}

// WriteRequest is a cached database write as a script hands it to its
// site.
type WriteRequest struct {
	// ID is as CallRequest's.
	ID string
	// Connection names a database connection of the site's configuration.
	Connection string
	// SQL is the statement, with the driver's placeholders; Args are its
	// parameters, a JSON array of scalars bound in order.
	SQL  string
	Args json.RawMessage
	OpSource
}

// OpOutcome is the answer to a cached call or write: the operation as the
// site recorded it and, when it was delivered at once, the target's answer.
type OpOutcome struct {
	Operation Operation
	Answer    json.RawMessage
}
