package acceptance

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/siteline/outbox/adapters/httpapi/api"
)

// TestAdminFormsInChromium drives the admin forms of the real central
// binary (its four built-in plugins in their processes) in headless
// Chromium: the Channels view lists every built-in type, those without
// settings as "defaults"; an admin creates a list and configures the
// webhook channel through forms built from the plugin's own schema, which
// refuse a literal secret without echoing it and a reference the secrets
// policy refuses; the API then shows both; an admin creates a user. The
// views are screenshot.
func TestAdminFormsInChromium(t *testing.T) {
	exe := browserPath(t)
	c := startPageCentral(t)
	br := newBrowser(t, exe, c.base)
	br.open("/login")
	br.do("fill in the login form",
		chromedp.SendKeys(chromedp.CSS(`form.login input[name="name"]`), pageAdmin),
		chromedp.SendKeys(chromedp.CSS(`form.login input[name="password"]`), pagePassword))
	br.submit("log in", `form.login button[type="submit"]`)

	// Every channel type in use: the four built-in plugins; only email has
	// settings (from the configuration).
	br.open("/channels")
	types := run(br, "read the channel types", chromedp.Evaluate[[]string](`Array.from(
		document.querySelectorAll("table.channels tbody tr[data-type]"),
		(tr) => tr.dataset.type + " " + (tr.querySelector("td.settings .defaults") ? "defaults" : "settings"))`))
	if want := []string{"email settings", "slack defaults", "teams defaults", "webhook defaults"}; !slices.Equal(types, want) {
		t.Fatalf("the Channels view lists %q, want %q", types, want)
	}

	// A list through the form.
	br.open("/lists")
	br.submit("open the new list form", `a[href="/lists/new"]`)
	br.do("fill in the list",
		chromedp.SendKeys(chromedp.CSS(`input[name="name"]`), "plant-hooks"),
		chromedp.SendKeys(chromedp.CSS(`input[name="type"]`), "webhook"),
		chromedp.SetValue(chromedp.CSS(`textarea[name="targets"]`), "https://hooks.example/a\nhttps://hooks.example/b"))
	br.screenshot("admin-list-form.png")
	br.submit("create the list", `form.admin-form button[type="submit"]`)
	if flash := br.text(".flash"); flash != "List plant-hooks saved." {
		t.Fatalf("the flash says %q", flash)
	}
	br.screenshot("admin-lists.png")

	// The webhook channel through the form the plugin's schema makes.
	br.open("/channels")
	br.submit("configure webhook", `a[href="/channels/webhook/edit"]`)
	inputs := run(br, "read the inputs", chromedp.Evaluate[[]string](`Array.from(
		document.querySelectorAll('form.admin-form [name^="setting."]'), (e) => e.name + ":" + (e.pattern || e.type))`))
	if !slices.Equal(inputs, []string{"setting.secret:(env|file):.+", "setting.timeout:([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+"}) {
		t.Fatalf("the webhook form's inputs are %q, want the schema's secret (a reference) and timeout (a duration)", inputs)
	}
	if help := br.text(`label[data-setting="timeout"] .help`); !strings.Contains(help, "Default: 30s.") {
		t.Errorf("the timeout's help reads %q, want its default", help)
	}
	const literal = "whsec_bGl0ZXJhbCBzZWNyZXQgbmV2ZXIgc2hvd24="
	setSecret := func(v string) {
		br.do("set the secret", chromedp.SetValue(chromedp.CSS(`input[name="setting.secret"]`), v),
			// The input's pattern would stop the browser; the server is what is tried.
			chromedp.Evaluate[chromedp.Void](`document.querySelector("form.admin-form").noValidate = true`))
	}
	setSecret(literal)
	br.do("fill in the rest",
		chromedp.SetValue(chromedp.CSS(`input[name="setting.timeout"]`), "15s"),
		chromedp.SetValue(chromedp.CSS(`input[name="rate_limit"]`), "3"))
	br.submitStatus("save a literal secret", `form.admin-form button[type="submit"]`, http.StatusBadRequest)
	if msg := br.text(".error"); !strings.Contains(msg, "settings.secret: a secret setting takes a reference") {
		t.Fatalf("a literal secret: the page says %q", msg)
	}
	html := run(br, "read the page", chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	if strings.Contains(html, literal) || strings.Contains(html, "bGl0ZXJhbC") {
		t.Fatal("the page echoed the literal secret")
	}
	if v := run(br, "read the timeout", chromedp.Evaluate[string](`document.querySelector('input[name="setting.timeout"]').value`)); v != "15s" {
		t.Errorf("after the error the timeout reads %q, want what was typed", v)
	}
	// A reference outside what the secrets policy lets the directory read.
	setSecret("env:HOOK_KEY")
	br.submitStatus("save a refused reference", `form.admin-form button[type="submit"]`, http.StatusBadRequest)
	if msg := br.text(".error"); !strings.Contains(msg, "settings.secret") || !strings.Contains(msg, "OUTBOX_SECRET_") {
		t.Fatalf("a reference the policy refuses: the page says %q", msg)
	}
	setSecret("env:OUTBOX_SECRET_HOOK_KEY")
	br.submit("save the channel", `form.admin-form button[type="submit"]`)
	if flash := br.text(".flash"); flash != "Channel webhook saved." {
		t.Fatalf("the flash says %q", flash)
	}
	if got := br.text(`tr[data-type="webhook"] td.settings`); got != "secret=env:OUTBOX_SECRET_HOOK_KEY timeout=15s" {
		t.Errorf("the webhook row shows %q", got)
	}
	br.screenshot("admin-channels.png")
	// The email form: every kind of input its schema asks for.
	br.open("/channels/email/edit")
	br.screenshot("admin-channel-form.png")

	// A deletion asks first; Cancel deletes nothing.
	br.open("/lists")
	br.submit("delete the list", `tr[data-list="plant-hooks"] button.danger`)
	if h := br.text("section.confirm h1"); h != "Delete list plant-hooks" {
		t.Fatalf("the confirmation reads %q", h)
	}
	br.screenshot("admin-confirm.png")
	br.submit("cancel", `section.confirm a.button`)

	// A user through the form.
	br.open("/users")
	br.do("fill in the new user",
		chromedp.SendKeys(chromedp.CSS(`form[aria-label="New user"] input[name="name"]`), "night-shift"),
		chromedp.SetValue(chromedp.CSS(`form[aria-label="New user"] select[name="role"]`), "operator"),
		chromedp.SendKeys(chromedp.CSS(`form[aria-label="New user"] input[name="password"]`), "night shift password 1"))
	br.submit("create the user", `form[aria-label="New user"] button[type="submit"]`)
	if flash := br.text(".flash"); flash != "User night-shift saved." {
		t.Fatalf("the flash says %q", flash)
	}
	br.screenshot("admin-users.png")

	// The API sees what the forms made.
	var l api.List
	c.adminGet(api.Prefix+"/lists/plant-hooks", &l)
	if l.Type != "webhook" || !slices.Equal(l.Targets, []string{"https://hooks.example/a", "https://hooks.example/b"}) {
		t.Errorf("the API shows the list %+v", l)
	}
	var ch api.Channel
	c.adminGet(api.Prefix+"/channels/webhook", &ch)
	if ch.Settings["secret"] != "env:OUTBOX_SECRET_HOOK_KEY" || ch.Settings["timeout"] != "15s" || ch.RateLimit != 3 || len(ch.Settings) != 2 {
		t.Errorf("the API shows the channel %+v", ch)
	}
	var users []api.User
	c.adminGet(api.Prefix+"/users", &users)
	if !slices.ContainsFunc(users, func(u api.User) bool { return u.Name == "night-shift" && u.Role == "operator" }) {
		t.Errorf("the API's users lack night-shift: %+v", users)
	}
	var audit api.AdminPage
	c.adminGet(api.Prefix+"/audit", &audit)
	for _, want := range []string{"list plant-hooks created", "channel webhook created", "user night-shift created"} {
		if !slices.ContainsFunc(audit.Items, func(r api.AdminRecord) bool {
			return r.Actor == pageAdmin && string(r.Kind)+" "+r.Name+" "+string(r.Action) == want
		}) {
			t.Errorf("the audit log lacks %q by %s: %+v", want, pageAdmin, audit.Items)
		}
	}
	br.checkQuiet()
}

// submitStatus clicks sel and waits for the page it leads to, failing
// unless that page answers status.
func (b *browser) submitStatus(what, sel string, status int64) {
	b.t.Helper()
	ctx, cancel := b.step()
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("browser: %s (click %s): %v", what, sel, err)
	}
	if resp.Status != status {
		b.t.Fatalf("browser: %s: the page answered %d %s, want %d", what, resp.Status, resp.StatusText, status)
	}
}

// adminGet reads path of the API as the admin into v.
func (c *pageCentral) adminGet(path string, v any) {
	c.t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		c.t.Fatal(err)
	}
	hc := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	b, _ := json.Marshal(api.Login{Name: pageAdmin, Password: pagePassword})
	resp, err := hc.Post(c.base+api.Prefix+"/login", "application/json", bytes.NewReader(b))
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("API login: %s", resp.Status)
	}
	resp, err = hc.Get(c.base + path)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
}
