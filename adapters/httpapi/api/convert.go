package api

import (
	"errors"
	"fmt"
	"time"

	"github.com/siteline/outbox/ports"
)

// FromRow is a listed row in wire form. withBody false leaves the body out,
// as the list does.
func FromRow(r ports.Row, withBody bool) Notification {
	n := r.Notification
	out := Notification{
		ID: n.ID, Type: n.Type, List: n.List, Subject: n.Subject,
		TypeData: n.TypeData, Priority: n.Priority, Status: n.Status, Stuck: r.Stuck,
		RetryCount: n.RetryCount, LastError: n.LastError, ResolvedTargets: n.ResolvedTargets,
		SourceSite: n.SourceSite, SourceInstance: n.SourceInstance, SourceScript: n.SourceScript,
		ExecutionID: n.ExecutionID, ParentExecutionID: n.ParentExecutionID,
		SiteEnqueuedAt: TimePtr(n.SiteEnqueuedAt), CreatedAt: TimePtr(n.CreatedAt),
		UpdatedAt: TimePtr(n.UpdatedAt), LastAttemptAt: TimePtr(n.LastAttemptAt),
		NextAttemptAt: TimePtr(n.NextAttemptAt), DeliveredAt: TimePtr(n.DeliveredAt),
		ExpiresAt: TimePtr(n.ExpiresAt),
	}
	if withBody {
		out.Body = n.Body
	}
	return out
}

// FromPage is a page of rows in wire form.
func FromPage(p ports.QueryPage) NotificationPage {
	out := NotificationPage{Items: make([]Notification, len(p.Items)), Next: p.Next}
	for i, r := range p.Items {
		out.Items[i] = FromRow(r, false)
	}
	return out
}

// FromDetail is a row with its targets and its history in wire form.
func FromDetail(d ports.Detail) Detail {
	out := Detail{Notification: FromRow(d.Row, true), Targets: FromTargets(d.Targets),
		History: make([]AuditRecord, len(d.History))}
	for i, h := range d.History {
		out.History[i] = AuditRecord{At: h.At.UTC(), Kind: h.Kind, Actor: h.Actor, Outcome: h.Outcome,
			Status: h.Status, DurationSeconds: h.Duration.Seconds(), Error: h.Error, Targets: fromAuditTargets(h.Targets)}
	}
	return out
}

// FromTargets is each target's fate in wire form; none (nil or empty) is
// nil, which the JSON leaves out.
func FromTargets(ts []ports.TargetState) []TargetState {
	if len(ts) == 0 {
		return nil
	}
	out := make([]TargetState, len(ts))
	for i, t := range ts {
		out[i] = TargetState{Target: t.Target, Status: t.Status, Attempts: t.Attempts, LastError: t.LastError,
			LastAttemptAt: TimePtr(t.LastAttemptAt), DeliveredAt: TimePtr(t.DeliveredAt)}
	}
	return out
}

// TargetsSummary says how many of a notification's targets were
// delivered, of those its list holds (a Dropped target is not counted):
// "4 of 5 delivered"; "" without target states.
func TargetsSummary(ts []TargetState) string {
	if len(ts) == 0 {
		return ""
	}
	delivered, listed := 0, 0
	for _, t := range ts {
		switch t.Status {
		case ports.TargetDropped:
			continue
		case ports.TargetDelivered:
			delivered++
		}
		listed++
	}
	return fmt.Sprintf("%d of %d delivered", delivered, listed)
}

func fromAuditTargets(ts []ports.AuditTarget) []AuditTarget {
	if len(ts) == 0 {
		return nil
	}
	out := make([]AuditTarget, len(ts))
	for i, t := range ts {
		out[i] = AuditTarget{Target: t.Target, Outcome: t.Outcome, Error: t.Error}
	}
	return out
}

