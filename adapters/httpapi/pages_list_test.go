package httpapi_test

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/httpapi"
	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/human"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/storetest"
	"github.com/siteline/outbox/ports/waittest"
)

// TestListChipsCountEachStatus: each status chip shows how many rows the
// filter would list with that status, whatever statuses are ticked.
func TestListChipsCountEachStatus(t *testing.T) {
	e := newEnv(t)
	parked := e.submit("bad", "parked one", "parked two")
	delivered := e.submit("ok", "delivered one", "delivered two", "delivered three")
	e.waitStatus(ports.StatusParked, parked...)
	e.waitStatus(ports.StatusDelivered, delivered...)
	c := e.loginBrowser("viewer")
	for _, tc := range []struct {
		query string
		want  map[string]string
	}{
		{"", map[string]string{"Pending": "0", "Retrying": "0", "Delivered": "3", "Parked": "2", "Discarded": "0"}},
		// The ticked status does not narrow the counts; the other fields do.
		{"?status=Parked", map[string]string{"Delivered": "3", "Parked": "2"}},
		{"?status=Parked&site=plant-1", map[string]string{"Delivered": "3", "Parked": "2"}},
		{"?status=Parked&site=plant-2", map[string]string{"Delivered": "0", "Parked": "0"}},
		// No index answers a list, type or keyword with the status: the
		// chips show no counts rather than read every matching row.
		{"?status=Parked&list=ok", map[string]string{}},
		{"?q=two", map[string]string{}},
		{"?type=email", map[string]string{}},
	} {
		code, body := e.get(c, "/notifications"+tc.query)
		if code != http.StatusOK {
			t.Fatalf("%s: %d", tc.query, code)
		}
		got := chipCounts(body)
		for st, n := range tc.want {
			if got[st] != n {
				t.Errorf("%q: chip %s shows %q, want %s (chips %v)", tc.query, st, got[st], n, got)
			}
		}
		if len(tc.want) == 0 && (len(got) != 0 || !strings.Contains(body, "(counted without a list, type or keyword filter)")) {
			t.Errorf("%q: chips %v, want none counted and the legend saying why", tc.query, got)
		}
	}
}

