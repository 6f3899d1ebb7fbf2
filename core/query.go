package core

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/ports"
)

// Paging limits of Query.
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
	maxStatusIDs    = 10000
)

// Status implements ports.Outbox. A site asking (req.Site set) learns the
// status of its own notifications only: another site's id answers Unknown,
// as an id nobody knows.
func (s *Service) Status(ctx context.Context, req ports.StatusRequest) (map[string]ports.Status, error) {
	ids := req.IDs
	if len(ids) > maxStatusIDs {
		return nil, fmt.Errorf("%d ids exceed the limit of %d: %w", len(ids), maxStatusIDs, ports.ErrInvalid)
	}
	canon := make([]string, len(ids)) // "" for an id that is not a UUID
	for i, id := range ids {
		if u, err := uuid.Parse(id); err == nil {
			canon[i] = u.String()
		}
	}
	found, err := s.store.Statuses(ctx, req.Site, slices.DeleteFunc(slices.Clone(canon), func(c string) bool { return c == "" }))
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	out := make(map[string]ports.Status, len(ids))
	for i, id := range ids {
		out[id] = cmp.Or(found[canon[i]], ports.StatusUnknown)
	}
	return out, nil
}

// Notification implements ports.Outbox.
func (s *Service) Notification(ctx context.Context, id string) (ports.Detail, error) {
	u, err := uuid.Parse(id)
	if err != nil {
		return ports.Detail{}, fmt.Errorf("id %q is not a UUID: %w", truncate(id, 40), ports.ErrInvalid)
	}
	n, err := s.store.Get(ctx, u.String())
	if err != nil {
		return ports.Detail{}, fmt.Errorf("notification %s: %w", u, err)
	}
	hist, err := s.audit.History(ctx, n.ID)
	if err != nil {
		return ports.Detail{}, fmt.Errorf("notification %s: history: %w", u, err)
	}
	return ports.Detail{Row: s.row(n), History: append([]ports.AuditRecord{ingestRecord(n)}, hist...)}, nil
}

// Query implements ports.Outbox.
func (s *Service) Query(ctx context.Context, q ports.Query) (ports.QueryPage, error) {
	f, err := s.filter(q)
	if err != nil {
		return ports.QueryPage{}, err
	}
	limit := q.Limit
	switch {
	case limit == 0:
		limit = DefaultPageSize
	case limit < 0 || limit > MaxPageSize:
		return ports.QueryPage{}, fmt.Errorf("page size %d is outside 1..%d: %w", limit, MaxPageSize, ports.ErrInvalid)
	}
	page, err := s.store.Query(ctx, f, ports.PageRequest{Limit: limit, After: q.After, Oldest: q.Oldest})
	if err != nil {
		return ports.QueryPage{}, fmt.Errorf("query: %w", err)
	}
	out := ports.QueryPage{Items: make([]ports.Row, len(page.Items)), Next: page.Next}
	for i, n := range page.Items {
		out.Items[i] = s.row(n)
	}
	return out, nil
}

// Count implements ports.Outbox.
func (s *Service) Count(ctx context.Context, q ports.Query) (int64, error) {
	f, err := s.filter(q)
	if err != nil {
		return 0, err
	}
	n, err := s.store.Count(ctx, f)
	if err != nil {
		return 0, fmt.Errorf("count: %w", err)
	}
	return n, nil
}

// CountByStatus implements ports.Outbox.
func (s *Service) CountByStatus(ctx context.Context, q ports.Query, limit int64) (map[ports.Status]int64, error) {
	f, err := s.filter(q)
	if err != nil {
		return nil, err
	}
	n, err := s.store.CountByStatus(ctx, f, limit)
	if err != nil {
		return nil, fmt.Errorf("count by status: %w", err)
	}
	return n, nil
}

