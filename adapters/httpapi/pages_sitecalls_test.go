package httpapi_test

import (
	"cmp"
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/httpapi"
	"github.com/siteline/outbox/adapters/httpapi/human"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

// The site-call views of the page over the real core: the env's service
// keeps the mirror in its memory store and serves it as Config.SiteCalls;
// the tests feed it as a site would, through ReportOperations and Sync.

const siteA = "plant-1"

// siteOp is a cached call of site as its site reports it.
func siteOp(target, method string, st ports.OpStatus, lastErr string) ports.Operation {
	now := time.Now().UTC()
	op := ports.Operation{ID: uuid.Must(uuid.NewV7()).String(), Kind: ports.OpCall, Target: target, Method: method,
		Status: st, RetryCount: 3, LastError: lastErr, SourceInstance: "line-2", SourceScript: "alarms/check",
		CreatedAt: now.Add(-time.Minute), UpdatedAt: now, Version: 4}
	if st.Terminal() {
		op.TerminalAt = now
	}
	return op
}

// syncNode is one Sync of a site's leading node: its health recorded, and
// the commands central asks it to apply.
func (e *env) syncNode(site, node string, backlog int64) []ports.SiteCommand {
	e.t.Helper()
	ans, err := e.svc.Sync(context.Background(), ports.SyncRequest{Site: site, Leads: true, Health: ports.SiteHealth{
		Site: site, Node: node, Backlog: backlog, OldestEnqueuedAt: time.Now().Add(-time.Minute),
		Replica:            ports.ReplicaState{Node: node, Role: ports.RoleLeader, Term: 7, Leader: node},
		LastCentralContact: time.Now(), LastCentralError: "",
		Operations: []ports.OpKindStats{{Kind: ports.OpCall, Backlog: 1, Parked: 2, Terminal: 5}},
	}})
	if err != nil {
		e.t.Fatal(err)
	}
	return ans.Commands
}

// TestSiteCallsPageShowsTheMirror: the list, its tiles and filters, the
// detail and the Sites views render what the sites reported; markup in a
// reported target or error is shown as text; a viewer sees no actions.
func TestSiteCallsPageShowsTheMirror(t *testing.T) {
	e := newEnv(t)
	const evilTarget, evilErr = `<script>alert(1)</script>`, `503 <img src=x onerror=alert(2)>`
	parked := siteOp(evilTarget, "post", ports.OpParked, evilErr)
	retrying := siteOp("erp", "createOrder", ports.OpRetrying, "connection refused")
	delivered := siteOp("mes", "report", ports.OpDelivered, "")
	e.report(siteA, parked, retrying, delivered)
	e.syncNode(siteA, "node-a", 4)
	e.submit("ok", "from the plant")
	c := e.loginBrowser("viewer")

	code, body := e.get(c, "/site-calls")
	if code != http.StatusOK {
		t.Fatalf("list: %d\n%s", code, body)
	}
	for _, want := range []string{`data-id="` + parked.ID + `"`, `data-id="` + retrying.ID + `"`, `data-id="` + delivered.ID + `"`,
		`<span class="label">Parked</span><span class="value">1</span>`, `<span class="label">Retrying</span><span class="value">1</span>`,
		"erp.createOrder", "connection refused", `href="/site-calls/` + siteA + `/` + parked.ID + `"`,
		`<a href="/site-calls" aria-current="page">Site calls</a>`, `<a href="/sites" >Sites</a>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the list lacks %s", want)
		}
	}
	if strings.Contains(body, "Retry selected") || strings.Contains(body, `name="key"`) {
		t.Error("a viewer is offered Retry")
	}
	code, body = e.get(c, "/site-calls?status=Parked&site="+siteA)
	if code != http.StatusOK || !strings.Contains(body, parked.ID) || strings.Contains(body, retrying.ID) || strings.Contains(body, delivered.ID) {
		t.Fatalf("status filter: %d\n%s", code, body)
	}
	if !strings.Contains(body, `value="Parked" checked`) {
		t.Error("the Parked box is not ticked on the filtered list")
	}
	code, body = e.get(c, "/site-calls?q=CREATEORDER")
	if code != http.StatusOK || !strings.Contains(body, retrying.ID) || strings.Contains(body, parked.ID) {
		t.Fatalf("keyword filter: %d", code)
	}
	code, body = e.get(c, "/site-calls?kind=DatabaseWrite")
	if code != http.StatusOK || strings.Contains(body, `data-id="`) {
		t.Fatalf("kind filter: %d", code)
	}
	code, body = e.get(c, "/site-calls?status=Lost")
	if code != http.StatusBadRequest || !strings.Contains(body, "unknown status &#34;Lost&#34;") {
		t.Fatalf("bad filter: %d\n%s", code, body)
	}

	code, body = e.get(c, "/site-calls/"+siteA+"/"+parked.ID)
	if code != http.StatusOK {
		t.Fatalf("detail: %d\n%s", code, body)
	}
	for _, want := range []string{parked.ID, "line-2", "alarms/check", `<span class="pill Parked big">Parked</span>`, "No operator has retried"} {
		if !strings.Contains(body, want) {
			t.Errorf("the detail lacks %s", want)
		}
	}
	if strings.Contains(body, `action="/site-calls/retry"`) {
		t.Error("a viewer is offered Retry on the detail")
	}
	if code, _ := e.get(c, "/site-calls/"+siteA+"/"+uuid.NewString()); code != http.StatusNotFound {
		t.Fatalf("unknown row: %d", code)
	}
	if code, _ := e.get(c, "/site-calls/plant-2/"+parked.ID); code != http.StatusNotFound {
		t.Fatalf("another site's key: %d", code)
	}

	// Markup reported by a site is text on every view.
	for _, path := range []string{"/site-calls", "/site-calls/" + siteA + "/" + parked.ID} {
		_, body := e.get(c, path)
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
			t.Fatalf("%s renders markup from a site's report:\n%s", path, body)
		}
		if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") || !strings.Contains(body, "&lt;img src=x onerror=alert(2)&gt;") {
			t.Fatalf("%s does not show the target and error escaped:\n%s", path, body)
		}
	}

	code, body = e.get(c, "/sites")
	if code != http.StatusOK {
		t.Fatalf("sites: %d", code)
	}
	for _, want := range []string{`<a href="/sites/` + siteA + `">` + siteA + `</a>`, `<span class="pill connected">connected</span>`,
		`<td>node-a</td>`, `href="/site-calls?site=` + siteA + `&amp;status=Parked">1</a>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the Sites view lacks %s:\n%s", want, body)
		}
	}
	code, body = e.get(c, "/sites/"+siteA)
	if code != http.StatusOK {
		t.Fatalf("site: %d", code)
	}
	for _, want := range []string{`<span class="pill connected big">connected</span>`, "leader node-a",
		`<td>node-a</td><td class="time">`, `<td>leader</td><td class="n">7</td>`, `<td class="n">4</td>`,
		`href="/site-calls?site=` + siteA + `&amp;kind=ExternalCall&amp;status=Parked">2</a>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the site's view lacks %s:\n%s", want, body)
		}
	}
	if code, _ := e.get(c, "/sites/nowhere"); code != http.StatusNotFound {
		t.Fatalf("unknown site: %d", code)
	}
	// The notifications list and the dashboard link a site to its view.
	for _, path := range []string{"/notifications", "/dashboard"} {
		if _, body := e.get(c, path); !strings.Contains(body, `<a href="/sites/`+siteA+`">`+siteA+`</a>`) {
			t.Errorf("%s does not link %s to its Sites view", path, siteA)
		}
	}
}

