package httpapi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/ports"
)

// This file is the one handler layer the page (pages.go) and the JSON API
// (api.go) share: each operation reads its input in the wire form both
// entrances use (query parameters, api types), calls the ports, and returns
// plain results that api.go encodes as JSON and pages.go renders as HTML.

// verb is an operator action on rows: retry and discard on parked rows,
// retry-now and park on Retrying notifications.
type verb string

const (
	verbRetry    verb = "retry"
	verbDiscard  verb = "discard"
	verbRetryNow verb = "retry-now"
	verbPark     verb = "park"
)

// past is the verb's past participle, for messages.
func (v verb) past() string {
	switch v {
	case verbRetry:
		return "retried"
	case verbRetryNow:
		return "retried now"
	case verbPark:
		return "parked"
	}
	return "discarded"
}

// invalid wraps a parse error of the caller's input.
func invalid(err error) error { return fmt.Errorf("%v: %w", err, ports.ErrInvalid) }

// listQuery is a parsed list request: the filter in wire form and the
// paging.
type listQuery struct {
	Filter api.Filter
	Limit  int
	After  string
	// Oldest lists oldest first (order=oldest); newest first is the
	// default.
	Oldest bool
}

// parseListQuery reads the filter and the paging of a list request.
func parseListQuery(v url.Values) (listQuery, error) {
	f, err := api.ParseFilter(v)
	if err != nil {
		return listQuery{}, invalid(err)
	}
	limit, after, err := api.ParsePage(v)
	if err != nil {
		return listQuery{}, invalid(err)
	}
	return listQuery{Filter: f, Limit: limit, After: after}, nil
}

// query turns a wire filter into the core's query.
func query(f api.Filter, limit int, after string) ports.Query {
	pf, stuck := f.PortsFilter()
	return ports.Query{Filter: pf, StuckOnly: stuck, Limit: limit, After: after}
}

// notifications is one page of rows matching q.
func (s *Server) notifications(ctx context.Context, q listQuery) (ports.QueryPage, error) {
	pq := query(q.Filter, q.Limit, q.After)
	pq.Oldest = q.Oldest
	return s.cfg.Outbox.Query(ctx, pq)
}

// count is how many rows match f.
func (s *Server) count(ctx context.Context, f api.Filter) (int64, error) {
	return s.cfg.Outbox.Count(ctx, query(f, 0, ""))
}

// notification is one row with its history.
func (s *Server) notification(ctx context.Context, id string) (ports.Detail, error) {
	return s.cfg.Outbox.Notification(ctx, id)
}

// kpis is the KPI report.
func (s *Server) kpis(ctx context.Context) (ports.KPIReport, error) {
	return s.cfg.Outbox.KPIs(ctx)
}

// act does v to the rows req selects, recording p as the actor.
func (s *Server) act(ctx context.Context, p ports.Principal, v verb, req api.ActionRequest) (ports.ActionResult, error) {
	a := ports.Action{Actor: p.Name, IDs: req.IDs, All: req.All}
	if req.Filter != nil {
		pf, stuck := req.Filter.PortsFilter()
		if stuck {
			if v == verbRetryNow || v == verbPark {
				return ports.ActionResult{}, fmt.Errorf("filter.stuck: %s does not select by the stuck threshold; select the Retrying notifications by ids or by the other fields: %w", v, ports.ErrInvalid)
			}
			return ports.ActionResult{}, fmt.Errorf("filter.stuck: stuck rows are never Parked, so an action on them would do nothing: %w", ports.ErrInvalid)
		}
		a.Filter = pf
	}
	if len(req.IDs) > 0 && req.Filter != nil && !req.Filter.IsZero() {
		return ports.ActionResult{}, fmt.Errorf("give ids or a filter, not both: %w", ports.ErrInvalid)
	}
	switch v {
	case verbRetry:
		return s.cfg.Outbox.Retry(ctx, a)
	case verbRetryNow:
		return s.cfg.Outbox.RetryNow(ctx, a)
	case verbPark:
		return s.cfg.Outbox.Park(ctx, a)
	}
	return s.cfg.Outbox.Discard(ctx, a)
}