// KPIs implements ports.Outbox.
func (s *Service) KPIs(ctx context.Context) (ports.KPIReport, error) {
	now := s.clock.Now()
	k, err := s.store.KPIs(ctx, ports.KPIRequest{
		StuckBefore:    now.Add(-s.cfg.StuckAgeThreshold),
		DeliveredSince: now.Add(-s.cfg.DeliveredKpiWindow),
	})
	if err != nil {
		return ports.KPIReport{}, fmt.Errorf("kpis: %w", err)
	}
	kpi := func(c ports.KPICounts) ports.KPI {
		out := ports.KPI{QueueDepth: c.QueueDepth, Stuck: c.Stuck, Parked: c.Parked, Delivered: c.Delivered}
		if !c.OldestPendingAt.IsZero() {
			out.OldestPendingAge = max(now.Sub(c.OldestPendingAt), 0)
		}
		return out
	}
	rate, err := s.store.Throughput(ctx, ports.ThroughputQuery{
		From: now.Add(-DeliveredRateWindow), To: now, Bucket: DeliveredRateWindow, By: ports.ThroughputBySite,
		DeliveredOnly: true,
	})
	if err != nil {
		return ports.KPIReport{}, fmt.Errorf("kpis: %w", err)
	}
	perMinute := func(n int64) float64 { return float64(n) / DeliveredRateWindow.Minutes() }
	rep := ports.KPIReport{At: now, Window: s.cfg.DeliveredKpiWindow, RateWindow: DeliveredRateWindow,
		StuckAfter: s.cfg.StuckAgeThreshold, Global: kpi(k.Global), Sites: make([]ports.SiteKPI, len(k.Sites))}
	index := make(map[string]int, len(k.Sites))
	for i, site := range k.Sites {
		rep.Sites[i] = ports.SiteKPI{Site: site.Site, KPI: kpi(site.KPICounts)}
		index[site.Site] = i
	}
	var added bool
	for _, sr := range rate.Series {
		if sr.Total.Delivered == 0 {
			continue
		}
		rep.Global.DeliveredPerMinute += perMinute(sr.Total.Delivered)
		i, ok := index[sr.Key]
		if !ok {
			// Delivered to within the rate's window but not the KPI's, and
			// nothing queued: the site is listed for its rate.
			i, added = len(rep.Sites), true
			rep.Sites = append(rep.Sites, ports.SiteKPI{Site: sr.Key})
		}
		rep.Sites[i].DeliveredPerMinute = perMinute(sr.Total.Delivered)
	}
	if added {
		slices.SortFunc(rep.Sites, func(a, b ports.SiteKPI) int { return strings.Compare(a.Site, b.Site) })
	}
	return rep, nil
}

// DeliveredRateWindow is the trailing window of the delivered rate
// (KPI.DeliveredPerMinute): long enough that a quiet minute does not read
// zero, short enough to show a stall within minutes.
const DeliveredRateWindow = 15 * time.Minute

// Throughput implements ports.Outbox.
func (s *Service) Throughput(ctx context.Context, q ports.ThroughputQuery) (ports.Throughput, error) {
	if err := q.Validate(); err != nil {
		return ports.Throughput{}, err
	}
	t, err := s.store.Throughput(ctx, q)
	if err != nil {
		return ports.Throughput{}, fmt.Errorf("throughput: %w", err)
	}
	return t, nil
}

// row adds the stuck badge to a notification.
func (s *Service) row(n ports.Notification) ports.Row {
	stuck := n.Status.Due() && n.CreatedAt.Before(s.clock.Now().Add(-s.cfg.StuckAgeThreshold))
	return ports.Row{Notification: n, Stuck: stuck}
}

// filter turns a query into the store's filter.
func (s *Service) filter(q ports.Query) (ports.Filter, error) {
	f := q.Filter
	if err := validFilter(f); err != nil {
		return f, err
	}
	if q.StuckOnly {
		f.StuckBefore = s.clock.Now().Add(-s.cfg.StuckAgeThreshold)
	}
	return f, nil
}

// validFilter rejects filter values no row can hold, with the reason.
func validFilter(f ports.Filter) error {
	for _, st := range f.Statuses {
		if !st.Valid() {
			return fmt.Errorf("unknown status %q (want one of %s): %w", truncate(string(st), 40), statusNames(), ports.ErrInvalid)
		}
	}
	if !f.CreatedFrom.IsZero() && !f.CreatedTo.IsZero() && !f.CreatedFrom.Before(f.CreatedTo) {
		return fmt.Errorf("the time range is empty: from %s is not before to %s: %w",
			f.CreatedFrom.Format("2006-01-02T15:04:05Z07:00"), f.CreatedTo.Format("2006-01-02T15:04:05Z07:00"), ports.ErrInvalid)
	}
	if len(f.Subject) > maxNameBytes {
		return fmt.Errorf("subject keyword is %d bytes, over the limit of %d: %w", len(f.Subject), maxNameBytes, ports.ErrInvalid)
	}
	return nil
}

// filterEmpty reports whether f selects every row.
func filterEmpty(f ports.Filter) bool {
	return len(f.Statuses) == 0 && f.Type == "" && f.SourceSite == "" && f.List == "" &&
		f.CreatedFrom.IsZero() && f.CreatedTo.IsZero() && f.UpdatedFrom.IsZero() && f.UpdatedTo.IsZero() &&
		f.StuckBefore.IsZero() && f.Subject == ""
}

// canonicalIDs checks that ids are UUIDs and returns them in canonical form.
func canonicalIDs(ids []string) ([]string, error) {
	out := make([]string, len(ids))
	for i, id := range ids {
		u, err := uuid.Parse(id)
		if err != nil {
			return nil, fmt.Errorf("id %q is not a UUID: %w", truncate(id, 40), ports.ErrInvalid)
		}
		out[i] = u.String()
	}
	return out, nil
}

func statusNames() string {
	names := make([]string, len(ports.CentralStatuses))
	for i, s := range ports.CentralStatuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}
