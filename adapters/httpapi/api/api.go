// Package api is the wire form of central's HTTP JSON API, version 1:
// the request and response bodies, the filter's query parameters, and the
// error body. The server (adapters/httpapi) and the Go client the CLI uses
// (adapters/httpapi/client) share it, so the two cannot drift apart; the
// OpenAPI document the server serves describes the same shapes.
//
// Times are RFC 3339 in UTC; durations are whole seconds (fields ending in
// _seconds) so that any client can read them.
package api

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/siteline/outbox/ports"
)

// Prefix is the path prefix of every API route.
const Prefix = "/api/v1"

// Error codes of Error.Code, one per HTTP status the API answers with.
const (
	CodeInvalid          = "invalid"            // 400: bad input; Message names the field and the rule
	CodeUnauthenticated  = "unauthenticated"    // 401: no or a bad session or token
	CodeForbidden        = "forbidden"          // 403: the role does not allow it
	CodeNotFound         = "not_found"          // 404
	CodeMethodNotAllowed = "method_not_allowed" // 405: the route takes other methods (see Allow)
	CodeConflict         = "conflict"           // 409: the current state refuses it
	CodeTooLarge         = "too_large"          // 413: the request body is over the limit
	CodeTooManyRequests  = "too_many_requests"  // 429: throttled; Retry-After says when to try again
	CodeUnavailable      = "unavailable"        // 503: try again later
	CodeInternal         = "internal"           // 500
)

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Error is an API error: a stable code and a message for people.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Notification is one row of the Notifications table as the API shows it.
type Notification struct {
	ID                string          `json:"id"`
	Type              string          `json:"type"`
	List              string          `json:"list"`
	Subject           string          `json:"subject"`
	Body              string          `json:"body,omitempty"`
	TypeData          json.RawMessage `json:"type_data,omitempty"`
	Priority          int             `json:"priority"`
	Status            ports.Status    `json:"status"`
	Stuck             bool            `json:"stuck"`
	RetryCount        int             `json:"retry_count"`
	LastError         string          `json:"last_error,omitempty"`
	ResolvedTargets   []string        `json:"resolved_targets,omitempty"`
	SourceSite        string          `json:"source_site,omitempty"`
	SourceInstance    string          `json:"source_instance,omitempty"`
	SourceScript      string          `json:"source_script,omitempty"`
	ExecutionID       string          `json:"execution_id,omitempty"`
	ParentExecutionID string          `json:"parent_execution_id,omitempty"`
	SiteEnqueuedAt    *time.Time      `json:"site_enqueued_at,omitempty"`
	CreatedAt         *time.Time      `json:"created_at,omitempty"`
	UpdatedAt         *time.Time      `json:"updated_at,omitempty"`
	LastAttemptAt     *time.Time      `json:"last_attempt_at,omitempty"`
	NextAttemptAt     *time.Time      `json:"next_attempt_at,omitempty"`
	DeliveredAt       *time.Time      `json:"delivered_at,omitempty"`
	ExpiresAt         *time.Time      `json:"expires_at,omitempty"`
}

// NotificationPage is one page of GET /notifications.
type NotificationPage struct {
	Items []Notification `json:"items"`
	// Next is the cursor of the following page (the after parameter), ""
	// on the last page.
	Next string `json:"next,omitempty"`
}

// Count is the body of GET /notifications/count and /site-calls/count.
type Count struct {
	Count int64 `json:"count"`
	// At is central's time as it began to count: the pin of a bulk action
	// that acts on exactly what was counted (updated_to for
	// notifications, reported_to for site calls), free of the caller's
	// clock.
	At *time.Time `json:"at,omitempty"`
}

// Detail is GET /notifications/{id}: the row, each target's fate, and its
// history, oldest first.
type Detail struct {
	Notification
	// Targets is the fate of each target an attempt went to, in the order
	// they were first attempted. It is absent before the first attempt and
	// on a row from before targets were tracked one by one: such a row's
	// targets share its status, and ResolvedTargets is who it went to.
	Targets []TargetState `json:"targets,omitempty"`
	History []AuditRecord `json:"history"`
}