// putList stores l under name, which the body's name must match if set,
// recording p as the actor. With create set it only creates: a list of
// that name existing already is refused with ErrConflict.
func (s *Server) putList(ctx context.Context, p ports.Principal, name string, l api.List, create bool) (ports.List, error) {
	if l.Name != "" && l.Name != name {
		return ports.List{}, fmt.Errorf("name: the body names %q but the path names %q: %w", l.Name, name, ports.ErrInvalid)
	}
	l.Name = name
	if create {
		return s.cfg.Editor.CreateList(ctx, p.Name, l.PortsList())
	}
	return s.cfg.Editor.PutList(ctx, p.Name, l.PortsList())
}

// shownTargets is targets as p may see them: an admin, who manages the
// lists, sees them as written; anyone else sees references as written and
// a URL only up to its host ("https://hooks.example/…"), since a webhook
// URL's path or query often is its secret (Slack's and Teams' are).
func shownTargets(p ports.Principal, targets []string) []string {
	if p.Role.Allows(ports.RoleAdmin) || len(targets) == 0 {
		return targets
	}
	out := make([]string, len(targets))
	for i, t := range targets {
		out[i] = shownTarget(t)
	}
	return out
}

// shownTarget is one target as anyone but an admin sees it: a URL up to
// its host, anything else (an address, a reference) as written.
func shownTarget(t string) string {
	if ports.IsSecretRef(t) {
		return t
	}
	scheme, rest, ok := strings.Cut(t, "://")
	if !ok {
		return t
	}
	host, _, _ := strings.Cut(rest, "/")
	host, _, _ = strings.Cut(host, "?")
	if i := strings.LastIndexByte(host, '@'); i >= 0 {
		host = host[i+1:]
	}
	return scheme + "://" + host + "/…"
}

// shownDetail is d as p may see it: its resolved targets, each target's
// state and the targets of its history through shownTarget. d's slices
// are not changed.
func shownDetail(p ports.Principal, d ports.Detail) ports.Detail {
	if p.Role.Allows(ports.RoleAdmin) {
		return d
	}
	d.ResolvedTargets = shownTargets(p, d.ResolvedTargets)
	if d.Targets != nil {
		ts := slices.Clone(d.Targets)
		for i := range ts {
			ts[i].Target = shownTarget(ts[i].Target)
		}
		d.Targets = ts
	}
	if d.History != nil {
		h := slices.Clone(d.History)
		for i := range h {
			if h[i].Targets == nil {
				continue
			}
			at := slices.Clone(h[i].Targets)
			for j := range at {
				at[j].Target = shownTarget(at[j].Target)
			}
			h[i].Targets = at
		}
		d.History = h
	}
	return d
}

// shownList is l as p may see it (see shownTargets).
func shownList(p ports.Principal, l ports.List) ports.List {
	l.Targets = shownTargets(p, l.Targets)
	return l
}

// shownChannel is c as p may see it: an admin sees the settings with the
// credentials of URLs in them masked (references as written), anyone else
// none of them — the type, the retry policy and the rate limit only.
func shownChannel(p ports.Principal, c ports.ChannelSettings) ports.ChannelSettings {
	if !p.Role.Allows(ports.RoleAdmin) {
		c.Settings = map[string]string{}
		return c
	}
	shown := make(map[string]string, len(c.Settings))
	for k, v := range c.Settings {
		shown[k] = v
		if !ports.IsSecretRef(v) {
			shown[k] = ports.MaskURLCredentials(v)
		}
	}
	c.Settings = shown
	return c
}

