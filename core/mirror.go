package core

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/siteline/outbox/ports"
)

// This file is central's side of the sites' cached operations: the reports
// a site sends (telemetry and reconciliation pages) and the operators'
// reads of the mirror and of the sites' health. Sync and the commands are
// in relay.go.

// errNoMirror is the error of the site-call methods of a Service built
// without a ports.SiteCallStore.
var errNoMirror = fmt.Errorf("central keeps no site-call mirror: %w", ports.ErrUnavailable)

// siteCallFailedWindow is the window of a site's Failed count.
const siteCallFailedWindow = time.Hour

// ReportOperations implements ports.Central: the rows are stored at their
// version (a late or repeated report changes nothing); a page of the
// change feed then advances the site's reconciliation cursor when it
// continues it.
func (s *Service) ReportOperations(ctx context.Context, req ports.OpReport) error {
	if s.siteCalls == nil {
		return errNoMirror
	}
	if req.Site == "" {
		return fmt.Errorf("report operations: the site is not named: %w", ports.ErrInvalid)
	}
	if len(req.Ops) > ports.MaxSiteCallReport {
		return fmt.Errorf("report operations of site %.64q: %d rows exceed the limit of %d: %w",
			req.Site, len(req.Ops), ports.MaxSiteCallReport, ports.ErrInvalid)
	}
	if f := req.Feed; f != nil {
		if err := ports.ValidateSiteCursor(req.Site, ports.SiteCursor{Epoch: f.Epoch, After: f.Next}); err != nil {
			return fmt.Errorf("report operations: feed page: %w", err)
		}
		if err := ports.ValidateSiteCursor(req.Site, ports.SiteCursor{After: f.From}); err != nil {
			return fmt.Errorf("report operations: feed page: %w", err)
		}
	}
	now := s.clock.Now()
	if len(req.Ops) > 0 {
		if _, err := s.siteCalls.ReportSiteCalls(ctx, req.Site, req.Ops, now); err != nil {
			return fmt.Errorf("report operations of site %.64q: %w", req.Site, err)
		}
	}
	if req.Feed == nil {
		return nil
	}
	return s.feedPage(ctx, req.Site, *req.Feed, now)
}

// continues reports whether page, read after page.From in page.Epoch,
// continues the stored cursor c: the same feed from where c stands, or
// from its start another feed (the site's store was rebuilt) or one whose
// epoch c does not know (a site reads such a feed from the start).
func continues(c ports.SiteCursor, page ports.FeedPage) bool {
	if page.From == "" && (page.Epoch != c.Epoch || c.Epoch == "") {
		return true
	}
	return page.Epoch == c.Epoch && page.From == c.After
}

// SiteCall implements ports.SiteCalls.
func (s *Service) SiteCall(ctx context.Context, site, id string) (ports.SiteCallDetail, error) {
	if s.siteCalls == nil {
		return ports.SiteCallDetail{}, errNoMirror
	}
	c, err := s.siteCalls.GetSiteCall(ctx, site, id)
	if err != nil {
		return ports.SiteCallDetail{}, fmt.Errorf("site call %.64q of site %.64q: %w", id, site, err)
	}
	cmds, err := s.siteCalls.SiteCommands(ctx, site, id)
	if err != nil {
		return ports.SiteCallDetail{}, fmt.Errorf("site call %.64q of site %.64q: commands: %w", id, site, err)
	}
	return ports.SiteCallDetail{SiteCall: c, Commands: cmds}, nil
}

// validSiteCallFilter checks what an operator's filter may hold.
func validSiteCallFilter(f ports.SiteCallFilter) error {
	for _, st := range f.Statuses {
		if !st.Valid() {
			return fmt.Errorf("status %q is unknown: %w", truncate(string(st), 40), ports.ErrInvalid)
		}
	}
	if f.Kind != "" && f.Kind != ports.OpCall && f.Kind != ports.OpWrite {
		return fmt.Errorf("kind %q is unknown: %w", truncate(string(f.Kind), 40), ports.ErrInvalid)
	}
	for _, v := range []string{f.Site, f.Target, f.Keyword} {
		if len(v) > ports.MaxSiteCallNameBytes {
			return fmt.Errorf("a filter text is over %d bytes: %w", ports.MaxSiteCallNameBytes, ports.ErrInvalid)
		}
	}
	return nil
}

