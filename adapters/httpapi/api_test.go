package httpapi_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/ports"
)

// route is one API route and the least role it needs.
type route struct {
	method, path string
	body         any
	need         ports.OperatorRole
}

// routes lists every API route with a request that the role allows to
// succeed (or fail on its own merits, never with 401 or 403).
func routes(id string) []route {
	return []route{
		{"GET", "/api/v1/me", nil, ports.RoleViewer},
		{"GET", "/api/v1/notifications", nil, ports.RoleViewer},
		{"GET", "/api/v1/notifications/count", nil, ports.RoleViewer},
		{"GET", "/api/v1/notifications/" + id, nil, ports.RoleViewer},
		{"GET", "/api/v1/kpis", nil, ports.RoleViewer},
		{"GET", "/api/v1/lists", nil, ports.RoleViewer},
		{"GET", "/api/v1/lists/ok", nil, ports.RoleViewer},
		{"GET", "/api/v1/channels", nil, ports.RoleViewer},
		{"POST", "/api/v1/notifications/retry", api.ActionRequest{IDs: []string{id}}, ports.RoleOperator},
		{"POST", "/api/v1/notifications/discard", api.ActionRequest{IDs: []string{id}}, ports.RoleOperator},
		{"POST", "/api/v1/notifications/retry-now", api.ActionRequest{IDs: []string{id}}, ports.RoleOperator},
		{"POST", "/api/v1/notifications/park", api.ActionRequest{IDs: []string{id}}, ports.RoleOperator},
		{"PUT", "/api/v1/lists/new", api.List{Type: "email", Targets: []string{"x@example.com"}}, ports.RoleAdmin},
		{"DELETE", "/api/v1/lists/new", nil, ports.RoleAdmin},
		{"PUT", "/api/v1/channels/email", api.Channel{Settings: map[string]string{"host": "localhost"}}, ports.RoleAdmin},
		{"GET", "/api/v1/channels/email", nil, ports.RoleViewer},
		{"DELETE", "/api/v1/channels/email", nil, ports.RoleAdmin},
		{"GET", "/api/v1/users", nil, ports.RoleAdmin},
		{"PUT", "/api/v1/users/someone", api.PutUser{Role: ports.RoleViewer, Password: "long enough password"}, ports.RoleAdmin},
		{"DELETE", "/api/v1/users/someone", nil, ports.RoleAdmin},
		{"GET", "/api/v1/tokens", nil, ports.RoleAdmin},
		{"POST", "/api/v1/tokens", api.NewToken{Name: "made", Role: ports.RoleViewer}, ports.RoleAdmin},
		{"GET", "/api/v1/site-calls", nil, ports.RoleViewer},
		{"GET", "/api/v1/site-calls/count", nil, ports.RoleViewer},
		{"GET", "/api/v1/site-calls/kpis", nil, ports.RoleViewer},
		{"GET", "/api/v1/site-calls/plant-1/" + id, nil, ports.RoleViewer},
		{"POST", "/api/v1/site-calls/retry", api.SiteCallActionRequest{Keys: []api.SiteCallKey{{Site: "plant-1", ID: id}}}, ports.RoleOperator},
		{"POST", "/api/v1/site-calls/discard", api.SiteCallActionRequest{Keys: []api.SiteCallKey{{Site: "plant-1", ID: id}}}, ports.RoleOperator},
		{"GET", "/api/v1/sites", nil, ports.RoleViewer},
		{"GET", "/api/v1/sites/plant-1", nil, ports.RoleViewer},
	}
}

