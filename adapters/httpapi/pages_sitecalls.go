package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/human"
	"github.com/siteline/outbox/ports"
)

// This file renders the operations of ops_sitecalls.go as the page: the
// "Site calls" list and detail, the bulk confirmation, and the "Sites"
// views.

// siteCallPageRoutes registers the page's "Site calls" and "Sites" views
// (Config.SiteCalls is set).
func (s *Server) siteCallPageRoutes() {
	s.pageRoute("GET /site-calls", ports.RoleViewer, s.pageSiteCalls)
	s.pageRoute("GET /site-calls/{site}/{id}", ports.RoleViewer, s.pageSiteCall)
	s.pageRoute("POST /site-calls/retry", ports.RoleOperator, s.pageSiteCallAction(verbRetry))
	s.pageRoute("POST /site-calls/discard", ports.RoleOperator, s.pageSiteCallAction(verbDiscard))
	s.pageRoute("GET /sites", ports.RoleViewer, s.pageSites)
	s.pageRoute("GET /sites/{site}", ports.RoleViewer, s.pageSite)
}

// siteCallTiles are the KPI tiles of the site-calls list: the mirror's
// counts summed over the sites, and each site's.
type siteCallTiles struct {
	Pending, Retrying, Parked, Failed int64
	// OldestBufferedAt is the creation of the oldest buffered row of any
	// site (zero when none).
	OldestBufferedAt time.Time
	Sites            []ports.SiteCallKPI
}

func newSiteCallTiles(kpis []ports.SiteCallKPI) siteCallTiles {
	t := siteCallTiles{Sites: kpis}
	for _, k := range kpis {
		t.Pending += k.Pending
		t.Retrying += k.Retrying
		t.Parked += k.Parked
		t.Failed += k.Failed
		if !k.OldestBufferedAt.IsZero() && (t.OldestBufferedAt.IsZero() || k.OldestBufferedAt.Before(t.OldestBufferedAt)) {
			t.OldestBufferedAt = k.OldestBufferedAt
		}
	}
	return t
}

// opStatusBox is one status checkbox of the site-calls filter form, with
// the count of calls the filter would list with that status (Counted
// false: unknown).
type opStatusBox struct {
	Name    ports.OpStatus
	On      bool
	Count   int64
	Counted bool
}

type siteCallListPage struct {
	base
	KPI          *siteCallTiles
	Filter       api.SiteCallFilter
	Statuses     []opStatusBox
	Kinds        []ports.OpKind
	FilterFields []field
	Rows         []ports.SiteCall
	After        string
	Self, First  string
	Next         string
	// FailedSince is the start of the Failed tile's hour, as a filter
	// value.
	FailedSince string
	// KnownSites are the sites the site field offers.
	KnownSites []string
}

func (s *Server) pageSiteCalls(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	v := siteCallListPage{base: s.newBase(w, r, p, "Site calls", "site-calls"), Kinds: []ports.OpKind{ports.OpCall, ports.OpWrite}}
	status := http.StatusOK
	q, err := parseSiteCallQuery(r.URL.Query())
	if err == nil {
		var page ports.SiteCallPage
		if page, err = s.siteCalls(r.Context(), q); err == nil {
			v.Rows = page.Items
			if page.Next != "" {
				v.Next = siteCallListURL(q.Filter, page.Next, q.Limit)
			}
		}
	}
	if err != nil {
		code, msg := s.classify(r, err)
		status, v.Error = statusOf[code], msg
	}
	v.Filter, v.After = q.Filter, q.After
	v.Self = siteCallListURL(q.Filter, q.After, q.Limit)
	v.First = siteCallListURL(q.Filter, "", q.Limit)
	v.FilterFields = siteCallFilterFields(q.Filter)
	for _, st := range ports.OpStatuses {
		b := opStatusBox{Name: st, On: slices.Contains(q.Filter.Status, st)}
		if err == nil {
			g := q.Filter
			g.Status = []ports.OpStatus{st}
			if n, cerr := s.siteCallCount(r.Context(), g); cerr == nil {
				b.Count, b.Counted = n, true
			} else {
				s.log.Warn("site-call status chip without a count", "status", st, "err", cerr)
			}
		}
		v.Statuses = append(v.Statuses, b)
	}
	v.FailedSince = time.Now().UTC().Add(-time.Hour).Format(time.RFC3339)
	if k, err := s.siteCallKPIs(r.Context()); err == nil {
		t := newSiteCallTiles(k)
		v.KPI = &t
	} else {
		s.log.Warn("site-calls page without KPIs", "err", err)
	}
	v.KnownSites = s.knownValues(r.Context(), nil).Sites
	s.render(w, r, status, "sitecalls", v)
}

