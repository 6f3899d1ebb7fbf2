package ports

import (
	"context"
	"time"
)

// Store is the Notifications table. The core is its only caller; adapters live
// in adapters/sqlstore (SQLite, PostgreSQL, MS SQL) and adapters/memstore.
// ports/storetest is the contract every adapter passes.
//
// A Store is safe for concurrent use, and any number of Store values (one per
// central node) may share one database: Claim leases rows so that no row is
// held by two owners at once.
type Store interface {
	// Insert adds each notification whose ID is not yet stored and leaves an
	// existing row untouched (insert-if-not-exists). It returns the IDs it
	// inserted, in any order. It is all or nothing: on error no row of the
	// batch was inserted. Duplicate IDs inside one batch are inserted once.
	Insert(ctx context.Context, ns []Notification) (inserted []string, err error)

	// Claim leases up to req.Limit due, unleased rows to req.Owner until
	// req.Now+req.Lease and returns them ordered by Priority descending, then
	// CreatedAt ascending, then ID. A row is due when it is Pending, or
	// Retrying with NextAttemptAt <= req.Now or unset; it is unleased when ClaimedUntil
	// is zero or <= req.Now (a dead owner's lease expires). Concurrent callers,
	// in one process or many, never receive the same row while a lease lasts.
	// The returned rows carry the new ClaimedBy and ClaimedUntil.
	Claim(ctx context.Context, req ClaimRequest) ([]Notification, error)

	// Record writes the result of attempts on rows that owner claimed and
	// releases their leases (ClaimedBy empty, ClaimedUntil zero). An update
	// whose row is no longer claimed by owner (its lease expired and another
	// owner claimed it) is not applied; its ID is returned in lost.
	//
	// The audit records of an update (Update.Records) are appended to the
	// audit log with it, all or nothing: an applied update's records are in
	// its notification's history, a lost update's are not, and a Record
	// that failed wrote both or neither (both when it committed and the
	// answer was lost). Of several updates of one ID in a call, the last
	// is written, with its records; the others and theirs are dropped. So
	// a store whose Record takes records is also the AuditLog that reads
	// them.
	Record(ctx context.Context, owner string, updates []Update) (lost []string, err error)

	// Release drops owner's leases on ids without changing anything else, so
	// that any dispatcher may claim them at once (used at shutdown).
	Release(ctx context.Context, owner string, ids []string) error

	// ReleaseNode drops the leases that earlier runs of a node hold: on
	// every Pending or Retrying row whose ClaimedBy is an owner of node (it
	// begins with LeaseOwnerPrefix(node), see LeaseOwner) other than keep,
	// expired or not, it clears ClaimedBy and ClaimedUntil and changes
	// nothing else, so that any dispatcher may claim the row at once. It
	// returns how many rows it released. Rows in any other status, leases
	// of other nodes and keep's leases are left untouched; ClaimedBy is
	// compared byte for byte, so LIKE wildcards and letter case in node
	// match only themselves. An empty node, or one holding "/", is an error
	// wrapping ErrInvalid. A restarted central calls it once at start with
	// its own node and new owner: a node id must therefore name one running
	// process at a time, or this takes the leases of a live one.
	ReleaseNode(ctx context.Context, node, keep string) (released int, err error)

	// Get returns one row. It returns an error wrapping ErrNotFound when no row
	// has that id.
	Get(ctx context.Context, id string) (Notification, error)

	// Statuses returns the status of each known id; unknown ids are absent
	// from the map. When site is not empty, only rows whose SourceSite is
	// site count as known: another site's row is absent too.
	Statuses(ctx context.Context, site string, ids []string) (map[string]Status, error)

	// Query returns one page of rows matching f, newest first (CreatedAt
	// descending, then ID descending) or with page.Oldest oldest first (both
	// ascending), using keyset paging: page.After is the
	// Next cursor of the previous page ("" for the first page). A cursor is
	// opaque; a malformed one yields an error wrapping ErrInvalid.
	Query(ctx context.Context, f Filter, page PageRequest) (Page, error)

	// Count returns how many rows match f.
	Count(ctx context.Context, f Filter) (int64, error)

	// CountByStatus returns how many rows match f, for each status (a
	// status no matching row has is absent from the map). With limit > 0
	// it counts each status only up to a cap, so that its cost stays
	// bounded whatever the table's size: a count of at most limit is
	// exact, and a status with more than limit matching rows counts more
	// than limit (limit+1 where the adapter stops reading, never more than
	// the rows it has). With limit <= 0 every count is exact.
	CountByStatus(ctx context.Context, f Filter, limit int64) (map[Status]int64, error)

	// KPIs computes the delivery KPIs, globally and per source site.
	KPIs(ctx context.Context, req KPIRequest) (KPIs, error)

	// Throughput counts the delivery outcomes of q's window in q's buckets
	// (see ThroughputCounts for what each count counts): delivered rows by
	// their DeliveredAt under their SourceSite and Type, and the failed
	// attempts and parkings of its audit log (the AuditLog of the same
	// adapter) by their At under the record's own SourceSite and Type (so
	// a purged row's records count until AuditLog.Forget). A q that fails
	// Validate is an error wrapping ErrInvalid. The answer is shaped by
	// NewThroughput.
	Throughput(ctx context.Context, q ThroughputQuery) (Throughput, error)

	// Transition moves every row selected by req.Selection that is in status
	// req.From to status req.To, sets UpdatedAt to req.Now, releases any lease,
	// and when req.Reset is set clears RetryCount (0), NextAttemptAt and
	// LastError, when req.DueNow is set NextAttemptAt alone. Rows in any
	// other status are left untouched, and so, when req.LeaseEndedBy is
	// set, are rows a dispatcher holds whose lease lasts beyond it. It
	// returns the rows it moved (their IDs, source sites and types, for the
	// audit records). The core decides which moves are legal; the store
	// only guarantees that From is checked atomically with the change.
	Transition(ctx context.Context, req TransitionRequest) (moved []Moved, err error)

	// Purge deletes up to limit terminal rows (Delivered, Parked, Discarded)
	// whose UpdatedAt is before cutoff or unset, and returns their IDs. It never deletes
	// a Pending or Retrying row.
	Purge(ctx context.Context, cutoff time.Time, limit int) (deleted []string, err error)
}

