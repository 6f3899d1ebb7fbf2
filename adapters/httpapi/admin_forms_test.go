package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/siteline/outbox/adapters/httpapi"
	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/plugins/email"
	"github.com/siteline/outbox/ports"
)

// newAdminEnv is the test env with the channel schema the real email plugin
// describes for type email, checked as central checks a PUT (the schema's
// Validate), and a webhook plugin loaded that no list uses.
func newAdminEnv(t *testing.T) *env {
	t.Helper()
	d, err := email.New(nil).Describe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	schema := httpapi.ChannelSchemaOf(d.Settings)
	return newEnvWith(t, func(c *httpapi.Config) {
		c.ChannelSchema = func(typ string) ([]httpapi.ChannelSetting, bool) {
			switch typ {
			case "email":
				return schema, true
			case "webhook":
				return nil, true
			case "hook":
				// A setting named as a secret but not flagged one.
				return []httpapi.ChannelSetting{{Name: "auth_token"}, {Name: "region"}}, true
			}
			return nil, false
		}
		c.CheckChannel = func(_ context.Context, cs ports.ChannelSettings) error {
			if cs.Type == "email" {
				return d.Validate(cs.Settings)
			}
			return nil
		}
		c.Plugins = func() []ports.PluginStatus {
			return []ports.PluginStatus{{Type: "email", Name: "email", Version: "1", Running: true},
				{Type: "webhook", Name: "webhook", Version: "1", Running: true}}
		}
	})
}

// form is url.Values from pairs.
func form(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v
}

// apiList reads a list through the API as an admin; ok false on 404.
func (e *env) apiList(name string) (api.List, bool) {
	e.t.Helper()
	code, body := e.do(ports.RoleAdmin, http.MethodGet, "/api/v1/lists/"+name, nil)
	if code == http.StatusNotFound {
		return api.List{}, false
	}
	if code != http.StatusOK {
		e.t.Fatalf("GET list %s: %d %s", name, code, body)
	}
	return decode[api.List](e.t, body), true
}

// apiChannel reads a channel's settings through the API as an admin; ok
// false on 404 and for a type without a settings row.
func (e *env) apiChannel(typ string) (api.Channel, bool) {
	e.t.Helper()
	code, body := e.do(ports.RoleAdmin, http.MethodGet, "/api/v1/channels/"+typ, nil)
	if code == http.StatusNotFound {
		return api.Channel{}, false
	}
	if code != http.StatusOK {
		e.t.Fatalf("GET channel %s: %d %s", typ, code, body)
	}
	// A type in use without a settings row answers its defaults.
	c := decode[api.Channel](e.t, body)
	return c, !c.Defaults
}

// hasAudit reports whether the admin audit log holds a record of kind,
// name and action by actor.
func (e *env) hasAudit(kind ports.AdminKind, name string, action ports.AdminAction, actor string) bool {
	e.t.Helper()
	return slices.ContainsFunc(e.auditLog(ports.RoleAdmin, "kind="+string(kind)), func(r api.AdminRecord) bool {
		return r.Name == name && r.Action == action && r.Actor == actor
	})
}

