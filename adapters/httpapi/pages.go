package httpapi

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/human"
	"github.com/siteline/outbox/ports"
)

// This file renders the operations of ops.go as the page.

// base is what every page shows around its content.
type base struct {
	Title, Nav      string
	User            string
	Role            ports.OperatorRole
	Flash, Error    string
	Banner          string
	Mail            bool
	Refresh         int
	CanAct, IsAdmin bool
	// SiteCalls says central keeps the sites' mirror: the page shows
	// "Site calls" and "Sites", and site names link to their site.
	SiteCalls bool
	// Live is how many seconds apart a list refreshes itself (app.js);
	// zero never.
	Live float64
	// Hooks says a webhook capture runs (dev mode): the page shows
	// "Webhook capture".
	Hooks bool
}

// parsePages parses each page template with the layout.
func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"stamp":     stamp,
		"dur":       human.Duration,
		"num":       human.Thousands,
		"clip":      human.Clip,
		"formTime":  formTime,
		"when":      timeTag,
		"timeField": timeField,
		"json":      prettyJSON,
		"pathEsc":   url.PathEscape,
		"since":     since,
		"callPath":  func(c ports.SiteCall) string { return siteCallPath(c.Site, c.ID) },
		"callKey":   siteCallKey,
		"backlog":   siteBacklog,
		"toolbar":   newToolbar,
		"rate":      rate,
	}
	names, err := fs.Glob(webFS, "web/templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := make(map[string]*template.Template)
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "web/templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.New(name).Funcs(funcs).ParseFS(webFS, "web/templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("httpapi: parse page %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// newBase fills the frame of a page for p.
func (s *Server) newBase(w http.ResponseWriter, r *http.Request, p ports.Principal, title, nav string) base {
	return base{Title: title, Nav: nav, User: p.Name, Role: p.Role, Flash: s.takeFlash(w, r), Banner: s.cfg.Banner,
		Mail: s.cfg.Mailbox != nil, CanAct: p.Role.Allows(ports.RoleOperator), IsAdmin: p.Role.Allows(ports.RoleAdmin),
		SiteCalls: s.cfg.SiteCalls != nil, Live: max(0, cmp.Or(s.cfg.ListRefresh, DefaultListRefresh).Seconds()),
		Hooks: s.cfg.Hookbox != nil}
}

// render writes page with data and status. The page is rendered into a
// buffer first, so that a template error becomes a clean 500.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, page string, data any) {
	var buf bytes.Buffer
	if err := s.pages[page].ExecuteTemplate(&buf, "layout", data); err != nil {
		s.log.Error("render page", "page", page, "path", r.URL.Path, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// pageError renders err as an error page with its status.
func (s *Server) pageError(w http.ResponseWriter, r *http.Request, p ports.Principal, err error) {
	code, msg := s.classify(r, err)
	s.renderError(w, r, p, statusOf[code], msg)
}

// renderError renders the error page.
func (s *Server) renderError(w http.ResponseWriter, r *http.Request, p ports.Principal, status int, msg string) {
	b := s.newBase(w, r, p, http.StatusText(status), "")
	b.Error = msg
	s.render(w, r, status, "error", struct {
		base
		Heading string
	}{b, http.StatusText(status)})
}

// field is a hidden form field.
type field struct{ Name, Value string }

// statusBox is one status checkbox of the filter form, with the count of
// rows the filter would list with that status (Counted false: unknown).
type statusBox struct {
	Name    ports.Status
	On      bool
	Count   int64
	Counted bool
	// More is set when more than Count rows have the status (Count is
	// the chips' cap).
	More bool
}

// kpiView is the KPI report with the stuck threshold for the tiles.
type kpiView struct {
	ports.KPIReport
	Stuck time.Duration
	// SiteLinks makes a site's name link to its Sites view.
	SiteLinks bool
}

type listPage struct {
	base
	KPI      *kpiView
	Filter   api.Filter
	Statuses []statusBox
	// ChipsCounted says whether the status chips show counts under this
	// filter (chipsCounted).
	ChipsCounted bool
	FilterFields []field
	Rows         []ports.Row
	After        string
	Self, First  string
	Next         string
	// Known are the filter fields' pick-lists.
	Known pickLists
	// Oldest lists oldest first; SortLink is the list in the other order.
	Oldest   bool
	SortLink string
}

// toolbar is the bar above a list with bulk actions: how many rows are
// shown, and for an operator the actions on the selection (by scope: ids,
// keys) and on everything matching the filter, posted to Path/retry and
// Path/discard.
type toolbar struct {
	Shown        int
	After        bool
	CanAct       bool
	Path, Scope  string
	FilterFields []field
	// Oldest says the list is oldest first.
	Oldest bool
}

// newToolbar is the toolbar of a list page (listPage, siteCallListPage).
func newToolbar(page any, path, scope string) (toolbar, error) {
	t := toolbar{Path: path, Scope: scope}
	switch p := page.(type) {
	case listPage:
		t.Shown, t.After, t.CanAct, t.FilterFields = len(p.Rows), p.After != "", p.CanAct, p.FilterFields
		t.Oldest = p.Oldest
	case siteCallListPage:
		t.Shown, t.After, t.CanAct, t.FilterFields = len(p.Rows), p.After != "", p.CanAct, p.FilterFields
	default:
		return t, fmt.Errorf("httpapi: no toolbar for a %T", page)
	}
	return t, nil
}

func (s *Server) pageNotifications(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	v := listPage{base: s.newBase(w, r, p, "Notifications", "notifications")}
	status := http.StatusOK
	q, err := parseListQuery(r.URL.Query())
	if err == nil {
		q.Oldest, err = parseOrder(r.URL.Query())
	}
	if err == nil {
		var page ports.QueryPage
		if page, err = s.notifications(r.Context(), q); err == nil {
			v.Rows = page.Items
			if page.Next != "" {
				v.Next = listURL(q.Filter, page.Next, q.Limit, q.Oldest)
			}
		}
	}
	if err != nil {
		code, msg := s.classify(r, err)
		status, v.Error = statusOf[code], msg
	}
	v.Filter, v.After, v.Oldest = q.Filter, q.After, q.Oldest
	v.Self = listURL(q.Filter, q.After, q.Limit, q.Oldest)
	v.First = listURL(q.Filter, "", q.Limit, q.Oldest)
	v.SortLink = listURL(q.Filter, "", q.Limit, !q.Oldest)
	v.FilterFields = filterFields(q.Filter)
	var counts map[ports.Status]int64
	if err == nil {
		counts = s.statusCounts(r.Context(), q.Filter)
	}
	v.ChipsCounted = chipsCounted(q.Filter)
	for _, st := range ports.CentralStatuses {
		n, ok := counts[st]
		v.Statuses = append(v.Statuses, statusBox{Name: st, On: slices.Contains(q.Filter.Status, st), Count: min(n, chipCap), Counted: ok, More: n > chipCap})
	}
	if k, err := s.kpis(r.Context()); err == nil {
		v.KPI = &kpiView{KPIReport: k, Stuck: k.StuckAfter, SiteLinks: v.SiteCalls}
	} else {
		s.log.Warn("page without KPIs", "err", err)
	}
	v.Known = s.knownValues(r.Context(), v.KPI)
	s.render(w, r, status, "notifications", v)
}

func (s *Server) pageNotification(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	d, err := s.notification(r.Context(), r.PathValue("id"))
	if err != nil {
		s.pageError(w, r, p, err)
		return
	}
	d = shownDetail(p, d)
	s.render(w, r, http.StatusOK, "detail", struct {
		base
		N       ports.Row
		Targets targetsView
		History []ports.AuditRecord
	}{s.newBase(w, r, p, d.Subject, "notifications"), d.Row, newTargetsView(d.Notification), d.History})
}

// targetsView is what the detail shows of a row's targets: each one's
// state, and how many of them were delivered. A row without target states
// (not attempted yet, or from before targets were tracked one by one) has
// none, and the page shows its resolved targets.
type targetsView struct {
	States []ports.TargetState
	// Summary is "4 of 5 delivered".
	Summary string
	// NotAttempted reports a row without target states that no attempt
	// went to yet.
	NotAttempted bool
	// Failed are, on a Parked row, the targets that did not get it, the
	// failed ones first: the detail shows them above everything else.
	Failed []ports.TargetState
}

func newTargetsView(n ports.Notification) targetsView {
	if len(n.Targets) == 0 {
		return targetsView{NotAttempted: n.LastAttemptAt.IsZero() && len(n.ResolvedTargets) == 0}
	}
	v := targetsView{States: n.Targets, Summary: api.TargetsSummary(api.FromTargets(n.Targets))}
	if n.Status == ports.StatusParked {
		v.Failed = failedTargets(n.Targets)
	}
	return v
}

// pageAction retries or discards from a form: the selected ids (scope=ids),
// or every parked row matching the filter (scope=filter), which first shows
// how many match and asks for a confirmation.
func (s *Server) pageAction(v verb) handler {
	return func(w http.ResponseWriter, r *http.Request, p ports.Principal) {
		form, ok := s.readForm(w, r, p)
		if !ok {
			return
		}
		back := safeNext(form.Get("return"), "/notifications")
		var req api.ActionRequest
		switch form.Get("scope") {
		case "filter":
			f, err := api.ParseFilter(form)
			if err != nil {
				s.pageError(w, r, p, invalid(err))
				return
			}
			if form.Get("confirm") != "yes" {
				s.confirmAction(w, r, p, v, f, back)
				return
			}
			req.Filter = &f
			req.All = f.IsZero()
		default:
			req.IDs = form["id"]
			if len(req.IDs) == 0 {
				s.setFlash(w, "Select at least one parked notification first.")
				http.Redirect(w, r, back, http.StatusSeeOther)
				return
			}
		}
		res, err := s.act(r.Context(), p, v, req)
		if err != nil {
			s.pageError(w, r, p, err)
			return
		}
		s.setFlash(w, actionMessage(v, res))
		http.Redirect(w, r, back, http.StatusSeeOther)
	}
}

// readForm reads a posted form of at most maxBodyBytes; when it cannot,
// it answers with the error page and reports false.
func (s *Server) readForm(w http.ResponseWriter, r *http.Request, p ports.Principal) (url.Values, bool) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	if err := r.ParseForm(); err != nil {
		if mbe := new(http.MaxBytesError); errors.As(err, &mbe) {
			s.renderError(w, r, p, http.StatusRequestEntityTooLarge, errTooLarge.Error())
			return nil, false
		}
		s.renderError(w, r, p, http.StatusBadRequest, "The form could not be read: "+err.Error())
		return nil, false
	}
	return r.PostForm, true
}

// confirmPage asks to confirm a bulk action by filter: Count rows match;
// the form posts FilterFields (which pin the count's instant) to Action.
type confirmPage struct {
	base
	Heading, Message, Button, Action, Return string
	Count                                    int64
	Danger                                   bool
	FilterFields                             []field
	// FilterWords restates, one line each, the filter the action acts on.
	FilterWords []string
}

// confirmAction shows how many parked rows match f and asks to confirm.
func (s *Server) confirmAction(w http.ResponseWriter, r *http.Request, p ports.Principal, v verb, f api.Filter, back string) {
	if f.Stuck {
		s.pageError(w, r, p, fmt.Errorf("stuck rows are never Parked; clear \"Stuck only\" to act on parked rows: %w", ports.ErrInvalid))
		return
	}
	// The count and the confirmed action see the same rows: those parked
	// before this instant. A row that parks after the count is left alone.
	parked := f
	pinned := false
	if now := time.Now().UTC().Truncate(time.Microsecond); parked.UpdatedTo == nil || parked.UpdatedTo.After(now) {
		parked.UpdatedTo, pinned = &now, true
	}
	var n int64
	if len(f.Status) == 0 || slices.Contains(f.Status, ports.StatusParked) {
		parked.Status = []ports.Status{ports.StatusParked}
		var err error
		if n, err = s.count(r.Context(), parked); err != nil {
			s.pageError(w, r, p, err)
			return
		}
	}
	what := "every parked notification"
	if !f.IsZero() {
		what = "the parked notifications matching the filter"
	}
	title := strings.ToUpper(string(v[:1])) + string(v[1:])
	msg := fmt.Sprintf("%s %s: %s match now. Rows that leave Parked meanwhile, or park after this count, are left alone.", title, what, human.Count(n, "notification"))
	if v == verbRetry {
		msg += " They go back to Pending and are delivered again."
	} else {
		msg += " They become Discarded and are kept for the audit record."
	}
	if n == 0 {
		msg = "No parked notification matches the filter: there is nothing to " + string(v) + "."
	}
	s.render(w, r, http.StatusOK, "confirm", confirmPage{
		base: s.newBase(w, r, p, title+" by filter", "notifications"), Heading: title + " by filter", Message: msg,
		Button: fmt.Sprintf("%s %s", title, human.Count(n, "notification")), Action: "/notifications/" + string(v),
		Return: back, Count: n, Danger: v == verbDiscard, FilterFields: filterFields(parked), FilterWords: filterWords(parked, pinned),
	})
}

func (s *Server) pageDashboard(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	k, err := s.kpis(r.Context())
	if err != nil {
		s.pageError(w, r, p, err)
		return
	}
	sites := make([]string, 0, len(k.Sites))
	for _, site := range k.Sites {
		sites = append(sites, site.Site)
	}
	charts, err := s.charts(r.Context(), r.URL.Query(), sites)
	if err != nil {
		s.pageError(w, r, p, err)
		return
	}
	b := s.newBase(w, r, p, "Health", "dashboard")
	b.Refresh = 15
	var plugins []ports.PluginStatus
	if s.cfg.Plugins != nil {
		plugins = s.cfg.Plugins()
	}
	s.render(w, r, http.StatusOK, "dashboard", struct {
		base
		KPI     kpiView
		Charts  chartsView
		Plugins []ports.PluginStatus
	}{b, kpiView{KPIReport: k, Stuck: k.StuckAfter, SiteLinks: b.SiteCalls}, charts, plugins})
}

func (s *Server) pageMail(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	mails := s.cfg.Mailbox()
	slices.Reverse(mails)
	b := s.newBase(w, r, p, "Mail capture", "mail")
	b.Refresh = 5
	s.render(w, r, http.StatusOK, "mail", struct {
		base
		Mails []Mail
	}{b, mails})
}

type loginPage struct {
	base
	Next, Name string
}

func (s *Server) pageLogin(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"), "/notifications")
	if _, err := s.authenticate(r); err == nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	b := s.newBase(w, r, ports.Principal{}, "Log in", "")
	s.render(w, r, http.StatusOK, "login", loginPage{base: b, Next: next})
}

func (s *Server) pageLoginPost(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		s.renderError(w, r, ports.Principal{}, http.StatusBadRequest, "The form could not be read.")
		return
	}
	next := safeNext(r.PostForm.Get("next"), "/notifications")
	name := r.PostForm.Get("name")
	if _, err := s.login(w, r, name, r.PostForm.Get("password")); err != nil {
		b := s.newBase(w, r, ports.Principal{}, "Log in", "")
		status := http.StatusUnauthorized
		b.Error = "Wrong name or password."
		var te *ports.LoginThrottledError
		switch {
		case errors.As(err, &te):
			status, b.Error = http.StatusTooManyRequests, throttledMessage(te)
			setRetryAfter(w, err)
		case !errors.Is(err, ports.ErrUnauthenticated):
			code, msg := s.classify(r, err)
			status, b.Error = statusOf[code], msg
		}
		s.render(w, r, status, "login", loginPage{base: b, Next: next, Name: name})
		return
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// throttledMessage tells a person at the login form why the password was
// not even checked, and how long to wait.
func throttledMessage(te *ports.LoginThrottledError) string {
	wait := human.Count(retryAfterSeconds(te), "second")
	switch te.Reason {
	case ports.LoginThrottledAddress:
		return "Too many failed logins from your address. Your password was not checked; try again in " + wait + "."
	case ports.LoginThrottledAccount:
		return "Too many failed logins for this account, and the last try from your address failed too. Your password was not checked; try again in " + wait + "."
	}
	return "Another login from your address is being checked. Try again in " + wait + "."
}

func (s *Server) pageLogout(w http.ResponseWriter, r *http.Request) {
	if err := s.logout(w, r); err != nil {
		s.pageError(w, r, ports.Principal{}, err)
		return
	}
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// listURL is the page's URL for filter f, page after and limit, oldest
// first if oldest.
func listURL(f api.Filter, after string, limit int, oldest bool) string {
	v := f.Values()
	if oldest {
		v.Set(api.ParamOrder, api.OrderOldest)
	}
	return pageURL("/notifications", v, after, limit)
}

// pageURL is the list at path with the filter's parameters v, page after
// and limit.
func pageURL(path string, v url.Values, after string, limit int) string {
	if after != "" {
		v.Set(api.ParamAfter, after)
	}
	if limit > 0 {
		v.Set(api.ParamLimit, strconv.Itoa(limit))
	}
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

// filterFields is f as hidden form fields.
func filterFields(f api.Filter) []field { return valueFields(f.Values()) }

// valueFields is a filter's parameters v as hidden form fields.
func valueFields(v url.Values) []field {
	var out []field
	for _, k := range slices.Sorted(mapsKeys(v)) {
		for _, x := range v[k] {
			out = append(out, field{k, x})
		}
	}
	return out
}

func mapsKeys(v url.Values) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range v {
			if !yield(k) {
				return
			}
		}
	}
}

// stamp shows a time in UTC to the second, or — for none.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

// since is how long ago t was, or — for none.
func since(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return human.Duration(time.Since(t))
}

// formTimeLayout is how a filter's time field shows a time: as the lists
// show it (stamp), with a fraction only when it has one, so that a time
// copied from a row can be typed into a field and a field's value submitted
// again keeps its filter. api.ParseFilter reads it (and the T form).
const formTimeLayout = "2006-01-02 15:04:05.999999999"

// formTime is a filter time as its field's value.
func formTime(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(formTimeLayout)
}

// ago is how long ago (or, for a future time, how soon) t is from now, in
// words: "just now", "42 s ago", "3 min ago", "in 5 min", "2 h ago",
// "3 days ago". app.js computes the same text to keep it current.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < 5*time.Second:
		return "just now"
	case d < time.Minute:
		s = fmt.Sprintf("%d s", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%d min", int(d/time.Minute))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%d h", int(d/time.Hour))
	default:
		s = fmt.Sprintf("%d days", int(d/(24*time.Hour)))
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// timeTag is t as a <time> element: the relative text (ago), the exact UTC
// time in its title and its datetime attribute for app.js to refresh the
// text; — for none.
func timeTag(t time.Time) template.HTML {
	if t.IsZero() {
		return "—"
	}
	t = t.UTC()
	return template.HTML(fmt.Sprintf(`<time datetime="%s" title="%s UTC" data-ago>%s</time>`,
		t.Format(time.RFC3339Nano), stamp(t), template.HTMLEscapeString(ago(t, time.Now()))))
}

// prettyJSON indents raw JSON for display.
func prettyJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}
