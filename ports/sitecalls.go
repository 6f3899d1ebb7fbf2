package ports

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Central sees every site's cached operations as it sees notifications, in
// a mirror it never edits itself: each site reports its tracking rows as
// they change (telemetry) and on central's request (reconciliation, from a
// cursor), and central keeps the newest version of each. An operator's
// Retry or Discard of a parked operation at central is a command relayed to
// the owning site, which applies it and reports the row's new state. Each
// site node also reports its health, which central keeps per node.

// SiteCall is central's mirror of one cached operation of a site: the
// site's tracking row as last reported (Payload always empty), with what
// central adds.
type SiteCall struct {
	// Site is the reporting site's authenticated id.
	Site string
	Operation
	// ReportedAt is when central stored the newest report of the row.
	ReportedAt time.Time
	// Requested is an operator's command relayed to the site and not yet
	// confirmed by a report ("" when none), with who asked and when.
	Requested   SiteCommandAction
	RequestedBy string
	RequestedAt time.Time
}

// SiteCallStore is central's mirror of the sites' cached operations, the
// latest health of each site node, the reconciliation cursors and the
// commands relayed to sites. adapters/sqlstore keeps it beside the
// Notifications table (SQLite, PostgreSQL, MS SQL), adapters/memstore in
// memory; ports/sitecallstest is the contract every adapter passes. It is
// safe for concurrent use, and any number of central nodes may share one.
type SiteCallStore interface {
	// ReportSiteCalls stores what site reports of its operations, at now.
	// An unknown row (site, ID) is inserted; a known one is replaced only
	// when the report's Version is above the stored one, so a late or
	// repeated report changes nothing. A newer report whose Status is not
	// Parked clears the row's Requested. Payload is ignored. It returns how
	// many rows it inserted or replaced; of rows with one ID in one
	// report, the highest Version counts. An empty site, more than
	// MaxSiteCallReport rows, or one that [ValidateSiteCallReport]
	// refuses, is an error wrapping ErrInvalid, and nothing is stored.
	ReportSiteCalls(ctx context.Context, site string, ops []Operation, now time.Time) (changed int, err error)

	// GetSiteCall returns one row, or an error wrapping ErrNotFound.
	GetSiteCall(ctx context.Context, site, id string) (SiteCall, error)

	// QuerySiteCalls returns one page of rows matching f, newest first
	// ((CreatedAt, Site, ID) descending, texts compared byte by byte), with keyset
	// paging as Store.Query: an opaque cursor, a malformed one ErrInvalid.
	QuerySiteCalls(ctx context.Context, f SiteCallFilter, page PageRequest) (SiteCallPage, error)

	// CountSiteCalls returns how many rows match f.
	CountSiteCalls(ctx context.Context, f SiteCallFilter) (int64, error)

	// SiteCallKPIs counts, per site with at least one row, the rows by
	// status, the Failed ones whose TerminalAt is at or after
	// req.FailedSince, and the oldest buffered row's CreatedAt; sorted by
	// site.
	SiteCallKPIs(ctx context.Context, req SiteCallKPIRequest) ([]SiteCallKPI, error)

	// PurgeSiteCalls removes up to limit terminal rows (Delivered, Failed,
	// Discarded) whose TerminalAt is before cutoff, oldest first, and the
	// commands finished before cutoff; it returns how many rows it
	// removed. A limit below 1 is ErrInvalid.
	PurgeSiteCalls(ctx context.Context, cutoff time.Time, limit int) (int, error)

	// SiteCursor returns how far central's reconciliation of site has
	// read (the zero SiteCursor when it never has). SetSiteCursor stores
	// it; an empty site, or an Epoch or After over MaxSiteCursorBytes, is
	// ErrInvalid.
	SiteCursor(ctx context.Context, site string) (SiteCursor, error)
	SetSiteCursor(ctx context.Context, site string, c SiteCursor) error

	// RecordSiteHealth stores h as the latest health of its node,
	// replacing the one before. What [ValidateSiteHealth] refuses is
	// ErrInvalid.
	RecordSiteHealth(ctx context.Context, h SiteNodeHealth) error

	// SiteHealth returns the latest health of every node of every site,
	// sorted by site, then node.
	SiteHealth(ctx context.Context) ([]SiteNodeHealth, error)

	// RequestSiteCommands stores cmds as Requested (each ID must be new:
	// one already stored, or twice in cmds, is ErrConflict, and nothing is
	// stored; one that [ValidateSiteCommand] refuses is ErrInvalid) and marks
	// each named row Requested with the command's action, actor and time.
	// A command naming a row that is not stored is stored all the same.
	RequestSiteCommands(ctx context.Context, cmds []SiteCommand) error

	// PendingSiteCommands returns up to limit Requested commands of site,
	// oldest first (RequestedAt, then ID). A limit below 1 is ErrInvalid.
	PendingSiteCommands(ctx context.Context, site string, limit int) ([]SiteCommand, error)

	// FinishSiteCommand records the site's answer to a command of site:
	// Applied or Refused (with the site's reason, at most
	// MaxSiteCallErrorBytes), at now; another state is ErrInvalid. A command
	// already finished, or of another site, is left as it is and the call
	// returns an error wrapping ErrConflict; an unknown id ErrNotFound. A
	// Refused command clears its row's Requested.
	FinishSiteCommand(ctx context.Context, site, id string, state SiteCommandState, result string, now time.Time) error

	// SiteCommands returns the commands of one operation of site, oldest
	// first (RequestedAt, then ID): the history an operator sees beside the
	// row.
	SiteCommands(ctx context.Context, site, operationID string) ([]SiteCommand, error)
}

