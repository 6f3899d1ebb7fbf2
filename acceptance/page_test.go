package acceptance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"golang.org/x/crypto/bcrypt"

	"github.com/siteline/outbox/adapters/httpapi"
	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/adapters/sitelink"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/clocktest"
	"github.com/siteline/outbox/ports/waittest"
)

// This file drives the operator page in a real browser: the page of the real central
// binary, driven through headless Chromium (chromedp) the way an operator
// uses it.

// Bounds of the browser test. They are deadlines, not waits.
const (
	// browserTimeout bounds the whole browser session.
	browserTimeout = 4 * time.Minute
	// stepTimeout bounds one browser step (a navigation, a click, a read).
	stepTimeout = 30 * time.Second
	// settleTimeout bounds the wait for a notification's status.
	settleTimeout = time.Minute
)

// The operator page test's admin account, made by central from http.admin.
const (
	pageAdmin    = "admin"
	pagePassword = "page-test password 7f3a91"
)

// TestOperatorPageInChromium drives the page end to end: the real central binary (SQLite,
// the built-in email channel in its plugin process, the embedded SMTP capture
// refusing one domain, the site link, the page) fed through the site link,
// and its page driven in headless Chromium: log in through the form, read
// the KPI tiles, filter by status, read a detail's attempt history, retry a
// parked row from the list, discard by filter after the confirmation, and see
// a subject holding markup shown as text. Screenshots of the list and of a
// detail are written for reviewers.
func TestOperatorPageInChromium(t *testing.T) {
	exe := browserPath(t)
	c := startPageCentral(t)

	okIDs := c.submit("ok", "Pump 3 pressure low", "Tank 7 level high", "Boiler 2 restarted")
	parked := c.submit("bounces", "Valve 12 stuck open", "Compressor 4 overheating", "Chiller 1 offline")
	// Inline script is also refused by the page's CSP; what this asserts is
	// that the text never becomes markup at all.
	const evil = `<script>alert("xss")</script><img src=x onerror="alert(1)"> Boiler 9 <b>bold</b>`
	evilID := c.submit("ok", evil)[0]
	c.waitStatus(ports.StatusDelivered, append(okIDs, evilID)...)
	c.waitStatus(ports.StatusParked, parked...)

	br := newBrowser(t, exe, c.base)

	// Log in through the form: the page sends a stranger to it first.
	br.open("/notifications")
	if loc := br.location(); !strings.Contains(loc, "/login?next=") {
		t.Fatalf("without a session the page is %s, want the login form", loc)
	}
	br.do("fill in the login form",
		chromedp.SendKeys(chromedp.CSS(`form.login input[name="name"]`), pageAdmin),
		chromedp.SendKeys(chromedp.CSS(`form.login input[name="password"]`), pagePassword))
	br.submit("log in", `form.login button[type="submit"]`)
	if loc := br.location(); !strings.HasSuffix(loc, "/notifications") {
		t.Fatalf("after the login the page is %s, want /notifications", loc)
	}
	if who := br.text("header .who"); !strings.Contains(who, pageAdmin) || !strings.Contains(who, "Log out") {
		t.Fatalf("the header shows %q, want %s logged in", who, pageAdmin)
	}

	// The KPI tiles count what central holds.
	if got := br.text(`[data-kpi="parked"] .value`); got != "3" {
		t.Fatalf("Parked tile shows %q, want 3", got)
	}
	if got := br.text(`[data-kpi="queue_depth"] .value`); got != "0" {
		t.Fatalf("Queue depth tile shows %q, want 0", got)
	}
	if rows := br.rows(); len(rows) != 7 {
		t.Fatalf("the unfiltered list shows %d rows, want 7: %+v", len(rows), rows)
	}
	br.screenshot("operator-page-list.png")

	// Filter by status: tick Parked, submit; only the parked rows are listed.
	br.do("tick Parked", chromedp.Click(chromedp.CSS(`form.filters input[name="status"][value="Parked"]`)))
	br.submit("filter", `form.filters button[type="submit"]`)
	if loc := br.location(); !strings.Contains(loc, "status=Parked") {
		t.Fatalf("after filtering the page is %s, want status=Parked in the URL", loc)
	}
	rows := br.rows()
	if ids := rowIDs(rows); !sameSet(ids, parked) {
		t.Fatalf("the Parked filter lists %+v, want exactly the parked %v", rows, parked)
	}
	for _, r := range rows {
		if r.Status != "Parked" {
			t.Fatalf("the Parked filter lists a %s row: %+v", r.Status, r)
		}
	}
	if on := run(br, "read the Parked box", chromedp.Evaluate[bool](
		`document.querySelector('form.filters input[name="status"][value="Parked"]').checked`)); !on {
		t.Fatal("the Parked box is not ticked on the filtered page")
	}

	// A detail page shows the attempt history: an Attempted row, Permanent,
	// with the SMTP server's refusal.
	target := parked[0]
	br.submit("open a parked row", fmt.Sprintf(`tr[data-id=%q] td.subject a`, target))
	br.waitVisible("table.history")
	hist := br.history()
	if !slices.ContainsFunc(hist, func(h historyRow) bool {
		return h.Event == "Attempted" && h.Outcome == "Permanent" && strings.Contains(h.Error, "550")
	}) {
		t.Fatalf("the history of a parked row has no Attempted/Permanent row with the 550: %+v", hist)
	}
	if st := br.text(".detail-head .pill"); st != "Parked" {
		t.Fatalf("the detail shows status %q, want Parked", st)
	}
	// The list's one address was refused: the targets table shows it
	// Failed, as the list holds it.
	fate := run(br, "read the targets", chromedp.Evaluate[[]string](`Array.from(
		document.querySelectorAll("table.targets tbody tr"),
		(tr) => tr.cells[0].textContent.trim() + " " + tr.cells[1].textContent.trim())`))
	if !slices.Equal(fate, []string{"nobody@bounce.example Failed"}) {
		t.Fatalf("the targets table reads %q, want the refused address Failed", fate)
	}
	br.screenshot("operator-page-detail.png")

	// Retry one parked row from the list. The list's address is made
	// deliverable first (as an admin would through the API), so the retried
	// row ends Delivered and visibly leaves the parked list.
	c.putList("bounces", "rescued@example.com")
	br.open("/notifications?status=Parked")
	br.do("select the row", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-id=%q] input[name="id"]`, target))))
	br.submit("retry selected", `#bulk button[formaction="/notifications/retry"][value="ids"]`)
	if flash := br.text(".flash"); flash != "1 notification retried." {
		t.Fatalf("the flash says %q, want \"1 notification retried.\"", flash)
	}
	br.waitFor("the retried row leaves the parked list", "/notifications?status=Parked", func() (bool, string) {
		ids := rowIDs(br.rows())
		return !slices.Contains(ids, target), fmt.Sprintf("parked list %v", ids)
	})
	br.waitFor("the retried row is Delivered", "/notifications/"+target, func() (bool, string) {
		st := br.text(".detail-head .pill")
		return st == "Delivered", "status " + st
	})
	if hist := br.history(); !slices.ContainsFunc(hist, func(h historyRow) bool {
		return h.Event == "Retried" && h.Actor == pageAdmin
	}) {
		t.Fatalf("the history has no Retried event by %s: %+v", pageAdmin, hist)
	}
	br.open("/notifications")
	if got := br.text(`[data-kpi="parked"] .value`); got != "2" {
		t.Fatalf("Parked tile shows %q after the retry, want 2", got)
	}

	// Discard by filter: the list filter, "Discard all matching…", the
	// confirmation shows the count, confirm; the rows are Discarded.
	br.open("/notifications?list=bounces")
	br.submit("discard all matching", `#bulk button[formaction="/notifications/discard"][value="filter"]`)
	if msg := br.text("section.confirm p"); !strings.Contains(msg, "2 notifications match now") {
		t.Fatalf("the confirmation says %q, want the count of 2", msg)
	}
	if btn := br.text("section.confirm button"); btn != "Discard 2 notifications" {
		t.Fatalf("the confirm button says %q", btn)
	}
	if n := len(br.rowsNow()); n != 0 {
		t.Fatalf("the confirmation page lists %d rows", n)
	}
	c.waitStatus(ports.StatusParked, parked[1:]...) // nothing moved before the confirmation
	br.submit("confirm the discard", `section.confirm button[type="submit"]`)
	if flash := br.text(".flash"); flash != "2 notifications discarded." {
		t.Fatalf("the flash says %q, want \"2 notifications discarded.\"", flash)
	}
	if loc := br.location(); !strings.Contains(loc, "list=bounces") {
		t.Fatalf("after the discard the page is %s, want the filtered list back", loc)
	}
	want := map[string]string{target: "Delivered", parked[1]: "Discarded", parked[2]: "Discarded"}
	got := map[string]string{}
	for _, r := range br.rowsNow() {
		got[r.ID] = r.Status
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the discard the list shows %v, want %v", got, want)
	}
	c.waitStatus(ports.StatusDiscarded, parked[1:]...)
	if got := br.text(`[data-kpi="parked"] .value`); got != "0" {
		t.Fatalf("Parked tile shows %q after the discard, want 0", got)
	}

	// A subject holding markup is shown as text, on the list and the
	// detail, and nothing in it runs.
	br.open("/notifications?list=ok")
	cell := fmt.Sprintf(`tr[data-id=%q] td.subject`, evilID)
	if txt := br.textContent(cell); txt != evil {
		t.Fatalf("the subject cell reads %q, want the text %q", txt, evil)
	}
	if n := run(br, "count elements made from the subject", chromedp.Evaluate[int](
		`document.querySelectorAll('td.subject script, td.subject img, td.subject b').length`)); n != 0 {
		t.Fatalf("the subject became %d elements on the list", n)
	}
	br.open("/notifications/" + evilID)
	if txt := br.textContent(".detail-head h1"); txt != evil {
		t.Fatalf("the detail heading reads %q, want the text %q", txt, evil)
	}
	if n := run(br, "count elements made from the subject", chromedp.Evaluate[int](
		`document.querySelectorAll('.detail-head h1 *, script:not([src])').length`)); n != 0 {
		t.Fatalf("the subject became %d elements on the detail", n)
	}
	br.checkQuiet()
}

