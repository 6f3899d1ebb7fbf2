package httpapi_test

import (
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/siteline/outbox/adapters/httpapi"
	"github.com/siteline/outbox/ports"
)

// get fetches a page with a browser client.
func (e *env) get(c *http.Client, path string) (int, string) {
	e.t.Helper()
	code, body := e.send(c, e.request("GET", path, nil))
	return code, string(body)
}

// post submits a form from the page's own origin.
func (e *env) post(c *http.Client, path string, form url.Values) (int, string, string) {
	e.t.Helper()
	req := e.request("POST", path, nil)
	req.Body = ioNopCloser(form.Encode())
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Location"), string(b)
}

func TestPageNeedsALogin(t *testing.T) {
	e := newEnv(t)
	c := e.browser()
	resp, err := c.Get(e.srv.URL + "/notifications?status=Parked")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login?next="+url.QueryEscape("/notifications?status=Parked") {
		t.Fatalf("no session: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	// A wrong password shows the form again with a message.
	code, _, body := e.post(c, "/login", url.Values{"name": {"admin"}, "password": {"nope nope nope"}})
	if code != http.StatusUnauthorized || !strings.Contains(body, "Wrong name or password") {
		t.Fatalf("wrong password: %d %s", code, body)
	}
	// The login never sends the browser to another site.
	code, loc, _ := e.post(c, "/login", url.Values{"name": {"viewer"}, "password": {password}, "next": {"//evil.example/x"}})
	if code != http.StatusSeeOther || loc != "/notifications" {
		t.Fatalf("open redirect: %d %s", code, loc)
	}
}

// TestScriptInSubjectIsInert: a subject holding markup is shown as text on
// the list, the detail and the mail page.
func TestScriptInSubjectIsInert(t *testing.T) {
	e := newEnv(t)
	const evil = `<script>alert("x")</script><img src=x onerror=alert(1)>`
	id := e.submit("ok", evil)[0]
	e.waitStatus(ports.StatusDelivered, id)
	c := e.loginBrowser("viewer")
	for _, path := range []string{"/notifications", "/notifications/" + id, "/mail"} {
		code, body := e.get(c, path)
		if code != http.StatusOK {
			t.Fatalf("%s: %d", path, code)
		}
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") || strings.Contains(body, "<b>mail</b>") {
			t.Fatalf("%s renders markup from data:\n%s", path, body)
		}
	}
	_, body := e.get(c, "/notifications")
	if !strings.Contains(body, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;") {
		t.Fatalf("the subject is not shown escaped:\n%s", body)
	}
}

// TestPageListFiltersAndShowsKPIs: the tiles count what the store holds;
// the status filter keeps only those rows; a bad filter says what is wrong.
func TestPageListFiltersAndShowsKPIs(t *testing.T) {
	e := newEnv(t)
	parked := e.submit("bad", "parked one", "parked two")
	delivered := e.submit("ok", "delivered one")
	e.waitStatus(ports.StatusParked, parked...)
	e.waitStatus(ports.StatusDelivered, delivered...)
	c := e.loginBrowser("viewer")
	code, body := e.get(c, "/notifications?status=Parked")
	if code != http.StatusOK || !strings.Contains(body, "parked one") || strings.Contains(body, "delivered one") {
		t.Fatalf("status filter: %d\n%s", code, body)
	}
	if !strings.Contains(body, `data-kpi="parked">`) || !strings.Contains(body, `<span class="label">Parked</span><span class="value">2</span>`) {
		t.Fatalf("parked tile:\n%s", body)
	}
	if strings.Contains(body, "Retry selected") {
		t.Fatal("a viewer is offered Retry")
	}
	code, body = e.get(c, "/notifications?q=DELIVERED")
	if code != http.StatusOK || !strings.Contains(body, "delivered one") || strings.Contains(body, "parked one") {
		t.Fatalf("keyword filter: %d", code)
	}
	code, body = e.get(c, "/notifications?status=Lost")
	if code != http.StatusBadRequest || !strings.Contains(body, "unknown status &#34;Lost&#34;") {
		t.Fatalf("bad filter: %d\n%s", code, body)
	}
	code, body = e.get(c, "/notifications/"+parked[0])
	if code != http.StatusOK || !strings.Contains(body, "550 mailbox unavailable") || !strings.Contains(body, "Attempted") {
		t.Fatalf("detail: %d\n%s", code, body)
	}
	for _, path := range []string{"/dashboard", "/lists", "/channels"} {
		if code, _ := e.get(c, path); code != http.StatusOK {
			t.Fatalf("%s: %d", path, code)
		}
	}
	// An oversize form is refused as such.
	if code, _, _ := e.post(c, "/notifications/retry", url.Values{"id": {strings.Repeat("x", 2<<20)}}); code != http.StatusForbidden {
		// a viewer is refused before the body is read
		t.Fatalf("viewer's oversize form: %d", code)
	}
	op := e.loginBrowser("operator")
	if code, _, _ := e.post(op, "/notifications/retry", url.Values{"id": {strings.Repeat("x", 2<<20)}}); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversize form: %d", code)
	}
	// A viewer's form post is refused with 403.
	code, _, _ = e.post(c, "/notifications/retry", url.Values{"id": {parked[0]}, "scope": {"ids"}})
	if code != http.StatusForbidden {
		t.Fatalf("viewer retry form: %d", code)
	}
}

