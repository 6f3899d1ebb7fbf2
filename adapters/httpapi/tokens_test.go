package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/guard/guardtest"
	"github.com/siteline/outbox/adapters/httpapi"
	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/client"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// auditLog reads the whole admin audit log through the API, newest first.
func (e *env) auditLog(role ports.OperatorRole, query string) []api.AdminRecord {
	e.t.Helper()
	var out []api.AdminRecord
	after := ""
	for range 100 {
		q, _ := url.ParseQuery(query)
		q.Set("limit", "3")
		if after != "" {
			q.Set("after", after)
		}
		code, body := e.do(role, http.MethodGet, "/api/v1/audit?"+q.Encode(), nil)
		if code != http.StatusOK {
			e.t.Fatalf("GET /audit: %d %s", code, body)
		}
		page := decode[api.AdminPage](e.t, body)
		out = append(out, page.Items...)
		if page.Next == "" {
			return out
		}
		after = page.Next
	}
	e.t.Fatal("the audit log's pages do not end")
	return nil
}

// sessionCookie logs user in through the API and returns its session
// cookie.
func (e *env) sessionCookie(user string) *http.Cookie {
	e.t.Helper()
	req := e.request(http.MethodPost, "/api/v1/login", api.Login{Name: user, Password: password})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == "outbox_session" && c.Value != "" {
			return c
		}
	}
	e.t.Fatalf("login as %s: %d, no session cookie", user, resp.StatusCode)
	return nil
}

// withCookie sends a request with the session cookie c.
func (e *env) withCookie(c *http.Cookie, method, path string, body any) (int, []byte) {
	e.t.Helper()
	req := e.request(method, path, body)
	req.AddCookie(c)
	return e.send(http.DefaultClient, req)
}

// withToken sends a request with the API token secret.
func (e *env) withToken(secret, method, path string, body any) (int, []byte) {
	e.t.Helper()
	req := e.request(method, path, body)
	req.Header.Set("Authorization", "Bearer "+secret)
	return e.send(http.DefaultClient, req)
}

