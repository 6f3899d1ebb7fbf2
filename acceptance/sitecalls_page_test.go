package acceptance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/siteline/outbox/ports"
)

// TestSiteCallsPageInChromium drives the page's "Site calls" and "Sites"
// views in headless Chromium, on the real central binary fed through the
// site link as site plant-1 would feed it (telemetry by ReportOperations,
// health and commands by Sync): log in, read the tiles, filter by Parked,
// open a row, Retry it, see "Retry requested" until the site reports; the
// site receives the operator's command, applies it, reports the call
// Delivered, and the detail shows it with the operator in the commands;
// the Sites view shows the site connected with its leader.
func TestSiteCallsPageInChromium(t *testing.T) {
	exe := browserPath(t)
	c := startPageCentral(t)

	now := time.Now().UTC()
	op := func(target, method string, st ports.OpStatus, lastErr string) ports.Operation {
		o := ports.Operation{ID: uuid.Must(uuid.NewV7()).String(), Kind: ports.OpCall, Target: target, Method: method,
			Status: st, RetryCount: 5, LastError: lastErr, SourceInstance: "line-2", SourceScript: "orders/post",
			CreatedAt: now.Add(-10 * time.Minute), UpdatedAt: now.Add(-time.Minute), Version: 6}
		if st.Terminal() {
			o.TerminalAt = o.UpdatedAt
		}
		return o
	}
	parked := []ports.Operation{
		op("erp", "createOrder", ports.OpParked, "503 Service Unavailable"),
		op("erp", "cancelOrder", ports.OpParked, "503 Service Unavailable"),
	}
	delivered := op("mes", "report", ports.OpDelivered, "")
	retrying := op("erp", "createOrder", ports.OpRetrying, "connection refused")
	c.reportOps(append(slices.Clone(parked), delivered, retrying)...)
	c.syncSite(nil)

	br := newBrowser(t, exe, c.base)
	br.open("/site-calls")
	br.logIn()
	if loc := br.location(); !strings.HasSuffix(loc, "/site-calls") {
		t.Fatalf("after the login the page is %s, want /site-calls", loc)
	}
	if got := br.text(`[data-kpi="parked"] .value`); got != "2" {
		t.Fatalf("Parked tile shows %q, want 2", got)
	}
	if got := br.text(`[data-kpi="retrying"] .value`); got != "1" {
		t.Fatalf("Retrying tile shows %q, want 1", got)
	}
	if rows := br.rows(); len(rows) != 4 {
		t.Fatalf("the unfiltered list shows %d rows, want 4: %+v", len(rows), rows)
	}
	br.screenshot("site-calls-list.png")

	// Filter by status Parked.
	br.do("tick Parked", chromedp.Click(chromedp.CSS(`form.filters input[name="status"][value="Parked"]`)))
	br.submit("filter", `form.filters button[type="submit"]`)
	if loc := br.location(); !strings.Contains(loc, "status=Parked") {
		t.Fatalf("after filtering the page is %s, want status=Parked in the URL", loc)
	}
	rows := br.rows()
	if ids := rowIDs(rows); !sameSet(ids, []string{parked[0].ID, parked[1].ID}) {
		t.Fatalf("the Parked filter lists %+v, want exactly the parked calls", rows)
	}

	// Open a row and retry it.
	target := parked[0]
	br.submit("open a parked call", fmt.Sprintf(`tr[data-id=%q] td.subject a`, target.ID))
	if st := br.text(".detail-head .pill"); st != "Parked" {
		t.Fatalf("the detail shows status %q, want Parked", st)
	}
	if h := br.text(".detail-head h1"); h != "erp.createOrder" {
		t.Fatalf("the detail's heading is %q", h)
	}
	br.screenshot("site-call-detail.png")
	br.submit("retry", `.detail-head form[action="/site-calls/retry"] button`)
	if flash := br.text(".flash"); !strings.HasPrefix(flash, "Retry requested for 1 cached call(s)") {
		t.Fatalf("the flash says %q", flash)
	}
	if notice := br.text(".requested-notice"); !strings.HasPrefix(notice, "Retry requested by "+pageAdmin+" at ") {
		t.Fatalf("the notice says %q, want the pending retry by %s", notice, pageAdmin)
	}
	if st := br.text(".detail-head .pill"); st != "Parked" {
		t.Fatalf("central changed the row to %q before the site reported", st)
	}
	if n := run(br, "count the action buttons", chromedp.Evaluate[int](`document.querySelectorAll(".detail-head form").length`)); n != 0 {
		t.Fatalf("the detail offers %d actions while a retry is pending", n)
	}
	cmds := commandRows(br)
	if len(cmds) != 1 || cmds[0][1] != "Retry" || cmds[0][2] != pageAdmin || cmds[0][3] != "Requested" {
		t.Fatalf("the commands read %q, want the admin's Retry Requested", cmds)
	}

	// The site takes the command, applies it and reports the call
	// delivered.
	// The command is stored before the page answered the retry.
	got := c.syncSite(nil)
	if len(got) != 1 {
		t.Fatalf("the site is asked %+v, want one command", got)
	}
	if got[0].OperationID != target.ID || got[0].Action != ports.SiteRetry || got[0].Actor != pageAdmin {
		t.Fatalf("the site is asked %+v, want %s's Retry of %s", got[0], pageAdmin, target.ID)
	}
	c.syncSite([]ports.CommandAnswer{{ID: got[0].ID, State: ports.CommandApplied}})
	done := target
	done.Status, done.RetryCount, done.LastError, done.Version = ports.OpDelivered, 6, "", target.Version+2
	done.UpdatedAt = time.Now().UTC()
	done.TerminalAt = done.UpdatedAt
	c.reportOps(done)

	path := fmt.Sprintf("/site-calls/%s/%s", sitePlant1, target.ID)
	br.waitFor("the retried call is Delivered", path, func() (bool, string) {
		st := br.text(".detail-head .pill")
		return st == "Delivered", "status " + st
	})
	if n := run(br, "look for the notice", chromedp.Evaluate[int](`document.querySelectorAll(".requested-notice").length`)); n != 0 {
		t.Fatal("the notice stays after the site reported")
	}
	if cmds := commandRows(br); len(cmds) != 1 || cmds[0][2] != pageAdmin || cmds[0][3] != "Applied" || cmds[0][5] == "—" {
		t.Fatalf("the commands read %q, want the admin's Retry Applied and finished", cmds)
	}

	// The Sites view shows the site connected, with its leader.
	br.do("open Sites from the nav", chromedp.Click(chromedp.CSS(`header nav a[href="/sites"]`)))
	br.waitVisible("table.site-states")
	row := fmt.Sprintf(`table.site-states tr[data-site=%q]`, sitePlant1)
	if st := br.text(row + " .pill"); st != "connected" {
		t.Fatalf("the Sites view shows %s %q, want connected", sitePlant1, st)
	}
	br.submit("open the site", row+" td a")
	if leader := br.text(".detail-head .sub"); !strings.Contains(leader, "leader node-a") {
		t.Fatalf("the site's view reads %q, want node-a leading", leader)
	}
	if role := br.text(`table.nodes tr[data-node="node-a"] td:nth-child(3)`); role != "leader" {
		t.Fatalf("node-a's role reads %q", role)
	}
	if got := br.text(`[data-kpi="parked"] .value`); got != "1" {
		t.Fatalf("the site's Parked tile shows %q, want 1", got)
	}
	br.screenshot("sites-view.png")
	br.checkQuiet()
}