// LeaseOwner returns the lease owner (ClaimRequest.Owner) of one run of a
// central node: "<node>/<run>". node names the node and stays the same
// across its restarts; run is unique to one process. Store.ReleaseNode
// finds the owners of every run of a node by the prefix "<node>/"
// (LeaseOwnerPrefix); stores never parse an owner otherwise. node must not
// hold "/".
func LeaseOwner(node, run string) string { return LeaseOwnerPrefix(node) + run }

// LeaseOwnerPrefix returns what every lease owner of node begins with:
// "<node>/".
func LeaseOwnerPrefix(node string) string { return node + "/" }

// ClaimRequest asks Store.Claim for due rows.
type ClaimRequest struct {
	// Owner identifies the claiming dispatcher: unique per running process,
	// and of the form LeaseOwner(node, run) for Store.ReleaseNode to find
	// it (Claim itself takes any non-empty text).
	Owner string
	// Now is the claim instant; rows are due and leases expire relative to it.
	Now time.Time
	// Lease is how long the claim holds: longer than any delivery may take.
	Lease time.Duration
	// Limit caps the number of rows returned; it must be positive.
	Limit int
}

// Update is the result of one delivery attempt (or of a park without an
// attempt, such as expiry) that Store.Record writes onto a claimed row. Every
// field is written as given: a zero time clears the column.
type Update struct {
	ID              string
	Status          Status
	RetryCount      int
	LastError       string
	ResolvedTargets []string
	Targets         []TargetState
	LastAttemptAt   time.Time
	NextAttemptAt   time.Time
	DeliveredAt     time.Time
	UpdatedAt       time.Time
	// Records are the audit records of this outcome, each of this ID,
	// appended when the update applies and only then (see Store.Record).
	Records []AuditRecord
}

