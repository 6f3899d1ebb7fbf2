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

// chipCap is the most rows a status chip counts: above it the chip shows
// "10 000+". Counting up to it reads at most chipCap+1 rows of each
// status, whatever the table's size (a few milliseconds each at
// 1,000,000 rows), where an exact count reads every matching row.
const chipCap = 10_000

// chipsCounted reports whether the status chips of f show counts: not
// under a list, type or keyword filter, which no index answers with the
// status, so that counting would read every matching row (at 1,000,000
// rows a list's or a common keyword's 80,000 took 110–280 ms, more than
// the rest of the page); status, site, time and stuck filters cost 12–60 ms.
func chipsCounted(f api.Filter) bool {
	return f.List == "" && f.Type == "" && f.Q == ""
}

// statusCounts counts, for each central status, the rows matching f with
// that status instead of f's statuses, up to chipCap+1 (a count above
// chipCap means more): what each status chip of the filter shows. When the
// count fails, or the filter's chips show no counts (chipsCounted), no chip
// shows a count; a failure is logged.
func (s *Server) statusCounts(ctx context.Context, f api.Filter) map[ports.Status]int64 {
	if !chipsCounted(f) {
		return nil
	}
	f.Status = nil
	counts, err := s.cfg.Outbox.CountByStatus(ctx, query(f, 0, ""), chipCap)
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
// instant of its count. Times show as the filter's fields do (formTime),
// fractions of a second included.
func filterWords(f api.Filter, pinned bool) []string {
	var w wordLines
	addStatuses(&w, f.Status)
	w.quoted("type", f.Type)
	w.quoted("site", f.Site)
	w.quoted("list", f.List)
	w.time("created at or after", f.From)
	w.time("created before", f.To)
	w.time("last changed at or after", f.UpdatedFrom)
	if pinned && f.UpdatedTo != nil {
		w = append(w, "parked before this count ("+formTime(f.UpdatedTo)+" UTC)")
	} else {
		w.time("last changed before", f.UpdatedTo)
	}
	if f.Stuck {
		w = append(w, "stuck only (Pending or Retrying past the stuck threshold)")
	}
	w.quoted("subject contains", f.Q)
	if len(w) == 0 {
		w = append(w, "every notification: no filter is set")
	}
	return w
}

// siteCallFilterWords is every field of a site-call action's filter f in
// words, one line each (its ReportedTo the instant of the count).
func siteCallFilterWords(f api.SiteCallFilter) []string {
	var w wordLines
	addStatuses(&w, f.Status)
	w.quoted("site", f.Site)
	w.quoted("kind", string(f.Kind))
	w.quoted("target", f.Target)
	w.time("created at or after", f.From)
	w.time("created before", f.To)
	w.time("last changed at the site at or after", f.UpdatedFrom)
	w.time("last changed at the site before", f.UpdatedTo)
	if f.ReportedTo != nil {
		w = append(w, "reported to central before this count ("+formTime(f.ReportedTo)+" UTC)")
	}
	w.quoted("id, target, method, error, instance or script contains", f.Q)
	return w
}

// timeInput is one time field of a filter form (the "timefield"
// template): its label, parameter name, value as formTime shows it, and
// the form the server accepts (api.TimePattern) for the browser to check.
type timeInput struct{ Label, Name, Value, Pattern string }

// timeField is the time field labelled label for the parameter name, t
// shown as formTime shows it (empty when t is nil).
func timeField(label, name string, t *time.Time) timeInput {
	return timeInput{Label: label, Name: name, Value: formTime(t), Pattern: api.TimePattern}
}

// wordLines gathers a filter's fields in words, one line each, for a bulk
// confirmation (filterWords, siteCallFilterWords).
type wordLines []string

// addStatuses adds "status is A or B" when sts holds any status.
func addStatuses[S ~string](w *wordLines, sts []S) {
	if len(sts) == 0 {
		return
	}
	names := make([]string, len(sts))
	for i, st := range sts {
		names[i] = string(st)
	}
	*w = append(*w, "status is "+strings.Join(names, " or "))
}

// quoted adds `what "v"` when v is set: "is" for a field's value, and
// "(any letter case)" for a search text (what ends in "contains").
func (w *wordLines) quoted(what, v string) {
	switch {
	case v == "":
	case strings.HasSuffix(what, " contains"):
		*w = append(*w, fmt.Sprintf("%s %q (any letter case)", what, v))
	default:
		*w = append(*w, fmt.Sprintf("%s is %q", what, v))
	}
}

// time adds "what <t> UTC" when t is set, t as the filter's time fields
// show it (formTime).
func (w *wordLines) time(what string, t *time.Time) {
	if t != nil {
		*w = append(*w, what+" "+formTime(t)+" UTC")
	}
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

// failRank orders failedTargets: a target that failed for good (0)
// before one still retrying (1).
func failRank(s ports.TargetStatus) int {
	if s == ports.TargetFailed {
		return 0
	}
	return 1
}