// TestListForms: an admin creates a list with the form, sees it through the
// API and in the audit log under its name, cannot create it twice, edits
// it, and deletes it only after the confirmation.
func TestListForms(t *testing.T) {
	e := newAdminEnv(t)
	b := e.loginBrowser("admin")
	if code, body := e.get(b, "/lists/new"); code != http.StatusOK || !strings.Contains(body, `name="targets"`) {
		t.Fatalf("GET /lists/new: %d %s", code, body)
	}
	code, loc, body := e.post(b, "/lists", form("new", "1", "name", "pumps", "type", "email",
		"targets", "ops@example.com\r\n\r\n  night@example.com \n"))
	if code != http.StatusSeeOther || loc != "/lists" {
		t.Fatalf("create a list: %d %s %s", code, loc, body)
	}
	l, ok := e.apiList("pumps")
	if !ok || l.Type != "email" || !slices.Equal(l.Targets, []string{"ops@example.com", "night@example.com"}) {
		t.Fatalf("the API shows %+v (found %v)", l, ok)
	}
	if !e.hasAudit(ports.AdminKindList, "pumps", ports.AdminCreated, "admin") {
		t.Errorf("no audit record of the list's creation by admin: %+v", e.auditLog(ports.RoleAdmin, "kind=list"))
	}
	if _, body := e.get(b, "/lists"); !strings.Contains(body, `href="/lists/pumps/edit"`) || !strings.Contains(body, "List pumps saved.") {
		t.Errorf("the lists view after the creation lacks the list's edit link or the flash: %s", body)
	}

	// Created twice: refused, the first kept.
	code, _, body = e.post(b, "/lists", form("new", "1", "name", "pumps", "type", "email", "targets", "other@example.com"))
	if code != http.StatusConflict || !strings.Contains(html.UnescapeString(body), `list "pumps" exists already`) {
		t.Fatalf("create a list twice: %d %s", code, body)
	}
	if l, _ := e.apiList("pumps"); len(l.Targets) != 2 {
		t.Fatalf("the second creation changed the list: %+v", l)
	}

	// Edit: the form shows the targets; the post replaces them.
	if _, body := e.get(b, "/lists/pumps/edit"); !strings.Contains(body, "ops@example.com\nnight@example.com") || !strings.Contains(body, "readonly") {
		t.Fatalf("the edit form: %s", body)
	}
	if code, _, body := e.post(b, "/lists", form("name", "pumps", "type", "email", "targets", "day@example.com")); code != http.StatusSeeOther {
		t.Fatalf("edit the list: %d %s", code, body)
	}
	if l, _ := e.apiList("pumps"); !slices.Equal(l.Targets, []string{"day@example.com"}) {
		t.Fatalf("after the edit the API shows %+v", l)
	}
	if !e.hasAudit(ports.AdminKindList, "pumps", ports.AdminChanged, "admin") {
		t.Errorf("no audit record of the list's change by admin")
	}

	// Bad values: the form comes back with the error and what was typed.
	code, _, body = e.post(b, "/lists", form("new", "1", "name", "", "type", "email", "targets", "kept@example.com"))
	if code != http.StatusBadRequest || !strings.Contains(body, "kept@example.com</textarea>") || !strings.Contains(errorText(body), "name: empty") {
		t.Fatalf("a bad list name: %d %s", code, body)
	}
	if code, _, body := e.post(b, "/lists", form("new", "1", "name", "notype", "type", "", "targets", "")); code != http.StatusBadRequest {
		t.Fatalf("a list without a type: %d %s", code, body)
	}

	// Delete: the first post asks and deletes nothing.
	code, _, body = e.post(b, "/lists/pumps/delete", nil)
	if code != http.StatusOK || !strings.Contains(body, "Delete list pumps") || !strings.Contains(body, `name="confirm" value="yes"`) {
		t.Fatalf("delete, unconfirmed: %d %s", code, body)
	}
	if _, ok := e.apiList("pumps"); !ok {
		t.Fatal("an unconfirmed delete deleted the list")
	}
	if code, _, body := e.post(b, "/lists/pumps/delete", form("confirm", "yes")); code != http.StatusSeeOther {
		t.Fatalf("delete, confirmed: %d %s", code, body)
	}
	if _, ok := e.apiList("pumps"); ok {
		t.Fatal("the confirmed delete left the list")
	}
	if !e.hasAudit(ports.AdminKindList, "pumps", ports.AdminDeleted, "admin") {
		t.Errorf("no audit record of the list's deletion by admin")
	}
	if code, _, _ := e.post(b, "/lists/nosuch/delete", nil); code != http.StatusNotFound {
		t.Errorf("delete an unknown list: %d", code)
	}
	// "." and ".." cannot be made: no URL could edit or delete them.
	for _, n := range []string{".", ".."} {
		if code, _, body := e.post(b, "/lists", form("new", "1", "name", n, "type", "email", "targets", "a@example.com")); code != http.StatusBadRequest {
			t.Errorf("a list named %q: %d %s", n, code, errorText(body))
		}
		if _, err := e.dir.List(t.Context(), n); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("a list named %q: %v", n, err)
		}
	}
}