// logIn logs the page's admin in through the login form shown.
func (b *browser) logIn() {
	b.t.Helper()
	b.do("fill in the login form",
		chromedp.SendKeys(chromedp.CSS(`form.login input[name="name"]`), pageAdmin),
		chromedp.SendKeys(chromedp.CSS(`form.login input[name="password"]`), pagePassword))
	b.submit("log in", `form.login button[type="submit"]`)
}

// commandRows reads the commands table of the site-call detail shown.
func commandRows(br *browser) [][]string {
	br.t.Helper()
	return run(br, "read the commands", chromedp.Evaluate[[][]string](`Array.from(
		document.querySelectorAll("table.commands tbody tr[data-state]"),
		(tr) => Array.from(tr.cells, (td) => td.textContent.trim()))`))
}

// reportOps sends ops as plant-1's telemetry over the site link.
func (c *pageCentral) reportOps(ops ...ports.Operation) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.client.ReportOperations(ctx, ports.OpReport{Site: sitePlant1, Ops: ops}); err != nil {
		c.t.Fatalf("report operations through the link: %v", err)
	}
}

// syncSite is one Sync of plant-1's leading node, node-a, with answers;
// it returns the commands central asks the site to apply.
func (c *pageCentral) syncSite(answers []ports.CommandAnswer) []ports.SiteCommand {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ans, err := c.client.Sync(ctx, ports.SyncRequest{Site: sitePlant1, Leads: true, Answers: answers, Health: ports.SiteHealth{
		Site: sitePlant1, Node: "node-a", Replica: ports.ReplicaState{Node: "node-a", Role: ports.RoleLeader, Term: 3, Leader: "node-a"},
		LastCentralContact: time.Now()}})
	if err != nil {
		c.t.Fatalf("sync through the link: %v", err)
	}
	return ans.Commands
}