// TestEveryRouteChecksTheRole calls every route with no credential, with a
// bad one, and with each role: no credential or a bad one gets 401, a role
// below the route's gets 403, and the others get through.
func TestEveryRouteChecksTheRole(t *testing.T) {
	e := newEnv(t)
	id := e.submit("bad", "parked")[0]
	e.waitStatus(ports.StatusParked, id)
	for _, r := range routes(id) {
		code, body := e.do("", r.method, r.path, r.body)
		if code != http.StatusUnauthorized || decode[api.ErrorBody](t, body).Error.Code != api.CodeUnauthenticated {
			t.Errorf("%s %s without a credential: %d %s, want 401 unauthenticated", r.method, r.path, code, body)
		}
		req := e.request(r.method, r.path, r.body)
		req.Header.Set("Authorization", "Bearer obx_0123456789ab_forged")
		if code, body := e.send(http.DefaultClient, req); code != http.StatusUnauthorized {
			t.Errorf("%s %s with a forged token: %d %s, want 401", r.method, r.path, code, body)
		}
		for _, role := range ports.OperatorRoles {
			code, body := e.do(role, r.method, r.path, r.body)
			switch {
			case role.Allows(r.need) && (code == http.StatusUnauthorized || code == http.StatusForbidden || code >= 500):
				t.Errorf("%s %s as %s: %d %s, want it allowed", r.method, r.path, role, code, body)
			case !role.Allows(r.need) && code != http.StatusForbidden:
				t.Errorf("%s %s as %s: %d %s, want 403", r.method, r.path, role, code, body)
			case !role.Allows(r.need) && decode[api.ErrorBody](t, body).Error.Code != api.CodeForbidden:
				t.Errorf("%s %s as %s: body %s, want code forbidden", r.method, r.path, role, body)
			}
		}
	}
}

// TestViewerCannotRetry: the parked row stays parked after a viewer's try.
func TestViewerCannotRetry(t *testing.T) {
	e := newEnv(t)
	id := e.submit("bad", "parked")[0]
	e.waitStatus(ports.StatusParked, id)
	code, body := e.do(ports.RoleViewer, "POST", "/api/v1/notifications/retry", api.ActionRequest{IDs: []string{id}})
	if code != http.StatusForbidden || !strings.Contains(string(body), "operator role") {
		t.Fatalf("viewer retry: %d %s", code, body)
	}
	e.waitStatus(ports.StatusParked, id)
}

// TestRetryAndDiscardByIDsAndFilter: an operator retries by id (the row is
// delivered again and fails again), discards by filter, and a delivered row
// is refused with the reason; the actor is in the history.
func TestRetryAndDiscardByIDsAndFilter(t *testing.T) {
	e := newEnv(t)
	parked := e.submit("bad", "p1", "p2", "p3")
	delivered := e.submit("ok", "d1")
	e.waitStatus(ports.StatusParked, parked...)
	e.waitStatus(ports.StatusDelivered, delivered...)

	code, body := e.do(ports.RoleOperator, "POST", "/api/v1/notifications/retry",
		api.ActionRequest{IDs: []string{parked[0], delivered[0]}})
	if code != http.StatusOK {
		t.Fatalf("retry: %d %s", code, body)
	}
	res := decode[api.ActionResult](t, body)
	if !slices.Equal(res.Moved, parked[:1]) || len(res.Refused) != 1 || res.Refused[0].ID != delivered[0] || res.Refused[0].Code != api.CodeConflict {
		t.Fatalf("retry result: %+v", res)
	}
	e.waitStatus(ports.StatusParked, parked[0]) // delivered again, failed again

	_, body = e.do(ports.RoleViewer, "GET", "/api/v1/notifications/"+parked[0], nil)
	d := decode[api.Detail](t, body)
	var kinds []string
	for _, h := range d.History {
		kinds = append(kinds, string(h.Kind)+"/"+h.Actor)
	}
	if !slices.Contains(kinds, "Retried/token:cli-operator") || d.Body != "body of p1" {
		t.Fatalf("history %v, body %q", kinds, d.Body)
	}

	code, body = e.do(ports.RoleOperator, "POST", "/api/v1/notifications/discard",
		api.ActionRequest{Filter: &api.Filter{List: "bad", Status: []ports.Status{ports.StatusParked}}})
	if code != http.StatusOK || len(decode[api.ActionResult](t, body).Moved) != 3 {
		t.Fatalf("discard by filter: %d %s", code, body)
	}
	e.waitStatus(ports.StatusDiscarded, parked...)

	// A forgotten filter never acts on every row.
	code, body = e.do(ports.RoleOperator, "POST", "/api/v1/notifications/retry", api.ActionRequest{})
	if code != http.StatusBadRequest || !strings.Contains(string(body), "select notifications") {
		t.Fatalf("empty action: %d %s", code, body)
	}
}