// TestEveryAdminChangeIsAuditedWithItsActor makes each kind of admin change
// through the real API, with a token and with a session, and finds each in
// the admin audit log with the caller as its actor. Before the admin audit
// log, a change left only a log line without its actor.
func TestEveryAdminChangeIsAuditedWithItsActor(t *testing.T) {
	e := newEnv(t)
	admin := e.sessionCookie("admin")
	const userPassword = "dora's long password"
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	type step struct {
		do     func() (int, []byte)
		want   int
		actor  string
		kind   ports.AdminKind
		name   string
		action ports.AdminAction
	}
	steps := []step{
		{func() (int, []byte) {
			return e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/lists/ops", api.List{Type: "email", Targets: []string{"ops@example.com"}})
		}, http.StatusOK, "token:cli-admin", ports.AdminKindList, "ops", ports.AdminCreated},
		{func() (int, []byte) {
			return e.withCookie(admin, http.MethodPut, "/api/v1/lists/ops", api.List{Type: "email", Targets: []string{"ops@example.com", "b@example.com"}})
		}, http.StatusOK, "admin", ports.AdminKindList, "ops", ports.AdminChanged},
		{func() (int, []byte) { return e.withCookie(admin, http.MethodDelete, "/api/v1/lists/ops", nil) },
			http.StatusNoContent, "admin", ports.AdminKindList, "ops", ports.AdminDeleted},
		{func() (int, []byte) {
			return e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/channels/webhook", api.Channel{Settings: map[string]string{"secret": "env:HOOK_SECRET"}})
		}, http.StatusOK, "token:cli-admin", ports.AdminKindChannel, "webhook", ports.AdminCreated},
		{func() (int, []byte) { return e.withCookie(admin, http.MethodDelete, "/api/v1/channels/webhook", nil) },
			http.StatusNoContent, "admin", ports.AdminKindChannel, "webhook", ports.AdminDeleted},
		{func() (int, []byte) {
			return e.withCookie(admin, http.MethodPut, "/api/v1/users/dora", api.PutUser{Role: ports.RoleViewer, Password: userPassword})
		}, http.StatusOK, "admin", ports.AdminKindUser, "dora", ports.AdminCreated},
		{func() (int, []byte) {
			return e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/users/dora", api.PutUser{Role: ports.RoleViewer, Password: "new " + userPassword})
		}, http.StatusOK, "token:cli-admin", ports.AdminKindUser, "dora", ports.AdminPassword},
		{func() (int, []byte) {
			return e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/users/dora", api.PutUser{Role: ports.RoleOperator})
		}, http.StatusOK, "token:cli-admin", ports.AdminKindUser, "dora", ports.AdminChanged},
		{func() (int, []byte) {
			return e.withCookie(admin, http.MethodPost, "/api/v1/tokens", api.NewToken{Name: "ci", Role: ports.RoleOperator, ExpiresAt: &expires})
		}, http.StatusCreated, "admin", ports.AdminKindToken, "ci", ports.AdminCreated},
		{func() (int, []byte) {
			return e.withCookie(e.sessionCookie("viewer"), http.MethodPost, "/api/v1/me/tokens", api.NewOwnToken{ExpiresAt: &expires})
		}, http.StatusCreated, "viewer", ports.AdminKindToken, "", ports.AdminCreated},
		{func() (int, []byte) { return e.withCookie(admin, http.MethodDelete, "/api/v1/users/dora", nil) },
			http.StatusNoContent, "admin", ports.AdminKindUser, "dora", ports.AdminDeleted},
	}
	var secrets []string
	for i, s := range steps {
		code, body := s.do()
		if code != s.want {
			t.Fatalf("step %d: %d %s, want %d", i, code, body, s.want)
		}
		if s.kind == ports.AdminKindToken {
			ct := decode[api.CreatedToken](t, body)
			secrets = append(secrets, ct.Secret)
			steps[i].name = ct.Name
			if s.name == "" && !strings.HasPrefix(ct.Name, "viewer/cli-") {
				t.Errorf("own token named %q", ct.Name)
			}
		}
	}
	// The tokens are revoked, one by an admin, one by itself.
	var ci api.Token
	ts := decodeTokens(t, e)
	for _, tok := range ts {
		if tok.Name == "ci" {
			ci = tok
		}
	}
	if code, body := e.withCookie(admin, http.MethodDelete, "/api/v1/tokens/"+ci.ID, nil); code != http.StatusNoContent {
		t.Fatalf("revoke ci: %d %s", code, body)
	}
	if code, body := e.withToken(secrets[1], http.MethodDelete, "/api/v1/me/token", nil); code != http.StatusNoContent {
		t.Fatalf("revoke the own token: %d %s", code, body)
	}
	steps = append(steps,
		step{actor: "admin", kind: ports.AdminKindToken, name: "ci", action: ports.AdminRevoked},
		step{actor: "viewer", kind: ports.AdminKindToken, name: steps[9].name, action: ports.AdminRevoked})

	recs := e.auditLog(ports.RoleAdmin, "")
	// newEnv's own accounts and tokens come first (actor system).
	var mine []api.AdminRecord
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Actor != ports.ActorSystem {
			mine = append(mine, recs[i])
		}
	}
	if len(mine) != len(steps) {
		for _, r := range mine {
			t.Logf("%+v", r)
		}
		t.Fatalf("%d records, want %d", len(mine), len(steps))
	}
	for i, s := range steps {
		r := mine[i]
		if r.Actor != s.actor || r.Kind != s.kind || r.Name != s.name || r.Action != s.action || r.At.IsZero() {
			t.Errorf("record %d = %+v, want actor %s, %s %s %s", i, r, s.actor, s.kind, s.name, s.action)
		}
		for _, secret := range append([]string{userPassword, "new " + userPassword, "ops@example.com"}, secrets...) {
			if strings.Contains(r.Summary, secret) {
				t.Errorf("record %d holds a secret or an address: %q", i, r.Summary)
			}
		}
	}
	// Filters.
	if got := e.auditLog(ports.RoleAdmin, "kind=user&name=dora"); len(got) != 4 || got[0].Action != ports.AdminDeleted {
		t.Errorf("kind=user&name=dora: %+v", got)
	}
	// Only admins read it.
	if code, _ := e.do(ports.RoleOperator, http.MethodGet, "/api/v1/audit", nil); code != http.StatusForbidden {
		t.Errorf("an operator reads the audit log: %d", code)
	}
	if code, _ := e.do("", http.MethodGet, "/api/v1/audit", nil); code != http.StatusUnauthorized {
		t.Errorf("nobody reads the audit log: %d", code)
	}
}