// MaxSiteCallReport bounds the rows of one ReportSiteCalls.
const MaxSiteCallReport = 1000

// Bounds on the text of a reported row (a site's and a node's id, an
// actor, are names too).
const (
	MaxSiteCallIDBytes    = 64
	MaxSiteCallNameBytes  = 200
	MaxSiteCallErrorBytes = 1024
)

// MaxSiteCursorBytes bounds each text of a SiteCursor.
const MaxSiteCursorBytes = 512

// checkText appends to errs why v, a field called name, is not a text of
// at most limit bytes of valid UTF-8 (nor empty, when required).
func checkText(errs []error, name, v string, limit int, required bool) []error {
	switch {
	case required && v == "":
		errs = append(errs, fmt.Errorf("%s is empty", name))
	case len(v) > limit:
		errs = append(errs, fmt.Errorf("%s is %d bytes, over %d", name, len(v), limit))
	case !utf8.ValidString(v):
		errs = append(errs, fmt.Errorf("%s is not valid UTF-8", name))
	}
	return errs
}

// ValidateSiteHealth checks a node's health before central stores it: a
// Site and Node of 1 to MaxSiteCallNameBytes, the replica's node, role and
// leader and each name of at most MaxSiteCallNameBytes, LastCentralError
// of at most MaxSiteCallErrorBytes, all valid UTF-8, no negative count,
// and at most one entry per known kind in Operations. The error wraps
// ErrInvalid.
func ValidateSiteHealth(h SiteHealth) error {
	var errs []error
	errs = checkText(errs, "site", h.Site, MaxSiteCallNameBytes, true)
	errs = checkText(errs, "node", h.Node, MaxSiteCallNameBytes, true)
	errs = checkText(errs, "replica node", h.Replica.Node, MaxSiteCallNameBytes, false)
	errs = checkText(errs, "role", string(h.Replica.Role), MaxSiteCallNameBytes, false)
	errs = checkText(errs, "leader", h.Replica.Leader, MaxSiteCallNameBytes, false)
	errs = checkText(errs, "last central error", h.LastCentralError, MaxSiteCallErrorBytes, false)
	if h.Backlog < 0 {
		errs = append(errs, errors.New("backlog is negative"))
	}
	seen := map[OpKind]bool{}
	for _, k := range h.Operations {
		switch {
		case k.Kind != OpCall && k.Kind != OpWrite:
			errs = append(errs, fmt.Errorf("operation kind %.40q is unknown", k.Kind))
		case seen[k.Kind]:
			errs = append(errs, fmt.Errorf("operation kind %s is given twice", k.Kind))
		case k.Backlog < 0 || k.Parked < 0 || k.Terminal < 0:
			errs = append(errs, fmt.Errorf("operation kind %s has a negative count", k.Kind))
		}
		seen[k.Kind] = true
	}
	if len(errs) > 0 {
		return fmt.Errorf("site health %.64q: %w: %w", h.Node, errors.Join(errs...), ErrInvalid)
	}
	return nil
}

