package httpapi_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/ports"
)

// TestWebhookURLsShownToAdminsOnly: a webhook URL's path is its secret
// (Slack's, Teams'), and a URL may carry a password: viewers and operators
// see a list's URL targets, and a notification's resolved targets, only up
// to the host, on the API and the page; admins, who manage the lists, see
// them as written.
func TestWebhookURLsShownToAdminsOnly(t *testing.T) {
	e := newEnv(t)
	const slack = "https://hooks.slack.com/services/T000/B000/SECRETXYZ"
	const basic = "https://user:PASSWORD123@receiver.example/in?token=TOKEN456"
	l := api.List{Name: "hooks", Type: "email", Targets: []string{slack, basic, "env:OUTBOX_SECRET_HOOK", "ops@example.com"}}
	if code, body := e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/lists/hooks", l); code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, body)
	}
	ids := e.submit("hooks", "to the hooks")
	e.waitStatus(ports.StatusDelivered, ids...)

	leaks := []string{"SECRETXYZ", "T000", "PASSWORD123", "TOKEN456", "user:"}
	wants := []string{"https://hooks.slack.com/…", "https://receiver.example/…", "env:OUTBOX_SECRET_HOOK", "ops@example.com"}
	check := func(who, what string, body []byte) {
		t.Helper()
		for _, leak := range leaks {
			if strings.Contains(string(body), leak) {
				t.Errorf("%s sees %q in %s: %s", who, leak, what, body)
			}
		}
		for _, want := range wants {
			if !strings.Contains(string(body), want) {
				t.Errorf("%s does not see %q in %s: %s", who, want, what, body)
			}
		}
	}
	for _, role := range []ports.OperatorRole{ports.RoleViewer, ports.RoleOperator} {
		for _, path := range []string{"/api/v1/lists", "/api/v1/lists/hooks", "/api/v1/notifications/" + ids[0]} {
			code, body := e.do(role, http.MethodGet, path, nil)
			if code != http.StatusOK {
				t.Fatalf("%s GET %s: %d %s", role, path, code, body)
			}
			check(string(role), path, body)
		}
		for _, path := range []string{"/lists", "/notifications/" + ids[0]} {
			req := e.request(http.MethodGet, path, nil)
			req.AddCookie(e.sessionCookie(string(role)))
			code, body := e.send(http.DefaultClient, req)
			if code != http.StatusOK {
				t.Fatalf("%s page %s: %d", role, path, code)
			}
			check(string(role)+" (page)", path, []byte(strings.ReplaceAll(string(body), "&hellip;", "…")))
		}
	}
	for _, path := range []string{"/api/v1/lists/hooks", "/api/v1/notifications/" + ids[0]} {
		code, body := e.do(ports.RoleAdmin, http.MethodGet, path, nil)
		if code != http.StatusOK || !strings.Contains(string(body), "SECRETXYZ") || !strings.Contains(string(body), "PASSWORD123") {
			t.Errorf("an admin does not see the targets as written at %s: %d %s", path, code, body)
		}
	}
}