// TargetState is the fate of one target of a notification. Target is as
// the list holds it: a reference (env:NAME, file:PATH) stays a reference.
type TargetState struct {
	Target string             `json:"target"`
	Status ports.TargetStatus `json:"status"`
	// Attempts counts the attempts that went to this target.
	Attempts      int        `json:"attempts"`
	LastError     string     `json:"last_error,omitempty"`
	LastAttemptAt *time.Time `json:"last_attempt_at,omitempty"`
	DeliveredAt   *time.Time `json:"delivered_at,omitempty"`
}

// AuditRecord is one entry of a notification's history.
type AuditRecord struct {
	At              time.Time       `json:"at"`
	Kind            ports.AuditKind `json:"kind"`
	Actor           string          `json:"actor"`
	Outcome         ports.Outcome   `json:"outcome,omitempty"`
	Status          ports.Status    `json:"status,omitempty"`
	DurationSeconds float64         `json:"duration_seconds,omitempty"`
	Error           string          `json:"error,omitempty"`
	// Targets are, on an Attempted record, the targets the attempt went
	// to with each one's outcome; absent on other records and on records
	// from before targets were tracked one by one.
	Targets []AuditTarget `json:"targets,omitempty"`
}

// AuditTarget is one target of an attempt and its outcome.
type AuditTarget struct {
	Target  string        `json:"target"`
	Outcome ports.Outcome `json:"outcome"`
	Error   string        `json:"error,omitempty"`
}

// ActionRequest is the body of POST /notifications/retry and /discard (on
// Parked rows) and of /notifications/retry-now and /park (on Retrying
// rows): the rows by ids, or else by filter. An empty filter with no ids
// is refused unless All is set.
type ActionRequest struct {
	IDs    []string `json:"ids,omitempty"`
	Filter *Filter  `json:"filter,omitempty"`
	All    bool     `json:"all,omitempty"`
}

// ActionResult reports an action: the ids done, and each requested id
// refused with why (not_found, or conflict: not in the status the action
// takes, or a Retrying row being delivered at that moment).
type ActionResult struct {
	Moved   []string  `json:"moved"`
	Refused []Refusal `json:"refused,omitempty"`
}