// ValidateSiteCommand checks a command before central stores it: an ID
// and OperationID of 1 to MaxSiteCallIDBytes, a Site and Actor of 1 to
// MaxSiteCallNameBytes, all valid UTF-8, a known Action, and a
// RequestedAt. State, Result and FinishedAt are not read. The error wraps
// ErrInvalid.
func ValidateSiteCommand(c SiteCommand) error {
	var errs []error
	errs = checkText(errs, "id", c.ID, MaxSiteCallIDBytes, true)
	errs = checkText(errs, "site", c.Site, MaxSiteCallNameBytes, true)
	errs = checkText(errs, "operation id", c.OperationID, MaxSiteCallIDBytes, true)
	errs = checkText(errs, "actor", c.Actor, MaxSiteCallNameBytes, true)
	if c.Action != SiteRetry && c.Action != SiteDiscard {
		errs = append(errs, fmt.Errorf("action %.40q is unknown", c.Action))
	}
	if c.RequestedAt.IsZero() {
		errs = append(errs, errors.New("requested time is zero"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("site command %.64q: %w: %w", c.ID, errors.Join(errs...), ErrInvalid)
	}
	return nil
}

// ValidateSiteCursor checks a reconciliation cursor before central stores
// it: a site of 1 to MaxSiteCallNameBytes, an Epoch and After of at most
// MaxSiteCursorBytes, all valid UTF-8. The error wraps ErrInvalid.
func ValidateSiteCursor(site string, c SiteCursor) error {
	var errs []error
	errs = checkText(errs, "site", site, MaxSiteCallNameBytes, true)
	errs = checkText(errs, "epoch", c.Epoch, MaxSiteCursorBytes, false)
	errs = checkText(errs, "position", c.After, MaxSiteCursorBytes, false)
	if len(errs) > 0 {
		return fmt.Errorf("site cursor of %.64q: %w: %w", site, errors.Join(errs...), ErrInvalid)
	}
	return nil
}

// ValidateSiteCallReport checks one reported row before it is stored: an
// ID of 1 to MaxSiteCallIDBytes, a known Kind and Status, a Version of at
// least 1, a CreatedAt, Target and Method (and each provenance field) of
// at most MaxSiteCallNameBytes, LastError of at most
// MaxSiteCallErrorBytes, all valid UTF-8, and a TerminalAt exactly when
// the status is terminal. The error wraps ErrInvalid.
func ValidateSiteCallReport(op Operation) error {
	var errs []error
	text := func(name, v string, limit int, required bool) { errs = checkText(errs, name, v, limit, required) }
	text("id", op.ID, MaxSiteCallIDBytes, true)
	text("target", op.Target, MaxSiteCallNameBytes, true)
	text("method", op.Method, MaxSiteCallNameBytes, false)
	text("last error", op.LastError, MaxSiteCallErrorBytes, false)
	text("source instance", op.SourceInstance, MaxSiteCallNameBytes, false)
	text("source script", op.SourceScript, MaxSiteCallNameBytes, false)
	text("execution id", op.ExecutionID, MaxSiteCallNameBytes, false)
	text("parent execution id", op.ParentExecutionID, MaxSiteCallNameBytes, false)
	if op.Kind != OpCall && op.Kind != OpWrite {
		errs = append(errs, fmt.Errorf("kind %.40q is unknown", op.Kind))
	}
	if !op.Status.Valid() {
		errs = append(errs, fmt.Errorf("status %.40q is unknown", op.Status))
	}
	if op.Version < 1 {
		errs = append(errs, errors.New("version is 0"))
	}
	if op.CreatedAt.IsZero() {
		errs = append(errs, errors.New("created time is zero"))
	}
	if op.Status.Valid() && op.Status.Terminal() == op.TerminalAt.IsZero() {
		errs = append(errs, fmt.Errorf("terminal time does not fit status %s", op.Status))
	}
	if len(errs) > 0 {
		return fmt.Errorf("site call %.64q: %w: %w", op.ID, errors.Join(errs...), ErrInvalid)
	}
	return nil
}

// SiteCallFilter selects mirror rows. Zero fields do not filter; set
// fields are ANDed.
type SiteCallFilter struct {
	Site     string
	Kind     OpKind
	Target   string
	Statuses []OpStatus
	// CreatedFrom (inclusive) and CreatedTo (exclusive) bound CreatedAt;
	// UpdatedFrom and UpdatedTo bound UpdatedAt, as the site reported it.
	CreatedFrom time.Time
	CreatedTo   time.Time
	UpdatedFrom time.Time
	UpdatedTo   time.Time
	// ReportedTo (exclusive) bounds ReportedAt, central's own time of the
	// row's newest report: what pins an operator's count before a bulk
	// action, since a row the site changed before the count may reach
	// central after it.
	ReportedTo time.Time
	// Keyword keeps rows whose ID, target, method, last error, source
	// instance or source script contains it, ignoring ASCII case; LIKE
	// wildcards in it match literally.
	Keyword string
}

// SiteCallPage is one page of mirror rows.
type SiteCallPage struct {
	Items []SiteCall
	// Next is the cursor of the following page, or "" when this is the last.
	Next string
}

// SiteCallKPIRequest fixes the instants the site-call KPIs count from.
type SiteCallKPIRequest struct {
	// FailedSince: Failed rows whose TerminalAt is at or after it count.
	FailedSince time.Time
}

// SiteCallKPI are one site's mirror counts.
type SiteCallKPI struct {
	Site     string
	Pending  int64
	Retrying int64
	Parked   int64
	// Failed counts the rows Failed since the request's FailedSince.
	Failed int64
	// OldestBufferedAt is the CreatedAt of the oldest Pending, Retrying or
	// Parked row (zero when none).
	OldestBufferedAt time.Time
}

// SiteCursor is how far central's reconciliation of one site has read the
// site's change feed. Epoch names the site's feed (a site whose state was
// rebuilt from nothing starts a new one, and central reads it from the
// start); After is the feed's opaque position.
type SiteCursor struct {
	Epoch string
	After string
}

// SiteNodeHealth is the latest health a site node reported, with when
// central received it.
type SiteNodeHealth struct {
	SiteHealth
	ReportedAt time.Time
}

// SiteCommandAction is what an operator asks a site to do to a parked
// operation.
type SiteCommandAction string

// The actions of site commands.
const (
	SiteRetry   SiteCommandAction = "Retry"
	SiteDiscard SiteCommandAction = "Discard"
)

// SiteCommandState is where a relayed command is.
type SiteCommandState string

// The states of a site command.
const (
	// CommandRequested: stored at central, not yet answered by the site.
	CommandRequested SiteCommandState = "Requested"
	// CommandApplied: the site applied it (the row's report follows).
	CommandApplied SiteCommandState = "Applied"
	// CommandRefused: the site refused it (the row was not Parked, or is
	// unknown there); Result says why.
	CommandRefused SiteCommandState = "Refused"
)

// SiteCommand is an operator's Retry or Discard of one parked operation,
// relayed by central to the owning site.
type SiteCommand struct {
	// ID is made by central (a UUID); the site answers with it.
	ID          string
	Site        string
	OperationID string
	Action      SiteCommandAction
	// Actor is the operator who asked.
	Actor       string
	RequestedAt time.Time
	State       SiteCommandState
	// Result is the site's reason when it refused; FinishedAt when it
	// answered.
	Result     string
	FinishedAt time.Time
}