// TestPageShowsEachTargetInChromium: the detail of a notification parked
// because one target of three refused it shows, in headless Chromium, each
// target with its own status chip, attempts and error, "2 of 3 delivered",
// and the targets the attempt went to in the history. The page is central's
// handler (httpapi over the real core and the memory store, which keeps
// each target's state) on a loopback server; the channel answers target by
// target and refuses the one address.
func TestPageShowsEachTargetInChromium(t *testing.T) {
	exe := browserPath(t)
	ctx := t.Context()
	store := memstore.New()
	targets := []string{"ops@example.com", "typo@exmaple.com", "env:OUTBOX_PAGER"}
	dir, err := memdir.New([]ports.List{{Name: "pumps", Type: "email", Targets: targets}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	svc, err := core.New(core.Config{}, core.Deps{Store: store, Audit: store, Directory: dir, Clock: clocktest.New(at),
		Channels: ports.ChannelMap{"email": refuseTarget{"typo@exmaple.com"}}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	srv := servePage(t, svc, store, dir, nil)

	id := uuid.Must(uuid.NewV7()).String()
	if res, err := svc.Submit(ctx, ports.SubmitRequest{Notifications: []ports.Submission{{ID: id, List: "pumps",
		Subject: "Pump 3 pressure low", Body: "Seen at the plant.", SourceSite: sitePlant1, SiteEnqueuedAt: at}}}); err != nil || len(res.Accepted) != 1 {
		t.Fatalf("submit: %v %+v", err, res)
	}
	for {
		n, err := svc.DispatchOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}

	br := newBrowser(t, exe, srv.URL)
	br.open("/login")
	br.do("fill in the login form",
		chromedp.SendKeys(chromedp.CSS(`form.login input[name="name"]`), pageAdmin),
		chromedp.SendKeys(chromedp.CSS(`form.login input[name="password"]`), pagePassword))
	br.submit("log in", `form.login button[type="submit"]`)
	br.open("/notifications/" + id)
	br.waitVisible("table.targets")
	if st := br.text(".detail-head .pill"); st != "Parked" {
		t.Fatalf("the detail shows status %q, want Parked", st)
	}
	if got := br.text("dd.targets-summary"); got != "2 of 3 delivered" {
		t.Errorf("the summary reads %q, want 2 of 3 delivered", got)
	}
	type targetRow struct {
		Target   string `json:"target"`
		Status   string `json:"status"`
		Chip     string `json:"chip"`
		Attempts string `json:"attempts"`
		Error    string `json:"error"`
		At       string `json:"at"`
		Done     string `json:"done"`
	}
	rows := run(br, "read the targets", chromedp.Evaluate[[]targetRow](`Array.from(
		document.querySelectorAll("table.targets tbody tr"),
		(tr) => { const c = Array.from(tr.cells, (td) => td.textContent.trim());
			return {target: c[0], status: c[1], chip: tr.cells[1].querySelector(".pill").className,
				attempts: c[2], error: c[3], at: c[4], done: c[5]}; })`))
	stamp := at.Format("2006-01-02 15:04:05")
	want := []targetRow{
		{Target: targets[0], Status: "Delivered", Chip: "pill Delivered", Attempts: "1", At: stamp, Done: stamp},
		{Target: targets[1], Status: "Failed", Chip: "pill Failed", Attempts: "1", Error: "550 5.1.1 mailbox unavailable", At: stamp, Done: "—"},
		{Target: targets[2], Status: "Delivered", Chip: "pill Delivered", Attempts: "1", At: stamp, Done: stamp},
	}
	if !slices.Equal(rows, want) {
		t.Errorf("the targets table reads\n%+v\nwant\n%+v", rows, want)
	}
	attempt := run(br, "read the attempt's targets", chromedp.Evaluate[[]string](`Array.from(
		document.querySelectorAll("table.history ul.attempt-targets li"), (li) => li.textContent.trim())`))
	wantAttempt := []string{targets[0] + " Success", targets[1] + " Permanent 550 5.1.1 mailbox unavailable", targets[2] + " Success"}
	if !slices.Equal(attempt, wantAttempt) {
		t.Errorf("the history's attempt lists %q, want %q", attempt, wantAttempt)
	}
	if hist := br.history(); !slices.ContainsFunc(hist, func(h historyRow) bool {
		return h.Event == "Attempted" && h.Outcome == "Permanent" && strings.Contains(h.Error, "1 of 3 targets not delivered")
	}) {
		t.Errorf("the history has no Attempted row summarising the one failed target: %+v", hist)
	}
	br.screenshot("operator-page-targets.png")
	br.checkQuiet()
}

// refuseTarget is an email channel that answers target by target: the
// refused address fails for good, every other target is delivered.
type refuseTarget struct{ refused string }

func (c refuseTarget) Deliver(_ context.Context, d ports.Delivery) ports.Result {
	res := ports.Result{Outcome: ports.OutcomePermanent, Targets: make([]ports.TargetResult, len(d.Targets))}
	for i, t := range d.Targets {
		res.Targets[i] = ports.TargetResult{Outcome: ports.OutcomeSuccess}
		if t == c.refused {
			res.Targets[i] = ports.TargetResult{Outcome: ports.OutcomePermanent, Error: "550 5.1.1 mailbox unavailable"}
		}
	}
	return res
}

// browserPath returns the path of a Chromium-family browser, or skips the
// test naming how to get one.
func browserPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium, chromium-browser or google-chrome on PATH: install Debian's chromium package (apt-get install chromium; .ci/test.sh does) to run the browser test")
	return ""
}

// pageCentral is the real `outbox central` process of the page test, and a
// site's client of its link.
type pageCentral struct {
	t          *testing.T
	dir        string
	base       string // the page's URL, http://host:port
	link, smtp string
	client     *sitelink.Client
	*centralProcess
}

// startPageCentral writes central's configuration in a temporary directory
// and starts the test's outbox binary on it: SQLite there, the built-in email
// channel sending to the embedded SMTP capture on a free port, which refuses
// @bounce.example; the list ok (accepted) and bounces (refused); the site
// link for plant-1 by token; the page on a free loopback port with the admin
// from a password file. It returns once the page answers /readyz. The process
// is stopped at the end of the test; its log is printed if the test failed.
func startPageCentral(t *testing.T) *pageCentral {
	t.Helper()
	dir := t.TempDir()
	c := &pageCentral{t: t, dir: dir, link: freeAddr(t), smtp: freeAddr(t)}
	httpAddr := freeAddr(t)
	c.base = "http://" + httpAddr
	for name, content := range map[string]string{"admin.password": pagePassword + "\n", "plant-1.token": tokenPlant1} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	smtpHost, smtpPort, _ := strings.Cut(c.smtp, ":")
	config := fmt.Sprintf(`data_dir: %[1]q
outbox:
  node_id: page-test
  dispatch_interval: 200ms
log:
  level: info
  format: json
lists:
  - {name: ok, type: email, targets: [ops@example.com]}
  - {name: bounces, type: email, targets: [nobody@bounce.example]}
channels:
  - type: email
    settings: {host: %[2]q, port: %[3]q, tls: none, from: outbox@example.com}
smtp_capture:
  addr: %[4]q
  dir: %[5]q
  reject: ["@bounce.example"]
delivery:
  network: {allow: [127.0.0.1]}   # the capture above
http:
  listen: %[6]q
  admin: {name: %[7]s, password: %[8]q}
link:
  listen: %[9]q
  sites:
    - {id: %[10]s, token: %[11]q}
`, filepath.Join(dir, "data"), smtpHost, smtpPort, c.smtp, filepath.Join(dir, "mail"), httpAddr,
		pageAdmin, "file:"+filepath.Join(dir, "admin.password"), c.link, sitePlant1, "file:"+filepath.Join(dir, "plant-1.token"))
	file := filepath.Join(dir, "central.yaml")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}

	c.centralProcess = startCentralProcess(t, testBinary(t), dir, file, childEnv(), c.base+"/readyz")
	client, err := sitelink.Dial(sitelink.ClientConfig{Addr: c.link, Token: tokenPlant1})
	if err != nil {
		t.Fatal(err)
	}
	c.client = client
	t.Cleanup(func() { _ = client.Close() }) // before central stops
	return c
}

// as site plant-1, and returns their ids.
func (c *pageCentral) submit(list string, subjects ...string) []string {
	c.t.Helper()
	subs := make([]ports.Submission, len(subjects))
	ids := make([]string, len(subjects))
	for i, s := range subjects {
		ids[i] = uuid.Must(uuid.NewV7()).String()
		subs[i] = ports.Submission{ID: ids[i], List: list, Subject: s, Body: "Seen at the plant: " + s + ".",
			SourceSite: sitePlant1, SourceInstance: "line-2", SourceScript: "alarms/check", SiteEnqueuedAt: time.Now()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.client.Submit(ctx, ports.SubmitRequest{Site: sitePlant1, Notifications: subs})
	if err != nil || len(res.Accepted) != len(subs) {
		c.t.Fatalf("submit through the link: %v, accepted %d of %d, rejected %+v", err, len(res.Accepted), len(subs), res.Rejected)
	}
	return ids
}

// waitStatus waits until central reports want for every id, asked through
// the site link.
func (c *pageCentral) waitStatus(want ports.Status, ids ...string) {
	c.t.Helper()
	waittest.For(c.t, settleTimeout, fmt.Sprintf("%d notifications %s", len(ids), want), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := c.client.Status(ctx, ports.StatusRequest{IDs: ids})
		if err != nil {
			return false, err.Error()
		}
		for _, id := range ids {
			if st[id] != want {
				return false, fmt.Sprintf("%s is %s", id, st[id])
			}
		}
		return true, ""
	})
}

// putList replaces the targets of list through the JSON API, as the admin.
func (c *pageCentral) putList(list string, targets ...string) {
	c.t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		c.t.Fatal(err)
	}
	hc := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	call := func(method, path string, body any, want int) {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		req, err := http.NewRequest(method, c.base+path, bytes.NewReader(b))
		if err != nil {
			c.t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			c.t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != want {
			var eb api.ErrorBody
			_ = json.NewDecoder(resp.Body).Decode(&eb)
			c.t.Fatalf("%s %s: %s %+v, want %d", method, path, resp.Status, eb.Error, want)
		}
	}
	call("POST", api.Prefix+"/login", api.Login{Name: pageAdmin, Password: pagePassword}, http.StatusOK)
	call("PUT", api.Prefix+"/lists/"+list, api.List{Type: "email", Targets: targets}, http.StatusOK)
}

// browser is one headless Chromium tab on the page at base. It records every
// JavaScript dialog (alert, confirm, prompt) the page opens, dismissing it,
// and every uncaught exception.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
	// shots is where screenshots go.
	shots string

	mu         sync.Mutex
	dialogs    []string
	exceptions []string
}

// newBrowser starts the browser at exe (headless, no sandbox since CI runs
// as root, no GPU, no /dev/shm) with one tab; it is closed at the end of the
// test.
func newBrowser(t *testing.T, exe, base string) *browser {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		bcancel()
		acancel()
		cancel()
		wg.Wait()
	})
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", exe, err)
	}
	b := &browser{t: t, ctx: bctx, base: base, shots: os.Getenv("OUTBOX_TEST_SCREENSHOT_DIR")}
	if b.shots == "" {
		b.shots = t.TempDir()
	}
	dialogs := chromedp.Events(bctx, page.JavascriptDialogOpening)
	console := chromedp.Console(bctx)
	// Both end when the tab's context ends (the cleanup above).
	wg.Go(func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.dialogs = append(b.dialogs, fmt.Sprintf("%s %q", ev.Type, ev.Message))
			b.mu.Unlock()
			_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	})
	wg.Go(func() {
		for m, err := range console {
			if err != nil {
				return
			}
			if m.IsException() {
				b.mu.Lock()
				b.exceptions = append(b.exceptions, fmt.Sprintf("%s:%d %s", m.URL, m.Line+1, m.Text))
				b.mu.Unlock()
			}
		}
	})

	// The watches work: a dialog and an exception the test causes are seen.
	b.do("open a probe dialog and throw", chromedp.Evaluate[chromedp.Void](
		`alert("probe"); setTimeout(() => { throw new Error("probe") }, 0)`))
	waittest.For(t, stepTimeout, "the probe dialog and exception seen", func() (bool, string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.dialogs) == 1 && len(b.exceptions) == 1, fmt.Sprint(b.dialogs, b.exceptions)
	})
	b.mu.Lock()
	b.dialogs, b.exceptions = nil, nil
	b.mu.Unlock()
	return b
}

