package slack_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/httpdeliver/httpdelivertest"
	"github.com/siteline/outbox/plugins/slack"
)

func TestSuite(t *testing.T) {
	httpdelivertest.Suite{
		New:       func(logger *slog.Logger) httpdelivertest.Channel { return slack.New(logger) },
		Settings:  map[string]string{"username": "Outbox"},
		HidesPath: true,
	}.Run(t)
}

// received is one request as the server saw it.
type received struct {
	path   string
	header http.Header
	body   []byte
}

// slackServer answers like Slack: status and a short text body.
func slackServer(t *testing.T, status int, text string) (*httptest.Server, <-chan received) {
	t.Helper()
	got := make(chan received, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read the body: %v", err)
		}
		got <- received{r.URL.Path, r.Header.Clone(), body}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, text)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func deliver(t *testing.T, settings map[string]string, n channel.Notification, targets ...string) channel.Result {
	t.Helper()
	ch := slack.New(nil)
	t.Cleanup(ch.Close)
	return ch.Deliver(t.Context(), channel.Request{Notification: n, Targets: targets, Settings: settings})
}

func TestPayload(t *testing.T) {
	srv, got := slackServer(t, http.StatusOK, "ok")
	n := httpdelivertest.Notification("Tank <3> & pump")
	n.Body = "Level <low> & falling\nsee <!channel> <https://evil.example|here>"
	target := srv.URL + "/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX"
	res := deliver(t, nil, n, target)
	if res.Outcome != channel.Success {
		t.Fatalf("Deliver: %v (%q)", res.Outcome, res.Error)
	}
	if want := srv.URL + "/…"; len(res.ResolvedTargets) != 1 || res.ResolvedTargets[0] != want {
		t.Errorf("resolved %q, want [%s]", res.ResolvedTargets, want)
	}
	r := <-got
	if r.path != "/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX" {
		t.Errorf("path %q", r.path)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var p map[string]any
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	want := "*Tank &lt;3&gt; &amp; pump*\nLevel &lt;low&gt; &amp; falling\nsee &lt;!channel&gt; &lt;https://evil.example|here&gt;"
	if p["text"] != want {
		t.Errorf("text %q, want %q", p["text"], want)
	}
	if len(p) != 1 {
		t.Errorf("payload %s: want only text without the optional settings", r.body)
	}
}

func TestUsernameAndIcon(t *testing.T) {
	srv, got := slackServer(t, http.StatusOK, "ok")
	res := deliver(t, map[string]string{"username": "Outbox", "icon_emoji": ":bell:"}, httpdelivertest.Notification("x"), srv.URL)
	if res.Outcome != channel.Success {
		t.Fatalf("Deliver: %v (%q)", res.Outcome, res.Error)
	}
	var p slack.Payload
	if err := json.Unmarshal((<-got).body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Username != "Outbox" || p.IconEmoji != ":bell:" {
		t.Errorf("payload %+v", p)
	}
	if res := deliver(t, map[string]string{"icon_emoji": "bell"}, httpdelivertest.Notification("x"), srv.URL); res.Outcome != channel.Permanent {
		t.Errorf("icon_emoji bell: %v (%q), want Permanent", res.Outcome, res.Error)
	}
}

func TestText(t *testing.T) {
	for _, c := range []struct{ subject, body, want string }{
		{"S", "B", "*S*\nB"},
		{"", "only body", "only body"},
		{"only subject", "  ", "*only subject*"},
		{"a&b", "<@U123>", "*a&amp;b*\n&lt;@U123&gt;"},
		{"&amp;", "", "*&amp;amp;*"},
	} {
		if got := slack.Text(c.subject, c.body); got != c.want {
			t.Errorf("Text(%q, %q) = %q, want %q", c.subject, c.body, got, c.want)
		}
	}
}

// TestSlackAnswers checks the answers Slack documents, with its short codes
// quoted in the error.
func TestSlackAnswers(t *testing.T) {
	for _, c := range []struct {
		status int
		text   string
		want   channel.Outcome
	}{
		{200, "ok", channel.Success},
		{400, "invalid_payload", channel.Permanent},
		{400, "no_text", channel.Permanent},
		{403, "action_prohibited", channel.Permanent},
		{403, "posting_to_general_channel_denied", channel.Permanent},
		{404, "no_service", channel.Permanent},
		{404, "channel_not_found", channel.Permanent},
		{410, "channel_is_archived", channel.Permanent},
		{429, "rate_limited", channel.Transient},
		{500, "rollup_error", channel.Transient},
	} {
		srv, _ := slackServer(t, c.status, c.text)
		res := deliver(t, nil, httpdelivertest.Notification("x"), srv.URL+"/services/T/B/secret")
		if res.Outcome != c.want {
			t.Errorf("%d %s: %v (%q), want %v", c.status, c.text, res.Outcome, res.Error, c.want)
		}
		if c.want != channel.Success && !strings.Contains(res.Error, `"`+c.text+`"`) {
			t.Errorf("%d %s: the error %q does not quote Slack's code", c.status, c.text, res.Error)
		}
	}
}

func TestLongOrAddressedAnswersAreNotQuoted(t *testing.T) {
	srv, _ := slackServer(t, http.StatusBadRequest, "contact admin@example.com or see https://status.slack.com")
	res := deliver(t, nil, httpdelivertest.Notification("x"), srv.URL)
	if res.Outcome != channel.Permanent || strings.Contains(res.Error, "@") || strings.Contains(res.Error, "status.slack.com") {
		t.Errorf("%v (%q): want Permanent without the address or the URL", res.Outcome, res.Error)
	}
	srv, _ = slackServer(t, http.StatusBadRequest, strings.Repeat("invalid ", 100))
	res = deliver(t, nil, httpdelivertest.Notification("x"), srv.URL)
	if res.Outcome != channel.Permanent || strings.Contains(res.Error, "invalid") {
		t.Errorf("%v (%q): want Permanent without the long body", res.Outcome, res.Error)
	}
}

func TestDescribe(t *testing.T) {
	d, err := slack.New(nil).Describe(t.Context())
	if err != nil || d.Name != "slack" || d.Version == "" {
		t.Fatalf("Describe: %+v, %v", d, err)
	}
	if err := d.Validate(map[string]string{"username": "x", "icon_emoji": ":x:", "timeout": "5s"}); err != nil {
		t.Errorf("Validate: %v", err)
	}
}
