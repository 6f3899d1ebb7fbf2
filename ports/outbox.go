package ports

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Outbox is the driving port of central: what the site link, the operator API,
// the CLI and the acceptance tests call. core.Service implements it. It
// embeds [Central], the part a site sees.
//
// Errors wrap ErrInvalid for bad input, ErrNotFound for unknown ids and
// ErrConflict for refused moves; any other error is a failure of a driven
// port (the store, say) and the request may be repeated.
type Outbox interface {
	Central

	// Notification returns one row with its history, or an error wrapping
	// ErrNotFound.
	Notification(ctx context.Context, id string) (Detail, error)

	// Query returns one page of rows matching q, newest first.
	Query(ctx context.Context, q Query) (QueryPage, error)

	// Count returns how many rows match q's filter (q's paging is ignored).
	Count(ctx context.Context, q Query) (int64, error)

	// CountByStatus returns how many rows match q's filter, for each
	// status (q's paging is ignored; a status no row has is absent): what
	// the page's status chips show. With limit > 0 each status is counted
	// only up to a cap (Store.CountByStatus): a count above limit means
	// "more than limit".
	CountByStatus(ctx context.Context, q Query, limit int64) (map[Status]int64, error)

	// KPIs returns the delivery KPIs, globally and per source site.
	KPIs(ctx context.Context) (KPIReport, error)

	// Throughput returns the delivery outcomes (delivered, failed
	// attempts, parked) of a time window in buckets, in total or per source
	// site or channel type (Store.Throughput). A q that fails
	// ThroughputQuery.Validate is an error wrapping ErrInvalid.
	Throughput(ctx context.Context, q ThroughputQuery) (Throughput, error)

	// Retry moves the selected Parked rows back to Pending, resetting
	// RetryCount, NextAttemptAt and LastError. Rows in other statuses are
	// refused, each with a reason.
	Retry(ctx context.Context, a Action) (ActionResult, error)

	// Discard moves the selected Parked rows to Discarded. Rows in other
	// statuses are refused, each with a reason.
	Discard(ctx context.Context, a Action) (ActionResult, error)

	// RetryNow makes the selected Retrying rows due at once, keeping their
	// RetryCount and LastError (recorded as Retried, status Retrying). Rows
	// in other statuses, and Retrying rows a dispatcher holds (until a
	// grace after its lease ends), are refused, each with a reason. It does
	// not wait for a Retry-After a target asked for: that is what the
	// operator overrides.
	RetryNow(ctx context.Context, a Action) (ActionResult, error)

	// Park moves the selected Retrying rows to Parked, keeping their
	// RetryCount and LastError (recorded as Parked with the operator as
	// actor). Rows in other statuses, and Retrying rows a dispatcher holds
	// (until a grace after its lease ends), are refused, each with a reason.
	Park(ctx context.Context, a Action) (ActionResult, error)
}

// Central is central as a site sees it: the two calls of the site link. It is
// the driven port of the site's forwarder. adapters/sitelink's Client
// implements it over gRPC; core.Service implements it in process.
//
// Errors wrap ErrInvalid for a request refused as a whole (a batch over the
// limit), ErrUnauthenticated when the caller is not a known site, and
// ErrUnavailable when central cannot be reached or cannot store now; the
// request may be repeated after any error. A request central refuses for now
// without harm, such as a site over its ingest quota, is a [*RetryLaterError]
// (it wraps ErrUnavailable) that may say how long to wait ([RetryAfter]).
type Central interface {
	// Submit ingests a batch from a site: insert-if-not-exists on each ID.
	// Invalid submissions are rejected one by one (Rejected, with the reason)
	// and the rest are still ingested. A notification already stored counts
	// as accepted, so a repeated Submit is harmless. On a store error Submit
	// returns the error and accepts nothing: the site keeps the batch and
	// sends it again.
	//
	// The list decides a notification's type: a submission whose Type is set
	// and differs from its list's type is rejected; the stored row takes the
	// list's type (none when the list is unknown: the row then parks at
	// dispatch, naming the list). Priority must lie within MinPriority and
	// MaxPriority.
	Submit(ctx context.Context, req SubmitRequest) (SubmitResult, error)

	// Status returns the status of each of req.IDs; ids central does not
	// know map to StatusUnknown. When req.Site is set, only that site's own
	// notifications are answered: another site's id maps to StatusUnknown,
	// exactly as an id nobody knows, so a site learns nothing of the others.
	Status(ctx context.Context, req StatusRequest) (map[string]Status, error)

	// ReportOperations stores what a site reports of its cached operations:
	// rows as they are after a change (telemetry), or a page of its change
	// feed central asked for (req.Feed set). It is idempotent: a row stored
	// at the same or a newer version is left as it is (see
	// SiteCallStore.ReportSiteCalls). More than MaxSiteCallReport rows, or
	// an invalid one, is refused whole with ErrInvalid.
	ReportOperations(ctx context.Context, req OpReport) error

	// Sync is a site node's standing call to central. It records the
	// node's health; from the node that leads it also takes the answers to
	// earlier commands, and it returns what central asks of the site now:
	// commands to apply and, when central reconciles, the page of the
	// change feed to send. With nothing to ask it waits up to req.Wait
	// (at most MaxSyncWait) for something, then answers empty.
	Sync(ctx context.Context, req SyncRequest) (SyncAnswer, error)
}