// TestListFormTakesWhatTheAPITakes: a list of 700 webhook targets made
// through the API (well over 16 KiB as a form) is saved again from its
// edit page unchanged.
func TestListFormTakesWhatTheAPITakes(t *testing.T) {
	e := newAdminEnv(t)
	targets := make([]string, 700)
	for i := range targets {
		targets[i] = fmt.Sprintf("https://hooks.example.com/services/T%05d/B%05d/abcdefghijklmnopqrstuvwx", i, i)
	}
	if code, body := e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/lists/many", api.List{Type: "webhook", Targets: targets}); code != http.StatusOK {
		t.Fatalf("PUT a list of 700 targets: %d %s", code, body)
	}
	b := e.loginBrowser("admin")
	_, page := e.get(b, "/lists/many/edit")
	m := regexp.MustCompile(`(?s)<textarea name="targets"[^>]*>(.*?)</textarea>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("the edit form has no targets: %s", page)
	}
	f := form("name", "many", "type", "webhook", "targets", html.UnescapeString(m[1])+"\nhttps://hooks.example.com/one-more")
	if n := len(f.Encode()); n <= 16<<10 {
		t.Fatalf("the form is %d bytes: not over the old bound", n)
	}
	if code, loc, body := e.post(b, "/lists", f); code != http.StatusSeeOther || loc != "/lists" {
		t.Fatalf("save the list from its edit page: %d %s", code, errorText(body))
	}
	if l, _ := e.apiList("many"); len(l.Targets) != 701 || l.Targets[699] != targets[699] {
		t.Fatalf("after the save the list has %d targets", len(l.Targets))
	}
}

// TestChannelForm: the channel form is the plugin's schema, one typed input
// a setting; a save is seen through the API and in the audit log; a
// literal secret is refused and never echoed; bad values are refused with
// the field named; deletion asks first.
func TestChannelForm(t *testing.T) {
	e := newAdminEnv(t)
	b := e.loginBrowser("admin")
	code, body := e.get(b, "/channels/email/edit")
	if code != http.StatusOK {
		t.Fatalf("GET the email form: %d %s", code, body)
	}
	for _, want := range []string{
		`<input name="setting.host" value="" required>`,
		`<input type="number" step="any" name="setting.port" value=""`,
		`<select name="setting.tls">`,
		`<option value="" selected>default (starttls)</option>`,
		`<option value="implicit">implicit</option>`,
		`<input name="setting.password" value="" autocomplete="off" spellcheck="false" pattern="(env|file):.+" placeholder="env:NAME or file:/path">`,
		`<textarea name="setting.scopes"`,
		`<input name="setting.connect_timeout" value="" pattern=`,
		`Host name or IP address of the SMTP server.`,
		`placeholder="16"`, // pool_size's default
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the email form lacks %s", want)
		}
	}
	if n := strings.Count(body, `name="setting.`); n != 15 {
		t.Errorf("the email form has %d setting inputs, want the schema's 15", n)
	}

	good := form("setting.host", "smtp.example.com", "setting.port", "2525", "setting.tls", "implicit",
		"setting.auth", "plain", "setting.username", "outbox", "setting.password", "env:SMTP_PASSWORD",
		"setting.from", "outbox@example.com", "setting.scopes", "a\r\nb", "setting.connect_timeout", "15s",
		"backoff", "exponential", "max_retries", "5", "interval", "30s", "max_interval", "10m", "rate_limit", "2.5")
	if code, loc, body := e.post(b, "/channels/email", good); code != http.StatusSeeOther || loc != "/channels" {
		t.Fatalf("save the email channel: %d %s %s", code, loc, body)
	}
	c, ok := e.apiChannel("email")
	want := map[string]string{"host": "smtp.example.com", "port": "2525", "tls": "implicit", "auth": "plain",
		"username": "outbox", "password": "env:SMTP_PASSWORD", "from": "outbox@example.com", "scopes": "a,b", "connect_timeout": "15s"}
	if !ok || fmt.Sprint(c.Settings) != fmt.Sprint(want) || c.Retry.Backoff != ports.BackoffExponential || c.Retry.MaxRetries != 5 ||
		c.Retry.IntervalSeconds != 30 || c.Retry.MaxIntervalSeconds != 600 || c.RateLimit != 2.5 {
		t.Fatalf("the API shows %+v", c)
	}
	if !e.hasAudit(ports.AdminKindChannel, "email", ports.AdminCreated, "admin") {
		t.Errorf("no audit record of the channel's creation by admin")
	}
	// The form shows what is stored: the list one value a line.
	_, body = e.get(b, "/channels/email/edit")
	for _, want := range []string{`value="smtp.example.com"`, `<option value="implicit" selected>`, "a\nb</textarea>", `value="env:SMTP_PASSWORD"`, `value="30s"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the stored form lacks %s", want)
		}
	}

	// A literal secret: refused with a clear error, never echoed, nothing
	// stored.
	const literal = "hunter2-the-real-password"
	bad := url.Values{}
	for k, v := range good {
		bad[k] = v
	}
	bad.Set("setting.password", literal)
	bad.Set("setting.host", "changed.example.com")
	code, _, body = e.post(b, "/channels/email", bad)
	if code != http.StatusBadRequest || !strings.Contains(body, "settings.password: a secret setting takes a reference") {
		t.Fatalf("a literal secret: %d %s", code, body)
	}
	if strings.Contains(body, literal) {
		t.Fatal("the page echoed the literal secret")
	}
	if !strings.Contains(body, `value="changed.example.com"`) {
		t.Error("the form after the error lost what was typed")
	}
	if c, _ := e.apiChannel("email"); c.Settings["host"] != "smtp.example.com" || c.Settings["password"] != "env:SMTP_PASSWORD" {
		t.Fatalf("the refused post changed the channel: %+v", c)
	}

	// Bad values, each refused naming the field.
	for _, tc := range []struct{ key, value, want string }{
		{"setting.port", "five87", `setting "port" must be a number`},
		{"setting.tls", "ssl", `setting "tls" must be one of none, starttls, implicit`},
		{"setting.connect_timeout", "ten seconds", `setting "connect_timeout" must be a duration`},
		{"setting.host", "", `setting "host" is required`},
		{"max_retries", "many", `retry.max_retries: "many" is not a whole number`},
		{"max_retries", "-1", `retry.max_retries: must not be negative`},
		{"interval", "forever", `retry.interval: "forever" is not a duration`},
		{"backoff", "random", `retry.backoff: unknown backoff`},
		{"rate_limit", "fast", `rate_limit: "fast" is not a number`},
		{"rate_limit", "-3", `rate_limit: must be a finite number`},
	} {
		v := url.Values{}
		for k, x := range good {
			v[k] = x
		}
		v.Set(tc.key, tc.value)
		code, _, body := e.post(b, "/channels/email", v)
		if code != http.StatusBadRequest || !strings.Contains(html.UnescapeString(body), tc.want) {
			t.Errorf("%s=%q: %d, want 400 with %q in %s", tc.key, tc.value, code, tc.want, errorText(body))
		}
	}

	// A setting named as a secret (auth_token) but not flagged one is a
	// secret all the same: a reference input, a literal refused and never
	// echoed.
	if _, body := e.get(b, "/channels/hook/edit"); !strings.Contains(body, `<input name="setting.auth_token" value="" autocomplete="off" spellcheck="false" pattern="(env|file):.+"`) {
		t.Errorf("auth_token is not asked as a reference: %s", body)
	}
	code, _, body = e.post(b, "/channels/hook", form("setting.auth_token", literal, "setting.region", "eu"))
	if code != http.StatusBadRequest || strings.Contains(body, literal) || !strings.Contains(body, "settings.auth_token: a secret setting takes a reference") {
		t.Fatalf("a literal secret in a setting named as one: %d %s", code, errorText(body))
	}
	if !strings.Contains(body, `value="eu"`) {
		t.Error("the form after the error lost the region")
	}
	if _, ok := e.apiChannel("hook"); ok {
		t.Fatal("the refused post stored the channel")
	}

	// A type whose plugin describes no settings takes key=value lines; a
	// secret-looking key takes references only.
	if _, body := e.get(b, "/channels/webhook/edit"); !strings.Contains(body, `<textarea name="settings"`) {
		t.Fatalf("the webhook form (no schema) has no free settings: %s", body)
	}
	code, _, body = e.post(b, "/channels/webhook", form("settings", "api_token="+literal+"\nregion=eu"))
	if code != http.StatusBadRequest || strings.Contains(body, literal) || !strings.Contains(body, "settings.api_token: a secret setting takes a reference") {
		t.Fatalf("a literal secret in free settings: %d %s", code, errorText(body))
	}
	if !strings.Contains(body, "region=eu") {
		t.Error("the free settings after the error lost the other lines")
	}
	if code, _, body := e.post(b, "/channels/webhook", form("settings", "region=eu\napi_token=env:HOOK_TOKEN")); code != http.StatusSeeOther {
		t.Fatalf("save free settings: %d %s", code, errorText(body))
	}
	if c, _ := e.apiChannel("webhook"); c.Settings["region"] != "eu" || c.Settings["api_token"] != "env:HOOK_TOKEN" {
		t.Fatalf("the API shows %+v", c)
	}

	// Delete: asks first.
	if code, _, body := e.post(b, "/channels/email/delete", nil); code != http.StatusOK || !strings.Contains(body, "Delete the settings of email") {
		t.Fatalf("delete, unconfirmed: %d %s", code, body)
	}
	if _, ok := e.apiChannel("email"); !ok {
		t.Fatal("an unconfirmed delete deleted the channel")
	}
	if code, _, _ := e.post(b, "/channels/email/delete", form("confirm", "yes")); code != http.StatusSeeOther {
		t.Fatalf("delete, confirmed: %d", code)
	}
	if _, ok := e.apiChannel("email"); ok {
		t.Fatal("the confirmed delete left the channel")
	}
	if !e.hasAudit(ports.AdminKindChannel, "email", ports.AdminDeleted, "admin") {
		t.Errorf("no audit record of the channel's deletion by admin")
	}
}

// TestChannelFormKeepsMaskedCredentials: a text and a list setting holding
// URLs with credentials are shown masked; posted back unchanged, they keep
// the stored credentials; a list value changed beside them keeps them too.
func TestChannelFormKeepsMaskedCredentials(t *testing.T) {
	e := newAdminEnv(t)
	const (
		tokenURL = "https://u:pw@auth.example/token?client_secret=s3cr3t"
		scopes   = "https://u:pw@h1/x, https://h2/y"
	)
	put := api.Channel{Settings: map[string]string{"host": "smtp.example.com", "from": "o@example.com", "token_url": tokenURL, "scopes": scopes}}
	if code, body := e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/channels/email", put); code != http.StatusOK {
		t.Fatalf("PUT email settings: %d %s", code, body)
	}
	b := e.loginBrowser("admin")
	_, page := e.get(b, "/channels/email/edit")
	inputs := map[string]string{}
	for _, m := range regexp.MustCompile(`<input name="setting\.([a-z_]+)" value="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		inputs[m[1]] = html.UnescapeString(m[2])
	}
	for _, m := range regexp.MustCompile(`(?s)<textarea name="setting\.([a-z_]+)"[^>]*>(.*?)</textarea>`).FindAllStringSubmatch(page, -1) {
		inputs[m[1]] = html.UnescapeString(m[2])
	}
	if strings.Contains(page, "pw@") || strings.Contains(page, "s3cr3t") || inputs["scopes"] != "https://***@h1/x\nhttps://h2/y" {
		t.Fatalf("the form shows token_url %q and scopes %q", inputs["token_url"], inputs["scopes"])
	}
	stored := func() map[string]string {
		t.Helper()
		c, err := e.dir.ChannelSettings(t.Context(), "email")
		if err != nil {
			t.Fatal(err)
		}
		return c.Settings
	}
	post := func(scopes string) {
		t.Helper()
		f := url.Values{}
		for k, v := range inputs {
			f.Set("setting."+k, v)
		}
		f.Set("setting.scopes", scopes)
		if code, _, body := e.post(b, "/channels/email", f); code != http.StatusSeeOther {
			t.Fatalf("save the form as shown: %d %s", code, errorText(body))
		}
	}
	post(inputs["scopes"])
	if got := stored(); got["token_url"] != tokenURL || got["scopes"] != "https://u:pw@h1/x,https://h2/y" {
		t.Fatalf("after saving the form as shown the directory holds token_url %q, scopes %q", got["token_url"], got["scopes"])
	}
	post("https://h0/z\n" + inputs["scopes"])
	if got := stored(); got["scopes"] != "https://h0/z,https://u:pw@h1/x,https://h2/y" {
		t.Fatalf("after adding a scope the directory holds scopes %q", got["scopes"])
	}
}