// TestBadInputGetsA400NamingIt covers the filters, paging, ids and bodies.
func TestBadInputGetsA400NamingIt(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ method, path, body, want string }{
		{"GET", "/api/v1/notifications?status=Lost", "", "unknown status \"Lost\""},
		{"GET", "/api/v1/notifications?from=yesterday", "", "from: \"yesterday\" is not a time"},
		{"GET", "/api/v1/notifications?from=2026-02-01&to=2026-01-01", "", "time range is empty"},
		{"GET", "/api/v1/notifications?limit=0", "", "limit: \"0\" is not a positive whole number"},
		{"GET", "/api/v1/notifications?limit=5000", "", "page size 5000 is outside 1..1000"},
		{"GET", "/api/v1/notifications?after=garbage", "", "cursor"},
		{"GET", "/api/v1/notifications?stuck=maybe", "", "stuck: \"maybe\" is not true or false"},
		{"GET", "/api/v1/notifications/not-a-uuid", "", "is not a UUID"},
		{"POST", "/api/v1/notifications/retry", "{", "malformed JSON"},
		{"POST", "/api/v1/notifications/retry", `{"ids":["x"],"extra":1}`, "unknown field"},
		{"POST", "/api/v1/notifications/retry", `{"ids":["x"]}`, "is not a UUID"},
		{"PUT", "/api/v1/lists/x", `{"type":""}`, "type"},
		{"PUT", "/api/v1/lists/x", `{"name":"y","type":"email"}`, "the body names"},
		{"PUT", "/api/v1/users/x", `{"role":"root","password":"long enough password"}`, "role \"root\""},
		{"PUT", "/api/v1/users/x", `{"role":"viewer","password":"short"}`, "password: at least"},
		{"PUT", "/api/v1/users/bad%20name", `{"role":"viewer","password":"long enough password"}`, "only letters"},
		{"POST", "/api/v1/tokens", `{"name":"t","role":"boss"}`, "role \"boss\""},
	} {
		req := e.request(c.method, c.path, nil)
		if c.body != "" {
			req = e.request(c.method, c.path, nil)
			req.Body = ioNopCloser(c.body)
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Authorization", "Bearer "+e.tokens[ports.RoleAdmin])
		code, body := e.send(http.DefaultClient, req)
		eb := decode[api.ErrorBody](t, body)
		if code != http.StatusBadRequest || eb.Error.Code != api.CodeInvalid || !strings.Contains(eb.Error.Message, c.want) {
			t.Errorf("%s %s %s: %d %s, want 400 mentioning %q", c.method, c.path, c.body, code, body, c.want)
		}
	}
	// An oversize body is refused as such.
	req := e.request("POST", "/api/v1/notifications/retry", nil)
	req.Body = ioNopCloser(`{"ids":["` + strings.Repeat("a", 2<<20) + `"]}`)
	req.Header.Set("Authorization", "Bearer "+e.tokens[ports.RoleAdmin])
	if code, body := e.send(http.DefaultClient, req); code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversize body: %d %.200s", code, body)
	}
	// A known route with another method is a JSON 405 naming the methods.
	req = e.request("DELETE", "/api/v1/kpis", nil)
	req.Header.Set("Authorization", "Bearer "+e.tokens[ports.RoleAdmin])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET" {
		t.Errorf("DELETE /api/v1/kpis: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	// An unknown route is a JSON 404.
	if code, body := e.do(ports.RoleViewer, "GET", "/api/v1/nothing", nil); code != http.StatusNotFound ||
		decode[api.ErrorBody](t, body).Error.Code != api.CodeNotFound {
		t.Errorf("unknown route: %d %s", code, body)
	}
}