// TestListChipsCapTheirCounts: a chip counts up to 10,000 rows and shows
// "10 000+" above, with the cap in its title; below the cap it is exact.
func TestListChipsCapTheirCounts(t *testing.T) {
	e := newEnv(t)
	ns := make([]ports.Notification, 0, 10_001+3)
	for i := range cap(ns) {
		n := storetest.NewNotification(time.Now().UTC().Add(-time.Hour).Add(time.Duration(i) * time.Millisecond))
		n.Status, n.LastError, n.SourceSite = ports.StatusParked, "list unknown", "many"
		if i >= 10_001 {
			n.SourceSite = "few"
		}
		ns = append(ns, n)
	}
	if _, err := e.store.Insert(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	c := e.loginBrowser("viewer")
	_, body := e.get(c, "/notifications")
	ten := human.Thousands(10_000)
	if want := `<b class="count" data-count="Parked" title="more than ` + ten + `">` + ten + `+</b>`; !strings.Contains(body, want) {
		t.Errorf("the Parked chip of 10,004 rows is not %s:\n%s", want, body)
	}
	_, body = e.get(c, "/notifications?site=few")
	if got := chipCounts(body); got["Parked"] != "3" {
		t.Errorf("the Parked chip of 3 rows shows %q (chips %v)", got["Parked"], got)
	}
}

// chipCounts reads the count of each status chip of a list page.
func chipCounts(page string) map[string]string {
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`<b class="count" data-count="(\w+)">([0-9,]+)</b>`).FindAllStringSubmatch(page, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// TestListFiltersOfferTheKnownValues: the site, list and type fields offer
// the sites that sent, the directory's lists and the channel types in use,
// and still take any text.
func TestListFiltersOfferTheKnownValues(t *testing.T) {
	e := newEnv(t)
	e.waitStatus(ports.StatusDelivered, e.submit("ok", "from plant-1")...)
	c := e.loginBrowser("viewer")
	_, body := e.get(c, "/notifications")
	for id, want := range map[string][]string{
		"known-sites": {"plant-1"},
		"known-lists": {"bad", "ok"},
		"known-types": {"email"},
	} {
		if got := datalist(body, id); !slices.Equal(got, want) {
			t.Errorf("datalist %s offers %q, want %q", id, got, want)
		}
		if !strings.Contains(body, `list="`+id+`"`) {
			t.Errorf("no field uses the datalist %s", id)
		}
	}
	// A value nobody knows is still a filter (it matches nothing).
	code, body := e.get(c, "/notifications?site=plant-99&list=nope")
	if code != http.StatusOK || !strings.Contains(body, "No notification matches") || !strings.Contains(body, `value="plant-99"`) {
		t.Fatalf("free text: %d\n%s", code, body)
	}
}

// datalist is the option values of the datalist id on page.
func datalist(page, id string) []string {
	m := regexp.MustCompile(`<datalist id="` + id + `">(.*?)</datalist>`).FindStringSubmatch(page)
	if m == nil {
		return nil
	}
	var out []string
	for _, o := range regexp.MustCompile(`<option value="([^"]*)">`).FindAllStringSubmatch(m[1], -1) {
		out = append(out, html.UnescapeString(o[1]))
	}
	return out
}

// TestListTimesRelativeAndFieldsTakeThemAsShown: a row's time reads
// relative with the exact UTC time on hover, and that exact time typed into
// the From and To fields as shown filters by it: the fields are text in
// the list's own format, which the server reads.
func TestListTimesRelativeAndFieldsTakeThemAsShown(t *testing.T) {
	e := newEnv(t)
	id := e.submit("ok", "timed")[0]
	e.waitStatus(ports.StatusDelivered, id)
	c := e.loginBrowser("viewer")
	_, body := e.get(c, "/notifications")
	m := regexp.MustCompile(`<time datetime="([^"]+)" title="(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC" data-ago>([^<]+)</time>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no relative time with its exact UTC title:\n%s", body)
	}
	if at, err := time.Parse(time.RFC3339Nano, m[1]); err != nil || time.Since(at) > time.Minute || !strings.HasPrefix(m[2], at.Format("2006-01-02 15:04:05")) {
		t.Fatalf("datetime %q (%v), title %q", m[1], err, m[2])
	}
	if m[3] != "just now" && !strings.HasSuffix(m[3], " s ago") {
		t.Errorf("a row made seconds ago reads %q", m[3])
	}
	shown := m[2]
	for _, tc := range []struct {
		query string
		found bool
	}{
		{"from=" + url.QueryEscape(shown), true},              // as shown, to the second
		{"to=" + url.QueryEscape(shown), false},               // before it, exclusive
		{"from=" + url.QueryEscape(shown[:16]), true},         // seconds optional
		{"from=" + url.QueryEscape(shown[:10]), true},         // a date
		{"from=" + strings.Replace(shown, " ", "T", 1), true}, // the T form
	} {
		code, page := e.get(c, "/notifications?"+tc.query)
		if code != http.StatusOK || strings.Contains(page, `data-id="`+id+`"`) != tc.found {
			t.Errorf("%s: %d, row listed %v, want %v", tc.query, code, !tc.found, tc.found)
		}
	}
	// The field shows the filter's time as the rows do, in a text field
	// that the browser neither reformats nor refuses.
	_, page := e.get(c, "/notifications?from="+url.QueryEscape(shown))
	if !regexp.MustCompile(`<input type="text" name="from" value="` + shown + `"`).MatchString(page) {
		t.Errorf("the From field does not show %q as typed:\n%s", shown, page)
	}
	if strings.Contains(page, "datetime-local") {
		t.Error("a datetime-local field is left: it shows the browser's locale format, not the list's")
	}
	code, page := e.get(c, "/notifications?from=02%2F01%2F2026")
	if code != http.StatusBadRequest || !strings.Contains(page, "UTC as the page shows it, 2026-01-02 15:04:05") {
		t.Errorf("a time in another format: %d, want 400 saying the format", code)
	}
}

// TestListSortsByCreationBothWays: the Created header toggles newest and
// oldest first, and each order pages by its cursor.
func TestListSortsByCreationBothWays(t *testing.T) {
	e := newEnv(t)
	var ids []string
	for _, s := range []string{"first", "second", "third"} {
		id := e.submit("ok", s)[0]
		e.waitStatus(ports.StatusDelivered, id)
		ids = append(ids, id)
	}
	c := e.loginBrowser("viewer")
	rowIDs := func(page string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`<tr class="[^"]*" data-id="([^"]+)"`).FindAllStringSubmatch(page, -1) {
			out = append(out, m[1])
		}
		return out
	}
	_, page := e.get(c, "/notifications?list=ok")
	newest := slices.Clone(ids)
	slices.Reverse(newest)
	if got := rowIDs(page); !slices.Equal(got, newest) {
		t.Fatalf("default order %v, want newest first %v", got, newest)
	}
	link := regexp.MustCompile(`<a class="sort" href="([^"]+)"`).FindStringSubmatch(page)
	if link == nil || !strings.Contains(html.UnescapeString(link[1]), "order=oldest") || !strings.Contains(html.UnescapeString(link[1]), "list=ok") {
		t.Fatalf("the Created header links to %v, want the same filter oldest first", link)
	}
	_, page = e.get(c, html.UnescapeString(link[1])+"&limit=2")
	if got := rowIDs(page); !slices.Equal(got, ids[:2]) || !strings.Contains(page, "oldest first") {
		t.Fatalf("oldest first, page 1: %v, want %v", got, ids[:2])
	}
	next := regexp.MustCompile(`<a class="button" href="([^"]+)" rel="next">`).FindStringSubmatch(page)
	if next == nil || !strings.Contains(next[1], "order=oldest") {
		t.Fatalf("the next page link %v keeps no order", next)
	}
	_, page = e.get(c, html.UnescapeString(next[1]))
	if got := rowIDs(page); !slices.Equal(got, ids[2:]) {
		t.Fatalf("oldest first, page 2: %v, want %v", got, ids[2:])
	}
	// The filter form keeps the order.
	if !strings.Contains(page, `<input type="hidden" name="order" value="oldest">`) {
		t.Error("the filter form drops the order")
	}
	code, page := e.get(c, "/notifications?order=sideways")
	if code != http.StatusBadRequest || !strings.Contains(page, "order: &#34;sideways&#34; is neither newest nor oldest") {
		t.Errorf("bad order: %d\n%s", code, page)
	}
	code, _ = e.get(c, "/notifications?order="+strings.Repeat("x", 5000))
	if code != http.StatusBadRequest {
		t.Errorf("oversize order: %d", code)
	}
}

// TestDiscardedRowsShowTheirOldErrorMuted: a discarded row's error is no
// alarm: muted, and labelled as the last error before the discard, on the
// list and the detail.
func TestDiscardedRowsShowTheirOldErrorMuted(t *testing.T) {
	e := newEnv(t)
	id := e.submit("bad", "to discard")[0]
	e.waitStatus(ports.StatusParked, id)
	op := e.loginBrowser("operator")
	if code, _, _ := e.post(op, "/notifications/discard", url.Values{"id": {id}, "scope": {"ids"}}); code != http.StatusSeeOther {
		t.Fatalf("discard: %d", code)
	}
	e.waitStatus(ports.StatusDiscarded, id)
	_, list := e.get(op, "/notifications")
	if !strings.Contains(list, `<td class="err past" title="Last error before the discard: 550 mailbox unavailable">`) {
		t.Errorf("the list shows the discarded row's error as an alarm:\n%s", list)
	}
	_, detail := e.get(op, "/notifications/"+id)
	if !strings.Contains(detail, `<div class="past-error">Last error before the discard: 550 mailbox unavailable</div>`) ||
		strings.Contains(detail, `<div class="error">Last error`) {
		t.Errorf("the detail shows the discarded row's error as an alarm:\n%s", detail)
	}
}

// TestBulkConfirmationRestatesTheFilter: the confirmation of a bulk action
// by filter names every field of the filter it acts on, its times as the
// filter's fields show them (a fraction of a second kept).
func TestBulkConfirmationRestatesTheFilter(t *testing.T) {
	e := newEnv(t)
	e.waitStatus(ports.StatusParked, e.submit("bad", "pump down")...)
	c := e.loginBrowser("operator")
	code, _, page := e.post(c, "/notifications/retry", url.Values{"scope": {"filter"}, "list": {"bad"}, "site": {"plant-1"},
		"type": {"email"}, "q": {"pump"}, "from": {"2020-01-02 03:04:05"}, "to": {"2099-01-01"}, "updated_from": {"2020-01-01T00:00:00.25Z"}})
	if code != http.StatusOK {
		t.Fatalf("confirmation: %d\n%s", code, page)
	}
	page = html.UnescapeString(page)
	for _, want := range []string{
		"It acts on the rows where:",
		"<li>status is Parked</li>",
		`<li>type is "email"</li>`,
		`<li>site is "plant-1"</li>`,
		`<li>list is "bad"</li>`,
		"<li>created at or after 2020-01-02 03:04:05 UTC</li>",
		"<li>created before 2099-01-01 00:00:00 UTC</li>",
		"<li>last changed at or after 2020-01-01 00:00:00.25 UTC</li>",
		"<li>parked before this count (20", // the count's instant
		`<li>subject contains "pump" (any letter case)</li>`,
		"1 notification match",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the confirmation lacks %q:\n%s", want, page)
		}
	}
}

// TestSiteCallsChipsCountAndSitesOffered: the Site calls list counts each
// status chip for the other filters, offers the sites that reported, and
// shows its times relative.
func TestSiteCallsChipsCountAndSitesOffered(t *testing.T) {
	e := newEnv(t)
	e.report(siteA, siteOp("erp", "a", ports.OpParked, "503"), siteOp("erp", "b", ports.OpRetrying, "refused"),
		siteOp("mes", "c", ports.OpRetrying, "refused"))
	e.syncNode(siteA, "node-a", 3)
	c := e.loginBrowser("viewer")
	_, body := e.get(c, "/site-calls?status=Parked&target=erp")
	got := chipCounts(body)
	for st, n := range map[string]string{"Parked": "1", "Retrying": "1", "Delivered": "0"} {
		if got[st] != n {
			t.Errorf("chip %s shows %q, want %s (chips %v)", st, got[st], n, got)
		}
	}
	if sites := datalist(body, "known-sites"); !slices.Contains(sites, siteA) {
		t.Errorf("the site field offers %q, want %s among them", sites, siteA)
	}
	if !strings.Contains(body, "<time datetime=") || !strings.Contains(body, `<div id="live" data-refresh="15">`) {
		t.Errorf("the site calls list has no relative times or does not refresh itself:\n%s", body)
	}
}

// TestSiteCallBulkConfirmationRestatesTheFilter: the site calls' bulk
// confirmation names every field of its filter too.
func TestSiteCallBulkConfirmationRestatesTheFilter(t *testing.T) {
	e := newEnv(t)
	e.report(siteA, siteOp("erp", "a", ports.OpParked, "503"))
	e.syncNode(siteA, "node-a", 1)
	c := e.loginBrowser("operator")
	code, _, page := e.post(c, "/site-calls/discard", url.Values{"scope": {"filter"}, "site": {siteA}, "target": {"erp"}, "q": {"503"}})
	if code != http.StatusOK {
		t.Fatalf("confirmation: %d\n%s", code, page)
	}
	page = html.UnescapeString(page)
	for _, want := range []string{"<li>status is Parked</li>", `<li>site is "plant-1"</li>`, `<li>target is "erp"</li>`,
		"<li>reported to central before this count (20", `contains "503" (any letter case)</li>`, "1 site call match"} {
		if !strings.Contains(page, want) {
			t.Errorf("the confirmation lacks %q:\n%s", want, page)
		}
	}
}

// TestRetryingRowRetriedNowThenParked: an operator retries a Retrying
// notification now from its detail (it is tried again at once, its retry
// count growing), then parks it; a viewer, a post from another origin, a
// bad id and an oversize form are refused.
func TestRetryingRowRetriedNowThenParked(t *testing.T) {
	e := newEnv(t)
	if code, body := e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/lists/flaky",
		api.List{Name: "flaky", Type: "email", Targets: []string{"ops@example.com"}}); code != http.StatusOK {
		t.Fatalf("put list: %d %s", code, body)
	}
	id := e.submit("flaky", "keeps failing")[0]
	e.waitStatus(ports.StatusRetrying, id)
	detail := "/notifications/" + id
	retries := func() int {
		d, err := e.svc.Notification(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return d.RetryCount
	}
	before := retries()

	viewer := e.loginBrowser("viewer")
	_, body := e.get(viewer, detail)
	if strings.Contains(body, "/notifications/retry-now") || strings.Contains(body, "/notifications/park") {
		t.Error("a viewer is offered Retry now or Park")
	}
	if code, _, _ := e.post(viewer, "/notifications/park", url.Values{"id": {id}}); code != http.StatusForbidden {
		t.Errorf("a viewer's Park: %d", code)
	}
	op := e.loginBrowser("operator")
	_, body = e.get(op, detail)
	if !strings.Contains(body, `action="/notifications/retry-now"`) || !strings.Contains(body, `action="/notifications/park"`) {
		t.Fatalf("an operator is not offered Retry now and Park on a Retrying row:\n%s", body)
	}
	req := e.request("POST", "/notifications/park", nil)
	req.Body = ioNopCloser(url.Values{"id": {id}}.Encode())
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if code, _ := e.send(op, req); code != http.StatusForbidden {
		t.Errorf("cross-origin Park: %d", code)
	}
	if code, _, page := e.post(op, "/notifications/park", url.Values{"id": {"not-a-uuid"}}); code != http.StatusBadRequest || !strings.Contains(page, "not a UUID") {
		t.Errorf("a bad id: %d", code)
	}
	if code, _, _ := e.post(op, "/notifications/retry-now", url.Values{"id": {strings.Repeat("x", 2<<20)}}); code != http.StatusRequestEntityTooLarge {
		t.Errorf("an oversize form: %d", code)
	}
	if code, loc, _ := e.post(op, "/notifications/park", url.Values{"return": {detail}}); code != http.StatusSeeOther || loc != detail {
		t.Errorf("nothing selected: %d %s", code, loc)
	}
	e.waitStatus(ports.StatusRetrying, id) // nothing refused moved it

	code, loc, _ := e.post(op, "/notifications/retry-now", url.Values{"id": {id}, "return": {detail}})
	if code != http.StatusSeeOther || loc != detail {
		t.Fatalf("retry now: %d %s", code, loc)
	}
	if _, body := e.get(op, loc); !strings.Contains(body, "1 notification retried now.") {
		t.Errorf("no flash after Retry now:\n%s", body)
	}
	waittest.For(t, 10*time.Second, "the row tried again at once", func() (bool, string) {
		n := retries()
		return n > before, fmt.Sprintf("retry count %d", n)
	})
	e.waitStatus(ports.StatusRetrying, id)
	if code, _, _ := e.post(op, "/notifications/park", url.Values{"id": {id}, "return": {detail}}); code != http.StatusSeeOther {
		t.Fatalf("park: %d", code)
	}
	e.waitStatus(ports.StatusParked, id)
	_, body = e.get(op, detail)
	if !strings.Contains(body, "1 notification parked.") || !strings.Contains(body, `action="/notifications/retry"`) {
		t.Errorf("after Park the detail has no flash or no Retry:\n%s", body)
	}
	// Parked, it is no longer Retrying: Retry now is refused with the reason.
	e.post(op, "/notifications/retry-now", url.Values{"id": {id}, "return": {detail}})
	if _, body := e.get(op, detail); !strings.Contains(body, "No notification was retried now; 1 refused: notification "+id+" is Parked; only Retrying notifications can be retried now") {
		t.Errorf("Retry now of a parked row:\n%s", body)
	}
}

// TestListRefreshSetting: the lists refresh as often as Config.ListRefresh
// says, and not at all with ListRefreshOff (no data-refresh for app.js).
func TestListRefreshSetting(t *testing.T) {
	for refresh, want := range map[time.Duration]string{
		time.Minute:            `<div id="live" data-refresh="60">`,
		httpapi.ListRefreshOff: `<div id="live">`,
	} {
		e := newEnvWith(t, func(c *httpapi.Config) { c.ListRefresh = refresh })
		c := e.loginBrowser("viewer")
		for _, path := range []string{"/notifications", "/site-calls"} {
			if _, body := e.get(c, path); !strings.Contains(body, want) {
				t.Errorf("ListRefresh %s: %s lacks %s", refresh, path, want)
			}
		}
	}
}