// Refusal is one requested id that did not move.
type Refusal struct {
	ID      string `json:"id"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// KPIReport is GET /kpis.
type KPIReport struct {
	At            time.Time `json:"at"`
	WindowSeconds float64   `json:"window_seconds"`
	// WindowSeconds is the trailing window of Delivered; RateWindowSeconds
	// that of DeliveredPerMinute.
	RateWindowSeconds float64 `json:"rate_window_seconds"`
	// StuckAfterSeconds is the stuck threshold.
	StuckAfterSeconds float64   `json:"stuck_after_seconds"`
	Global            KPI       `json:"global"`
	Sites             []SiteKPI `json:"sites"`
}

// KPI is one set of delivery KPIs.
type KPI struct {
	QueueDepth int64 `json:"queue_depth"`
	Stuck      int64 `json:"stuck"`
	Parked     int64 `json:"parked"`
	// Delivered counts the rows delivered in the report's window (by
	// default the last minute: often 0 on a quiet system).
	Delivered int64 `json:"delivered"`
	// DeliveredPerMinute is the rows delivered per minute over the
	// report's rate window (the last 15 minutes).
	DeliveredPerMinute      float64 `json:"delivered_per_minute"`
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
}

// SiteKPI is the KPIs of one source site.
type SiteKPI struct {
	Site string `json:"site"`
	KPI
}

// List is a notification list (GET/PUT /lists/{name}).
type List struct {
	Name    string   `json:"name"`
	Type    string   `json:"type"`
	Targets []string `json:"targets"`
}

// Channel is the settings of one channel type (GET/PUT /channels/{type});
// GET /channels lists every type in use, with or without settings.
type Channel struct {
	Type string `json:"type"`
	// Settings are shown to admins only, with the credentials of a URL in
	// a value masked (user:***@, api_key=***); a value sent back exactly as
	// shown keeps the stored one.
	Settings  map[string]string `json:"settings"`
	Retry     Retry             `json:"retry"`
	RateLimit float64           `json:"rate_limit,omitempty"`
	// SettingsHidden says that Settings is left empty because the caller
	// is not an admin.
	SettingsHidden bool `json:"settings_hidden,omitempty"`
	// Defaults says that the type is in use (a plugin delivers it or a
	// list names it) without a settings row: it delivers with the
	// defaults, and PUT makes a row.
	Defaults bool `json:"defaults,omitempty"`
}

// Retry is a channel's retry policy.
type Retry struct {
	Backoff            ports.Backoff `json:"backoff,omitempty"`
	MaxRetries         int           `json:"max_retries,omitempty"`
	IntervalSeconds    float64       `json:"interval_seconds,omitempty"`
	MaxIntervalSeconds float64       `json:"max_interval_seconds,omitempty"`
}

// Login is the body of POST /login.
type Login struct {
	Name     string `json:"name"`
	Password string `json:"password"`
}

// Me is GET /me and the answer of POST /login: who the caller is.
type Me struct {
	Name string             `json:"name"`
	Role ports.OperatorRole `json:"role"`
	// ExpiresAt is the session's end (login only).
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// User is an operator account (GET /users, PUT /users/{name}).
type User struct {
	Name      string             `json:"name"`
	Role      ports.OperatorRole `json:"role"`
	CreatedAt *time.Time         `json:"created_at,omitempty"`
	UpdatedAt *time.Time         `json:"updated_at,omitempty"`
}

// PutUser is the body of PUT /users/{name}.
type PutUser struct {
	Role ports.OperatorRole `json:"role"`
	// Password, when set, becomes the password; required for a new user.
	Password string `json:"password,omitempty"`
}

// Token is an API token as listed.
type Token struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Role is the token's own role, or for a token bound to an account the
	// account's role now.
	Role ports.OperatorRole `json:"role"`
	// Account is the account a token made by outbox login is bound to.
	Account   string     `json:"account,omitempty"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
	// ExpiresAt is when the token stops working; absent for never.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Expired reports that ExpiresAt has passed: the token is refused.
	Expired bool `json:"expired,omitempty"`
}