// TestCrossOriginPostIsRefused: a POST a browser sends from another site is
// refused before it reaches the handler, with a session cookie or not; the
// same POST from the page's own origin goes through.
func TestCrossOriginPostIsRefused(t *testing.T) {
	e := newEnv(t)
	id := e.submit("bad", "parked")[0]
	e.waitStatus(ports.StatusParked, id)
	c := e.loginBrowser("operator")
	for _, h := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site"},
		{"Origin": "https://evil.example"},
	} {
		req := e.request("POST", "/notifications/retry", nil)
		req.Body = ioNopCloser(url.Values{"id": {id}, "scope": {"ids"}}.Encode())
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range h {
			req.Header.Set(k, v)
		}
		if code, body := e.send(c, req); code != http.StatusForbidden || !strings.Contains(string(body), "cross-origin") {
			t.Fatalf("cross-origin form post %v: %d %s", h, code, body)
		}
		req = e.request("POST", "/api/v1/notifications/retry", api.ActionRequest{IDs: []string{id}})
		for k, v := range h {
			req.Header.Set(k, v)
		}
		if code, body := e.send(c, req); code != http.StatusForbidden {
			t.Fatalf("cross-origin API post %v: %d %s", h, code, body)
		}
	}
	e.waitStatus(ports.StatusParked, id)

	req := e.request("POST", "/notifications/retry", nil)
	req.Body = ioNopCloser(url.Values{"id": {id}, "scope": {"ids"}}.Encode())
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if code, body := e.send(c, req); code != http.StatusSeeOther {
		t.Fatalf("same-origin post: %d %s", code, body)
	}
}

// TestLoginSessionLogout: a session from POST /login works like a token
// until logout, after which the cookie is worthless; a wrong password says
// nothing about which part was wrong.
func TestLoginSessionLogout(t *testing.T) {
	e := newEnv(t)
	c := e.browser()
	code, body := e.send(c, e.request("POST", "/api/v1/login", api.Login{Name: "admin", Password: "wrong password!"}))
	if code != http.StatusUnauthorized || !strings.Contains(string(body), "wrong name or password") {
		t.Fatalf("bad login: %d %s", code, body)
	}
	code, body = e.send(c, e.request("POST", "/api/v1/login", api.Login{Name: "nobody", Password: password}))
	if code != http.StatusUnauthorized || !strings.Contains(string(body), "wrong name or password") {
		t.Fatalf("unknown user login: %d %s", code, body)
	}
	code, body = e.send(c, e.request("POST", "/api/v1/login", api.Login{Name: "operator", Password: password}))
	if code != http.StatusOK || decode[api.Me](t, body).Role != ports.RoleOperator {
		t.Fatalf("login: %d %s", code, body)
	}
	u, _ := url.Parse(e.srv.URL)
	var cookie *http.Cookie
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == "outbox_session" {
			cookie = ck
		}
	}
	if cookie == nil {
		t.Fatal("no session cookie")
	}
	if code, body := e.send(c, e.request("GET", "/api/v1/me", nil)); code != http.StatusOK || decode[api.Me](t, body).Name != "operator" {
		t.Fatalf("me: %d %s", code, body)
	}
	if code, _ := e.send(c, e.request("POST", "/api/v1/logout", nil)); code != http.StatusNoContent {
		t.Fatalf("logout: %d", code)
	}
	req := e.request("GET", "/api/v1/me", nil)
	req.AddCookie(&http.Cookie{Name: "outbox_session", Value: cookie.Value})
	if code, _ := e.send(http.DefaultClient, req); code != http.StatusUnauthorized {
		t.Fatalf("the cookie still works after logout: %d", code)
	}
}