// step returns a context bounding one step.
func (b *browser) step() (context.Context, context.CancelFunc) {
	return context.WithTimeout(b.ctx, stepTimeout)
}

// do runs steps, failing the test with what on error.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := b.step()
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
}

// run runs a and returns its value, failing the test with what on error.
func run[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := b.step()
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
	return v
}

// open navigates to path and fails unless the page answers 200.
func (b *browser) open(path string) {
	b.t.Helper()
	resp := run(b, "open "+path, chromedp.NavigateResponse(b.base+path))
	if resp.Status != http.StatusOK {
		b.t.Fatalf("browser: %s answered %d %s", path, resp.Status, resp.StatusText)
	}
}

// submit clicks sel (a submit button or a link) and waits for the page it
// leads to, following redirects; it fails unless that page answers 200.
func (b *browser) submit(what, sel string) {
	b.t.Helper()
	ctx, cancel := b.step()
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("browser: %s (click %s): %v", what, sel, err)
	}
	if resp.Status != http.StatusOK {
		b.t.Fatalf("browser: %s: the page answered %d %s", what, resp.Status, resp.StatusText)
	}
}

// location is the tab's URL.
func (b *browser) location() string {
	b.t.Helper()
	return run(b, "read the location", chromedp.Location())
}

// waitVisible waits until sel is visible.
func (b *browser) waitVisible(sel string) {
	b.t.Helper()
	b.do("wait for "+sel, chromedp.WaitVisible(chromedp.CSS(sel)))
}

