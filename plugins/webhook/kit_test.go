package webhook_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/channel/v1/plugintest"
	"github.com/siteline/outbox/plugins/httpdeliver/httpdelivertest"
	"github.com/siteline/outbox/plugins/webhook"
)

// TestMain lets the test binary serve as the webhook plugin of the kit's
// subprocess mode, built as central builds it.
func TestMain(m *testing.M) {
	plugintest.Main(m, map[string]func() channel.Channel{
		webhook.Name: func() channel.Channel { return webhook.New(channel.Logger()) },
	})
}

// TestKit runs the channel plugin contract kit on the webhook channel,
// in-process, over gRPC and as a plugin process.
func TestKit(t *testing.T) {
	plugintest.Run(t, plugintest.Target{
		Name:    webhook.Name,
		New:     func(*testing.T) channel.Channel { return webhook.New(nil) },
		Command: plugintest.Reexec(webhook.Name),
		Cases:   kitCases,
	})
}

// kitCases delivers signed POSTs to a recorder, whose check finds the POST
// by its id and verifies its signature, and adds the HTTP failures.
func kitCases(t *testing.T) []plugintest.Case {
	rec := httpdelivertest.NewRecorder(t, http.StatusOK)
	const path, query = "/hooks/outbox", "token=" + httpdelivertest.KitToken
	check := func(t *testing.T, req channel.Request, res channel.Result) {
		t.Helper()
		id := req.Notification.ID
		r, ok := rec.Find(func(r httpdelivertest.Received) bool { return r.Header.Get(webhook.HeaderID) == id })
		if !ok {
			t.Errorf("no POST with %s %s reached the server", webhook.HeaderID, id)
			return
		}
		if err := webhook.Verify(testSecret, r.Header, r.Body, 0, time.Now()); err != nil {
			t.Errorf("POST %s: %v", id, err)
		}
		if r.Path != path || r.RawQuery != query {
			t.Errorf("POST %s to %s?%s, want %s?%s", id, r.Path, r.RawQuery, path, query)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("POST %s: Content-Type %q", id, ct)
		}
		var p webhook.Payload
		if err := json.Unmarshal(r.Body, &p); err != nil {
			t.Errorf("POST %s: decode the payload: %v", id, err)
			return
		}
		n := req.Notification
		if p.ID != id || p.List != n.List || p.Subject != n.Subject || p.Body != n.Body {
			t.Errorf("payload id %q, list %q, subject %q and a body of %d bytes; want %q, %q, %q and %d bytes",
				p.ID, p.List, p.Subject, len(p.Body), id, n.List, n.Subject, len(n.Body))
		}
		if want := []string{rec.URL + path}; !slices.Equal(res.ResolvedTargets, want) {
			t.Errorf("resolved %q, want %q", res.ResolvedTargets, want)
		}
	}
	return httpdelivertest.KitCases(t, plugintest.Case{
		Name: "Delivered",
		Request: channel.Request{
			Notification: httpdelivertest.Notification("Pump 3 stopped"),
			Targets:      []string{rec.URL + path + "?" + query},
			Settings:     map[string]string{webhook.SecretSetting: testSecret, "timeout": "5s"},
		},
		Want:  channel.Success,
		Check: check,
	})
}