// errorText is the page's error box, for failure messages.
func errorText(body string) string {
	m := regexp.MustCompile(`(?s)<div class="error" role="alert">(.*?)</div>`).FindStringSubmatch(body)
	if m == nil {
		return "(no error shown)"
	}
	return html.UnescapeString(m[1])
}

// TestChannelsViewListsEveryTypeInUse: the Channels view lists the loaded
// plugins' types and the types lists name, with their settings or
// "defaults", even without a settings row; a viewer sees no settings and
// no form.
func TestChannelsViewListsEveryTypeInUse(t *testing.T) {
	e := newAdminEnv(t)
	if code, body := e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/lists/pager", api.List{Type: "sms", Targets: []string{"+15550100"}}); code != http.StatusOK {
		t.Fatalf("PUT a list of type sms: %d %s", code, body)
	}
	if code, body := e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/channels/webhook", api.Channel{Settings: map[string]string{"region": "eu"}}); code != http.StatusOK {
		t.Fatalf("PUT webhook settings: %d %s", code, body)
	}
	rowRE := regexp.MustCompile(`(?s)<tr data-type="([^"]+)">(.*?)</tr>`)
	rows := func(body string) map[string]string {
		out := map[string]string{}
		for _, m := range rowRE.FindAllStringSubmatch(body, -1) {
			out[m[1]] = m[2]
		}
		return out
	}
	_, body := e.get(e.loginBrowser("admin"), "/channels")
	got := rows(body)
	if keys := slices.Sorted(func(yield func(string) bool) {
		for k := range got {
			if !yield(k) {
				return
			}
		}
	}); !slices.Equal(keys, []string{"email", "sms", "webhook"}) {
		t.Fatalf("the Channels view lists %v, want email (plugin and lists), sms (a list) and webhook (plugin)", keys)
	}
	for typ, want := range map[string][]string{
		"email":   {`class="defaults">defaults`, "email 1", `href="/notifications?list=ok"`, `href="/notifications?list=bad"`, "Configure"},
		"sms":     {`class="defaults">defaults`, "no plugin", `href="/notifications?list=pager"`},
		"webhook": {"<code>region=eu</code>", "webhook 1", "none", "Edit", `action="/channels/webhook/delete"`},
	} {
		for _, w := range want {
			if !strings.Contains(got[typ], w) {
				t.Errorf("the %s row lacks %s: %s", typ, w, got[typ])
			}
		}
	}
	_, body = e.get(e.loginBrowser("viewer"), "/channels")
	got = rows(body)
	if len(got) != 3 || strings.Contains(got["webhook"], "region=eu") || !strings.Contains(got["webhook"], "admins only") ||
		strings.Contains(body, "/edit") || strings.Contains(body, "/delete") {
		t.Errorf("a viewer's Channels view shows settings or forms: %s", body)
	}
}