// text is the visible text of the first element matching sel, trimmed.
func (b *browser) text(sel string) string {
	b.t.Helper()
	return strings.TrimSpace(run(b, "read "+sel, chromedp.Text(chromedp.CSS(sel))))
}

// textContent is the text content of the first element matching sel,
// trimmed.
func (b *browser) textContent(sel string) string {
	b.t.Helper()
	return strings.TrimSpace(run(b, "read "+sel, chromedp.TextContent(chromedp.CSS(sel))))
}

// pageRow is one row of the list as the page shows it.
type pageRow struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Subject string `json:"subject"`
}

// rowsNow reads the rows of the list on the current page (none on a page
// without the list).
func (b *browser) rowsNow() []pageRow {
	b.t.Helper()
	return run(b, "read the rows", chromedp.Evaluate[[]pageRow](`Array.from(
		document.querySelectorAll("table.rows tbody tr[data-id]"),
		(tr) => ({id: tr.dataset.id, status: tr.dataset.status, subject: tr.querySelector("td.subject").textContent}))`))
}

// rows waits for the list and reads its rows.
func (b *browser) rows() []pageRow {
	b.t.Helper()
	b.waitVisible("table.rows")
	return b.rowsNow()
}

// historyRow is one row of a detail's history as the page shows it.
type historyRow struct {
	Event   string `json:"event"`
	Actor   string `json:"actor"`
	Outcome string `json:"outcome"`
	Status  string `json:"status"`
	Error   string `json:"error"`
}

