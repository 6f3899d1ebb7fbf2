package httpapi

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/ports"
)

// This file holds what the Notifications list shows besides its rows: the
// count of each status chip, the known values the filter's fields offer,
// and the filter restated in words on a bulk confirmation.

// pageListRoutes registers the actions on Retrying notifications: Retry
// now and Park, from the detail's buttons.
func (s *Server) pageListRoutes() {
	s.pageRoute("POST /notifications/retry-now", ports.RoleOperator, s.pageRetryingAction(verbRetryNow))
	s.pageRoute("POST /notifications/park", ports.RoleOperator, s.pageRetryingAction(verbPark))
}

// pageRetryingAction retries now or parks the Retrying notifications a
// form selects by id (never by filter), and says what happened.
func (s *Server) pageRetryingAction(v verb) handler {
	return func(w http.ResponseWriter, r *http.Request, p ports.Principal) {
		form, ok := s.readForm(w, r, p)
		if !ok {
			return
		}
		back := safeNext(form.Get("return"), "/notifications")
		ids := form["id"]
		if len(ids) == 0 {
			s.setFlash(w, "Select at least one retrying notification first.")
			http.Redirect(w, r, back, http.StatusSeeOther)
			return
		}
		res, err := s.act(r.Context(), p, v, api.ActionRequest{IDs: ids})
		if err != nil {
			s.pageError(w, r, p, err)
			return
		}
		s.setFlash(w, actionMessage(v, res))
		http.Redirect(w, r, back, http.StatusSeeOther)
	}
}

// parseOrder reads the sort parameter (api.ParamOrder): whether to list
// oldest first; newest first is the default. Both are the store's keyset
// (CreatedAt, ID), so every page of either order is one index range.
func parseOrder(v url.Values) (bool, error) {
	oldest, err := api.ParseOrder(v)
	if err != nil {
		return false, invalid(err)
	}
	return oldest, nil
}

// statusCounts counts, for each central status, the rows matching f with
// that status instead of f's statuses: what each status chip of the filter
// shows, in one grouped count. When the count fails no chip shows a count,
// and the failure is logged.
func (s *Server) statusCounts(ctx context.Context, f api.Filter) map[ports.Status]int64 {
	f.Status = nil
	counts, err := s.cfg.Outbox.CountByStatus(ctx, query(f, 0, ""))
	if err != nil {
		s.log.Warn("status chips without counts", "err", err)
		return nil
	}
	out := make(map[ports.Status]int64, len(ports.CentralStatuses))
	for _, st := range ports.CentralStatuses {
		out[st] = counts[st] // a status no row has counts 0
	}
	return out
}

// pickLists are the known values the filter's site, list and type fields
// offer (each sorted, without duplicates); the fields take any other text
// too.
type pickLists struct {
	Sites, Lists, Types []string
}

// knownValues gathers the pick-lists: the sites central knows (those with
// notifications in the KPIs, and with the sites' mirror the sites that
// reported), the lists of the directory and the channel types in use
// (the lists' and the configured channels'). A source that fails is left
// out and logged: the fields still take free text.
func (s *Server) knownValues(ctx context.Context, k *kpiView) pickLists {
	var p pickLists
	if k != nil {
		for _, site := range k.Sites {
			p.Sites = append(p.Sites, site.Site)
		}
	}
	if s.cfg.SiteCalls != nil {
		if vs, err := s.sites(ctx); err == nil {
			for _, v := range vs {
				p.Sites = append(p.Sites, v.Site)
			}
		} else {
			s.log.Warn("site pick-list without the sites' view", "err", err)
		}
	}
	if ls, err := s.cfg.Directory.Lists(ctx); err == nil {
		for _, l := range ls {
			p.Lists = append(p.Lists, l.Name)
			p.Types = append(p.Types, l.Type)
		}
	} else {
		s.log.Warn("list pick-list without the lists", "err", err)
	}
	if cs, err := s.cfg.Directory.Channels(ctx); err == nil {
		for _, c := range cs {
			p.Types = append(p.Types, c.Type)
		}
	} else {
		s.log.Warn("type pick-list without the channels", "err", err)
	}
	p.Sites, p.Lists, p.Types = known(p.Sites), known(p.Lists), known(p.Types)
	return p
}