// TestAPIChannelsListsEveryTypeInUse: GET /channels lists the types the
// Channels view lists, a type without a settings row marked defaults, and
// GET /channels/{type} answers such a type's defaults; a type neither
// configured nor in use is not found.
func TestAPIChannelsListsEveryTypeInUse(t *testing.T) {
	e := newAdminEnv(t)
	if code, body := e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/lists/pager", api.List{Type: "sms", Targets: []string{"+15550100"}}); code != http.StatusOK {
		t.Fatalf("PUT a list of type sms: %d %s", code, body)
	}
	if code, body := e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/channels/webhook", api.Channel{Settings: map[string]string{"region": "eu"}}); code != http.StatusOK {
		t.Fatalf("PUT webhook settings: %d %s", code, body)
	}
	for _, role := range []ports.OperatorRole{ports.RoleAdmin, ports.RoleViewer} {
		code, body := e.do(role, http.MethodGet, "/api/v1/channels", nil)
		if code != http.StatusOK {
			t.Fatalf("GET /channels as %s: %d %s", role, code, body)
		}
		got := map[string]api.Channel{}
		var types []string
		for _, c := range decode[[]api.Channel](t, body) {
			got[c.Type] = c
			types = append(types, c.Type)
		}
		if !slices.Equal(types, []string{"email", "sms", "webhook"}) {
			t.Fatalf("GET /channels as %s lists %v, want email, sms and webhook, as the Channels view", role, types)
		}
		if !got["email"].Defaults || !got["sms"].Defaults || got["webhook"].Defaults {
			t.Errorf("defaults as %s: %+v", role, got)
		}
		if (got["webhook"].Settings["region"] == "eu") != (role == ports.RoleAdmin) {
			t.Errorf("webhook's settings as %s: %+v", role, got["webhook"])
		}
	}
	code, body := e.do(ports.RoleViewer, http.MethodGet, "/api/v1/channels/sms", nil)
	if c := decode[api.Channel](t, body); code != http.StatusOK || c.Type != "sms" || !c.Defaults {
		t.Errorf("GET /channels/sms: %d %s", code, body)
	}
	if code, body := e.do(ports.RoleViewer, http.MethodGet, "/api/v1/channels/fax", nil); code != http.StatusNotFound {
		t.Errorf("GET /channels/fax: %d %s", code, body)
	}
}