// OpReport is what a site reports of its cached operations.
type OpReport struct {
	// Site is the reporting site: the caller's authenticated id, set by the
	// link (a site never names another).
	Site string
	// Ops are the rows as they are now, payloads left out.
	Ops []Operation
	// Feed, when set, says Ops are the page of the site's change feed that
	// central asked for.
	Feed *FeedPage
}

// FeedPage places a page of a site's change feed: it was read after From
// in feed Epoch, and ends at Next. Last says nothing followed it then.
type FeedPage struct {
	Epoch string
	From  string
	Next  string
	Last  bool
}

// MaxSyncWait bounds how long Sync waits for something to ask.
const MaxSyncWait = 30 * time.Second

// SyncRequest is a site node's Sync.
type SyncRequest struct {
	// Site is the caller's authenticated id, set by the link.
	Site string
	// Health is the node's health (its Node names it).
	Health SiteHealth
	// Leads says the node leads its group: only then does central take its
	// answers and ask it for commands and feed pages.
	Leads bool
	// Answers are the site's answers to commands central sent before.
	Answers []CommandAnswer
	// Wait is how long Sync may wait for something to ask.
	Wait time.Duration
}

// CommandAnswer is a site's answer to one command: Applied, or Refused
// with the reason.
type CommandAnswer struct {
	ID     string
	State  SiteCommandState
	Result string
}

// SyncAnswer is what central asks of a site.
type SyncAnswer struct {
	// Commands are the operators' Retry and Discard commands still to
	// apply, oldest first. A command comes again until the site answers
	// it, so applying one must be idempotent.
	Commands []SiteCommand
	// Feed, when set, asks for the page of the change feed after
	// Feed.After in feed Feed.Epoch; a site whose feed has another epoch
	// sends its feed from the start.
	Feed *SiteCursor
}

// SiteCalls is the operators' view of the sites' cached operations and
// health at central: what the API, the page and the CLI call. core.Service
// implements it over ports.SiteCallStore. Errors wrap ErrInvalid for bad
// input and ErrNotFound for an unknown row.
type SiteCalls interface {
	// SiteCall returns one mirror row with the commands relayed for it.
	SiteCall(ctx context.Context, site, id string) (SiteCallDetail, error)

	// QuerySiteCalls returns one page of mirror rows matching f, newest
	// first.
	QuerySiteCalls(ctx context.Context, f SiteCallFilter, page PageRequest) (SiteCallPage, error)

	// CountSiteCalls returns how many mirror rows match f.
	CountSiteCalls(ctx context.Context, f SiteCallFilter) (int64, error)

	// SiteCallKPIs returns the mirror's counts per site (Failed over the
	// last hour).
	SiteCallKPIs(ctx context.Context) ([]SiteCallKPI, error)

	// RetrySiteCalls and DiscardSiteCalls relay an operator's Retry or
	// Discard of the selected Parked rows to their sites as commands, and
	// mark the rows Requested; the mirror's status changes only when the
	// site reports. Rows not Parked are refused, each with a reason.
	RetrySiteCalls(ctx context.Context, a SiteCallAction) (SiteCallActionResult, error)
	DiscardSiteCalls(ctx context.Context, a SiteCallAction) (SiteCallActionResult, error)

	// Sites returns every site that ever reported, with its nodes' latest
	// health and its state, sorted by site.
	Sites(ctx context.Context) ([]SiteView, error)
}