func decodeTokens(t *testing.T, e *env) []api.Token {
	t.Helper()
	code, body := e.do(ports.RoleAdmin, http.MethodGet, "/api/v1/tokens", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /tokens: %d %s", code, body)
	}
	return decode[[]api.Token](t, body)
}

// TestAClearSecretSettingNeverReachesTheAuditLog: a channel's setting that
// the plugin marks secret (here: any setting, since the test server knows
// no schema) is recorded masked, whatever its value; a reference is shown.
func TestAClearSecretSettingNeverReachesTheAuditLog(t *testing.T) {
	e := newEnv(t)
	const clear = "s3cr3t-signing-value-9f2a"
	for _, settings := range []map[string]string{
		{"signature": clear, "password": "env:SMTP_PASSWORD"},
		{"signature": clear + "-rotated", "password": "file:/run/secrets/smtp"},
	} {
		if code, body := e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/channels/email", api.Channel{Settings: settings}); code != http.StatusOK {
			t.Fatalf("put channel: %d %s", code, body)
		}
	}
	if code, body := e.do(ports.RoleAdmin, http.MethodDelete, "/api/v1/channels/email", nil); code != http.StatusNoContent {
		t.Fatalf("delete channel: %d %s", code, body)
	}
	recs := e.auditLog(ports.RoleAdmin, "kind=channel")
	if len(recs) != 3 {
		t.Fatalf("%d channel records, want 3: %+v", len(recs), recs)
	}
	for _, r := range recs {
		if strings.Contains(r.Summary, clear[:10]) {
			t.Errorf("the record shows the clear secret: %q", r.Summary)
		}
		if !strings.Contains(r.Summary, "signature") {
			t.Errorf("the record does not name the changed setting: %q", r.Summary)
		}
	}
	if !strings.Contains(recs[1].Summary, "password env:SMTP_PASSWORD → file:/run/secrets/smtp") {
		t.Errorf("the change of reference is not shown: %q", recs[1].Summary)
	}
}