// history reads the history table of the detail page shown.
func (b *browser) history() []historyRow {
	b.t.Helper()
	return run(b, "read the history", chromedp.Evaluate[[]historyRow](`Array.from(
		document.querySelectorAll("table.history tbody tr"),
		(tr) => { const c = Array.from(tr.cells, (td) => td.textContent.trim());
			return {event: c[1], actor: c[2], outcome: c[3], status: c[4], error: c[6]}; })`))
}

// waitFor opens path again until cond, read from the page, holds.
func (b *browser) waitFor(what, path string, cond func() (bool, string)) {
	b.t.Helper()
	waittest.For(b.t, settleTimeout, what, func() (bool, string) {
		b.open(path)
		return cond()
	})
}

// screenshot writes a full-page PNG of the tab as name in the directory
// OUTBOX_TEST_SCREENSHOT_DIR names (else a temporary one), and also in
// testdata/screenshots when OUTBOX_UPDATE_SCREENSHOTS=1.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	png := run(b, "screenshot "+name, chromedp.FullScreenshot(100))
	dirs := []string{b.shots}
	if os.Getenv("OUTBOX_UPDATE_SCREENSHOTS") == "1" {
		dirs = append(dirs, filepath.Join("testdata", "screenshots"))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.t.Fatalf("screenshot directory: %v", err)
		}
		path := filepath.Join(d, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			b.t.Fatalf("write screenshot: %v", err)
		}
		abs, _ := filepath.Abs(path)
		b.t.Logf("screenshot: %s", abs)
	}
}

