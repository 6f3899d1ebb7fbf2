package teams_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/channel/v1/plugintest"
	"github.com/siteline/outbox/plugins/httpdeliver/httpdelivertest"
	"github.com/siteline/outbox/plugins/teams"
)

// TestMain lets the test binary serve as the Teams plugin of the kit's
// subprocess mode, built as central builds it.
func TestMain(m *testing.M) {
	plugintest.Main(m, map[string]func() channel.Channel{
		teams.Name: func() channel.Channel { return teams.New(channel.Logger()) },
	})
}

// TestKit runs the channel plugin contract kit on the Teams channel,
// in-process, over gRPC and as a plugin process.
func TestKit(t *testing.T) {
	plugintest.Run(t, plugintest.Target{
		Name:    teams.Name,
		New:     func(*testing.T) channel.Channel { return teams.New(nil) },
		Command: plugintest.Reexec(teams.Name),
		Cases:   kitCases,
	})
}

// card is the part of a Teams message the check reads, decoded by its JSON
// field names rather than through the channel's Go types.
type card struct {
	Type        string `json:"type"`
	Attachments []struct {
		ContentType string `json:"contentType"`
		Content     struct {
			Type string `json:"type"`
			Body []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"body"`
		} `json:"content"`
	} `json:"attachments"`
}

// texts returns the texts of the card's text blocks, or nil when the message
// is not one Adaptive Card of text blocks.
func (c card) texts() []string {
	if c.Type != "message" || len(c.Attachments) != 1 {
		return nil
	}
	a := c.Attachments[0]
	if a.ContentType != "application/vnd.microsoft.card.adaptive" || a.Content.Type != "AdaptiveCard" {
		return nil
	}
	var out []string
	for _, b := range a.Content.Body {
		if b.Type != "TextBlock" {
			return nil
		}
		out = append(out, b.Text)
	}
	return out
}

// kitCases posts to a recorder standing in for a Teams Workflows webhook,
// whose check finds a card with the notification's subject and body (a card
// has no id), and adds the HTTP failures.
func kitCases(t *testing.T) []plugintest.Case {
	// A Workflows webhook answers 202 and carries its signature in the query.
	rec := httpdelivertest.NewRecorder(t, http.StatusAccepted)
	const path, query = "/workflows/kit/triggers/manual/paths/invoke", "api-version=1&sig=" + httpdelivertest.KitToken
	check := func(t *testing.T, req channel.Request, res channel.Result) {
		t.Helper()
		want := []string{req.Notification.Subject, req.Notification.Body}
		r, ok := rec.Find(func(r httpdelivertest.Received) bool {
			var c card
			return json.Unmarshal(r.Body, &c) == nil && slices.Equal(c.texts(), want)
		})
		if !ok {
			t.Errorf("no card with subject %q and a body of %d bytes reached the server",
				req.Notification.Subject, len(req.Notification.Body))
			return
		}
		if r.Path != path || r.RawQuery != query {
			t.Errorf("posted to %s?%s, want %s?%s", r.Path, r.RawQuery, path, query)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		if want := []string{rec.URL + "/…"}; !slices.Equal(res.ResolvedTargets, want) {
			t.Errorf("resolved %q, want %q", res.ResolvedTargets, want)
		}
	}
	return httpdelivertest.KitCases(t, plugintest.Case{
		Name: "Delivered",
		Request: channel.Request{
			Notification: httpdelivertest.Notification("Pump 3 stopped"),
			Targets:      []string{rec.URL + path + "?" + query},
			Settings:     map[string]string{"timeout": "5s"},
		},
		Want:  channel.Success,
		Check: check,
	})
}