// TestTokenExpiryThroughTheAPI: a token made with an expiry works until
// then, is refused with "token expired" (401) after, and is listed as
// expired; a bad expiry is a clear 400.
func TestTokenExpiryThroughTheAPI(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		body string
		want string
	}{
		{`{"name":"x","role":"viewer","expires_at":"2001-01-01T00:00:00Z"}`, "expires_at: 2001-01-01T00:00:00Z is not in the future"},
		{`{"name":"x","role":"viewer","expires_at":"9999-01-01T00:00:00Z"}`, "expires_at: at most 3650 days ahead"},
		{`{"name":"x","role":"viewer","expires_at":"tomorrow"}`, "malformed JSON body"},
	} {
		req := e.request(http.MethodPost, "/api/v1/tokens", nil)
		req.Body = ioNopCloser(c.body)
		req.Header.Set("Authorization", "Bearer "+e.tokens[ports.RoleAdmin])
		code, body := e.send(http.DefaultClient, req)
		if code != http.StatusBadRequest || !strings.Contains(string(body), c.want) {
			t.Errorf("%s: %d %s, want 400 saying %q", c.body, code, body, c.want)
		}
	}
	expires := time.Now().Add(time.Second)
	code, body := e.do(ports.RoleAdmin, http.MethodPost, "/api/v1/tokens", api.NewToken{Name: "brief", Role: ports.RoleViewer, ExpiresAt: &expires})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	tok := decode[api.CreatedToken](t, body)
	if tok.ExpiresAt == nil || !tok.ExpiresAt.Equal(expires.UTC().Truncate(time.Microsecond)) {
		t.Fatalf("created %+v", tok)
	}
	if code, body := e.withToken(tok.Secret, http.MethodGet, "/api/v1/me", nil); code != http.StatusOK {
		t.Fatalf("before its expiry: %d %s", code, body)
	}
	// Wait for the expiry (the server's clock is the real one).
	waittest.For(t, 10*time.Second, "the token to expire", func() (bool, string) {
		code, body = e.withToken(tok.Secret, http.MethodGet, "/api/v1/me", nil)
		return code != http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
	if code != http.StatusUnauthorized || !strings.Contains(string(body), "token expired") {
		t.Fatalf("after its expiry: %d %s, want 401 token expired", code, body)
	}
	for _, lt := range decodeTokens(t, e) {
		if lt.Name == "brief" && (!lt.Expired || lt.ExpiresAt == nil) {
			t.Errorf("listed %+v, want expired", lt)
		}
	}
}

// TestOwnTokenThroughTheAPI: a session makes a token of its own, which has
// the account's role at each request; a demotion or a deletion of the
// account takes effect at once; a token cannot make one; DELETE /me/token
// kills the token that calls.
func TestOwnTokenThroughTheAPI(t *testing.T) {
	e := newEnv(t)
	expires := time.Now().Add(time.Hour)
	// An API token cannot make itself a successor.
	if code, body := e.do(ports.RoleAdmin, http.MethodPost, "/api/v1/me/tokens", api.NewOwnToken{ExpiresAt: &expires}); code != http.StatusForbidden {
		t.Fatalf("a token making its own token: %d %s, want 403", code, body)
	}
	if code, _ := e.do("", http.MethodPost, "/api/v1/me/tokens", api.NewOwnToken{ExpiresAt: &expires}); code != http.StatusUnauthorized {
		t.Fatalf("nobody making a token: %d, want 401", code)
	}
	// The same through the client, as outbox login does.
	c, err := client.New(e.srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.LoginToken(ctx, "operator", "wrong password!", api.NewOwnToken{ExpiresAt: &expires}); !errors.Is(err, ports.ErrUnauthenticated) ||
		strings.Contains(err.Error(), "wrong password!") {
		t.Fatalf("a wrong password: %v", err)
	}
	if _, err := c.LoginToken(ctx, "operator", password, api.NewOwnToken{}); !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "expires_at: required") {
		t.Fatalf("no expiry: %v", err)
	}
	tok, err := c.LoginToken(ctx, "operator", password, api.NewOwnToken{Label: "laptop", ExpiresAt: &expires})
	if err != nil {
		t.Fatal(err)
	}
	if tok.Account != "operator" || !strings.HasPrefix(tok.Name, "operator/laptop-") || tok.ExpiresAt == nil {
		t.Fatalf("own token %+v", tok)
	}
	me := func() (int, api.Me) {
		t.Helper()
		code, body := e.withToken(tok.Secret, http.MethodGet, "/api/v1/me", nil)
		if code != http.StatusOK {
			return code, api.Me{}
		}
		return code, decode[api.Me](t, body)
	}
	if code, m := me(); code != http.StatusOK || m.Name != "operator" || m.Role != ports.RoleOperator {
		t.Fatalf("me: %d %+v", code, m)
	}
	if code, _ := e.withToken(tok.Secret, http.MethodPost, "/api/v1/notifications/retry", api.ActionRequest{IDs: []string{"x"}}); code == http.StatusForbidden {
		t.Fatalf("the operator's token cannot retry")
	}
	// Demoted: the token is a viewer's at once.
	if code, body := e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/users/operator", api.PutUser{Role: ports.RoleViewer}); code != http.StatusOK {
		t.Fatalf("demote: %d %s", code, body)
	}
	if code, m := me(); code != http.StatusOK || m.Role != ports.RoleViewer {
		t.Fatalf("me after the demotion: %d %+v", code, m)
	}
	if code, _ := e.withToken(tok.Secret, http.MethodPost, "/api/v1/notifications/retry", api.ActionRequest{IDs: []string{"x"}}); code != http.StatusForbidden {
		t.Fatalf("the demoted account's token retries: %d, want 403", code)
	}
	// Deleted: the token dies with it.
	if code, body := e.do(ports.RoleAdmin, http.MethodDelete, "/api/v1/users/operator", nil); code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", code, body)
	}
	if code, _ := me(); code != http.StatusUnauthorized {
		t.Fatalf("me after the deletion: %d, want 401", code)
	}

	// DELETE /me/token revokes the token that calls, and only it.
	tok2, err := c.LoginToken(ctx, "viewer", password, api.NewOwnToken{ExpiresAt: &expires})
	if err != nil {
		t.Fatal(err)
	}
	self, _ := client.New(e.srv.URL, tok2.Secret)
	if err := self.RevokeOwnToken(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := self.Me(ctx); !errors.Is(err, ports.ErrUnauthenticated) {
		t.Fatalf("a revoked token: %v", err)
	}
	if code, _ := e.do(ports.RoleViewer, http.MethodGet, "/api/v1/me", nil); code != http.StatusOK {
		t.Fatalf("another token after a revocation: %d", code)
	}
	// A session has no token to revoke.
	if code, body := e.withCookie(e.sessionCookie("viewer"), http.MethodDelete, "/api/v1/me/token", nil); code != http.StatusBadRequest {
		t.Fatalf("a session revoking its token: %d %s, want 400", code, body)
	}
}

