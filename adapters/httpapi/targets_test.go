package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

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