// QuerySiteCalls implements ports.SiteCalls. A page size of 0 is the
// default (DefaultPageSize), at most MaxPageSize.
func (s *Service) QuerySiteCalls(ctx context.Context, f ports.SiteCallFilter, page ports.PageRequest) (ports.SiteCallPage, error) {
	if s.siteCalls == nil {
		return ports.SiteCallPage{}, errNoMirror
	}
	if err := validSiteCallFilter(f); err != nil {
		return ports.SiteCallPage{}, err
	}
	switch {
	case page.Limit == 0:
		page.Limit = DefaultPageSize
	case page.Limit < 0 || page.Limit > MaxPageSize:
		return ports.SiteCallPage{}, fmt.Errorf("page size %d is outside 1..%d: %w", page.Limit, MaxPageSize, ports.ErrInvalid)
	}
	p, err := s.siteCalls.QuerySiteCalls(ctx, f, page)
	if err != nil {
		return ports.SiteCallPage{}, fmt.Errorf("query site calls: %w", err)
	}
	return p, nil
}

// CountSiteCalls implements ports.SiteCalls.
func (s *Service) CountSiteCalls(ctx context.Context, f ports.SiteCallFilter) (int64, error) {
	if s.siteCalls == nil {
		return 0, errNoMirror
	}
	if err := validSiteCallFilter(f); err != nil {
		return 0, err
	}
	n, err := s.siteCalls.CountSiteCalls(ctx, f)
	if err != nil {
		return 0, fmt.Errorf("count site calls: %w", err)
	}
	return n, nil
}

// SiteCallKPIs implements ports.SiteCalls.
func (s *Service) SiteCallKPIs(ctx context.Context) ([]ports.SiteCallKPI, error) {
	if s.siteCalls == nil {
		return nil, errNoMirror
	}
	k, err := s.siteCalls.SiteCallKPIs(ctx, ports.SiteCallKPIRequest{FailedSince: s.clock.Now().Add(-siteCallFailedWindow)})
	if err != nil {
		return nil, fmt.Errorf("site call KPIs: %w", err)
	}
	return k, nil
}

// SiteStateAt is the state of a site whose nodes last reported at last,
// seen at now: connected within c.SiteStaleAfter of it, stale until
// c.SiteDisconnectedAfter, disconnected after (and when it never
// reported).
func (c Config) SiteStateAt(last, now time.Time) ports.SiteState {
	switch age := now.Sub(last); {
	case !last.IsZero() && age <= c.SiteStaleAfter:
		return ports.SiteConnected
	case !last.IsZero() && age <= c.SiteDisconnectedAfter:
		return ports.SiteStale
	default:
		return ports.SiteDisconnected
	}
}

// Sites implements ports.SiteCalls: every site with a node's health or a
// mirror row, its state from its nodes' newest report.
func (s *Service) Sites(ctx context.Context) ([]ports.SiteView, error) {
	return s.siteViews(ctx, true)
}

// SiteStates is Sites without the mirror's counts: every site with a
// node's health, its state, last contact, leader and nodes as Sites has
// them, and Calls holding only the site's name. It reads the nodes' health
// alone, not the mirror's KPIs (a count over every mirrored row), so it is
// the read for what polls often, such as central's /metrics. A site known
// only by its mirror rows, none of its nodes having reported, is not in
// it (Sites lists it as disconnected).
func (s *Service) SiteStates(ctx context.Context) ([]ports.SiteView, error) {
	return s.siteViews(ctx, false)
}

// siteViews is Sites, with the mirror's counts when calls is set and
// without them (SiteStates) when not.
func (s *Service) siteViews(ctx context.Context, calls bool) ([]ports.SiteView, error) {
	what := "site states"
	if calls {
		what = "sites"
	}
	if s.siteCalls == nil {
		return nil, errNoMirror
	}
	health, err := s.siteCalls.SiteHealth(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: health: %w", what, err)
	}
	var kpis []ports.SiteCallKPI
	if calls {
		if kpis, err = s.SiteCallKPIs(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	now := s.clock.Now()
	views := map[string]*ports.SiteView{}
	view := func(site string) *ports.SiteView {
		v, ok := views[site]
		if !ok {
			v = &ports.SiteView{Site: site, Calls: ports.SiteCallKPI{Site: site}}
			views[site] = v
		}
		return v
	}
	var leaderAt = map[string]time.Time{}
	for _, h := range health {
		v := view(h.Site)
		v.Nodes = append(v.Nodes, h)
		if h.ReportedAt.After(v.LastContact) {
			v.LastContact = h.ReportedAt
		}
		if h.Replica.Role == ports.RoleLeader && !h.ReportedAt.Before(leaderAt[h.Site]) {
			v.Leader, leaderAt[h.Site] = h.Node, h.ReportedAt
		}
	}
	for _, k := range kpis {
		view(k.Site).Calls = k
	}
	out := make([]ports.SiteView, 0, len(views))
	for _, v := range views {
		v.State = s.cfg.SiteStateAt(v.LastContact, now)
		slices.SortFunc(v.Nodes, func(a, b ports.SiteNodeHealth) int { return cmp.Compare(a.Node, b.Node) })
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b ports.SiteView) int { return cmp.Compare(a.Site, b.Site) })
	return out, nil
}