// TestAuditQueryRefusals: bad paging parameters are a clear 400.
func TestAuditQueryRefusals(t *testing.T) {
	e := newEnv(t)
	for q, want := range map[string]string{
		"limit=0":                          "limit:",
		"limit=201":                        "limit:",
		"limit=x":                          "limit:",
		"after=-1":                         "after:",
		"after=01":                         "after:",
		"after=abc":                        "after:",
		"kind=plugin":                      "kind:",
		"name=" + strings.Repeat("n", 401): "name:",
	} {
		code, body := e.do(ports.RoleAdmin, http.MethodGet, "/api/v1/audit?"+q, nil)
		if code != http.StatusBadRequest || !strings.Contains(string(body), want) {
			t.Errorf("%.30s: %d %s, want 400 naming %q", q, code, body, want)
		}
	}
}

// TestAdminPages: the tokens view lists, creates with an expiry (showing the
// secret once) and revokes; the audit view shows the changes; neither is
// for a non-admin.
func TestAdminPages(t *testing.T) {
	e := newEnv(t)
	b := e.loginBrowser("admin")
	get := func(c *http.Client, path string) (int, string) {
		t.Helper()
		code, body := e.send(c, e.request(http.MethodGet, path, nil))
		return code, string(body)
	}
	post := func(form string, path string) (int, string) {
		t.Helper()
		req := e.request(http.MethodPost, path, nil)
		req.Body = ioNopCloser(form)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		code, body := e.send(b, req)
		return code, string(body)
	}
	if code, body := get(b, "/tokens"); code != http.StatusOK || !strings.Contains(body, "cli-admin") {
		t.Fatalf("/tokens: %d", code)
	}
	code, body := post("name=from-page&role=operator&expires=7d", "/tokens")
	if code != http.StatusCreated || !strings.Contains(body, "obx_") || !strings.Contains(body, "from-page") {
		t.Fatalf("create on the page: %d %s", code, body)
	}
	secret := body[strings.Index(body, "obx_"):]
	secret = secret[:strings.IndexByte(secret, '<')]
	if code, _ := e.withToken(secret, http.MethodGet, "/api/v1/me", nil); code != http.StatusOK {
		t.Fatalf("the page's token: %d", code)
	}
	if code, body := post("name=bad&role=operator&expires=forever", "/tokens"); code != http.StatusBadRequest || !strings.Contains(body, "not a lifetime") {
		t.Fatalf("a bad expiry on the page: %d", code)
	}
	var id string
	for _, tk := range decodeTokens(t, e) {
		if tk.Name == "from-page" {
			id = tk.ID
			if tk.ExpiresAt == nil || tk.ExpiresAt.Before(time.Now().Add(6*24*time.Hour)) {
				t.Errorf("the page's token expires %v, want in 7 days", tk.ExpiresAt)
			}
		}
	}
	// The first post asks for a confirmation and revokes nothing.
	if code, body := post("id="+id, "/tokens/revoke"); code != http.StatusOK || !strings.Contains(body, "Revoke token from-page") {
		t.Fatalf("revoke on the page, unconfirmed: %d %s", code, body)
	}
	if code, _ := e.withToken(secret, http.MethodGet, "/api/v1/me", nil); code != http.StatusOK {
		t.Fatalf("the page token after an unconfirmed revoke: %d", code)
	}
	if code, _ := post("id="+id+"&confirm=yes", "/tokens/revoke"); code != http.StatusSeeOther {
		t.Fatalf("revoke on the page: %d", code)
	}
	if code, _ := e.withToken(secret, http.MethodGet, "/api/v1/me", nil); code != http.StatusUnauthorized {
		t.Fatalf("the revoked page token: %d", code)
	}
	if code, body := get(b, "/audit?kind=token"); code != http.StatusOK || !strings.Contains(body, "from-page") || !strings.Contains(body, "revoked") {
		t.Fatalf("/audit: %d %s", code, body)
	}
	op := e.loginBrowser("operator")
	for _, path := range []string{"/tokens", "/audit"} {
		if code, _ := get(op, path); code != http.StatusForbidden {
			t.Errorf("an operator opens %s: %d", path, code)
		}
	}
}

