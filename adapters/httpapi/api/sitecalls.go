package api

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/siteline/outbox/ports"
)

// SiteCall is one row of central's mirror of the sites' cached calls and
// database writes, as the site last reported it (GET /site-calls).
type SiteCall struct {
	Site string       `json:"site"`
	ID   string       `json:"id"`
	Kind ports.OpKind `json:"kind"`
	// Target is the external system (call) or database connection (write);
	// Method the system's method, for a call.
	Target     string         `json:"target"`
	Method     string         `json:"method,omitempty"`
	Status     ports.OpStatus `json:"status"`
	RetryCount int            `json:"retry_count"`
	LastError  string         `json:"last_error,omitempty"`
	// Version counts the site's committed changes of the row.
	Version           uint64     `json:"version"`
	SourceInstance    string     `json:"source_instance,omitempty"`
	SourceScript      string     `json:"source_script,omitempty"`
	ExecutionID       string     `json:"execution_id,omitempty"`
	ParentExecutionID string     `json:"parent_execution_id,omitempty"`
	CreatedAt         *time.Time `json:"created_at,omitempty"`
	UpdatedAt         *time.Time `json:"updated_at,omitempty"`
	NextAttemptAt     *time.Time `json:"next_attempt_at,omitempty"`
	TerminalAt        *time.Time `json:"terminal_at,omitempty"`
	// ReportedAt is when central stored the site's newest report of it.
	ReportedAt *time.Time `json:"reported_at,omitempty"`
	// Requested is an operator's Retry or Discard relayed to the site and
	// not yet confirmed by its report, with who asked and when.
	Requested   ports.SiteCommandAction `json:"requested,omitempty"`
	RequestedBy string                  `json:"requested_by,omitempty"`
	RequestedAt *time.Time              `json:"requested_at,omitempty"`
}

// SiteCallPage is one page of GET /site-calls.
type SiteCallPage struct {
	Items []SiteCall `json:"items"`
	// Next is the cursor of the following page (the after parameter), ""
	// on the last page.
	Next string `json:"next,omitempty"`
}

// SiteCallDetail is GET /site-calls/{site}/{id}: the row and the commands
// operators relayed for it, oldest first.
type SiteCallDetail struct {
	SiteCall
	Commands []SiteCommand `json:"commands"`
}

