package memstore

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/siteline/outbox/ports"
)

// This file is ports.SiteCallStore: central's mirror of the sites' cached
// operations, the sites' node health, the reconciliation cursors and the
// commands relayed to sites, in maps under the store's mutex. Reads sort
// what they select; the mirror of the core's tests is small.

var _ ports.SiteCallStore = (*Store)(nil)

// siteKey names one mirror row, or one node of a site.
type siteKey struct{ site, id string }

// siteCallTables are the tables of ports.SiteCallStore.
type siteCallTables struct {
	calls    map[siteKey]ports.SiteCall
	health   map[siteKey]ports.SiteNodeHealth
	cursors  map[string]ports.SiteCursor
	commands map[string]ports.SiteCommand
}

// siteCalls returns the tables, made on first use; s.mu is held.
func (s *Store) siteCalls() *siteCallTables {
	if s.sc.calls == nil {
		s.sc = siteCallTables{calls: map[siteKey]ports.SiteCall{}, health: map[siteKey]ports.SiteNodeHealth{},
			cursors: map[string]ports.SiteCursor{}, commands: map[string]ports.SiteCommand{}}
	}
	return &s.sc
}

// ReportSiteCalls implements ports.SiteCallStore.
func (s *Store) ReportSiteCalls(ctx context.Context, site string, ops []ports.Operation, now time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memstore: report site calls: %w", err)
	}
	if site == "" || len(site) > ports.MaxSiteCallNameBytes || !utf8.ValidString(site) {
		return 0, fmt.Errorf("memstore: report site calls: the site is empty, over %d bytes, or not UTF-8: %w",
			ports.MaxSiteCallNameBytes, ports.ErrInvalid)
	}
	if len(ops) > ports.MaxSiteCallReport {
		return 0, fmt.Errorf("memstore: report site calls: %d rows, over %d: %w", len(ops), ports.MaxSiteCallReport, ports.ErrInvalid)
	}
	newest := make(map[string]ports.Operation, len(ops))
	for _, op := range ops {
		if err := ports.ValidateSiteCallReport(op); err != nil {
			return 0, fmt.Errorf("memstore: report site calls: %w", err)
		}
		if prev, ok := newest[op.ID]; !ok || op.Version > prev.Version {
			newest[op.ID] = op
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.siteCalls()
	changed := 0
	for id, op := range newest {
		k := siteKey{site, id}
		old, known := t.calls[k]
		if known && op.Version <= old.Version {
			continue
		}
		c := ports.SiteCall{Site: site, Operation: utcOp(op), ReportedAt: utc(now)}
		if known && op.Status == ports.OpParked {
			c.Requested, c.RequestedBy, c.RequestedAt = old.Requested, old.RequestedBy, old.RequestedAt
		}
		t.calls[k] = c
		changed++
	}
	return changed, nil
}

// utcOp is op without its payload, its times in UTC.
func utcOp(op ports.Operation) ports.Operation {
	op.Payload = ports.OpPayload{}
	op.NextAttemptAt, op.CreatedAt, op.UpdatedAt, op.TerminalAt = utc(op.NextAttemptAt), utc(op.CreatedAt), utc(op.UpdatedAt), utc(op.TerminalAt)
	return op
}

// GetSiteCall implements ports.SiteCallStore.
func (s *Store) GetSiteCall(ctx context.Context, site, id string) (ports.SiteCall, error) {
	if err := ctx.Err(); err != nil {
		return ports.SiteCall{}, fmt.Errorf("memstore: get site call: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.siteCalls().calls[siteKey{site, id}]
	if !ok {
		return ports.SiteCall{}, fmt.Errorf("memstore: site call %.64q of %.64q: %w", id, site, ports.ErrNotFound)
	}
	return c, nil
}

// siteCallCursor is the position after which a page of mirror rows
// starts, going newest first.
type siteCallCursor struct {
	Created time.Time `json:"c"`
	Site    string    `json:"s"`
	ID      string    `json:"i"`
}

const siteCallCursorPrefix = "s1."

func encodeSiteCallCursor(c ports.SiteCall) string {
	b, _ := json.Marshal(siteCallCursor{Created: c.CreatedAt, Site: c.Site, ID: c.ID})
	return siteCallCursorPrefix + base64.RawURLEncoding.EncodeToString(b)
}

func decodeSiteCallCursor(text string) (siteCallCursor, error) {
	var c siteCallCursor
	body, ok := strings.CutPrefix(text, siteCallCursorPrefix)
	if ok {
		raw, err := base64.RawURLEncoding.DecodeString(body)
		ok = err == nil && json.Unmarshal(raw, &c) == nil && c.ID != ""
	}
	if !ok {
		return siteCallCursor{}, fmt.Errorf("memstore: page cursor %.40q is malformed: %w", text, ports.ErrInvalid)
	}
	return c, nil
}

// compareSiteCalls orders mirror rows newest first.
func compareSiteCalls(a, b ports.SiteCall) int {
	return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), strings.Compare(b.Site, a.Site), strings.Compare(b.ID, a.ID))
}

// siteCallMatcher is a checked SiteCallFilter.
type siteCallMatcher struct {
	f       ports.SiteCallFilter
	keyword string // lower-cased ASCII
}

func newSiteCallMatcher(f ports.SiteCallFilter) (siteCallMatcher, error) {
	for _, st := range f.Statuses {
		if !st.Valid() {
			return siteCallMatcher{}, fmt.Errorf("memstore: filter status %.40q is unknown: %w", st, ports.ErrInvalid)
		}
	}
	return siteCallMatcher{f: f, keyword: asciiLower(f.Keyword)}, nil
}

func (m siteCallMatcher) match(c ports.SiteCall) bool {
	f := &m.f
	switch {
	case f.Site != "" && c.Site != f.Site,
		f.Kind != "" && c.Kind != f.Kind,
		f.Target != "" && c.Target != f.Target,
		len(f.Statuses) > 0 && !slices.Contains(f.Statuses, c.Status),
		!f.CreatedFrom.IsZero() && !atOrAfter(c.CreatedAt, f.CreatedFrom),
		!f.CreatedTo.IsZero() && !before(c.CreatedAt, f.CreatedTo),
		!f.UpdatedFrom.IsZero() && !atOrAfter(c.UpdatedAt, f.UpdatedFrom),
		!f.UpdatedTo.IsZero() && !before(c.UpdatedAt, f.UpdatedTo),
		!f.ReportedTo.IsZero() && !before(c.ReportedAt, f.ReportedTo):
		return false
	case m.keyword == "":
		return true
	}
	for _, v := range []string{c.ID, c.Target, c.Method, c.LastError, c.SourceInstance, c.SourceScript} {
		if strings.Contains(asciiLower(v), m.keyword) {
			return true
		}
	}
	return false
}

// selectSiteCalls returns the rows m keeps, newest first; s.mu is held.
func (s *Store) selectSiteCalls(m siteCallMatcher) []ports.SiteCall {
	var out []ports.SiteCall
	for _, c := range s.siteCalls().calls {
		if m.match(c) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, compareSiteCalls)
	return out
}

// QuerySiteCalls implements ports.SiteCallStore.
func (s *Store) QuerySiteCalls(ctx context.Context, f ports.SiteCallFilter, page ports.PageRequest) (ports.SiteCallPage, error) {
	if err := ctx.Err(); err != nil {
		return ports.SiteCallPage{}, fmt.Errorf("memstore: query site calls: %w", err)
	}
	if page.Limit <= 0 {
		return ports.SiteCallPage{}, fmt.Errorf("memstore: query site calls: page limit %d is not positive: %w", page.Limit, ports.ErrInvalid)
	}
	m, err := newSiteCallMatcher(f)
	if err != nil {
		return ports.SiteCallPage{}, err
	}
	var after *siteCallCursor
	if page.After != "" {
		c, err := decodeSiteCallCursor(page.After)
		if err != nil {
			return ports.SiteCallPage{}, err
		}
		after = &c
	}
	s.mu.Lock()
	rows := s.selectSiteCalls(m)
	s.mu.Unlock()
	if after != nil {
		key := ports.SiteCall{Site: after.Site, Operation: ports.Operation{ID: after.ID, CreatedAt: after.Created}}
		i, _ := slices.BinarySearchFunc(rows, key, compareSiteCalls)
		for i < len(rows) && compareSiteCalls(rows[i], key) <= 0 {
			i++
		}
		rows = rows[i:]
	}
	p := ports.SiteCallPage{Items: []ports.SiteCall{}}
	if len(rows) > page.Limit {
		rows = rows[:page.Limit]
		p.Next = encodeSiteCallCursor(rows[len(rows)-1])
	}
	p.Items = append(p.Items, rows...)
	return p, nil
}

// CountSiteCalls implements ports.SiteCallStore.
func (s *Store) CountSiteCalls(ctx context.Context, f ports.SiteCallFilter) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memstore: count site calls: %w", err)
	}
	m, err := newSiteCallMatcher(f)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, c := range s.siteCalls().calls {
		if m.match(c) {
			n++
		}
	}
	return n, nil
}