// TestAViewerCannotMintTokensWithoutLimit replays the reviewer's attack: a
// viewer's session posts to /api/v1/me/tokens from four connections at
// once. Before the fix it made 41,000 tokens (and as many audit records) in
// 14 s. Now the account makes at most a burst of them, the rest are answered
// 429 with Retry-After before the body is read, each refusal counted and
// logged once per address, and the account never holds more than ten.
func TestAViewerCannotMintTokensWithoutLimit(t *testing.T) {
	logs := &guardtest.LogBuffer{}
	refusals := guard.NewRefusals("http", slog.New(slog.NewTextHandler(logs, nil)), time.Minute)
	e := newEnvWith(t, func(c *httpapi.Config) { c.Refusals = refusals })
	viewer := e.sessionCookie("viewer")
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				req := e.request(http.MethodPost, "/api/v1/me/tokens", api.NewOwnToken{Label: "m", ExpiresAt: &expires})
				req.AddCookie(viewer)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
					t.Error("429 without Retry-After")
				}
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// The burst, and at most one more if a minute passed.
	if made := codes[http.StatusCreated]; made < httpapi.DefaultOwnTokenBurst || made > httpapi.DefaultOwnTokenBurst+1 ||
		codes[http.StatusTooManyRequests] != 200-made {
		t.Fatalf("answers %v: want %d made and the rest 429", codes, httpapi.DefaultOwnTokenBurst)
	}
	if got := refusals.Count("own tokens over rate"); got != codes[http.StatusTooManyRequests] {
		t.Fatalf("%d refusals counted for %d answered 429", got, codes[http.StatusTooManyRequests])
	}
	if l := logs.String(); strings.Count(l, "own tokens over rate") != 1 || !strings.Contains(l, "user=viewer") {
		t.Fatalf("want one log line for the burst, naming the account:\n%s", l)
	}
	if n := len(e.accountTokens("viewer")); n != codes[http.StatusCreated] {
		t.Fatalf("the viewer holds %d tokens", n)
	}
	// Another account is not held by the viewer's rate.
	if code, body := e.withCookie(e.sessionCookie("operator"), http.MethodPost, "/api/v1/me/tokens", api.NewOwnToken{ExpiresAt: &expires}); code != http.StatusCreated {
		t.Fatalf("another account: %d %s", code, body)
	}
}

// TestAnAccountKeepsAtMostTenTokens: past ten tokens of its own, each new
// one revokes the oldest, and the admin audit log says so with the actor.
func TestAnAccountKeepsAtMostTenTokens(t *testing.T) {
	e := newEnvWith(t, func(c *httpapi.Config) { c.OwnTokenRate, c.OwnTokenBurst = 1000, 1000 })
	viewer := e.sessionCookie("viewer")
	var secrets []string
	for i := range 25 {
		expires := time.Now().Add(time.Duration(i+1) * time.Hour).UTC().Truncate(time.Second)
		code, body := e.withCookie(viewer, http.MethodPost, "/api/v1/me/tokens", api.NewOwnToken{ExpiresAt: &expires})
		if code != http.StatusCreated {
			t.Fatalf("token %d: %d %s", i, code, body)
		}
		secrets = append(secrets, decode[api.CreatedToken](t, body).Secret)
	}
	if n := len(e.accountTokens("viewer")); n != core.DefaultMaxOwnTokens {
		t.Fatalf("the viewer holds %d tokens, want %d", n, core.DefaultMaxOwnTokens)
	}
	for i, s := range secrets {
		code, _ := e.withToken(s, http.MethodGet, "/api/v1/me", nil)
		if want := i >= 25-core.DefaultMaxOwnTokens; (code == http.StatusOK) != want {
			t.Fatalf("token %d answers %d (want it live: %v)", i, code, want)
		}
	}
	revoked := 0
	for _, r := range e.auditLog(ports.RoleAdmin, "kind=token") {
		if r.Action == ports.AdminRevoked {
			if r.Actor != "viewer" || !strings.Contains(r.Summary, "the oldest of its tokens") {
				t.Fatalf("revocation record %+v", r)
			}
			revoked++
		}
	}
	if revoked != 25-core.DefaultMaxOwnTokens {
		t.Fatalf("%d revocations audited, want %d", revoked, 25-core.DefaultMaxOwnTokens)
	}
}