// FromKPIReport is a KPI report in wire form.
func FromKPIReport(r ports.KPIReport) KPIReport {
	kpi := func(k ports.KPI) KPI {
		return KPI{QueueDepth: k.QueueDepth, Stuck: k.Stuck, Parked: k.Parked, Delivered: k.Delivered,
			DeliveredPerMinute: k.DeliveredPerMinute, OldestPendingAgeSeconds: k.OldestPendingAge.Seconds()}
	}
	out := KPIReport{At: r.At.UTC(), WindowSeconds: r.Window.Seconds(), RateWindowSeconds: r.RateWindow.Seconds(),
		StuckAfterSeconds: r.StuckAfter.Seconds(), Global: kpi(r.Global),
		Sites: make([]SiteKPI, len(r.Sites))}
	for i, s := range r.Sites {
		out.Sites[i] = SiteKPI{Site: s.Site, KPI: kpi(s.KPI)}
	}
	return out
}

// FromActionResult is an action's result in wire form; code maps a refusal's
// error to its code.
func FromActionResult(r ports.ActionResult) ActionResult {
	out := ActionResult{Moved: r.Moved, Refused: make([]Refusal, len(r.Refused))}
	if out.Moved == nil {
		out.Moved = []string{}
	}
	for i, f := range r.Refused {
		out.Refused[i] = Refusal{ID: f.ID, Code: CodeOf(f.Err), Message: f.Err.Error()}
	}
	return out
}

// CodeOf maps an error to its API code through the ports' sentinels.
func CodeOf(err error) string {
	var throttled *ports.LoginThrottledError
	switch {
	case errors.As(err, &throttled):
		return CodeTooManyRequests
	case errors.Is(err, ports.ErrInvalid):
		return CodeInvalid
	case errors.Is(err, ports.ErrUnauthenticated):
		return CodeUnauthenticated
	case errors.Is(err, ports.ErrForbidden):
		return CodeForbidden
	case errors.Is(err, ports.ErrNotFound):
		return CodeNotFound
	case errors.Is(err, ports.ErrConflict):
		return CodeConflict
	case errors.Is(err, ports.ErrUnavailable):
		return CodeUnavailable
	}
	return CodeInternal
}

// FromList is a list in wire form.
func FromList(l ports.List) List {
	t := l.Targets
	if t == nil {
		t = []string{}
	}
	return List{Name: l.Name, Type: l.Type, Targets: t}
}

// PortsList is l as the directory's list.
func (l List) PortsList() ports.List {
	return ports.List{Name: l.Name, Type: l.Type, Targets: l.Targets}
}

// FromChannel is channel settings in wire form.
func FromChannel(c ports.ChannelSettings) Channel {
	s := c.Settings
	if s == nil {
		s = map[string]string{}
	}
	return Channel{Type: c.Type, Settings: s, RateLimit: c.RateLimit, Retry: Retry{
		Backoff: c.Retry.Backoff, MaxRetries: c.Retry.MaxRetries,
		IntervalSeconds: c.Retry.Interval.Seconds(), MaxIntervalSeconds: c.Retry.MaxInterval.Seconds(),
	}}
}

// PortsChannel is c as the directory's channel settings. Intervals are kept
// to the millisecond, the precision a directory keeps.
func (c Channel) PortsChannel() ports.ChannelSettings {
	ms := func(s float64) time.Duration { return time.Duration(s*1000) * time.Millisecond }
	return ports.ChannelSettings{Type: c.Type, Settings: c.Settings, RateLimit: c.RateLimit,
		Retry: ports.RetrySettings{Backoff: c.Retry.Backoff, MaxRetries: c.Retry.MaxRetries,
			Interval: ms(c.Retry.IntervalSeconds), MaxInterval: ms(c.Retry.MaxIntervalSeconds)}}
}

// FromUser is an account in wire form.
func FromUser(u ports.User) User {
	return User{Name: u.Name, Role: u.Role, CreatedAt: TimePtr(u.CreatedAt), UpdatedAt: TimePtr(u.UpdatedAt)}
}

// FromToken is a token in wire form.
func FromToken(t ports.Token) Token {
	return Token{ID: t.ID, Name: t.Name, Role: t.Role, Account: t.Account, CreatedAt: TimePtr(t.CreatedAt),
		ExpiresAt: TimePtr(t.ExpiresAt), Expired: t.Expired}
}