// SiteCallKPIs implements ports.SiteCallStore.
func (s *Store) SiteCallKPIs(ctx context.Context, req ports.SiteCallKPIRequest) ([]ports.SiteCallKPI, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: site call kpis: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sites := map[string]*ports.SiteCallKPI{}
	for k, c := range s.siteCalls().calls {
		kpi := sites[k.site]
		if kpi == nil {
			kpi = &ports.SiteCallKPI{Site: k.site}
			sites[k.site] = kpi
		}
		switch c.Status {
		case ports.OpPending:
			kpi.Pending++
		case ports.OpRetrying:
			kpi.Retrying++
		case ports.OpParked:
			kpi.Parked++
		case ports.OpFailed:
			if !c.TerminalAt.Before(req.FailedSince) {
				kpi.Failed++
			}
		}
		if c.Status.Buffered() && (kpi.OldestBufferedAt.IsZero() || c.CreatedAt.Before(kpi.OldestBufferedAt)) {
			kpi.OldestBufferedAt = c.CreatedAt
		}
	}
	out := make([]ports.SiteCallKPI, 0, len(sites))
	for _, k := range sites {
		out = append(out, *k)
	}
	slices.SortFunc(out, func(a, b ports.SiteCallKPI) int { return strings.Compare(a.Site, b.Site) })
	return out, nil
}