// TestPageRetryAndBulkDiscard: retry one from the list, then discard by
// filter after the confirmation that shows the count.
func TestPageRetryAndBulkDiscard(t *testing.T) {
	e := newEnv(t)
	parked := e.submit("bad", "p1", "p2", "p3")
	e.waitStatus(ports.StatusParked, parked...)
	c := e.loginBrowser("operator")

	code, loc, _ := e.post(c, "/notifications/retry", url.Values{"id": {parked[0]}, "scope": {"ids"}, "return": {"/notifications?status=Parked"}})
	if code != http.StatusSeeOther || loc != "/notifications?status=Parked" {
		t.Fatalf("retry: %d %s", code, loc)
	}
	_, body := e.get(c, loc)
	if !strings.Contains(body, "1 notification retried.") {
		t.Fatalf("no flash:\n%s", body)
	}

	// Bulk by filter: the first post asks, the second acts.
	e.waitStatus(ports.StatusParked, parked...)
	code, _, body = e.post(c, "/notifications/discard", url.Values{"scope": {"filter"}, "list": {"bad"}})
	if code != http.StatusOK || !strings.Contains(body, "3 notifications match") || !strings.Contains(body, `name="confirm" value="yes"`) {
		t.Fatalf("confirmation: %d\n%s", code, body)
	}
	e.waitStatus(ports.StatusParked, parked...) // nothing moved yet
	code, _, _ = e.post(c, "/notifications/discard", url.Values{"scope": {"filter"}, "list": {"bad"}, "status": {"Parked"}, "confirm": {"yes"}})
	if code != http.StatusSeeOther {
		t.Fatalf("confirmed discard: %d", code)
	}
	e.waitStatus(ports.StatusDiscarded, parked...)
}

// TestBulkConfirmationActsOnWhatItCounted: rows that park after the
// confirmation showed its count are left alone by the confirmed action.
func TestBulkConfirmationActsOnWhatItCounted(t *testing.T) {
	e := newEnv(t)
	first := e.submit("bad", "counted")
	e.waitStatus(ports.StatusParked, first...)
	c := e.loginBrowser("operator")
	code, _, page := e.post(c, "/notifications/discard", url.Values{"scope": {"filter"}, "list": {"bad"}})
	if code != http.StatusOK || !strings.Contains(page, "1 notification match") {
		t.Fatalf("confirmation: %d\n%s", code, page)
	}
	form := url.Values{}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`).FindAllStringSubmatch(page, -1) {
		form.Add(m[1], html.UnescapeString(m[2]))
	}
	if form.Get("updated_to") == "" || form.Get("confirm") != "yes" {
		t.Fatalf("the confirmation does not pin its instant: %v", form)
	}
	later := e.submit("bad", "parked after the count", "and another")
	e.waitStatus(ports.StatusParked, later...)
	if code, _, body := e.post(c, "/notifications/discard", form); code != http.StatusSeeOther {
		t.Fatalf("confirm: %d %s", code, body)
	}
	e.waitStatus(ports.StatusDiscarded, first...)
	e.waitStatus(ports.StatusParked, later...)
}

// TestEachCredentialInItsPlace: a token planted in the session cookie is
// no login, and a session secret is no API token.
func TestEachCredentialInItsPlace(t *testing.T) {
	e := newEnv(t)
	req := e.request("GET", "/api/v1/me", nil)
	req.AddCookie(&http.Cookie{Name: "outbox_session", Value: e.tokens[ports.RoleAdmin]})
	if code, body := e.send(http.DefaultClient, req); code != http.StatusUnauthorized {
		t.Fatalf("token in the cookie: %d %s", code, body)
	}
	s, err := e.ops.Login(t.Context(), ports.LoginRequest{Name: "admin", Password: password})
	if err != nil {
		t.Fatal(err)
	}
	req = e.request("GET", "/api/v1/me", nil)
	req.Header.Set("Authorization", "Bearer "+s.Secret)
	if code, body := e.send(http.DefaultClient, req); code != http.StatusUnauthorized {
		t.Fatalf("session as a bearer token: %d %s", code, body)
	}
	// Logging out with a session that has ended still clears the cookie.
	req = e.request("POST", "/logout", nil)
	req.AddCookie(&http.Cookie{Name: "outbox_session", Value: "long gone"})
	resp, err := e.browser().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Set-Cookie"), "outbox_session=;") {
		t.Fatalf("logout of a dead session: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestDashboardShowsThePlugins: the dashboard shows each channel plugin the
// host reports, with its type and state.
func TestDashboardShowsThePlugins(t *testing.T) {
	e := newEnvWith(t, func(c *httpapi.Config) {
		c.Plugins = func() []ports.PluginStatus {
			return []ports.PluginStatus{{Type: "email", Name: "outbox-email", Running: true, Restarts: 2}, {Type: "webhook", Name: "outbox-webhook"}}
		}
	})
	code, body := e.get(e.loginBrowser("viewer"), "/dashboard")
	if code != http.StatusOK {
		t.Fatalf("dashboard: %d", code)
	}
	for _, row := range []string{`<td>outbox-email</td><td>email</td><td><span class="pill Delivered">running</span></td><td class="n">2</td>`,
		`<td>outbox-webhook</td><td>webhook</td><td><span class="pill Parked">down</span></td>`} {
		if !strings.Contains(body, row) {
			t.Errorf("dashboard lacks %s:\n%s", row, body)
		}
	}
}