// TestSiteCallRetriedFromCentralPage is the path end to end with real
// processes: a three-node site (`outbox site`) whose external system answers
// 503 parks a cached call after its retries; its telemetry shows the call
// Parked on the real central binary's page; the system comes back; an
// operator selects the call on central's page in headless Chromium and
// retries it; central relays the command over the site's own connection;
// the site delivers the call once, and central's mirror shows it Delivered
// with the operator's command applied in its history.
func TestSiteCallRetriedFromCentralPage(t *testing.T) {
	exe := browserPath(t)
	erp := newERPSystem(t)
	c := startPageCentral(t)
	g := newSiteGroupAt(t, c.link, siteSpec{Extra: erpConfig(erp, 1, "200ms")})
	g.startAll()
	g.leader()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := g.client.Call(ctx, "erp", "order", map[string]any{"item": "valve"})
	if err != nil || res.Operation.Status != ports.OpPending {
		t.Fatalf("a call with the system down: %v %+v, want it Pending", err, res.Operation)
	}
	id := res.ID
	path := fmt.Sprintf("/site-calls/%s/%s", sitePlant1, id)

	br := newBrowser(t, exe, c.base)
	br.open("/login")
	br.logIn()

	// The site parks the call after its retry; its telemetry shows it so
	// at central.
	br.waitFor("central shows the call Parked", "/site-calls?status=Parked&site="+sitePlant1, func() (bool, string) {
		ids := rowIDs(br.rowsNow())
		return slices.Contains(ids, id), fmt.Sprintf("parked rows %v", ids)
	})
	if got := br.text(fmt.Sprintf(`tr[data-id=%q] td.err`, id)); !strings.Contains(got, "503") {
		t.Fatalf("the parked call's last error reads %q, want the 503", got)
	}
	requests, accepted := erp.counts()
	if requests[id] < 2 || accepted[id] != 0 {
		t.Fatalf("before the retry the system saw %d requests, %d accepted; want 1 + max_retries, none accepted", requests[id], accepted[id])
	}

	// The system is back; the operator retries the call from the list.
	erp.up.Store(true)
	br.do("select the call", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-id=%q] input[name="key"]`, id))))
	br.submit("retry selected", `#bulk button[formaction="/site-calls/retry"][value="keys"]`)
	if flash := br.text(".flash"); !strings.HasPrefix(flash, "Retry requested for 1 cached call(s)") {
		t.Fatalf("the flash says %q", flash)
	}

	br.waitFor("central shows the call Delivered", path, func() (bool, string) {
		st := br.text(".detail-head .pill")
		return st == "Delivered", "status " + st
	})
	cmds := commandRows(br)
	if len(cmds) != 1 || cmds[0][1] != "Retry" || cmds[0][2] != pageAdmin || cmds[0][3] != "Applied" {
		t.Fatalf("the commands read %q, want %s's Retry Applied", cmds, pageAdmin)
	}
	if _, accepted = erp.counts(); accepted[id] != 1 {
		t.Fatalf("the retried call reached the system %d times as accepted, want once", accepted[id])
	}
	br.screenshot("site-call-retried-from-central.png")

	// The Sites view shows the site connected, led by one of its nodes.
	br.open("/sites/" + sitePlant1)
	if st := br.text(".detail-head .pill"); st != "connected" {
		t.Fatalf("the site shows %q, want connected", st)
	}
	if sub := br.text(".detail-head .sub"); !strings.Contains(sub, "leader a") && !strings.Contains(sub, "leader b") {
		t.Fatalf("the site's view reads %q, want a or b leading", sub)
	}
	br.checkQuiet()
}