// PurgeSiteCalls implements ports.SiteCallStore.
func (s *Store) PurgeSiteCalls(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memstore: purge site calls: %w", err)
	}
	if limit < 1 {
		return 0, fmt.Errorf("memstore: purge site calls: limit %d is not positive: %w", limit, ports.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.siteCalls()
	var old []ports.SiteCall
	for _, c := range t.calls {
		if c.Status.Terminal() && before(c.TerminalAt, cutoff) {
			old = append(old, c)
		}
	}
	slices.SortFunc(old, func(a, b ports.SiteCall) int {
		return cmp.Or(a.TerminalAt.Compare(b.TerminalAt), strings.Compare(a.Site, b.Site), strings.Compare(a.ID, b.ID))
	})
	old = old[:min(limit, len(old))]
	for _, c := range old {
		delete(t.calls, siteKey{c.Site, c.ID})
	}
	for id, c := range t.commands {
		if c.State != ports.CommandRequested && before(c.FinishedAt, cutoff) {
			delete(t.commands, id)
		}
	}
	return len(old), nil
}

// SiteCursor implements ports.SiteCallStore.
func (s *Store) SiteCursor(ctx context.Context, site string) (ports.SiteCursor, error) {
	if err := ctx.Err(); err != nil {
		return ports.SiteCursor{}, fmt.Errorf("memstore: read site cursor: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.siteCalls().cursors[site], nil
}

// SetSiteCursor implements ports.SiteCallStore.
func (s *Store) SetSiteCursor(ctx context.Context, site string, c ports.SiteCursor) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: set site cursor: %w", err)
	}
	if err := ports.ValidateSiteCursor(site, c); err != nil {
		return fmt.Errorf("memstore: set site cursor: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.siteCalls().cursors[site] = c
	return nil
}

// RecordSiteHealth implements ports.SiteCallStore.
func (s *Store) RecordSiteHealth(ctx context.Context, h ports.SiteNodeHealth) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: record site health: %w", err)
	}
	if err := ports.ValidateSiteHealth(h.SiteHealth); err != nil {
		return fmt.Errorf("memstore: record site health: %w", err)
	}
	h.Operations = slices.Clone(h.Operations)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.siteCalls().health[siteKey{h.Site, h.Node}] = h
	return nil
}

// SiteHealth implements ports.SiteCallStore.
func (s *Store) SiteHealth(ctx context.Context) ([]ports.SiteNodeHealth, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: read site health: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ports.SiteNodeHealth, 0, len(s.siteCalls().health))
	for _, h := range s.sc.health {
		h.Operations = slices.Clone(h.Operations)
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b ports.SiteNodeHealth) int {
		return cmp.Or(strings.Compare(a.Site, b.Site), strings.Compare(a.Node, b.Node))
	})
	return out, nil
}

