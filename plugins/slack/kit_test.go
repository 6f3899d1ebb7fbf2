package slack_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/channel/v1/plugintest"
	"github.com/siteline/outbox/plugins/httpdeliver/httpdelivertest"
	"github.com/siteline/outbox/plugins/slack"
)

// TestMain lets the test binary serve as the Slack plugin of the kit's
// subprocess mode, built as central builds it.
func TestMain(m *testing.M) {
	plugintest.Main(m, map[string]func() channel.Channel{
		slack.Name: func() channel.Channel { return slack.New(channel.Logger()) },
	})
}

// TestKit runs the channel plugin contract kit on the Slack channel,
// in-process, over gRPC and as a plugin process.
func TestKit(t *testing.T) {
	plugintest.Run(t, plugintest.Target{
		Name:    slack.Name,
		New:     func(*testing.T) channel.Channel { return slack.New(nil) },
		Command: plugintest.Reexec(slack.Name),
		Cases:   kitCases,
	})
}

// kitCases posts to a recorder standing in for a Slack webhook, whose check
// finds a message with the notification's text (a Slack message has no id),
// and adds the HTTP failures.
func kitCases(t *testing.T) []plugintest.Case {
	rec := httpdelivertest.NewRecorder(t, http.StatusOK)
	// A Slack webhook URL is a credential: its path is the token.
	const path = "/services/T0KIT/B0KIT/" + httpdelivertest.KitToken
	check := func(t *testing.T, req channel.Request, res channel.Result) {
		t.Helper()
		want := slack.Text(req.Notification.Subject, req.Notification.Body)
		var p slack.Payload
		r, ok := rec.Find(func(r httpdelivertest.Received) bool {
			p = slack.Payload{}
			return json.Unmarshal(r.Body, &p) == nil && p.Text == want
		})
		if !ok {
			t.Errorf("no message with the text of subject %q and a body of %d bytes reached the server",
				req.Notification.Subject, len(req.Notification.Body))
			return
		}
		if r.Path != path {
			t.Errorf("posted to %s, want %s", r.Path, path)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		if p.Username != "Outbox" || p.IconEmoji != ":bell:" {
			t.Errorf("username %q, icon %q; want Outbox, :bell:", p.Username, p.IconEmoji)
		}
		if want := []string{rec.URL + "/…"}; !slices.Equal(res.ResolvedTargets, want) {
			t.Errorf("resolved %q, want %q", res.ResolvedTargets, want)
		}
	}
	return httpdelivertest.KitCases(t, plugintest.Case{
		Name: "Delivered",
		Request: channel.Request{
			Notification: httpdelivertest.Notification("Pump 3 stopped"),
			Targets:      []string{rec.URL + path},
			Settings:     map[string]string{slack.UsernameSetting: "Outbox", slack.IconEmojiSetting: ":bell:"},
		},
		Want:  channel.Success,
		Check: check,
	})
}
