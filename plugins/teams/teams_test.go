package teams_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/httpdeliver/httpdelivertest"
	"github.com/siteline/outbox/plugins/teams"
)

func TestSuite(t *testing.T) {
	httpdelivertest.Suite{
		New:       func(logger *slog.Logger) httpdelivertest.Channel { return teams.New(logger) },
		HidesPath: true,
	}.Run(t)
}

// received is one request as the server saw it.
type received struct {
	path, query string
	header      http.Header
	body        []byte
}

func teamsServer(t *testing.T, status int, answer string) (*httptest.Server, <-chan received) {
	t.Helper()
	got := make(chan received, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read the body: %v", err)
		}
		got <- received{r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func deliver(t *testing.T, n channel.Notification, targets ...string) channel.Result {
	t.Helper()
	ch := teams.New(nil)
	t.Cleanup(ch.Close)
	return ch.Deliver(t.Context(), channel.Request{Notification: n, Targets: targets})
}

// TestCard decodes the card as the server received it, generically, to
// check the JSON field names and not only the Go types.
func TestCard(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		answer string
		path   string
	}{
		{"WorkflowsAnswer202", http.StatusAccepted, "", "/workflows/abc/triggers/manual/paths/invoke"},
		{"LegacyAnswer200", http.StatusOK, "1", "/webhookb2/abc@def/IncomingWebhook/ghi/jkl"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, got := teamsServer(t, c.status, c.answer)
			n := httpdelivertest.Notification("Pump **3** <down>")
			target := srv.URL + c.path + "?api-version=2016-06-01&sig=SIGNATURE"
			res := deliver(t, n, target)
			if res.Outcome != channel.Success {
				t.Fatalf("Deliver: %v (%q)", res.Outcome, res.Error)
			}
			if want := srv.URL + "/…"; len(res.ResolvedTargets) != 1 || res.ResolvedTargets[0] != want {
				t.Errorf("resolved %q, want [%s]", res.ResolvedTargets, want)
			}
			r := <-got
			if r.path != c.path || r.query != "api-version=2016-06-01&sig=SIGNATURE" {
				t.Errorf("request to %s?%s", r.path, r.query)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			var m struct {
				Type        string `json:"type"`
				Attachments []struct {
					ContentType string `json:"contentType"`
					Content     struct {
						Schema  string           `json:"$schema"`
						Type    string           `json:"type"`
						Version string           `json:"version"`
						Body    []map[string]any `json:"body"`
					} `json:"content"`
				} `json:"attachments"`
			}
			if err := json.Unmarshal(r.body, &m); err != nil {
				t.Fatalf("decode %s: %v", r.body, err)
			}
			if m.Type != "message" || len(m.Attachments) != 1 {
				t.Fatalf("message %s", r.body)
			}
			a := m.Attachments[0]
			if a.ContentType != "application/vnd.microsoft.card.adaptive" || a.Content.Type != "AdaptiveCard" ||
				a.Content.Version != "1.4" || a.Content.Schema != "http://adaptivecards.io/schemas/adaptive-card.json" {
				t.Errorf("attachment %+v", a)
			}
			if len(a.Content.Body) != 2 {
				t.Fatalf("card body %v: want two text blocks", a.Content.Body)
			}
			title, text := a.Content.Body[0], a.Content.Body[1]
			if title["type"] != "TextBlock" || title["text"] != n.Subject || title["weight"] != "Bolder" ||
				title["size"] != "Medium" || title["wrap"] != true {
				t.Errorf("title block %v", title)
			}
			if text["type"] != "TextBlock" || text["text"] != n.Body || text["wrap"] != true {
				t.Errorf("body block %v", text)
			}
			if _, ok := text["weight"]; ok {
				t.Errorf("body block %v has a weight", text)
			}
		})
	}
}

func TestTeamsAnswers(t *testing.T) {
	for _, c := range []struct {
		status int
		want   channel.Outcome
	}{
		{200, channel.Success}, {202, channel.Success}, {400, channel.Permanent}, {401, channel.Permanent},
		{404, channel.Permanent}, {413, channel.Permanent}, {429, channel.Transient}, {502, channel.Transient},
	} {
		srv, _ := teamsServer(t, c.status, "")
		if res := deliver(t, httpdelivertest.Notification("x"), srv.URL); res.Outcome != c.want {
			t.Errorf("HTTP %d: %v (%q), want %v", c.status, res.Outcome, res.Error, c.want)
		}
	}
}

func TestDescribe(t *testing.T) {
	d, err := teams.New(nil).Describe(t.Context())
	if err != nil || d.Name != "teams" || d.Version == "" {
		t.Fatalf("Describe: %+v, %v", d, err)
	}
	if err := d.Validate(map[string]string{"timeout": "5s"}); err != nil {
		t.Errorf("Validate: %v", err)
	}
}