func (s *Server) pageSiteCall(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	d, err := s.siteCall(r.Context(), r.PathValue("site"), r.PathValue("id"))
	if err != nil {
		s.pageError(w, r, p, err)
		return
	}
	s.render(w, r, http.StatusOK, "sitecall", struct {
		base
		C    ports.SiteCall
		Self string
		Cmds []ports.SiteCommand
	}{s.newBase(w, r, p, d.Summary()+" · "+d.Site, "site-calls"), d.SiteCall, siteCallPath(d.Site, d.ID), d.Commands})
}

// pageSiteCallAction relays a Retry or Discard from a form: the selected
// rows (scope=keys, each key "site/id" with both parts path-escaped), or
// every parked row matching the filter (scope=filter), which first shows
// how many match and asks for a confirmation.
func (s *Server) pageSiteCallAction(v verb) handler {
	return func(w http.ResponseWriter, r *http.Request, p ports.Principal) {
		form, ok := s.readForm(w, r, p)
		if !ok {
			return
		}
		back := safeNext(form.Get("return"), "/site-calls")
		var req api.SiteCallActionRequest
		switch form.Get("scope") {
		case "filter":
			f, err := api.ParseSiteCallFilter(form)
			if err != nil {
				s.pageError(w, r, p, invalid(err))
				return
			}
			if form.Get("confirm") != "yes" {
				s.confirmSiteCallAction(w, r, p, v, f, back)
				return
			}
			if f.ReportedTo == nil {
				// Only the confirmation page's form confirms, and it pins
				// the count: an unpinned confirmation would act on rows
				// nobody counted.
				s.pageError(w, r, p, invalid(errors.New("reported_to: a confirmed action carries the instant of its count")))
				return
			}
			req.Filter = &f
		default:
			for _, raw := range form["key"] {
				k, err := parseSiteCallKey(raw)
				if err != nil {
					s.pageError(w, r, p, invalid(err))
					return
				}
				req.Keys = append(req.Keys, k)
			}
			if len(req.Keys) == 0 {
				s.setFlash(w, "Select at least one parked site call first.")
				http.Redirect(w, r, back, http.StatusSeeOther)
				return
			}
		}
		res, err := s.actSiteCalls(r.Context(), p, v, req)
		if err != nil {
			s.pageError(w, r, p, err)
			return
		}
		s.setFlash(w, siteCallActionMessage(v, res))
		http.Redirect(w, r, back, http.StatusSeeOther)
	}
}

// confirmSiteCallAction shows how many parked rows match f and asks to
// confirm. The confirmation pins the instant of the count as reported_to,
// central's time of a row's newest report, so the confirmed action leaves
// alone a row whose parking reached central after the count, however
// early the site parked it.
func (s *Server) confirmSiteCallAction(w http.ResponseWriter, r *http.Request, p ports.Principal, v verb, f api.SiteCallFilter, back string) {
	parked := f
	if now := time.Now().UTC().Truncate(time.Microsecond); parked.ReportedTo == nil || parked.ReportedTo.After(now) {
		parked.ReportedTo = &now
	}
	var n int64
	if len(f.Status) == 0 || slices.Contains(f.Status, ports.OpParked) {
		parked.Status = []ports.OpStatus{ports.OpParked}
		var err error
		if n, err = s.siteCallCount(r.Context(), parked); err != nil {
			s.pageError(w, r, p, err)
			return
		}
	}
	what := "every parked site call"
	if !f.IsZero() {
		what = "the parked site calls matching the filter"
	}
	title := verbTitle(v)
	msg := fmt.Sprintf("%s %s: %s match now. Rows that leave Parked meanwhile, or whose parking reaches central after this count, are left alone.",
		title, what, human.Count(n, "site call"))
	if v == verbRetry {
		msg += " Central relays a Retry to each call's site, which delivers it again."
	} else {
		msg += " Central relays a Discard to each call's site, which drops it and keeps its record."
	}
	msg += " Each row changes when its site reports."
	if n == 0 {
		msg = "No parked site call matches the filter: there is nothing to " + string(v) + "."
	}
	s.render(w, r, http.StatusOK, "confirm", confirmPage{
		base: s.newBase(w, r, p, title+" site calls by filter", "site-calls"), Heading: title + " site calls by filter", Message: msg,
		Button: fmt.Sprintf("%s %s", title, human.Count(n, "site call")), Action: "/site-calls/" + string(v),
		Return: back, Count: n, Danger: v == verbDiscard, FilterFields: siteCallFilterFields(parked),
		FilterWords: siteCallFilterWords(parked),
	})
}