// NewToken is the body of POST /tokens.
type NewToken struct {
	Name string             `json:"name"`
	Role ports.OperatorRole `json:"role"`
	// ExpiresAt, when set, is when the token stops working (in the future,
	// at most ten years ahead); absent makes a token that does not expire.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// CreatedToken answers POST /tokens: the secret is shown this once.
type CreatedToken struct {
	Token
	Secret string `json:"secret"`
}

// Filter selects notifications: the query parameters of GET /notifications
// and /notifications/count, and the filter of an action. Zero fields do not
// filter; set fields are ANDed.
type Filter struct {
	Status []ports.Status `json:"status,omitempty"`
	Type   string         `json:"type,omitempty"`
	Site   string         `json:"site,omitempty"`
	List   string         `json:"list,omitempty"`
	// From (inclusive) and To (exclusive) bound the creation time.
	From *time.Time `json:"from,omitempty"`
	To   *time.Time `json:"to,omitempty"`
	// UpdatedFrom keeps rows changed at or after it ("parked since T"),
	// UpdatedTo rows changed before it.
	UpdatedFrom *time.Time `json:"updated_from,omitempty"`
	UpdatedTo   *time.Time `json:"updated_to,omitempty"`
	// Stuck keeps only stuck rows.
	Stuck bool `json:"stuck,omitempty"`
	// Q keeps rows whose subject contains it, ignoring case.
	Q string `json:"q,omitempty"`
}

// Query parameter names of a Filter and of paging.
const (
	ParamStatus      = "status"
	ParamType        = "type"
	ParamSite        = "site"
	ParamList        = "list"
	ParamFrom        = "from"
	ParamTo          = "to"
	ParamUpdatedFrom = "updated_from"
	ParamUpdatedTo   = "updated_to"
	ParamStuck       = "stuck"
	ParamQ           = "q"
	ParamLimit       = "limit"
	ParamAfter       = "after"
	// ParamOrder is the sort of GET /notifications: OrderNewest (the
	// default) or OrderOldest.
	ParamOrder = "order"
)

// Values of ParamOrder: both sort by creation time (then id).
const (
	OrderNewest = "newest"
	OrderOldest = "oldest"
)

// ParseOrder reads ParamOrder, in any letter case: whether to list oldest
// first. Absent or empty is newest first.
func ParseOrder(v url.Values) (oldest bool, err error) {
	switch o := strings.TrimSpace(v.Get(ParamOrder)); strings.ToLower(o) {
	case "", OrderNewest:
		return false, nil
	case OrderOldest:
		return true, nil
	default:
		return false, fmt.Errorf("%s: %q is neither %s nor %s", ParamOrder, clip(o), OrderNewest, OrderOldest)
	}
}

// Values encodes f as query parameters (status repeated, times RFC 3339).
func (f Filter) Values() url.Values {
	v := url.Values{}
	for _, s := range f.Status {
		v.Add(ParamStatus, string(s))
	}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set(ParamType, f.Type)
	set(ParamSite, f.Site)
	set(ParamList, f.List)
	set(ParamFrom, formatTime(f.From))
	set(ParamTo, formatTime(f.To))
	set(ParamUpdatedFrom, formatTime(f.UpdatedFrom))
	set(ParamUpdatedTo, formatTime(f.UpdatedTo))
	if f.Stuck {
		v.Set(ParamStuck, "true")
	}
	set(ParamQ, f.Q)
	return v
}

// IsZero reports whether f selects every row.
func (f Filter) IsZero() bool {
	return len(f.Status) == 0 && f.Type == "" && f.Site == "" && f.List == "" &&
		f.From == nil && f.To == nil && f.UpdatedFrom == nil && f.UpdatedTo == nil && !f.Stuck && f.Q == ""
}

// ParseFilter reads a Filter from query parameters. A status may be given
// repeatedly or comma-separated, in any letter case; times are RFC 3339 or a
// date (2006-01-02, midnight UTC) or a time without a zone, read as UTC
// (2006-01-02 15:04:05 as the page shows it, or 2006-01-02T15:04; seconds
// optional). Empty values do not filter. Unknown
// statuses and unreadable times are errors naming the parameter.
func ParseFilter(v url.Values) (Filter, error) {
	var f Filter
	for _, raw := range v[ParamStatus] {
		for s := range strings.SplitSeq(raw, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			st, ok := ParseStatus(s)
			if !ok {
				return Filter{}, fmt.Errorf("status: unknown status %q (want one of %s)", clip(s), statusNames())
			}
			if !slices.Contains(f.Status, st) {
				f.Status = append(f.Status, st)
			}
		}
	}
	f.Type = strings.TrimSpace(v.Get(ParamType))
	f.Site = strings.TrimSpace(v.Get(ParamSite))
	f.List = strings.TrimSpace(v.Get(ParamList))
	f.Q = strings.TrimSpace(v.Get(ParamQ))
	var err error
	if f.From, err = parseTimeParam(v, ParamFrom); err != nil {
		return Filter{}, err
	}
	if f.To, err = parseTimeParam(v, ParamTo); err != nil {
		return Filter{}, err
	}
	if f.UpdatedFrom, err = parseTimeParam(v, ParamUpdatedFrom); err != nil {
		return Filter{}, err
	}
	if f.UpdatedTo, err = parseTimeParam(v, ParamUpdatedTo); err != nil {
		return Filter{}, err
	}
	if s := strings.TrimSpace(v.Get(ParamStuck)); s != "" {
		switch strings.ToLower(s) {
		case "true", "1", "on", "yes":
			f.Stuck = true
		case "false", "0", "off", "no":
		default:
			return Filter{}, fmt.Errorf("stuck: %q is not true or false", clip(s))
		}
	}
	return f, nil
}

// ParsePage reads the limit and after parameters; limit 0 means the
// server's default.
func ParsePage(v url.Values) (limit int, after string, err error) {
	if s := strings.TrimSpace(v.Get(ParamLimit)); s != "" {
		limit, err = strconv.Atoi(s)
		if err != nil || limit < 1 {
			return 0, "", fmt.Errorf("limit: %q is not a positive whole number", clip(s))
		}
	}
	return limit, v.Get(ParamAfter), nil
}

// ParseStatus reads a status name in any letter case.
func ParseStatus(s string) (ports.Status, bool) {
	for _, c := range ports.CentralStatuses {
		if strings.EqualFold(s, string(c)) {
			return c, true
		}
	}
	return "", false
}

// PortsFilter is f as the core's filter.
func (f Filter) PortsFilter() (pf ports.Filter, stuckOnly bool) {
	return ports.Filter{
		Statuses:    f.Status,
		Type:        f.Type,
		SourceSite:  f.Site,
		List:        f.List,
		CreatedFrom: deref(f.From),
		CreatedTo:   deref(f.To),
		UpdatedFrom: deref(f.UpdatedFrom),
		UpdatedTo:   deref(f.UpdatedTo),
		Subject:     f.Q,
	}, f.Stuck
}

// TimePattern is the form of a time parameter, as a regular expression
// of the syntax JavaScript and Go share: a date, then optionally a time
// of day after a space or a T (minutes, or seconds with an optional
// fraction), read as UTC; or RFC 3339 (a T, seconds, and a zone). The
// page's time fields take it as their pattern attribute, and
// parseTimeParam accepts a value only when the whole of it matches, so
// that a field the browser lets through is one the server reads, and the
// other way round (a date that does not exist, such as month 13, matches
// and is refused by the server alone).
const TimePattern = `\d{4}-\d{2}-\d{2}(([ T]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?)|(T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|\+\d{2}:\d{2}|-\d{2}:\d{2})))?`

// timeForm matches a whole time parameter of the form TimePattern.
var timeForm = regexp.MustCompile(`^(?:` + TimePattern + `)$`)

// timeLayouts read a time parameter that matched TimePattern, most
// precise first: RFC 3339, and UTC without a zone with a T or a space
// between date and time (the page shows times as "2006-01-02 15:04:05"
// and its filter fields take them as shown), seconds optional (a fraction
// follows the seconds), or a date alone.
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04",
	"2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"}

func parseTimeParam(v url.Values, key string) (*time.Time, error) {
	s := strings.TrimSpace(v.Get(key))
	if s == "" {
		return nil, nil
	}
	if timeForm.MatchString(s) {
		for _, layout := range timeLayouts {
			if t, err := time.Parse(layout, s); err == nil {
				t = t.UTC()
				return &t, nil
			}
		}
	}
	return nil, fmt.Errorf("%s: %q is not a time (UTC as the page shows it, 2026-01-02 15:04:05, seconds optional; RFC 3339 such as 2026-01-02T15:04:05Z; or a date 2026-01-02)", key, clip(s))
}

func formatTime(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// TimePtr returns &t in UTC, or nil for the zero time: how every optional
// time of the wire form is set.
func TimePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// clip shortens an echoed input value so an error message stays readable.
func clip(s string) string {
	for i := range s {
		if i >= 40 {
			return s[:i] + "…"
		}
	}
	return s
}

func statusNames() string {
	names := make([]string, len(ports.CentralStatuses))
	for i, s := range ports.CentralStatuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}