// TestAdminManagesListsUsersAndTokens goes through the admin routes end to
// end: a list made through the API is used by the next notification, a
// user made by the admin can log in, a token made can be used and then
// revoked, and the last admin cannot be removed.
func TestAdminManagesListsUsersAndTokens(t *testing.T) {
	e := newEnv(t)
	if code, body := e.do(ports.RoleAdmin, "PUT", "/api/v1/lists/fresh", api.List{Type: "email", Targets: []string{"a@example.com"}}); code != http.StatusOK {
		t.Fatalf("put list: %d %s", code, body)
	}
	id := e.submit("fresh", "to the new list")[0]
	e.waitStatus(ports.StatusDelivered, id)
	_, body := e.do(ports.RoleViewer, "GET", "/api/v1/lists", nil)
	if ls := decode[[]api.List](t, body); len(ls) != 3 || ls[1].Name != "fresh" {
		t.Fatalf("lists: %s", body)
	}

	if code, body := e.do(ports.RoleAdmin, "PUT", "/api/v1/users/carol", api.PutUser{Role: ports.RoleOperator, Password: "carol's long password"}); code != http.StatusOK {
		t.Fatalf("put user: %d %s", code, body)
	}
	code, body := e.send(e.browser(), e.request("POST", "/api/v1/login", api.Login{Name: "carol", Password: "carol's long password"}))
	if code != http.StatusOK {
		t.Fatalf("carol login: %d %s", code, body)
	}

	code, body = e.do(ports.RoleAdmin, "POST", "/api/v1/tokens", api.NewToken{Name: "ci", Role: ports.RoleViewer})
	if code != http.StatusCreated {
		t.Fatalf("create token: %d %s", code, body)
	}
	tok := decode[api.CreatedToken](t, body)
	req := e.request("GET", "/api/v1/me", nil)
	req.Header.Set("Authorization", "Bearer "+tok.Secret)
	if code, body := e.send(http.DefaultClient, req); code != http.StatusOK || decode[api.Me](t, body).Name != "token:ci" {
		t.Fatalf("new token: %d %s", code, body)
	}
	_, body = e.do(ports.RoleAdmin, "GET", "/api/v1/tokens", nil)
	if strings.Contains(string(body), tok.Secret) || !strings.Contains(string(body), tok.ID) {
		t.Fatalf("token list shows the secret or misses the token: %s", body)
	}
	if code, _ := e.do(ports.RoleAdmin, "DELETE", "/api/v1/tokens/"+tok.ID, nil); code != http.StatusNoContent {
		t.Fatalf("revoke: %d", code)
	}
	req = e.request("GET", "/api/v1/me", nil)
	req.Header.Set("Authorization", "Bearer "+tok.Secret)
	if code, _ := e.send(http.DefaultClient, req); code != http.StatusUnauthorized {
		t.Fatalf("revoked token still works: %d", code)
	}

	// Remove the admin token, then the last admin account is protected.
	_, body = e.do(ports.RoleAdmin, "GET", "/api/v1/tokens", nil)
	for _, tk := range decode[[]api.Token](t, body) {
		if tk.Role == ports.RoleAdmin {
			c := e.loginBrowser("admin")
			if code, body := e.send(c, e.request("DELETE", "/api/v1/tokens/"+tk.ID, nil)); code != http.StatusNoContent {
				t.Fatalf("delete admin token: %d %s", code, body)
			}
			if code, body := e.send(c, e.request("DELETE", "/api/v1/users/admin", nil)); code != http.StatusConflict ||
				!strings.Contains(string(body), "last admin") {
				t.Fatalf("delete last admin: %d %s", code, body)
			}
		}
	}
}

// TestOpenAPIDocumentIsServed: the document is public JSON naming the API.
func TestOpenAPIDocumentIsServed(t *testing.T) {
	e := newEnv(t)
	code, body := e.do("", "GET", "/api/v1/openapi.json", nil)
	doc := decode[map[string]any](t, body)
	if code != http.StatusOK || doc["openapi"] != "3.1.0" {
		t.Fatalf("openapi: %d %.200s", code, body)
	}
}

// TestSecurityHeaders: every response, page or API, carries them.
func TestSecurityHeaders(t *testing.T) {
	e := newEnv(t)
	for _, path := range []string{"/login", "/api/v1/kpis", "/static/style.css"} {
		resp, err := http.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := resp.Header
		if !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
			!strings.Contains(h.Get("Content-Security-Policy"), "script-src 'self'") ||
			h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", path, h)
		}
	}
}