// TestUserForms: an admin creates a user who then logs in, changes its
// role, is refused a duplicate (the password never echoed) and deletes it
// after the confirmation.
func TestUserForms(t *testing.T) {
	e := newAdminEnv(t)
	b := e.loginBrowser("admin")
	const pw = "a long enough password 42"
	if code, loc, body := e.post(b, "/users", form("new", "1", "name", "jane", "role", "operator", "password", pw)); code != http.StatusSeeOther || loc != "/users" {
		t.Fatalf("create a user: %d %s %s", code, loc, body)
	}
	if _, err := e.ops.Login(t.Context(), ports.LoginRequest{Name: "jane", Password: pw}); err != nil {
		t.Fatalf("the new user cannot log in: %v", err)
	}
	if !e.hasAudit(ports.AdminKindUser, "jane", ports.AdminCreated, "admin") {
		t.Error("no audit record of the user's creation by admin")
	}
	code, _, body := e.post(b, "/users", form("new", "1", "name", "jane", "role", "viewer", "password", "another password 43"))
	if code != http.StatusConflict || strings.Contains(body, "another password 43") || !strings.Contains(html.UnescapeString(body), `user "jane" exists already`) {
		t.Fatalf("a duplicate user: %d %s", code, errorText(body))
	}
	if code, _, body := e.post(b, "/users", form("new", "1", "name", "nopw", "role", "viewer")); code != http.StatusBadRequest || !strings.Contains(body, "password") {
		t.Fatalf("a new user without a password: %d %s", code, errorText(body))
	}
	if code, _, body := e.post(b, "/users", form("new", "1", "name", "x", "role", "boss", "password", pw)); code != http.StatusBadRequest {
		t.Fatalf("an unknown role: %d %s", code, errorText(body))
	}
	// Change the role, the password left as it is.
	if code, _, body := e.post(b, "/users", form("name", "jane", "role", "viewer", "password", "")); code != http.StatusSeeOther {
		t.Fatalf("change the role: %d %s", code, errorText(body))
	}
	us, _ := e.ops.Users(t.Context())
	if i := slices.IndexFunc(us, func(u ports.User) bool { return u.Name == "jane" }); i < 0 || us[i].Role != ports.RoleViewer {
		t.Fatalf("after the change the users are %+v", us)
	}
	if _, err := e.ops.Login(t.Context(), ports.LoginRequest{Name: "jane", Password: pw}); err != nil {
		t.Fatalf("a role change without a password changed it: %v", err)
	}
	if _, body := e.get(b, "/users"); !strings.Contains(body, `<tr data-user="jane">`) || !strings.Contains(body, `<option value="viewer" selected>`) ||
		!strings.Contains(body, `admin <span class="role">admin</span>`) {
		t.Errorf("the users view (with admin's own role in the header): %s", body)
	}
	if code, _, body := e.post(b, "/users/jane/delete", nil); code != http.StatusOK || !strings.Contains(body, "Delete user jane") {
		t.Fatalf("delete, unconfirmed: %d %s", code, body)
	}
	if code, _, _ := e.post(b, "/users/jane/delete", form("confirm", "yes")); code != http.StatusSeeOther {
		t.Fatalf("delete, confirmed: %d", code)
	}
	us, _ = e.ops.Users(t.Context())
	if slices.ContainsFunc(us, func(u ports.User) bool { return u.Name == "jane" }) {
		t.Fatal("the confirmed delete left the user")
	}
	if !e.hasAudit(ports.AdminKindUser, "jane", ports.AdminDeleted, "admin") {
		t.Error("no audit record of the user's deletion by admin")
	}
	if code, _, body := e.post(b, "/users/nosuch/delete", form("confirm", "yes")); code != http.StatusNotFound {
		t.Fatalf("delete an unknown user: %d %s", code, errorText(body))
	}
	// Unconfirmed, an unknown user gets no confirmation either.
	if code, _, body := e.post(b, "/users/nosuch/delete", nil); code != http.StatusNotFound || strings.Contains(body, "Delete user nosuch") {
		t.Fatalf("delete an unknown user, unconfirmed: %d %s", code, errorText(body))
	}
}