// SiteCallDetail is one mirror row and its commands, oldest first.
type SiteCallDetail struct {
	SiteCall
	Commands []SiteCommand
}

// SiteCallAction selects the rows an operator's Retry or Discard acts on:
// Keys, or the Parked rows matching Filter (All with an empty Filter: every
// Parked row), at most MaxSiteCallBulk of them. As for notifications, a
// confirmation pins what the operator counted with Filter.UpdatedTo, the
// instant the count was shown.
type SiteCallAction struct {
	Keys   []SiteCallKey
	Filter SiteCallFilter
	All    bool
	// Actor is the operator, recorded with each command; required.
	Actor string
}

// MaxSiteCallBulk bounds the rows one SiteCallAction selects by filter.
const MaxSiteCallBulk = 10000

// SiteCallKey names one mirror row.
type SiteCallKey struct {
	Site string
	ID   string
}

// SiteCallActionResult says which rows got a command and which were
// refused, with why.
type SiteCallActionResult struct {
	Requested []SiteCallKey
	Refused   []SiteCallRefusal
}

// SiteCallRefusal is one row an action refused.
type SiteCallRefusal struct {
	SiteCallKey
	Reason string
}

// SiteState is how recently a site's nodes reported.
type SiteState string

// The states of a site: connected while a node reported within the stale
// time (default SiteStaleAfter), stale until the disconnected time
// (default SiteDisconnectedAfter), disconnected after.
const (
	SiteConnected    SiteState = "connected"
	SiteStale        SiteState = "stale"
	SiteDisconnected SiteState = "disconnected"
)

// How long after its nodes' last report a site turns stale, then
// disconnected, and how often a node reports: the defaults of central's
// core.Config.SiteStaleAfter and SiteDisconnectedAfter and of a site's
// core.SiteConfig.ReportInterval, which configure them.
const (
	SiteReportInterval    = 15 * time.Second
	SiteStaleAfter        = 45 * time.Second
	SiteDisconnectedAfter = 3 * time.Minute
)

// SiteView is one site as an operator sees it at central.
type SiteView struct {
	Site  string
	State SiteState
	// LastContact is the newest report of any of its nodes.
	LastContact time.Time
	// Leader is the node that reported it leads most recently ("" when
	// none did).
	Leader string
	// Nodes are the latest health of each node, sorted by node.
	Nodes []SiteNodeHealth
	// Calls are the mirror's counts for the site.
	Calls SiteCallKPI
}

// The range of Submission.Priority. Dispatch takes due notifications by
// priority, higher first, then oldest first; 0 is the default, and a site's
// Send sets none. A submission outside the range is rejected.
const (
	MinPriority = -100
	MaxPriority = 100
)

// StatusRequest asks central the status of notifications.
type StatusRequest struct {
	// Site is the authenticated site that asks; only its own notifications
	// are answered. Empty means a trusted local caller, which sees every
	// row.
	Site string
	// IDs are the notification ids asked about.
	IDs []string
}

// RetryLaterError reports a request central refused for now, storing
// nothing, and that the caller should repeat after a while: a site past its
// ingest quota, or with too many calls in progress. It wraps ErrUnavailable.
type RetryLaterError struct {
	// After is how long central asks the caller to wait; 0 when it did not
	// say.
	After time.Duration
	// Reason says why, in central's words; it holds no secret.
	Reason string
}

// Error implements error.
func (e *RetryLaterError) Error() string {
	s := e.Reason
	if e.After > 0 {
		s += "; retry after " + e.After.String()
	}
	return s + ": " + ErrUnavailable.Error()
}

// Unwrap makes errors.Is(err, ErrUnavailable) hold.
func (e *RetryLaterError) Unwrap() error { return ErrUnavailable }

// RetryAfter returns the wait a [*RetryLaterError] in err's chain asks for,
// and whether err holds one.
func RetryAfter(err error) (time.Duration, bool) {
	var r *RetryLaterError
	if errors.As(err, &r) {
		return r.After, true
	}
	return 0, false
}