// Filter selects rows. Zero fields do not filter; set fields are ANDed.
type Filter struct {
	// Statuses keeps rows in any of these statuses.
	Statuses []Status
	// Type, SourceSite and List keep rows with exactly that value.
	Type       string
	SourceSite string
	List       string
	// CreatedFrom (inclusive) and CreatedTo (exclusive) bound CreatedAt.
	CreatedFrom time.Time
	CreatedTo   time.Time
	// UpdatedFrom (inclusive) and UpdatedTo (exclusive) bound UpdatedAt,
	// e.g. "parked since T", or "parked before the count was shown".
	UpdatedFrom time.Time
	UpdatedTo   time.Time
	// StuckBefore, when set, keeps only stuck rows: Pending or Retrying
	// with CreatedAt before this instant.
	StuckBefore time.Time
	// Subject keeps rows whose subject contains this text, ignoring ASCII
	// case. LIKE wildcards in it (% and _) match literally.
	Subject string
}

// PageRequest asks for one page of a query.
type PageRequest struct {
	// Limit is the page size; it must be positive.
	Limit int
	// After is the Next cursor of the previous page, or "" for the first.
	After string
	// Oldest asks Store.Query for the rows oldest first (CreatedAt, then
	// ID, ascending) instead of newest first; a cursor continues in the
	// order of the request it is given to. Only Store.Query reads it.
	Oldest bool
}

// Page is one page of query results.
type Page struct {
	Items []Notification
	// Next is the cursor of the following page, or "" when this is the last.
	Next string
}

// KPIRequest fixes the instants the KPIs are computed against.
type KPIRequest struct {
	// StuckBefore: Pending or Retrying rows created before it are stuck.
	StuckBefore time.Time
	// DeliveredSince: rows with DeliveredAt >= it count as delivered recently;
	// zero counts every row with a DeliveredAt.
	DeliveredSince time.Time
}

// KPIs holds the delivery KPIs globally and for each source site that has a
// non-terminal row, a parked row or a recent delivery.
type KPIs struct {
	Global KPICounts
	// Sites is sorted by site id.
	Sites []SiteKPICounts
}

// KPICounts are the raw KPI figures of a set of rows.
type KPICounts struct {
	// QueueDepth counts Pending and Retrying rows.
	QueueDepth int64
	// Stuck counts Pending and Retrying rows created before StuckBefore.
	Stuck int64
	// Parked counts Parked rows.
	Parked int64
	// Delivered counts rows with DeliveredAt >= DeliveredSince.
	Delivered int64
	// OldestPendingAt is the CreatedAt of the oldest Pending or Retrying
	// row, zero when there is none.
	OldestPendingAt time.Time
}

// SiteKPICounts are the KPI figures of one source site.
type SiteKPICounts struct {
	Site string
	KPICounts
}

// Selection picks rows for a bulk action: by IDs when IDs is non-empty,
// otherwise by Filter.
type Selection struct {
	IDs    []string
	Filter Filter
}

// Moved is a row Store.Transition moved: its ID, and its source site and
// channel type, which the operator's audit record carries so that
// Store.Throughput counts an operator's parking under them.
type Moved struct {
	ID, SourceSite, Type string
}

// TransitionRequest asks Store.Transition to move selected rows between two
// statuses.
type TransitionRequest struct {
	Selection Selection
	From      Status
	To        Status
	Now       time.Time
	// Reset clears RetryCount, NextAttemptAt and LastError (operator Retry).
	Reset bool
	// DueNow clears NextAttemptAt only, so that the row is due at once,
	// keeping its RetryCount and LastError (an operator's Retry now of a
	// Retrying row).
	DueNow bool
	// LeaseEndedBy, when set, leaves alone a selected row a dispatcher
	// holds (ClaimedBy set) unless its lease (ClaimedUntil) ended at or
	// before it: the dispatcher is delivering the row, and its outcome is
	// recorded under the lease (an operator's Retry now or Park of a
	// Retrying row). The core sets it a grace before Now, since the lease
	// was measured by the claiming node's clock and Store.Record checks
	// only ClaimedBy: a Record begun within the lease may land after it.
	LeaseEndedBy time.Time
}
