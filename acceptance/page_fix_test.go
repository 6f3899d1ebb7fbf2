package acceptance

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/siteline/outbox/ports/waittest"
)

// TestListRefreshStopsWhenTheSessionEnds: when the session behind a list
// that refreshes itself ends (here its cookie is gone, as after a logout
// elsewhere or an expiry), the next refresh stops the polling and shows a
// notice whose link logs in again and comes back to the same list.
func TestListRefreshStopsWhenTheSessionEnds(t *testing.T) {
	exe := browserPath(t)
	c := startListCentral(t)
	c.send("ok", "Pump 3 pressure low")

	br := newBrowser(t, exe, c.srv.URL)
	br.open("/login")
	br.logIn()
	br.open("/notifications?list=ok")
	br.waitContains("the list to refresh once", "[data-live-status]", "live, updated")
	br.do("count the page's requests", chromedp.Evaluate[chromedp.Void](`(() => {
		window.outboxFetches = 0;
		const f = window.fetch;
		window.fetch = (...args) => { window.outboxFetches++; return f(...args); };
	})()`))
	ctx, cancel := br.step()
	_, err := chromedp.Call(ctx, network.ClearBrowserCookies, cdp.Empty{})
	cancel()
	if err != nil {
		t.Fatalf("clear the cookies: %v", err)
	}

	br.waitVisible("#session-ended")
	if got := br.text("#session-ended"); !strings.HasPrefix(got, "Session ended — log in again") {
		t.Errorf("the notice reads %q", got)
	}
	href := run(br, "read the link", chromedp.Evaluate[string](`document.querySelector("#session-ended a").getAttribute("href")`))
	if want := "/login?next=" + url.QueryEscape("/notifications?list=ok"); href != want {
		t.Errorf("the notice links to %q, want %q", href, want)
	}
	if st := br.text("[data-live-status]"); !strings.Contains(st, "refresh stopped: session ended") {
		t.Errorf("the live status reads %q", st)
	}
	// Three refresh intervals (of one second) later, no request followed
	// the one that found the session ended: the polling stopped. (An
	// absence has to be watched for a while; the notice above is what the
	// test waited for.)
	fetches := run(br, "count the requests over three intervals", chromedp.Evaluate[int](
		`new Promise((done) => { const n = window.outboxFetches; setTimeout(() => done(window.outboxFetches - n), 3000); })`,
		chromedp.EvalAwaitPromise))
	if fetches != 0 {
		t.Errorf("the list went on polling after the session ended: %d requests in three intervals", fetches)
	}
	br.screenshot("notifications-list-session-ended.png")

	br.submit("follow the notice's link", "#session-ended a")
	br.logIn()
	if loc := br.location(); !strings.HasSuffix(loc, "/notifications?list=ok") {
		t.Errorf("after logging in again the browser is at %s, want the list it left", loc)
	}
	br.waitContains("the list to refresh again", "[data-live-status]", "live, updated")
	br.checkQuiet()
}

// TestTimeFieldsAcceptWhatTheServerReads: each example is typed into a
// filter's time field and sent as that filter: the field accepts it
// (its pattern) exactly when the server reads it.
func TestTimeFieldsAcceptWhatTheServerReads(t *testing.T) {
	exe := browserPath(t)
	c := startListCentral(t)
	br := newBrowser(t, exe, c.srv.URL)
	br.open("/login")
	br.logIn()
	br.open("/notifications")

	examples := map[string]bool{
		"2026-01-02":                     true,
		"2026-01-02 15:04":               true,
		"2026-01-02 15:04:05":            true,
		"2026-01-02 15:04:05.5":          true,
		"2026-01-02 15:04:05.123456789":  true,
		"2026-01-02T15:04":               true,
		"2026-01-02T15:04:05":            true,
		"2026-01-02T15:04:05Z":           true,
		"2026-01-02T15:04:05.25+02:00":   true,
		"2026-01-02T15:04:05-07:30":      true,
		"2026-01-02 15:04:05Z":           false, // a zone needs the T of RFC 3339
		"2026-01-02T15:04Z":              false, // and seconds
		"2026-01-02 15:04:05+02:00":      false,
		"2026-01-02 3:04":                false,
		"2026-1-2":                       false,
		"2026-01-02 15:04:05,5":          false,
		"2026-01-02 15:04:05.1234567891": false,
		"02/01/2026":                     false,
		"2026-01-02t15:04:05z":           false,
		"yesterday":                      false,
	}
	type verdict struct {
		Field  bool `json:"field"`
		Status int  `json:"status"`
	}
	for ex, want := range examples {
		got := run(br, "try "+ex, chromedp.Evaluate[verdict](fmt.Sprintf(`(async () => {
			const f = document.querySelector('form.filters input[name="from"]');
			f.value = %q;
			const field = f.checkValidity();
			f.value = "";
			const r = await fetch("/notifications?from=" + encodeURIComponent(%q), {credentials: "same-origin"});
			return {field: field, status: r.status};
		})()`, ex, ex), chromedp.EvalAwaitPromise))
		server := got.Status == http.StatusOK
		if got.Status != http.StatusOK && got.Status != http.StatusBadRequest {
			t.Errorf("%q: the server answered %d", ex, got.Status)
		}
		if got.Field != want || server != want {
			t.Errorf("%q: the field accepts it: %v, the server reads it: %v (status %d); want both %v",
				ex, got.Field, server, got.Status, want)
		}
	}
	br.checkQuiet()
}

// waitContains waits until the text of sel holds want, without navigating.
func (b *browser) waitContains(what, sel, want string) {
	b.t.Helper()
	waittest.For(b.t, settleTimeout, what, func() (bool, string) {
		got := run(b, "read "+sel, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, sel)))
		return strings.Contains(got, want), fmt.Sprintf("%s reads %q", sel, got)
	})
}