func (s *Server) pageSites(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	sites, err := s.sites(r.Context())
	if err != nil {
		s.pageError(w, r, p, err)
		return
	}
	b := s.newBase(w, r, p, "Sites", "sites")
	b.Refresh = 15
	s.render(w, r, http.StatusOK, "sitelist", struct {
		base
		Sites                         []ports.SiteView
		StaleAfter, DisconnectedAfter time.Duration
	}{b, sites, s.cfg.SiteStaleAfter, s.cfg.SiteDisconnectedAfter})
}

func (s *Server) pageSite(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	name := r.PathValue("site")
	sites, err := s.sites(r.Context())
	if err != nil {
		s.pageError(w, r, p, err)
		return
	}
	i := slices.IndexFunc(sites, func(v ports.SiteView) bool { return v.Site == name })
	if i < 0 {
		s.pageError(w, r, p, fmt.Errorf("site %.64q never reported to central: %w", name, ports.ErrNotFound))
		return
	}
	b := s.newBase(w, r, p, "Site "+name, "sites")
	b.Refresh = 15
	v := sites[i]
	ops := slices.ContainsFunc(v.Nodes, func(n ports.SiteNodeHealth) bool { return len(n.Operations) > 0 })
	s.render(w, r, http.StatusOK, "site", struct {
		base
		S ports.SiteView
		// Ops says a node reported cached operations (the site
		// defines targets).
		Ops bool
		// FailedSince is the start of the Failed count's hour, as a
		// filter value.
		FailedSince string
	}{b, v, ops, time.Now().UTC().Add(-time.Hour).Format(time.RFC3339)})
}

// siteBacklog is a site's notification backlog: its leader's, else the
// largest a node reported (the nodes share one replicated buffer).
func siteBacklog(v ports.SiteView) int64 {
	var most int64
	for _, n := range v.Nodes {
		if n.Node == v.Leader {
			return n.Backlog
		}
		most = max(most, n.Backlog)
	}
	return most
}

// siteCallPath is the page's path of one mirror row.
func siteCallPath(site, id string) string {
	return "/site-calls/" + url.PathEscape(site) + "/" + url.PathEscape(id)
}

// siteCallKey is a row's key as a form value: site and id path-escaped,
// joined by a slash.
func siteCallKey(c ports.SiteCall) string {
	return url.PathEscape(c.Site) + "/" + url.PathEscape(c.ID)
}

// parseSiteCallKey reads a key siteCallKey made.
func parseSiteCallKey(raw string) (api.SiteCallKey, error) {
	site, id, ok := strings.Cut(raw, "/")
	if ok {
		var err1, err2 error
		site, err1 = url.PathUnescape(site)
		id, err2 = url.PathUnescape(id)
		ok = err1 == nil && err2 == nil && site != "" && id != ""
	}
	if !ok {
		return api.SiteCallKey{}, fmt.Errorf("key %q is not site/id", human.Clip(raw, 80))
	}
	return api.SiteCallKey{Site: site, ID: id}, nil
}

// siteCallListURL is the page's URL for filter f, page after and limit.
func siteCallListURL(f api.SiteCallFilter, after string, limit int) string {
	return pageURL("/site-calls", f.Values(), after, limit)
}

// siteCallFilterFields is f as hidden form fields.
func siteCallFilterFields(f api.SiteCallFilter) []field { return valueFields(f.Values()) }