// RequestSiteCommands implements ports.SiteCallStore.
func (s *Store) RequestSiteCommands(ctx context.Context, cmds []ports.SiteCommand) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: request site commands: %w", err)
	}
	seen := make(map[string]bool, len(cmds))
	for _, c := range cmds {
		if err := ports.ValidateSiteCommand(c); err != nil {
			return fmt.Errorf("memstore: request site commands: %w", err)
		}
		if seen[c.ID] {
			return fmt.Errorf("memstore: request site commands: command %.64q is given twice: %w", c.ID, ports.ErrConflict)
		}
		seen[c.ID] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.siteCalls()
	for _, c := range cmds {
		if _, ok := t.commands[c.ID]; ok {
			return fmt.Errorf("memstore: request site commands: command %.64q is already stored: %w", c.ID, ports.ErrConflict)
		}
	}
	for _, c := range cmds {
		c.RequestedAt = utc(c.RequestedAt)
		c.State, c.Result, c.FinishedAt = ports.CommandRequested, "", time.Time{}
		t.commands[c.ID] = c
		k := siteKey{c.Site, c.OperationID}
		if row, ok := t.calls[k]; ok {
			row.Requested, row.RequestedBy, row.RequestedAt = c.Action, c.Actor, c.RequestedAt
			t.calls[k] = row
		}
	}
	return nil
}

// sortedCommands returns the commands keep accepts, oldest first; s.mu is
// held.
func (s *Store) sortedCommands(keep func(ports.SiteCommand) bool) []ports.SiteCommand {
	out := []ports.SiteCommand{}
	for _, c := range s.siteCalls().commands {
		if keep(c) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b ports.SiteCommand) int {
		return cmp.Or(a.RequestedAt.Compare(b.RequestedAt), strings.Compare(a.ID, b.ID))
	})
	return out
}

// PendingSiteCommands implements ports.SiteCallStore.
func (s *Store) PendingSiteCommands(ctx context.Context, site string, limit int) ([]ports.SiteCommand, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: pending site commands: %w", err)
	}
	if limit < 1 {
		return nil, fmt.Errorf("memstore: pending site commands: limit %d is not positive: %w", limit, ports.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sortedCommands(func(c ports.SiteCommand) bool { return c.Site == site && c.State == ports.CommandRequested })
	return out[:min(limit, len(out))], nil
}

// FinishSiteCommand implements ports.SiteCallStore.
func (s *Store) FinishSiteCommand(ctx context.Context, site, id string, state ports.SiteCommandState, result string, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: finish site command: %w", err)
	}
	if err := checkFinish(state, result); err != nil {
		return fmt.Errorf("memstore: finish site command %.64q: %w", id, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.siteCalls()
	c, ok := t.commands[id]
	switch {
	case !ok:
		return fmt.Errorf("memstore: finish site command %.64q: %w", id, ports.ErrNotFound)
	case c.Site != site:
		return fmt.Errorf("memstore: finish site command %.64q: another site's: %w", id, ports.ErrConflict)
	case c.State != ports.CommandRequested:
		return fmt.Errorf("memstore: finish site command %.64q: already %s: %w", id, c.State, ports.ErrConflict)
	}
	c.State, c.Result, c.FinishedAt = state, result, utc(now)
	t.commands[id] = c
	k := siteKey{c.Site, c.OperationID}
	if row, ok := t.calls[k]; ok && state == ports.CommandRefused {
		row.Requested, row.RequestedBy, row.RequestedAt = "", "", time.Time{}
		t.calls[k] = row
	}
	return nil
}

// checkFinish refuses a site's answer other than Applied or Refused, or a
// reason over its bound.
func checkFinish(state ports.SiteCommandState, result string) error {
	if state != ports.CommandApplied && state != ports.CommandRefused {
		return fmt.Errorf("state %.40q is not an answer: %w", state, ports.ErrInvalid)
	}
	if len(result) > ports.MaxSiteCallErrorBytes {
		return fmt.Errorf("result is %d bytes, over %d: %w", len(result), ports.MaxSiteCallErrorBytes, ports.ErrInvalid)
	}
	return nil
}

// SiteCommands implements ports.SiteCallStore.
func (s *Store) SiteCommands(ctx context.Context, site, operationID string) ([]ports.SiteCommand, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: site commands: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sortedCommands(func(c ports.SiteCommand) bool { return c.Site == site && c.OperationID == operationID }), nil
}