// TestSiteCallsPageWithoutTheMirror: central without the mirror shows
// neither view nor its nav links.
func TestSiteCallsPageWithoutTheMirror(t *testing.T) {
	e := newEnvWith(t, func(c *httpapi.Config) { c.SiteCalls = nil })
	c := e.loginBrowser("operator")
	if _, body := e.get(c, "/notifications"); strings.Contains(body, `href="/site-calls"`) || strings.Contains(body, `href="/sites"`) {
		t.Fatal("the nav links to views central does not serve")
	}
	for _, path := range []string{"/site-calls", "/sites"} {
		if code, _ := e.get(c, path); code != http.StatusNotFound {
			t.Fatalf("%s: %d", path, code)
		}
	}
}

// TestSiteCallsPageRetryRelaysACommand: a viewer's Retry is refused; an
// operator's relays a command the site receives, and the row shows the
// request until the site reports.
func TestSiteCallsPageRetryRelaysACommand(t *testing.T) {
	e := newEnv(t)
	parked := siteOp("erp", "createOrder", ports.OpParked, "503 Service Unavailable")
	e.report(siteA, parked)
	key := siteA + "/" + parked.ID
	detail := "/site-calls/" + key

	viewer := e.loginBrowser("viewer")
	if code, _, _ := e.post(viewer, "/site-calls/retry", url.Values{"key": {key}, "scope": {"keys"}}); code != http.StatusForbidden {
		t.Fatalf("viewer's retry: %d", code)
	}
	if code, _, _ := e.post(viewer, "/site-calls/discard", url.Values{"scope": {"filter"}, "site": {siteA}}); code != http.StatusForbidden {
		t.Fatalf("viewer's bulk discard: %d", code)
	}
	op := e.loginBrowser("operator")
	if code, _, _ := e.post(op, "/site-calls/retry", url.Values{"key": {strings.Repeat("x", 2<<20)}}); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversize form: %d", code)
	}
	if code, _, body := e.post(op, "/site-calls/retry", url.Values{"key": {"no-slash"}, "scope": {"keys"}}); code != http.StatusBadRequest || !strings.Contains(body, "is not site/id") {
		t.Fatalf("bad key: %d\n%s", code, body)
	}
	if code, loc, _ := e.post(op, "/site-calls/retry", url.Values{"scope": {"keys"}, "return": {"/site-calls"}}); code != http.StatusSeeOther || loc != "/site-calls" {
		t.Fatalf("nothing selected: %d %s", code, loc)
	}
	// A post from another origin is refused before it is read.
	req := e.request("POST", "/site-calls/retry", nil)
	req.Body = ioNopCloser(url.Values{"key": {key}, "scope": {"keys"}}.Encode())
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if code, _ := e.send(op, req); code != http.StatusForbidden {
		t.Fatalf("cross-origin retry: %d", code)
	}
	if cmds := e.syncNode(siteA, "node-a", 0); len(cmds) != 0 {
		t.Fatalf("refused posts relayed commands: %+v", cmds)
	}

	_, body := e.get(op, detail)
	if !strings.Contains(body, `action="/site-calls/retry"`) {
		t.Fatalf("an operator is not offered Retry on a parked row:\n%s", body)
	}
	code, loc, _ := e.post(op, "/site-calls/retry", url.Values{"key": {key}, "scope": {"keys"}, "return": {detail}})
	if code != http.StatusSeeOther || loc != detail {
		t.Fatalf("retry: %d %s", code, loc)
	}
	_, body = e.get(op, loc)
	for _, want := range []string{"Retry requested for 1 cached call(s)", "Retry requested by operator at",
		`<td>Retry</td><td>operator</td><td>Requested</td>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the detail after the retry lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, `action="/site-calls/retry"`) {
		t.Error("Retry is offered again while one is pending")
	}
	if _, body := e.get(op, "/site-calls?status=Parked"); !strings.Contains(body, "Retry requested by operator") {
		t.Errorf("the list does not show the pending retry:\n%s", body)
	}
	cmds := e.syncNode(siteA, "node-a", 0)
	if len(cmds) != 1 || cmds[0].OperationID != parked.ID || cmds[0].Action != ports.SiteRetry || cmds[0].Actor != "operator" {
		t.Fatalf("the site is asked %+v, want the operator's Retry of %s", cmds, parked.ID)
	}

	// The site applies it and reports: the row is Pending, the command
	// Applied, and the notice gone.
	if _, err := e.svc.Sync(t.Context(), ports.SyncRequest{Site: siteA, Leads: true,
		Health:  ports.SiteHealth{Site: siteA, Node: "node-a", Replica: ports.ReplicaState{Node: "node-a", Role: ports.RoleLeader}},
		Answers: []ports.CommandAnswer{{ID: cmds[0].ID, State: ports.CommandApplied}}}); err != nil {
		t.Fatal(err)
	}
	retried := parked
	retried.Status, retried.Version, retried.UpdatedAt = ports.OpPending, parked.Version+1, time.Now().UTC()
	e.report(siteA, retried)
	_, body = e.get(op, detail)
	if !strings.Contains(body, `<span class="pill Pending big">Pending</span>`) || strings.Contains(body, "Retry requested by") ||
		!strings.Contains(body, `<td>Retry</td><td>operator</td><td>Applied</td>`) {
		t.Fatalf("the detail after the site's report:\n%s", body)
	}
}

// TestSiteCallsBulkConfirmationPinsTheCount: Discard by filter first shows
// how many parked calls match; confirmed, it relays a command for those and
// leaves alone a call whose parking reached central after the count, though
// the site parked it long before. A confirmation without the pin is refused.
func TestSiteCallsBulkConfirmationPinsTheCount(t *testing.T) {
	e := newEnv(t)
	a := siteOp("erp", "createOrder", ports.OpParked, "503")
	b := siteOp("erp", "cancelOrder", ports.OpParked, "503")
	other := siteOp("erp", "createOrder", ports.OpParked, "503")
	e.report(siteA, a, b)
	e.report("plant-2", other)
	c := e.loginBrowser("operator")

	code, _, page := e.post(c, "/site-calls/discard", url.Values{"scope": {"filter"}, "site": {siteA}, "return": {"/site-calls?site=" + siteA}})
	if code != http.StatusOK || !strings.Contains(page, "2 site calls match now") || !strings.Contains(page, "Discard 2 site calls") {
		t.Fatalf("confirmation: %d\n%s", code, page)
	}
	form := url.Values{}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`).FindAllStringSubmatch(page, -1) {
		form.Add(m[1], html.UnescapeString(m[2]))
	}
	if form.Get("reported_to") == "" || form.Get("confirm") != "yes" || form.Get("status") != "Parked" || form.Get("site") != siteA {
		t.Fatalf("the confirmation does not pin what it counted: %v", form)
	}
	if cmds := e.syncNode(siteA, "node-a", 0); len(cmds) != 0 {
		t.Fatalf("the confirmation relayed commands: %+v", cmds)
	}
	late := siteOp("erp", "createOrder", ports.OpParked, "503")
	late.CreatedAt, late.UpdatedAt = late.CreatedAt.Add(-time.Hour), late.UpdatedAt.Add(-time.Hour) // late telemetry
	e.report(siteA, late)

	unpinned := url.Values{}
	for k, v := range form {
		if k != "reported_to" {
			unpinned[k] = v
		}
	}
	if code, _, _ := e.post(c, "/site-calls/discard", unpinned); code != http.StatusBadRequest {
		t.Errorf("a confirmation without its pin: %d, want 400", code)
	}
	code, loc, _ := e.post(c, "/site-calls/discard", form)
	if code != http.StatusSeeOther || loc != "/site-calls?site="+siteA {
		t.Fatalf("confirm: %d %s", code, loc)
	}
	if _, body := e.get(c, loc); !strings.Contains(body, "Discard requested for 2 cached call(s)") {
		t.Fatalf("no flash:\n%s", body)
	}
	for _, k := range []struct {
		site, id string
		want     ports.SiteCommandAction
	}{{siteA, a.ID, ports.SiteDiscard}, {siteA, b.ID, ports.SiteDiscard}, {siteA, late.ID, ""}, {"plant-2", other.ID, ""}} {
		d, err := e.svc.SiteCall(t.Context(), k.site, k.id)
		if err != nil {
			t.Fatal(err)
		}
		if d.Requested != k.want {
			t.Errorf("%s/%s: requested %q, want %q", k.site, k.id, d.Requested, k.want)
		}
	}

	// Nothing left to count: the confirmation says so and offers no button.
	code, _, page = e.post(c, "/site-calls/retry", url.Values{"scope": {"filter"}, "site": {"plant-3"}})
	if code != http.StatusOK || !strings.Contains(page, "No parked site call matches") || strings.Contains(page, `name="confirm"`) {
		t.Fatalf("empty confirmation: %d\n%s", code, page)
	}
}

// TestSitesPageStatesTheConfiguredThresholds: the Sites view explains the
// thresholds central was configured with, not the defaults.
func TestSitesPageStatesTheConfiguredThresholds(t *testing.T) {
	for _, tc := range []struct {
		stale, disconnected time.Duration
	}{{0, 0}, {10 * time.Second, 30 * time.Second}} {
		e := newEnvWith(t, func(c *httpapi.Config) {
			c.SiteCalls = c.Outbox.(*core.Service)
			c.SiteStaleAfter, c.SiteDisconnectedAfter = tc.stale, tc.disconnected
		})
		stale, disconnected := cmp.Or(tc.stale, ports.SiteStaleAfter), cmp.Or(tc.disconnected, ports.SiteDisconnectedAfter)
		_, body := e.get(e.loginBrowser("viewer"), "/sites")
		want := "connected within " + human.Duration(stale) + " of the last report, stale until " + human.Duration(disconnected)
		if !strings.Contains(body, want) {
			t.Errorf("thresholds %s/%s: the Sites view does not say %q", tc.stale, tc.disconnected, want)
		}
	}
}
