package acceptance

import (
	"context"
	"fmt"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/httpapi"
	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// listCentral is central's page handler (httpapi over the real core and
// the memory store) on a loopback server, its lists refreshing every
// second; rows are dispatched by dispatch, never in the background, so the
// page changes only when the test makes it.
type listCentral struct {
	t     *testing.T
	svc   *core.Service
	srv   *httptest.Server
	store *memstore.Store
}

// The list test's lists: ok delivers to its one address; bounces has two,
// and the channel refuses the second, so its rows park with one failed
// target; flaky's receiver answers "try later", so its rows keep retrying.
var listTargets = map[string][]string{
	"ok":      {"ops@example.com"},
	"bounces": {"ops@example.com", "typo@exmaple.com"},
	"flaky":   {"busy@example.com"},
}

// listChannel is refuseTarget for typo@exmaple.com, and fails for now on
// every target of the list flaky.
type listChannel struct{ refuseTarget }

func (c listChannel) Deliver(ctx context.Context, d ports.Delivery) ports.Result {
	if d.Notification.List == "flaky" {
		return ports.Result{Outcome: ports.OutcomeTransient, Error: "421 4.7.0 try again later"}
	}
	return c.refuseTarget.Deliver(ctx, d)
}

func startListCentral(t *testing.T) *listCentral {
	t.Helper()
	store := memstore.New()
	dir, err := memdir.New([]ports.List{
		{Name: "ok", Type: "email", Targets: listTargets["ok"]},
		{Name: "bounces", Type: "email", Targets: listTargets["bounces"]},
		{Name: "flaky", Type: "email", Targets: listTargets["flaky"]},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := core.New(core.Config{}, core.Deps{Store: store, Audit: store, Directory: dir, Clock: ports.SystemClock{},
		Channels: ports.ChannelMap{"email": listChannel{refuseTarget{"typo@exmaple.com"}}}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	srv := servePage(t, svc, store, dir, func(c *httpapi.Config) { c.ListRefresh = time.Second })
	return &listCentral{t: t, svc: svc, srv: srv, store: store}
}

// send submits one notification per subject to list as site plant-1 and
// dispatches until nothing is due; it returns their ids.
func (c *listCentral) send(list string, subjects ...string) []string {
	c.t.Helper()
	var subs []ports.Submission
	var ids []string
	for _, s := range subjects {
		id := uuid.Must(uuid.NewV7()).String()
		ids = append(ids, id)
		subs = append(subs, ports.Submission{ID: id, List: list, Subject: s, Body: "Seen at the plant: " + s + ".",
			SourceSite: sitePlant1, SiteEnqueuedAt: time.Now()})
	}
	if res, err := c.svc.Submit(c.t.Context(), ports.SubmitRequest{Notifications: subs}); err != nil || len(res.Accepted) != len(subs) {
		c.t.Fatalf("submit: %v %+v", err, res)
	}
	for {
		n, err := c.svc.DispatchOnce(c.t.Context())
		if err != nil {
			c.t.Fatal(err)
		}
		if n == 0 {
			return ids
		}
	}
}

// TestNotificationsListInChromium drives the Notifications list in
// headless Chromium: the times read relative with the exact UTC time on
// hover and app.js keeps them current; the list refreshes itself in place
// (a new row and the chips' counts appear without a reload), and holds
// still while a row is ticked; the Created header sorts oldest first; a
// time typed into the From field as the list shows it filters; a parked
// row's detail names the failed target first; the bulk confirmation
// restates its filter. Screenshots of the list, the detail and the
// confirmation are written for reviewers.
func TestNotificationsListInChromium(t *testing.T) {
	exe := browserPath(t)
	c := startListCentral(t)
	ok := c.send("ok", "Pump 3 pressure low", "Tank 7 level high")
	parked := c.send("bounces", "Valve 12 stuck open")

	br := newBrowser(t, exe, c.srv.URL)
	br.open("/login")
	br.logIn()
	br.open("/notifications")
	if rows := br.rows(); len(rows) != 3 {
		t.Fatalf("the list shows %d rows, want 3: %+v", len(rows), rows)
	}

	// Relative times, the exact UTC time in the title.
	type when struct {
		Text  string `json:"text"`
		Title string `json:"title"`
	}
	w := run(br, "read a row's time", chromedp.Evaluate[when](`(() => { const e = document.querySelector("table.rows tbody time[data-ago]");
		return {text: e.textContent, title: e.title}; })()`))
	if !regexp.MustCompile(`^(just now|\d+ s ago)$`).MatchString(w.Text) || !regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$`).MatchString(w.Title) {
		t.Fatalf("a row made seconds ago reads %+v, want a relative time titled with the exact UTC time", w)
	}
	// app.js computes the relative text of any <time data-ago> it finds.
	br.do("add a time three hours ago", chromedp.Evaluate[chromedp.Void](`(() => { const e = document.createElement("time");
		e.id = "probe"; e.dataset.ago = ""; e.dateTime = new Date(Date.now() - 3*3600*1000 - 5000).toISOString(); document.body.append(e); })()`))
	br.waitText("app.js to read the probe time", "#probe", "3 h ago")
	br.do("remove the probe", chromedp.Evaluate[chromedp.Void](`document.getElementById("probe").remove()`))

	// The list refreshes itself: a new row and the chips' counts arrive in
	// this same document (a reload would drop the marker).
	br.do("mark the document", chromedp.Evaluate[chromedp.Void](`window.outboxMarker = "same document"`))
	if got := br.text(`[data-count="Delivered"]`); got != "2" {
		t.Fatalf("the Delivered chip counts %q, want 2", got)
	}
	later := c.send("ok", "Boiler 2 restarted")[0]
	br.waitRow("the new row to appear without a reload", later, true)
	br.waitText("the Delivered chip to count the new row", `[data-count="Delivered"]`, "3")
	if m := run(br, "read the marker", chromedp.Evaluate[string](`window.outboxMarker || ""`)); m != "same document" {
		t.Fatal("the page reloaded to show the new row: the list must refresh in place")
	}
	if st := br.text("[data-live-status]"); !strings.Contains(st, "live, updated") {
		t.Errorf("the live status reads %q", st)
	}

	// A ticked row holds the list still until it is cleared.
	box := fmt.Sprintf(`tr[data-id=%q] input[name="id"]`, parked[0])
	br.do("tick the parked row", chromedp.Click(chromedp.CSS(box)))
	held := c.send("ok", "Chiller 1 offline")[0]
	br.waitText("the refresh to pause", "[data-live-status]", "· paused: rows selected")
	if slices.Contains(rowIDs(br.rowsNow()), held) {
		t.Fatal("the list refreshed under a ticked row")
	}
	if on := run(br, "read the box", chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector('%s').checked`, box))); !on {
		t.Fatal("the refresh cleared the operator's selection")
	}
	br.do("clear the tick", chromedp.Click(chromedp.CSS(box)))
	br.waitRow("the held row to appear once the tick is cleared", held, true)
	br.screenshot("notifications-list-live.png")

	// The Created header sorts oldest first (and back).
	br.submit("sort oldest first", "table.rows th a.sort")
	if loc := br.location(); !strings.Contains(loc, "order=oldest") {
		t.Fatalf("the sorted list is %s, want order=oldest", loc)
	}
	all := append(append(slices.Clone(ok), parked...), later, held)
	if got := rowIDs(br.rows()); !slices.Equal(got, all) {
		t.Fatalf("oldest first the list reads %v, want %v", got, all)
	}
	br.submit("sort newest first", "table.rows th a.sort")
	slices.Reverse(all)
	if got := rowIDs(br.rows()); !slices.Equal(got, all) {
		t.Fatalf("newest first the list reads %v, want %v", got, all)
	}

	// The exact time shown on hover, typed into From as shown, filters.
	shown := strings.TrimSuffix(run(br, "read the held row's time", chromedp.Evaluate[string](
		fmt.Sprintf(`document.querySelector('tr[data-id=%q] time').title`, held))), " UTC")
	br.do("type the time into From", chromedp.SendKeys(chromedp.CSS(`form.filters input[name="from"]`), shown))
	br.submit("filter from that time", `form.filters button[type="submit"]`)
	if got := br.inputValue(`form.filters input[name="from"]`); got != shown {
		t.Errorf("the From field shows %q after filtering, want %q as typed", got, shown)
	}
	if got := rowIDs(br.rows()); !slices.Contains(got, held) || slices.Contains(got, ok[0]) {
		t.Errorf("from %s the list reads %v: want the held row and not the first", shown, got)
	}

	// A parked row's detail names the failed target and its error first.
	br.open("/notifications/" + parked[0])
	br.waitVisible("section.failed-targets")
	if got := br.text("section.failed-targets li"); !strings.HasPrefix(got, "typo@exmaple.com Failed 550 5.1.1 mailbox unavailable") {
		t.Errorf("the failed targets read %q, want the refused address first with its error", got)
	}
	if order := run(br, "read the order of the boxes", chromedp.Evaluate[[]string](`Array.from(
		document.querySelectorAll("main .failed-targets, main div.error"), (e) => e.className)`)); len(order) == 0 || order[0] != "error failed-targets" {
		t.Errorf("the boxes read %v: the failed targets come first", order)
	}
	br.screenshot("notification-detail-parked.png")

	// The bulk confirmation restates its filter.
	br.open("/notifications?list=bounces&site=" + sitePlant1)
	br.submit("discard all matching", `#bulk button[formaction="/notifications/discard"][value="filter"]`)
	words := run(br, "read the filter words", chromedp.Evaluate[[]string](`Array.from(
		document.querySelectorAll(".filter-words li"), (li) => li.textContent)`))
	for _, want := range []string{"status is Parked", `site is "plant-1"`, `list is "bounces"`} {
		if !slices.Contains(words, want) {
			t.Errorf("the confirmation restates %q, want %q among them", words, want)
		}
	}
	br.screenshot("bulk-confirmation-filter.png")

	// A Retrying row can be retried now, then parked.
	flaky := c.send("flaky", "Conveyor 5 jammed")[0]
	br.open("/notifications/" + flaky)
	if st := br.text(".detail-head .pill"); st != "Retrying" {
		t.Fatalf("the flaky row is %s, want Retrying", st)
	}
	br.screenshot("notification-detail-retrying.png")
	br.submit("retry now", `form[action="/notifications/retry-now"] button`)
	if flash := br.text(".flash"); flash != "1 notification retried now." {
		t.Fatalf("the flash says %q", flash)
	}
	if got := br.text("table.history tbody tr:last-child"); !strings.Contains(got, "Retried") || !strings.Contains(got, pageAdmin) {
		t.Errorf("the history's last row reads %q, want the admin's Retried", got)
	}
	br.submit("park", `form[action="/notifications/park"] button`)
	if st := br.text(".detail-head .pill"); st != "Parked" {
		t.Fatalf("after Park the row is %s", st)
	}
	br.checkQuiet()
}

// waitText waits until the text of sel is want, without navigating.
func (b *browser) waitText(what, sel, want string) {
	b.t.Helper()
	waittest.For(b.t, settleTimeout, what, func() (bool, string) {
		got := run(b, "read "+sel, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, sel)))
		return strings.TrimSpace(got) == want, fmt.Sprintf("%s reads %q", sel, got)
	})
}

// waitRow waits until the row id is listed (or not), without navigating.
func (b *browser) waitRow(what, id string, listed bool) {
	b.t.Helper()
	waittest.For(b.t, settleTimeout, what, func() (bool, string) {
		ids := rowIDs(b.rowsNow())
		return slices.Contains(ids, id) == listed, fmt.Sprintf("rows %v", ids)
	})
}

// inputValue is the value of the input sel.
func (b *browser) inputValue(sel string) string {
	b.t.Helper()
	return run(b, "read "+sel, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q).value`, sel)))
}