// TestAdminFormsAttacked: every admin form refuses a caller without a
// session (401), a viewer and an operator (403), a post from another
// origin (403) and a body over the limit (413), and changes nothing; the
// admin views are not for a non-admin either.
func TestAdminFormsAttacked(t *testing.T) {
	e := newAdminEnv(t)
	posts := []struct {
		path string
		form url.Values
	}{
		{"/lists", form("new", "1", "name", "evil", "type", "email", "targets", "evil@example.com")},
		{"/lists/ok/delete", form("confirm", "yes")},
		{"/channels/email", form("setting.host", "evil.example", "setting.from", "evil@example.com")},
		{"/channels/email/delete", form("confirm", "yes")},
		{"/users", form("new", "1", "name", "evil", "role", "admin", "password", "evil password 666")},
		{"/users/viewer/delete", form("confirm", "yes")},
		{"/tokens", form("name", "evil", "role", "admin", "expires", "never")},
		{"/tokens/revoke", form("id", "x", "confirm", "yes")},
	}
	if code, body := e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/channels/email", api.Channel{Settings: map[string]string{"host": "smtp.example.com", "from": "o@example.com"}}); code != http.StatusOK {
		t.Fatalf("PUT email settings: %d %s", code, body)
	}
	before := len(e.auditLog(ports.RoleAdmin, ""))
	send := func(c *http.Client, path string, body string, headers map[string]string) (int, string) {
		t.Helper()
		req := e.request(http.MethodPost, path, nil)
		req.Body = ioNopCloser(body)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		code, b := e.send(c, req)
		return code, string(b)
	}
	sameOrigin := map[string]string{"Sec-Fetch-Site": "same-origin"}
	admin := e.loginBrowser("admin")
	for _, p := range posts {
		if code, _ := send(e.browser(), p.path, p.form.Encode(), sameOrigin); code != http.StatusUnauthorized {
			t.Errorf("%s without a session: %d, want 401", p.path, code)
		}
		for _, role := range []string{"viewer", "operator"} {
			if code, _ := send(e.loginBrowser(role), p.path, p.form.Encode(), sameOrigin); code != http.StatusForbidden {
				t.Errorf("%s by %s: %d, want 403", p.path, role, code)
			}
		}
		for _, h := range []map[string]string{{"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}} {
			if code, body := send(admin, p.path, p.form.Encode(), h); code != http.StatusForbidden || !strings.Contains(body, "cross-origin") {
				t.Errorf("%s from another origin %v: %d %s", p.path, h, code, body)
			}
		}
		big := p.form.Encode() + "&pad=" + strings.Repeat("x", 1<<20)
		if code, _ := send(admin, p.path, big, sameOrigin); code != http.StatusRequestEntityTooLarge {
			t.Errorf("%s with a body over the limit: %d, want 413", p.path, code)
		}
		if code, _ := send(admin, p.path, "%zz=%", sameOrigin); code != http.StatusBadRequest {
			t.Errorf("%s with a malformed body: %d, want 400", p.path, code)
		}
	}
	if after := e.auditLog(ports.RoleAdmin, ""); len(after) != before {
		t.Fatalf("the refused posts changed something: %+v", after[:len(after)-before])
	}
	if _, ok := e.apiList("evil"); ok {
		t.Fatal("a refused post made a list")
	}
	if c, _ := e.apiChannel("email"); c.Settings["host"] != "smtp.example.com" {
		t.Fatalf("a refused post changed the channel: %+v", c)
	}
	for _, path := range []string{"/lists/new", "/lists/ok/edit", "/channels/email/edit", "/users"} {
		for _, role := range []string{"viewer", "operator"} {
			if code, _ := e.get(e.loginBrowser(role), path); code != http.StatusForbidden {
				t.Errorf("GET %s by %s: %d, want 403", path, role, code)
			}
		}
		resp, err := e.browser().Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login?next=") {
			t.Errorf("GET %s without a session: %d %s, want the login", path, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	// A viewer reads the lists and channels, without any form.
	v := e.loginBrowser("viewer")
	for _, path := range []string{"/lists", "/channels"} {
		code, body := e.get(v, path)
		if code != http.StatusOK || strings.Contains(body, `method="post" action="/lists`) || strings.Contains(body, `/edit"`) {
			t.Errorf("a viewer's %s: %d, forms shown", path, code)
		}
	}
}