// unmasked is the value v of a setting posted back with was stored: was
// when v is was as shown (ports.MaskURLCredentials), else v with each of
// its comma-separated values that is a stored value as shown put back to
// the stored value. A list setting goes through the page one value a line
// and comes back joined afresh, so its masked values are matched one by
// one: by position first, else by the only stored value that shows so.
func unmasked(v, was string) string {
	if v == ports.MaskURLCredentials(was) {
		return was
	}
	if !strings.Contains(v, "***") {
		return v
	}
	olds := strings.Split(was, ",")
	shown := map[string][]string{}
	for _, o := range olds {
		o = strings.TrimSpace(o)
		if m := ports.MaskURLCredentials(o); m != o && !slices.Contains(shown[m], o) {
			shown[m] = append(shown[m], o)
		}
	}
	vs := strings.Split(v, ",")
	for i, x := range vs {
		x = strings.TrimSpace(x)
		switch {
		case i < len(olds) && x != strings.TrimSpace(olds[i]) && x == ports.MaskURLCredentials(strings.TrimSpace(olds[i])):
			vs[i] = strings.Replace(vs[i], x, strings.TrimSpace(olds[i]), 1)
		case len(shown[x]) == 1:
			vs[i] = strings.Replace(vs[i], x, shown[x][0], 1)
		}
	}
	return strings.Join(vs, ",")
}

// putChannel stores c under typ after the plugin's check, recording p as
// the actor.
func (s *Server) putChannel(ctx context.Context, p ports.Principal, typ string, c api.Channel) (ports.ChannelSettings, error) {
	if c.Type != "" && c.Type != typ {
		return ports.ChannelSettings{}, fmt.Errorf("type: the body names %q but the path names %q: %w", c.Type, typ, ports.ErrInvalid)
	}
	c.Type = typ
	pc := c.PortsChannel()
	// A value sent back as it was shown, masked, keeps the stored one.
	if old, err := s.cfg.Directory.ChannelSettings(ctx, typ); err == nil && len(pc.Settings) > 0 {
		settings := maps.Clone(pc.Settings)
		for k, v := range settings {
			if was, ok := old.Settings[k]; ok && v != was {
				settings[k] = unmasked(v, was)
			}
		}
		pc.Settings = settings
	} else if err != nil && !errors.Is(err, ports.ErrNotFound) {
		return ports.ChannelSettings{}, err
	}
	if err := pc.Validate(); err != nil {
		return ports.ChannelSettings{}, err
	}
	if s.cfg.CheckChannel != nil {
		if err := s.cfg.CheckChannel(ctx, pc); err != nil {
			if !errors.Is(err, ports.ErrInvalid) {
				err = fmt.Errorf("%v: %w", err, ports.ErrInvalid)
			}
			return ports.ChannelSettings{}, err
		}
	}
	return s.cfg.Editor.PutChannel(ctx, p.Name, pc)
}

// ownTokenRequest checks the body of POST /me/tokens.
func ownTokenRequest(in api.NewOwnToken) (ports.OwnTokenRequest, error) {
	if in.ExpiresAt == nil {
		return ports.OwnTokenRequest{}, fmt.Errorf("expires_at: required (a token of one's own expires): %w", ports.ErrInvalid)
	}
	return ports.OwnTokenRequest{Label: in.Label, ExpiresAt: *in.ExpiresAt}, nil
}

// tokenRequest checks the body of POST /tokens, recording p as the actor.
func tokenRequest(p ports.Principal, in api.NewToken) ports.TokenRequest {
	req := ports.TokenRequest{Actor: p.Name, Name: in.Name, Role: in.Role}
	if in.ExpiresAt != nil {
		req.ExpiresAt = *in.ExpiresAt
	}
	return req
}

// actionMessage is the one-line summary of an action's result.
func actionMessage(v verb, res ports.ActionResult) string {
	var b strings.Builder
	switch n := len(res.Moved); n {
	case 0:
		b.WriteString("No notification was " + v.past())
	case 1:
		b.WriteString("1 notification " + v.past())
	default:
		fmt.Fprintf(&b, "%d notifications %s", n, v.past())
	}
	if n := len(res.Refused); n > 0 {
		fmt.Fprintf(&b, "; %d refused: %v", n, res.Refused[0].Err)
		if n > 1 {
			fmt.Fprintf(&b, " (and %d more)", n-1)
		}
	}
	return b.String() + "."
}