// SiteCommand is an operator's Retry or Discard relayed to a site.
type SiteCommand struct {
	ID          string                  `json:"id"`
	Action      ports.SiteCommandAction `json:"action"`
	Actor       string                  `json:"actor"`
	RequestedAt time.Time               `json:"requested_at"`
	State       ports.SiteCommandState  `json:"state"`
	// Result is the site's reason when it refused.
	Result     string     `json:"result,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// SiteCallKey names one mirror row.
type SiteCallKey struct {
	Site string `json:"site"`
	ID   string `json:"id"`
}

// SiteCallActionRequest is the body of POST /site-calls/retry and
// /site-calls/discard: the rows by keys, or else the Parked rows matching
// the filter. An empty filter with no keys is refused unless All is set.
// A confirmation pins what the operator counted with filter.updated_to.
type SiteCallActionRequest struct {
	Keys   []SiteCallKey   `json:"keys,omitempty"`
	Filter *SiteCallFilter `json:"filter,omitempty"`
	All    bool            `json:"all,omitempty"`
}

// SiteCallActionResult reports a relayed Retry or Discard: the rows a
// command was sent for (their status changes when the site reports) and
// those refused, with why.
type SiteCallActionResult struct {
	Requested []SiteCallKey     `json:"requested"`
	Refused   []SiteCallRefusal `json:"refused,omitempty"`
}

// SiteCallRefusal is one row an action refused.
type SiteCallRefusal struct {
	SiteCallKey
	Reason string `json:"reason"`
}

// SiteCallKPI are one site's counts of cached operations in the mirror
// (GET /site-calls/kpis).
type SiteCallKPI struct {
	Site     string `json:"site"`
	Pending  int64  `json:"pending"`
	Retrying int64  `json:"retrying"`
	Parked   int64  `json:"parked"`
	// FailedLastHour counts the rows that failed in the last hour.
	FailedLastHour int64 `json:"failed_last_hour"`
	// OldestBufferedAt is the creation of the oldest Pending, Retrying or
	// Parked row.
	OldestBufferedAt *time.Time `json:"oldest_buffered_at,omitempty"`
}

// Site is one site as central sees it (GET /sites, /sites/{site}).
type Site struct {
	Site string `json:"site"`
	// State is connected, stale or disconnected, by the last contact.
	State       ports.SiteState `json:"state"`
	LastContact *time.Time      `json:"last_contact,omitempty"`
	// Leader is the node that most recently reported it leads.
	Leader string      `json:"leader,omitempty"`
	Nodes  []SiteNode  `json:"nodes"`
	Calls  SiteCallKPI `json:"calls"`
}

// SiteNode is the latest health one site node reported.
type SiteNode struct {
	Node       string     `json:"node"`
	ReportedAt *time.Time `json:"reported_at,omitempty"`
	Role       ports.Role `json:"role,omitempty"`
	Term       uint64     `json:"term,omitempty"`
	Leader     string     `json:"leader,omitempty"`
	// Backlog counts the notifications buffered at the node, the oldest
	// enqueued at OldestEnqueuedAt.
	Backlog          int64      `json:"backlog"`
	OldestEnqueuedAt *time.Time `json:"oldest_enqueued_at,omitempty"`
	// LastCentralContact is when the node last completed a call to
	// central; LastCentralError the error of a failed one since.
	LastCentralContact *time.Time    `json:"last_central_contact,omitempty"`
	LastCentralError   string        `json:"last_central_error,omitempty"`
	Operations         []SiteNodeOps `json:"operations,omitempty"`
}

// SiteNodeOps are a node's cached operations of one kind.
type SiteNodeOps struct {
	Kind             ports.OpKind `json:"kind"`
	Backlog          int64        `json:"backlog"`
	Parked           int64        `json:"parked"`
	Terminal         int64        `json:"terminal"`
	OldestBufferedAt *time.Time   `json:"oldest_buffered_at,omitempty"`
}

// SiteCallFilter selects mirror rows: the query parameters of GET
// /site-calls and /site-calls/count, and the filter of an action. Zero
// fields do not filter; set fields are ANDed.
type SiteCallFilter struct {
	Site   string           `json:"site,omitempty"`
	Kind   ports.OpKind     `json:"kind,omitempty"`
	Target string           `json:"target,omitempty"`
	Status []ports.OpStatus `json:"status,omitempty"`
	// From (inclusive) and To (exclusive) bound the creation time;
	// UpdatedFrom and UpdatedTo the last change the site reported.
	From        *time.Time `json:"from,omitempty"`
	To          *time.Time `json:"to,omitempty"`
	UpdatedFrom *time.Time `json:"updated_from,omitempty"`
	UpdatedTo   *time.Time `json:"updated_to,omitempty"`
	// ReportedTo keeps rows whose newest report central stored before it:
	// the pin of a confirmed bulk action, in central's time (a row the site
	// changed before the count may reach central after it).
	ReportedTo *time.Time `json:"reported_to,omitempty"`
	// Q keeps rows whose id, target, method, last error, source instance
	// or source script contains it, ignoring case.
	Q string `json:"q,omitempty"`
}

// ParamTarget is the query parameter of a SiteCallFilter's target; its
// other parameters are Filter's (status, site, from, to, updated_from,
// updated_to, q) and ParamKind.
const ParamTarget = "target"

// ParamReportedTo is the query parameter of SiteCallFilter.ReportedTo.
const ParamReportedTo = "reported_to"

// Values encodes f as query parameters (status repeated, times RFC 3339).
func (f SiteCallFilter) Values() url.Values {
	v := url.Values{}
	for _, s := range f.Status {
		v.Add(ParamStatus, string(s))
	}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set(ParamSite, f.Site)
	set(ParamKind, string(f.Kind))
	set(ParamTarget, f.Target)
	set(ParamFrom, formatTime(f.From))
	set(ParamTo, formatTime(f.To))
	set(ParamUpdatedFrom, formatTime(f.UpdatedFrom))
	set(ParamUpdatedTo, formatTime(f.UpdatedTo))
	set(ParamReportedTo, formatTime(f.ReportedTo))
	set(ParamQ, f.Q)
	return v
}

// IsZero reports whether f selects every row.
func (f SiteCallFilter) IsZero() bool {
	return f.Site == "" && f.Kind == "" && f.Target == "" && len(f.Status) == 0 && f.From == nil && f.To == nil &&
		f.UpdatedFrom == nil && f.UpdatedTo == nil && f.ReportedTo == nil && f.Q == ""
}

// ParseSiteCallFilter reads a SiteCallFilter from query parameters, with
// the rules of ParseFilter: statuses repeated or comma-separated in any
// letter case, the same time forms, empty values not filtering. A kind is
// ExternalCall or DatabaseWrite, or for short call or write, in any letter
// case.
func ParseSiteCallFilter(v url.Values) (SiteCallFilter, error) {
	var f SiteCallFilter
	for _, raw := range v[ParamStatus] {
		for s := range strings.SplitSeq(raw, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			st, ok := ParseOpStatus(s)
			if !ok {
				return SiteCallFilter{}, fmt.Errorf("status: unknown status %q (want one of %s)", clip(s), opStatusNames())
			}
			if !slices.Contains(f.Status, st) {
				f.Status = append(f.Status, st)
			}
		}
	}
	if k := strings.TrimSpace(v.Get(ParamKind)); k != "" {
		switch {
		case strings.EqualFold(k, string(ports.OpCall)) || strings.EqualFold(k, "call"):
			f.Kind = ports.OpCall
		case strings.EqualFold(k, string(ports.OpWrite)) || strings.EqualFold(k, "write"):
			f.Kind = ports.OpWrite
		default:
			return SiteCallFilter{}, fmt.Errorf("kind: unknown kind %q (want %s or %s, or call or write)", clip(k), ports.OpCall, ports.OpWrite)
		}
	}
	f.Site = strings.TrimSpace(v.Get(ParamSite))
	f.Target = strings.TrimSpace(v.Get(ParamTarget))
	f.Q = strings.TrimSpace(v.Get(ParamQ))
	var err error
	for _, t := range []struct {
		key string
		dst **time.Time
	}{{ParamFrom, &f.From}, {ParamTo, &f.To}, {ParamUpdatedFrom, &f.UpdatedFrom}, {ParamUpdatedTo, &f.UpdatedTo},
		{ParamReportedTo, &f.ReportedTo}} {
		if *t.dst, err = parseTimeParam(v, t.key); err != nil {
			return SiteCallFilter{}, err
		}
	}
	return f, nil
}

// ParseOpStatus reads a cached operation's status in any letter case.
func ParseOpStatus(s string) (ports.OpStatus, bool) {
	for _, c := range ports.OpStatuses {
		if strings.EqualFold(s, string(c)) {
			return c, true
		}
	}
	return "", false
}

func opStatusNames() string {
	names := make([]string, len(ports.OpStatuses))
	for i, s := range ports.OpStatuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// PortsFilter is f as the core's filter.
func (f SiteCallFilter) PortsFilter() ports.SiteCallFilter {
	return ports.SiteCallFilter{
		Site:        f.Site,
		Kind:        f.Kind,
		Target:      f.Target,
		Statuses:    f.Status,
		CreatedFrom: deref(f.From),
		CreatedTo:   deref(f.To),
		UpdatedFrom: deref(f.UpdatedFrom),
		UpdatedTo:   deref(f.UpdatedTo),
		ReportedTo:  deref(f.ReportedTo),
		Keyword:     f.Q,
	}
}

// FromSiteCall is a mirror row in wire form.
func FromSiteCall(c ports.SiteCall) SiteCall {
	return SiteCall{
		Site: c.Site, ID: c.ID, Kind: c.Kind, Target: c.Target, Method: c.Method, Status: c.Status,
		RetryCount: c.RetryCount, LastError: c.LastError, Version: c.Version,
		SourceInstance: c.SourceInstance, SourceScript: c.SourceScript, ExecutionID: c.ExecutionID,
		ParentExecutionID: c.ParentExecutionID,
		CreatedAt:         TimePtr(c.CreatedAt), UpdatedAt: TimePtr(c.UpdatedAt), NextAttemptAt: TimePtr(c.NextAttemptAt),
		TerminalAt: TimePtr(c.TerminalAt), ReportedAt: TimePtr(c.ReportedAt),
		Requested: c.Requested, RequestedBy: c.RequestedBy, RequestedAt: TimePtr(c.RequestedAt),
	}
}

// FromSiteCallDetail is a mirror row and its commands in wire form.
func FromSiteCallDetail(d ports.SiteCallDetail) SiteCallDetail {
	out := SiteCallDetail{SiteCall: FromSiteCall(d.SiteCall), Commands: make([]SiteCommand, len(d.Commands))}
	for i, c := range d.Commands {
		out.Commands[i] = SiteCommand{ID: c.ID, Action: c.Action, Actor: c.Actor, RequestedAt: c.RequestedAt.UTC(),
			State: c.State, Result: c.Result, FinishedAt: TimePtr(c.FinishedAt)}
	}
	return out
}

// FromSiteCallPage is a page of mirror rows in wire form.
func FromSiteCallPage(p ports.SiteCallPage) SiteCallPage {
	out := SiteCallPage{Items: make([]SiteCall, len(p.Items)), Next: p.Next}
	for i, c := range p.Items {
		out.Items[i] = FromSiteCall(c)
	}
	return out
}

// FromSiteCallKPI is one site's mirror counts in wire form.
func FromSiteCallKPI(k ports.SiteCallKPI) SiteCallKPI {
	return SiteCallKPI{Site: k.Site, Pending: k.Pending, Retrying: k.Retrying, Parked: k.Parked,
		FailedLastHour: k.Failed, OldestBufferedAt: TimePtr(k.OldestBufferedAt)}
}

// FromSiteCallActionResult is an action's result in wire form.
func FromSiteCallActionResult(r ports.SiteCallActionResult) SiteCallActionResult {
	out := SiteCallActionResult{Requested: make([]SiteCallKey, len(r.Requested))}
	for i, k := range r.Requested {
		out.Requested[i] = SiteCallKey(k)
	}
	for _, f := range r.Refused {
		out.Refused = append(out.Refused, SiteCallRefusal{SiteCallKey: SiteCallKey(f.SiteCallKey), Reason: f.Reason})
	}
	return out
}

// FromSiteView is one site in wire form.
func FromSiteView(v ports.SiteView) Site {
	out := Site{Site: v.Site, State: v.State, LastContact: TimePtr(v.LastContact), Leader: v.Leader,
		Nodes: make([]SiteNode, len(v.Nodes)), Calls: FromSiteCallKPI(v.Calls)}
	out.Calls.Site = v.Site
	for i, n := range v.Nodes {
		node := SiteNode{Node: n.Node, ReportedAt: TimePtr(n.ReportedAt), Role: n.Replica.Role, Term: n.Replica.Term,
			Leader: n.Replica.Leader, Backlog: n.Backlog, OldestEnqueuedAt: TimePtr(n.OldestEnqueuedAt),
			LastCentralContact: TimePtr(n.LastCentralContact), LastCentralError: n.LastCentralError}
		for _, k := range n.Operations {
			node.Operations = append(node.Operations, SiteNodeOps{Kind: k.Kind, Backlog: k.Backlog, Parked: k.Parked,
				Terminal: k.Terminal, OldestBufferedAt: TimePtr(k.OldestBufferedAt)})
		}
		out.Nodes[i] = node
	}
	return out
}
