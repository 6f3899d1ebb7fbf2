package httpapi_test

import (
	"net/http"
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
