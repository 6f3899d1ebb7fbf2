package httpapi_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/httpapi"
)

// TestHooksPageShowsTheCaptureEscaped: with a hooks box, /hooks lists the
// requests received, newest first, with method, path, headers and body
// (JSON indented), every value escaped; a long body is clipped. It needs a
// login like every page; without a hooks box there is neither the page
// nor its nav entry.
func TestHooksPageShowsTheCaptureEscaped(t *testing.T) {
	long := strings.Repeat("x", 20<<10)
	e := newEnvWith(t, func(c *httpapi.Config) {
		c.HooksURL = "http://127.0.0.1:8090"
		c.Hookbox = func() []httpapi.Hook {
			return []httpapi.Hook{
				{At: time.Now(), Method: "POST", Path: "/control-room", Query: "token=(hidden)",
					Header: []httpapi.HookHeader{{Name: "Authorization", Value: "(hidden)"}, {Name: "X-Evil", Value: `<img src=x onerror=alert(1)>`}},
					Body:   []byte(`{"subject":"<script>alert(1)</script>"}`), Size: 40},
				{At: time.Now(), Method: "PUT", Path: "/<b>path</b>", Body: []byte(long), Size: 30 << 10},
			}
		}
	})

	resp, err := e.browser().Get(e.srv.URL + "/hooks")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
		t.Fatalf("/hooks without a login: %d %s, want a redirect to the login", resp.StatusCode, resp.Header.Get("Location"))
	}

	c := e.loginBrowser("viewer")
	code, body := e.get(c, "/hooks")
	if code != http.StatusOK {
		t.Fatalf("/hooks: %d", code)
	}
	for _, markup := range []string{"<script>alert", "<img src=x", "<b>path</b>"} {
		if strings.Contains(body, markup) {
			t.Errorf("/hooks renders markup from a request: %q", markup)
		}
	}
	for _, want := range []string{
		`<a href="/hooks" aria-current="page">Webhook capture</a>`,
		"<code>http://127.0.0.1:8090</code>",
		"2 received, newest first",
		"<code>POST /control-room?token=(hidden)</code>",
		"<dt>Authorization</dt><dd>(hidden)</dd>",
		"&lt;img src=x onerror=alert(1)&gt;",
		"{\n  &#34;subject&#34;: &#34;&lt;script&gt;alert(1)&lt;/script&gt;&#34;\n}",
		"<code>PUT /&lt;b&gt;path&lt;/b&gt;</code>",
		"30720 bytes, clipped",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/hooks lacks %q", want)
		}
	}
	if strings.Index(body, "PUT /") > strings.Index(body, "POST /control-room") {
		t.Error("/hooks is not newest first")
	}
	if strings.Contains(body, long[:17<<10]) {
		t.Error("/hooks shows more than 16 KiB of one body")
	}

	plain := newEnv(t)
	c = plain.loginBrowser("viewer")
	if code, _ := plain.get(c, "/hooks"); code != http.StatusNotFound {
		t.Errorf("/hooks without a hooks box: %d, want 404", code)
	}
	if _, body := plain.get(c, "/notifications"); strings.Contains(body, `href="/hooks"`) {
		t.Error("the nav links to /hooks without a hooks box")
	}
}

// TestHooksPageShowsTheNewest50AndTellsTextFromBinary: of many requests,
// /hooks shows the newest 50 and says how many were received; it has no
// full-page refresh (its script refreshes the rows in place, keeping what
// is open). A text body the capture clipped in the middle of a character
// is shown as text; a binary body is not shown, clipped or not.
func TestHooksPageShowsTheNewest50AndTellsTextFromBinary(t *testing.T) {
	start := time.Now().Add(-time.Hour)
	hooks := make([]httpapi.Hook, 60)
	for i := range hooks {
		hooks[i] = httpapi.Hook{At: start.Add(time.Duration(i) * time.Second), Method: "POST", Path: fmt.Sprintf("/p%d", i),
			Body: []byte("x"), Size: 1}
	}
	cut := []byte(strings.Repeat("é", 10))[:19] // the last é cut in two
	hooks[58].Body, hooks[58].Size = cut, 40
	binary := []byte{0xff, 0xfe, 0x00, 0x01, 0x80, 0x81, 0x82, 0x83}
	hooks[59].Body, hooks[59].Size = binary, 1000
	e := newEnvWith(t, func(c *httpapi.Config) {
		c.Hookbox = func() []httpapi.Hook { return slices.Clone(hooks) }
	})
	c := e.loginBrowser("viewer")
	code, body := e.get(c, "/hooks")
	if code != http.StatusOK {
		t.Fatalf("/hooks: %d", code)
	}
	if n := strings.Count(body, "<tr data-hook="); n != 50 {
		t.Errorf("%d rows, want the newest 50", n)
	}
	for _, want := range []string{"60 received, newest first, the newest 50 shown", "<code>POST /p10</code>", "<code>POST /p59</code>",
		`id="hooks-live" data-refresh="5"`, strings.Repeat("é", 9), "1000 bytes, not text"} {
		if !strings.Contains(body, want) {
			t.Errorf("/hooks lacks %q", want)
		}
	}
	for _, not := range []string{"<code>POST /p9</code>", `http-equiv="refresh"`, "40 bytes, not text"} {
		if strings.Contains(body, not) {
			t.Errorf("/hooks holds %q", not)
		}
	}
}