// checkQuiet fails the test if the page opened a dialog or threw.
func (b *browser) checkQuiet() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.dialogs) > 0 {
		b.t.Errorf("the page opened JavaScript dialogs: %v", b.dialogs)
	}
	if len(b.exceptions) > 0 {
		b.t.Errorf("the page threw: %v", b.exceptions)
	}
}

// rowIDs are the ids of rows.
func rowIDs(rows []pageRow) []string {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids
}

// sameSet reports that a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// servePage serves central's page and API (httpapi) over svc, store and dir
// on a loopback server, with the admin pageAdmin, as central wires them;
// configure, when given, adds to the server's configuration.
func servePage(t *testing.T, svc *core.Service, store *memstore.Store, dir *memdir.Directory, configure func(*httpapi.Config)) *httptest.Server {
	t.Helper()
	ops, err := core.NewOperators(store, ports.SystemClock{}, core.OperatorsConfig{BcryptCost: bcrypt.MinCost}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ops.PutUser(t.Context(), ports.UserRequest{Actor: ports.ActorSystem, Name: pageAdmin, Role: ports.RoleAdmin, Password: pagePassword}); err != nil {
		t.Fatal(err)
	}
	editor, err := core.NewDirectoryEditor(dir, store, ports.SystemClock{}, core.DirectoryEditorConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := httpapi.Config{Outbox: svc, Directory: dir, Editor: editor, Operators: ops, Logger: testLogger()}
	if configure != nil {
		configure(&cfg)
	}
	h, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.Handler())
	t.Cleanup(srv.Close)
	return srv
}