// TestDetailShowsEachTargetsFate: a notification to a list of four whose
// channel refuses one target parks; its detail, on the API and the page,
// shows each target with its own status, attempts, error and times, in the
// list's form (a reference stays a reference), and the attempt in the
// history names the targets it went to with their outcomes. A URL target is
// shown to a viewer up to its host there too; the list page stays lean.
func TestDetailShowsEachTargetsFate(t *testing.T) {
	e := newEnv(t)
	const hook = "https://hooks.example/in/PATHSECRET"
	targets := []string{"ops@example.com", "bad@example.com", hook, "env:OUTBOX_TEST_HOOK"}
	if code, body := e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/lists/mixed",
		api.List{Name: "mixed", Type: "email", Targets: targets}); code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, body)
	}
	id := e.submit("mixed", "to four")[0]
	e.waitStatus(ports.StatusParked, id)

	code, body := e.do(ports.RoleAdmin, http.MethodGet, "/api/v1/notifications/"+id, nil)
	if code != http.StatusOK {
		t.Fatalf("GET: %d %s", code, body)
	}
	d := decode[api.Detail](t, body)
	if len(d.Targets) != len(targets) {
		t.Fatalf("targets %+v, want one per target of %v", d.Targets, targets)
	}
	for i, ts := range d.Targets {
		want := ports.TargetDelivered
		if i == 1 {
			want = ports.TargetFailed
		}
		switch {
		case ts.Target != targets[i] || ts.Status != want || ts.Attempts != 1 || ts.LastAttemptAt == nil:
			t.Errorf("target %d is %+v, want %s %s after 1 attempt", i, ts, targets[i], want)
		case want == ports.TargetFailed && (ts.DeliveredAt != nil || !strings.Contains(ts.LastError, "550 5.1.1")):
			t.Errorf("the failed target is %+v, want its 550 and no delivery time", ts)
		case want == ports.TargetDelivered && (ts.DeliveredAt == nil || ts.LastError != ""):
			t.Errorf("a delivered target is %+v, want a delivery time and no error", ts)
		}
	}
	if want := []string{targets[0], targets[2], targets[3]}; !slices.Equal(d.ResolvedTargets, want) {
		t.Errorf("resolved targets %v, want the delivered %v", d.ResolvedTargets, want)
	}
	var attempted []api.AuditRecord
	for _, h := range d.History {
		if h.Kind == ports.AuditAttempted {
			attempted = append(attempted, h)
		}
	}
	if len(attempted) != 1 || len(attempted[0].Targets) != len(targets) {
		t.Fatalf("attempts in the history %+v, want one naming the %d targets", attempted, len(targets))
	}
	for i, at := range attempted[0].Targets {
		want := api.AuditTarget{Target: targets[i], Outcome: ports.OutcomeSuccess}
		if i == 1 {
			want = api.AuditTarget{Target: targets[i], Outcome: ports.OutcomePermanent, Error: "550 5.1.1 <b>mailbox</b> unavailable"}
		}
		if at != want {
			t.Errorf("the attempt's target %d is %+v, want %+v", i, at, want)
		}
	}

	// A viewer sees the URL up to its host, in the targets and the history.
	code, body = e.do(ports.RoleViewer, http.MethodGet, "/api/v1/notifications/"+id, nil)
	if code != http.StatusOK || strings.Contains(string(body), "PATHSECRET") {
		t.Fatalf("a viewer's detail: %d %s", code, body)
	}
	d = decode[api.Detail](t, body)
	if d.Targets[2].Target != "https://hooks.example/…" || d.History[len(d.History)-1].Kind == "" ||
		attemptedTargets(d)[2].Target != "https://hooks.example/…" || d.Targets[3].Target != "env:OUTBOX_TEST_HOOK" {
		t.Errorf("a viewer sees the targets %+v and the attempt's %+v", d.Targets, attemptedTargets(d))
	}

	// The list's page of rows carries no per-target array.
	code, body = e.do(ports.RoleViewer, http.MethodGet, "/api/v1/notifications?list=mixed", nil)
	if code != http.StatusOK || !strings.Contains(string(body), id) || strings.Contains(string(body), `"targets"`) {
		t.Errorf("the list: %d %s", code, body)
	}

	// The page: the summary, a row a target with its status chip, and the
	// attempt's targets in the history, all escaped.
	req := e.request(http.MethodGet, "/notifications/"+id, nil)
	req.AddCookie(e.sessionCookie(string(ports.RoleViewer)))
	code, body = e.send(http.DefaultClient, req)
	page := string(body)
	if code != http.StatusOK {
		t.Fatalf("page: %d %s", code, page)
	}
	for _, want := range []string{
		"3 of 4 delivered",
		`<tr data-status="Failed" class="failed-target"><td class="target-cell"><span class="target">bad@example.com</span></td><td><span class="pill Failed">Failed</span></td>`,
		// A parked row names the target that failed, with its error, above
		// everything else, before the row's own last error.
		`<b>Parked: 1 of 4 targets not delivered</b>
  <ul><li data-target-status="Failed"><span class="target">bad@example.com</span> <span class="pill Failed">Failed</span> <span class="target-error">550 5.1.1 &lt;b&gt;mailbox&lt;/b&gt; unavailable</span>`,
		`<span class="target">env:OUTBOX_TEST_HOOK</span></td><td><span class="pill Delivered">Delivered</span>`,
		`<span class="target">https://hooks.example/…</span></td><td><span class="pill Delivered">Delivered</span>`,
		"550 5.1.1 &lt;b&gt;mailbox&lt;/b&gt; unavailable",
		`<li><span class="target">bad@example.com</span> <span class="outcome Permanent">Permanent</span> <span class="err">550 5.1.1 &lt;b&gt;mailbox&lt;/b&gt; unavailable</span></li>`,
		`<li><span class="target">ops@example.com</span> <span class="outcome Success">Success</span></li>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if box, last := strings.Index(page, `class="error failed-targets"`), strings.Index(page, `<div class="error">Last error:`); box < 0 || last >= 0 && last < box {
		t.Errorf("the failed targets come at %d, the row's last error at %d: the failed target's comes first", box, last)
	}
	if strings.Contains(page, "PATHSECRET") || strings.Contains(page, "<b>mailbox") || strings.Contains(page, "Resolved targets") {
		t.Errorf("the page leaks the URL, carries markup from an error, or shows resolved targets beside the states:\n%s", page)
	}
}

// attemptedTargets are the targets of d's last Attempted record.
func attemptedTargets(d api.Detail) []api.AuditTarget {
	for i := len(d.History) - 1; i >= 0; i-- {
		if d.History[i].Kind == ports.AuditAttempted {
			return d.History[i].Targets
		}
	}
	return nil
}

// TestDetailOfARowWithoutTargetStates: a row from before targets were
// tracked one by one (attempted, no target states) shows its resolved
// targets as before and no per-target table or array; a row no attempt
// went to yet says so.
func TestDetailOfARowWithoutTargetStates(t *testing.T) {
	e := newEnv(t)
	at := time.Now().Add(-time.Hour).UTC()
	old := ports.Notification{ID: uuid.Must(uuid.NewV7()).String(), Type: "email", List: "ok", Subject: "from before",
		Status: ports.StatusDelivered, ResolvedTargets: []string{"ops@example.com"}, CreatedAt: at, UpdatedAt: at,
		LastAttemptAt: at, DeliveredAt: at}
	fresh := ports.Notification{ID: uuid.Must(uuid.NewV7()).String(), Type: "email", List: "unknown", Subject: "not yet",
		Status: ports.StatusParked, LastError: "no list", CreatedAt: at, UpdatedAt: at}
	if _, err := e.store.Insert(t.Context(), []ports.Notification{old, fresh}); err != nil {
		t.Fatal(err)
	}
	code, body := e.do(ports.RoleViewer, http.MethodGet, "/api/v1/notifications/"+old.ID, nil)
	if code != http.StatusOK || strings.Contains(string(body), `"targets"`) ||
		!slices.Equal(decode[api.Detail](t, body).ResolvedTargets, old.ResolvedTargets) {
		t.Errorf("an old row's detail: %d %s", code, body)
	}
	page := func(id string) string {
		req := e.request(http.MethodGet, "/notifications/"+id, nil)
		req.AddCookie(e.sessionCookie(string(ports.RoleViewer)))
		code, body := e.send(http.DefaultClient, req)
		if code != http.StatusOK {
			t.Fatalf("page %s: %d", id, code)
		}
		return string(body)
	}
	if p := page(old.ID); !strings.Contains(p, `<dt>Resolved targets</dt><dd><span class="target">ops@example.com</span>`) ||
		strings.Contains(p, `table class="grid targets"`) || strings.Contains(p, "delivered</dd>") {
		t.Errorf("an old row's page:\n%s", p)
	}
	if p := page(fresh.ID); !strings.Contains(p, "not attempted yet") || strings.Contains(p, `table class="grid targets"`) {
		t.Errorf("the page of a row no attempt went to:\n%s", p)
	}
}