// known is vs sorted, without duplicates and empty values.
func known(vs []string) []string {
	vs = slices.DeleteFunc(vs, func(v string) bool { return v == "" })
	slices.Sort(vs)
	return slices.Compact(vs)
}

// filterWords is every field of f in words, one line each, for a bulk
// confirmation to restate what it acts on; "every notification" for the
// empty filter. pinned says the confirmation set f.UpdatedTo to the
// instant of its count.
func filterWords(f api.Filter, pinned bool) []string {
	var out []string
	if len(f.Status) > 0 {
		names := make([]string, len(f.Status))
		for i, st := range f.Status {
			names[i] = string(st)
		}
		out = append(out, "status is "+strings.Join(names, " or "))
	}
	add := func(what, v string) {
		if v != "" {
			out = append(out, fmt.Sprintf("%s is %q", what, v))
		}
	}
	add("type", f.Type)
	add("site", f.Site)
	add("list", f.List)
	if f.From != nil {
		out = append(out, "created at or after "+stamp(*f.From)+" UTC")
	}
	if f.To != nil {
		out = append(out, "created before "+stamp(*f.To)+" UTC")
	}
	if f.UpdatedFrom != nil {
		out = append(out, "last changed at or after "+stamp(*f.UpdatedFrom)+" UTC")
	}
	switch {
	case f.UpdatedTo != nil && pinned:
		out = append(out, "parked before this count ("+formTime(f.UpdatedTo)+" UTC)")
	case f.UpdatedTo != nil:
		out = append(out, "last changed before "+formTime(f.UpdatedTo)+" UTC")
	}
	if f.Stuck {
		out = append(out, "stuck only (Pending or Retrying past the stuck threshold)")
	}
	if f.Q != "" {
		out = append(out, fmt.Sprintf("subject contains %q (any letter case)", f.Q))
	}
	if len(out) == 0 {
		out = append(out, "every notification: no filter is set")
	}
	return out
}

// timeInput is one time field of a filter form (the "timefield"
// template): its label, parameter name and value as formTime shows it.
type timeInput struct{ Label, Name, Value string }

func timeField(label, name string, t *time.Time) timeInput {
	return timeInput{Label: label, Name: name, Value: formTime(t)}
}

// siteCallFilterWords is every field of a site-call action's filter f in
// words, one line each (its ReportedTo the instant of the count).
func siteCallFilterWords(f api.SiteCallFilter) []string {
	var out []string
	if len(f.Status) > 0 {
		names := make([]string, len(f.Status))
		for i, st := range f.Status {
			names[i] = string(st)
		}
		out = append(out, "status is "+strings.Join(names, " or "))
	}
	add := func(what, v string) {
		if v != "" {
			out = append(out, fmt.Sprintf("%s is %q", what, v))
		}
	}
	add("site", f.Site)
	add("kind", string(f.Kind))
	add("target", f.Target)
	times := []struct {
		what string
		t    *time.Time
	}{{"created at or after", f.From}, {"created before", f.To},
		{"last changed at the site at or after", f.UpdatedFrom}, {"last changed at the site before", f.UpdatedTo}}
	for _, x := range times {
		if x.t != nil {
			out = append(out, x.what+" "+formTime(x.t)+" UTC")
		}
	}
	if f.ReportedTo != nil {
		out = append(out, "reported to central before this count ("+formTime(f.ReportedTo)+" UTC)")
	}
	if f.Q != "" {
		out = append(out, fmt.Sprintf("id, target, method, error, instance or script contains %q (any letter case)", f.Q))
	}
	return out
}

// failedTargets are the targets of a row that did not get it (Failed or
// still Retrying), the failed ones first: what a Parked row's detail shows
// first.
func failedTargets(ts []ports.TargetState) []ports.TargetState {
	var out []ports.TargetState
	for _, t := range ts {
		if t.Status == ports.TargetFailed || t.Status == ports.TargetRetrying {
			out = append(out, t)
		}
	}
	slices.SortStableFunc(out, func(a, b ports.TargetState) int {
		return cmp.Compare(failRank(a.Status), failRank(b.Status))
	})
	return out
}

func failRank(s ports.TargetStatus) int {
	if s == ports.TargetFailed {
		return 0
	}
	return 1
}