// SubmitRequest is one batch from a site.
type SubmitRequest struct {
	// Site is the authenticated site that sends the batch. When set, every
	// submission must carry the same SourceSite; others are rejected. Empty
	// means a trusted local caller.
	Site string
	// Notifications are the submissions, at most core.Config.MaxBatch.
	Notifications []Submission
}

// Submission is one notification as a site hands it to central.
type Submission struct {
	// ID is the UUID generated at the site.
	ID      string
	List    string
	Subject string
	Body    string
	// Type, when set, must be the list's type; central takes the type from
	// the list in the Directory either way (the list decides).
	Type     string
	TypeData json.RawMessage
	// Priority orders dispatch, higher first; it must lie within
	// MinPriority and MaxPriority (0 is the default).
	Priority int
	// ExpiresAt, when set, parks the notification with reason "expired" if it
	// could not be delivered before then.
	ExpiresAt time.Time

	SourceSite        string
	SourceInstance    string
	SourceScript      string
	ExecutionID       string
	ParentExecutionID string
	// SiteEnqueuedAt is when the script called Send.
	SiteEnqueuedAt time.Time
}

// SubmitResult acknowledges a batch.
type SubmitResult struct {
	// Accepted are the IDs now stored (newly or before): the site may drop
	// them from its buffer.
	Accepted []string
	// Rejected are the submissions refused as invalid, with the reason.
	Rejected []Rejection
}

// Rejection is a submission refused as invalid.
type Rejection struct {
	ID     string
	Reason string
}

// Query selects rows for listing.
type Query struct {
	Filter Filter
	// StuckOnly keeps only stuck rows (Pending or Retrying older than the
	// stuck threshold). It overrides Filter.StuckBefore.
	StuckOnly bool
	// Limit is the page size; 0 means the default (50); at most 1000.
	Limit int
	// After is the Next cursor of the previous page.
	After string
	// Oldest lists oldest first; rows are listed newest first otherwise.
	Oldest bool
}

// QueryPage is one page of a query.
type QueryPage struct {
	Items []Row
	// Next is the cursor of the following page, "" when this is the last.
	Next string
}

// Row is a notification as listed, with its stuck badge.
type Row struct {
	Notification
	// Stuck is set on Pending or Retrying rows older than the threshold.
	Stuck bool
}

// Detail is one notification with its history.
type Detail struct {
	Row
	History []AuditRecord
}

// KPIReport is the delivery KPIs at one instant.
type KPIReport struct {
	At time.Time
	// Window is the trailing window of Delivered.
	Window time.Duration
	// StuckAfter is the stuck threshold: Pending or Retrying rows older
	// than it count as stuck.
	StuckAfter time.Duration
	// RateWindow is the trailing window of DeliveredPerMinute.
	RateWindow time.Duration
	Global     KPI
	// Sites is sorted by site id.
	Sites []SiteKPI
}

// KPI is one set of delivery KPIs.
type KPI struct {
	QueueDepth int64
	Stuck      int64
	Parked     int64
	// Delivered counts the rows delivered in the report's Window.
	Delivered int64
	// DeliveredPerMinute is the rows delivered in the report's RateWindow
	// per minute: a rate that a quiet minute does not zero.
	DeliveredPerMinute float64
	OldestPendingAge   time.Duration
}

// SiteKPI is the KPIs of one source site.
type SiteKPI struct {
	Site string
	KPI
}

// Action selects rows for an operator Retry or Discard: by IDs, or else by
// Filter. An empty Filter with no IDs is refused unless All is set, so that a
// forgotten filter never acts on every row.
type Action struct {
	// Actor is the operator, recorded in the audit log.
	Actor  string
	IDs    []string
	Filter Filter
	All    bool
}

// ActionResult reports an operator action.
type ActionResult struct {
	// Moved are the IDs that changed status.
	Moved []string
	// Refused are requested IDs that did not move, each with the reason (an
	// error wrapping ErrNotFound or ErrConflict).
	Refused []Refusal
}

// Refusal is one id an action did not move.
type Refusal struct {
	ID  string
	Err error
}