// accountTokens returns the tokens bound to account, as an admin lists them.
func (e *env) accountTokens(account string) []api.Token {
	e.t.Helper()
	var out []api.Token
	for _, tok := range decodeTokens(e.t, e) {
		if tok.Account == account {
			out = append(out, tok)
		}
	}
	return out
}

// TestChannelSettingsShowNoCredentials replays the reviewer's channel: a
// token_url with user:password@ and api_key=, an e-mail address in from.
// GET /channels used to show it verbatim to viewers. Now a viewer (API and
// page) sees the type, the retry policy and the rate only; an admin sees the
// settings with the URL's credentials masked; and the admin putting back
// what it was shown keeps the stored value.
func TestChannelSettingsShowNoCredentials(t *testing.T) {
	e := newEnv(t)
	const tokenURL = "http://user:PASSWORD123@idp.example.com/token?api_key=KEY123&scope=mail"
	ch := api.Channel{Type: "email", Settings: map[string]string{"token_url": tokenURL, "from": "alerts@plant.example.com",
		"client_secret": "env:OUTBOX_SECRET_IDP"}, RateLimit: 5}
	if code, body := e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/channels/email", ch); code != http.StatusOK ||
		strings.Contains(string(body), "PASSWORD123") {
		t.Fatalf("PUT: %d %s", code, body)
	}
	leaks := []string{"PASSWORD123", "KEY123"}
	for _, role := range []ports.OperatorRole{ports.RoleViewer, ports.RoleOperator} {
		for _, path := range []string{"/api/v1/channels", "/api/v1/channels/email"} {
			code, body := e.do(role, http.MethodGet, path, nil)
			if code != http.StatusOK || !strings.Contains(string(body), `"settings_hidden": true`) || !strings.Contains(string(body), `"rate_limit": 5`) {
				t.Fatalf("%s GET %s: %d %s", role, path, code, body)
			}
			for _, leak := range append(leaks, "alerts@", "token_url", "env:OUTBOX_SECRET_IDP") {
				if strings.Contains(string(body), leak) {
					t.Fatalf("%s GET %s shows %q: %s", role, path, leak, body)
				}
			}
		}
	}
	req := e.request(http.MethodGet, "/channels", nil)
	req.AddCookie(e.sessionCookie("viewer"))
	if code, body := e.send(http.DefaultClient, req); code != http.StatusOK || strings.Contains(string(body), "idp.example.com") ||
		!strings.Contains(string(body), "admins only") {
		t.Fatalf("the page as a viewer: %d %s", code, body)
	}

	code, body := e.do(ports.RoleAdmin, http.MethodGet, "/api/v1/channels/email", nil)
	shown := decode[api.Channel](t, body)
	if code != http.StatusOK || shown.Settings["token_url"] != "http://***@idp.example.com/token?api_key=***&scope=mail" ||
		shown.Settings["from"] != "alerts@plant.example.com" || shown.Settings["client_secret"] != "env:OUTBOX_SECRET_IDP" {
		t.Fatalf("as an admin: %d %s", code, body)
	}
	// Back as shown: the stored token_url stays whole.
	shown.RateLimit = 7
	if code, body := e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/channels/email", shown); code != http.StatusOK {
		t.Fatalf("PUT back: %d %s", code, body)
	}
	stored, err := e.dir.ChannelSettings(t.Context(), "email")
	if err != nil || stored.Settings["token_url"] != tokenURL || stored.RateLimit != 7 {
		t.Fatalf("stored after the round trip: %+v %v", stored, err)
	}
	for _, r := range e.auditLog(ports.RoleAdmin, "kind=channel") {
		for _, leak := range append(leaks, "alerts@") {
			if strings.Contains(r.Summary, leak) {
				t.Fatalf("the audit log shows %q: %s", leak, r.Summary)
			}
		}
	}
}
