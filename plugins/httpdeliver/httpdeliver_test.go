package httpdeliver_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/channel/v1/plugintest"
	"github.com/siteline/outbox/plugins/httpdeliver"
	"github.com/siteline/outbox/plugins/httpdeliver/httpdelivertest"
)

// rawChannel is the thinnest channel over a Client: it posts the subject.
type rawChannel struct{ client *httpdeliver.Client }

func (c rawChannel) Deliver(ctx context.Context, req channel.Request) channel.Result {
	timeout, err := httpdeliver.Timeout(req.Settings)
	if err != nil {
		return channel.Fail(err)
	}
	return c.client.Deliver(ctx, req.Targets, httpdeliver.Message{
		ID:      req.Notification.ID,
		Body:    []byte(`{"subject":"` + req.Notification.Subject + `"}`),
		Timeout: timeout,
	})
}

func (c rawChannel) Describe(context.Context) (channel.Description, error) {
	return channel.Description{Name: "raw", Version: "test", Settings: []channel.Setting{httpdeliver.TimeoutSetting()}}, nil
}

func (c rawChannel) Close() { c.client.Close() }

func TestClientSuite(t *testing.T) {
	httpdelivertest.Suite{
		New: func(logger *slog.Logger) httpdelivertest.Channel {
			return rawChannel{client: httpdeliver.NewClient(logger, "")}
		},
		HidesPath: true,
	}.Run(t)
}

func TestClassify(t *testing.T) {
	for status, want := range map[int]channel.Outcome{
		100: channel.Permanent, 200: channel.Success, 202: channel.Success, 204: channel.Success,
		299: channel.Success, 301: channel.Permanent, 304: channel.Permanent, 400: channel.Permanent,
		404: channel.Permanent, 408: channel.Transient, 409: channel.Permanent, 429: channel.Transient,
		500: channel.Transient, 501: channel.Transient, 599: channel.Transient, 600: channel.Permanent,
	} {
		if got := httpdeliver.Classify(status); got != want {
			t.Errorf("Classify(%d) = %v, want %v", status, got, want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                               0,
		"0":                              0,
		"30":                             30 * time.Second,
		" 120 ":                          2 * time.Minute,
		"-5":                             0,
		"1.5":                            0,
		"soon":                           0,
		"86400":                          httpdeliver.MaxRetryAfter,
		"99999999999999999999999":        httpdeliver.MaxRetryAfter,
		"Sun, 01 Mar 2026 12:05:00 GMT":  5 * time.Minute,
		"Sunday, 01-Mar-26 12:00:30 GMT": 30 * time.Second,
		"Sun Mar  1 12:01:00 2026":       time.Minute,
		"Sun, 01 Mar 2026 11:00:00 GMT":  0,
		"Mon, 02 Mar 2026 12:00:00 GMT":  httpdeliver.MaxRetryAfter,
	} {
		if got := httpdeliver.ParseRetryAfter(v, now); got != want {
			t.Errorf("ParseRetryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestParseTarget(t *testing.T) {
	for raw, ok := range map[string]bool{
		"https://hooks.slack.com/services/T/B/X": true,
		"http://127.0.0.1:8080/hook?x=1":         true,
		" https://example.com ":                  true,
		"HTTPS://EXAMPLE.COM/x":                  true,
		"https://user:pw@example.com/x":          true,
		"https://[::1]:443/x":                    true,
		"":                                       false,
		"example.com/hook":                       false,
		"//example.com/hook":                     false,
		"ftp://example.com/":                     false,
		"https://":                               false,
		"https://:443/":                          false,
		"https:example.com":                      false,
		"https://example.com/%zz":                false,
		"https://exa mple.com/":                  false,
		"mailto:ops@example.com":                 false,
	} {
		u, err := httpdeliver.ParseTarget(raw)
		if (err == nil) != ok {
			t.Errorf("ParseTarget(%q): error %v, want ok %v", raw, err, ok)
			continue
		}
		if err != nil {
			if !errors.Is(err, httpdeliver.ErrInvalidTarget) {
				t.Errorf("ParseTarget(%q): %v does not wrap ErrInvalidTarget", raw, err)
			}
			if raw != "" && strings.Contains(err.Error(), raw) {
				t.Errorf("ParseTarget(%q): the error %q repeats the target", raw, err)
			}
		} else if u.Host == "" {
			t.Errorf("ParseTarget(%q): no host", raw)
		}
	}
}

func TestRedact(t *testing.T) {
	u, err := url.Parse("https://user:pw@hooks.example.com:8443/services/T1/B2/tok%2Fen?sig=abc#frag")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := httpdeliver.RedactQuery(u), "https://hooks.example.com:8443/services/T1/B2/tok%2Fen"; got != want {
		t.Errorf("RedactQuery = %q, want %q", got, want)
	}
	if got, want := httpdeliver.RedactPath(u), "https://hooks.example.com:8443/…"; got != want {
		t.Errorf("RedactPath = %q, want %q", got, want)
	}
}

func TestTimeout(t *testing.T) {
	for v, want := range map[string]time.Duration{"": httpdeliver.DefaultTimeout, " ": httpdeliver.DefaultTimeout,
		"5s": 5 * time.Second, "1m30s": 90 * time.Second} {
		got, err := httpdeliver.Timeout(map[string]string{"timeout": v})
		if err != nil || got != want {
			t.Errorf("Timeout(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	if got, err := httpdeliver.Timeout(nil); err != nil || got != httpdeliver.DefaultTimeout {
		t.Errorf("Timeout(nil) = %v, %v", got, err)
	}
	for _, v := range []string{"soon", "10", "0s", "-1s"} {
		if _, err := httpdeliver.Timeout(map[string]string{"timeout": v}); err == nil {
			t.Errorf("Timeout(%q): no error", v)
		}
	}
}

func TestSanitize(t *testing.T) {
	long := strings.Repeat("x", 201)
	for body, want := range map[string]string{
		"ok":                                   "ok",
		"  invalid_payload\n":                  "invalid_payload",
		"channel_is_archived":                  "channel_is_archived",
		"no_service":                           "no_service",
		"line one\r\nline\ttwo\x00":            "line one line two",
		"see https://hooks.slack.com/x for it": "see [redacted] for it",
		"mail ops@example.com now":             "mail [redacted] now",
		"path /services/T1/B2 bad":             "path [redacted] bad",
		"token " + strings.Repeat("a", 41):     "token [redacted]",
		"<html><body>Bad</body></html>":        "",
		long:                                   "",
		"\xff\xfe":                             "",
		"   ":                                  "",
		`{"error":"invalid_token"}`:            `{"error":"invalid_token"}`,
		"secret SECRETTOKEN here":              "secret [redacted] here",
	} {
		if got := httpdeliver.Sanitize([]byte(body), "SECRETTOKEN"); got != want {
			t.Errorf("Sanitize(%q) = %q, want %q", body, got, want)
		}
	}
	words := strings.TrimSpace(strings.Repeat("abcdefghi ", 19))
	if got := httpdeliver.Sanitize([]byte(words)); len([]rune(got)) != 121 || !strings.HasSuffix(got, "…") {
		t.Errorf("Sanitize(190 bytes) = %q: want 120 runes and an ellipsis", got)
	}
}

func TestPostWrapsTheNetworkError(t *testing.T) {
	srv := httpdelivertest.NewServer(t, func(http.ResponseWriter, *http.Request) {})
	u, err := url.Parse(srv.URL + "/hook/SECRET123")
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	c := httpdeliver.NewClient(nil, "")
	defer c.Close()
	a := c.Post(t.Context(), u, httpdeliver.Message{Body: []byte("{}")})
	if a.Outcome != channel.Transient || a.Status != 0 {
		t.Fatalf("closed server: %+v, want Transient without status", a)
	}
	if !errors.Is(a.Err, syscall.ECONNREFUSED) {
		t.Errorf("error %v does not wrap ECONNREFUSED", a.Err)
	}
	if text := a.Err.Error(); strings.Contains(text, "SECRET123") || strings.Contains(text, "127.0.0.1") ||
		!strings.Contains(text, "connection refused") {
		t.Errorf("error text %q: want %q without the URL or the address", text, "connection refused")
	}
}

func TestPostSendsHeaders(t *testing.T) {
	got := make(chan http.Header, 1)
	srv := httpdelivertest.NewServer(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.WriteHeader(http.StatusNoContent)
	})
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := httpdeliver.NewClient(nil, "")
	defer c.Close()
	a := c.Post(t.Context(), u, httpdeliver.Message{Body: []byte("{}"), Header: http.Header{"X-Test": {"1"}}})
	if a.Outcome != channel.Success || a.Status != http.StatusNoContent || a.Err != nil {
		t.Fatalf("Post: %+v", a)
	}
	h := <-got
	if h.Get("Content-Type") != "application/json" || h.Get("User-Agent") != httpdeliver.UserAgent || h.Get("X-Test") != "1" {
		t.Errorf("headers received: %v", h)
	}
}

func TestDeliverPostsARepeatedTargetOnce(t *testing.T) {
	srv := httpdelivertest.NewServer(t, func(w http.ResponseWriter, _ *http.Request) {})
	c := httpdeliver.NewClient(nil, "")
	defer c.Close()
	res := c.Deliver(t.Context(), []string{srv.URL + "/a", srv.URL + "/a", srv.URL + "/b"},
		httpdeliver.Message{Body: []byte("{}"), Redact: httpdeliver.RedactQuery})
	if res.Outcome != channel.Success || srv.Requests() != 2 {
		t.Fatalf("%v (%q), %d requests; want Success, 2 requests", res.Outcome, res.Error, srv.Requests())
	}
	if want := []string{srv.URL + "/a", srv.URL + "/b"}; strings.Join(res.ResolvedTargets, " ") != strings.Join(want, " ") {
		t.Errorf("resolved %q, want %q", res.ResolvedTargets, want)
	}
	// The repeat is answered at its own place in the list.
	if len(res.Targets) != 3 {
		t.Fatalf("%d target results, want 3", len(res.Targets))
	}
	for i, r := range res.Targets {
		if r.Outcome != channel.Success {
			t.Errorf("target %d: %v (%q), want Success", i+1, r.Outcome, r.Error)
		}
	}
}

// TestDeliverAnswersARepeatedFailingTargetAtEachPlace checks that a repeated
// target that fails is posted once and fails at each of its places.
func TestDeliverAnswersARepeatedFailingTargetAtEachPlace(t *testing.T) {
	ok := httpdelivertest.NewServer(t, func(http.ResponseWriter, *http.Request) {})
	busy := httpdelivertest.NewServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "9")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	c := httpdeliver.NewClient(nil, "")
	defer c.Close()
	res := c.Deliver(t.Context(), []string{busy.URL + "/x", ok.URL, busy.URL + "/x"}, httpdeliver.Message{Body: []byte("{}")})
	if busy.Requests() != 1 || ok.Requests() != 1 {
		t.Errorf("requests: busy %d, ok %d; want 1 each", busy.Requests(), ok.Requests())
	}
	want := []channel.TargetResult{
		{Outcome: channel.Transient, Error: "HTTP 503 Service Unavailable", RetryAfter: 9 * time.Second},
		{Outcome: channel.Success},
		{Outcome: channel.Transient, Error: "HTTP 503 Service Unavailable", RetryAfter: 9 * time.Second},
	}
	if !slices.Equal(res.Targets, want) {
		t.Errorf("targets %+v, want %+v", res.Targets, want)
	}
	if res.Outcome != channel.Transient || res.RetryAfter != 9*time.Second {
		t.Errorf("%v, RetryAfter %v; want Transient, 9s", res.Outcome, res.RetryAfter)
	}
}

// TestDeliverSumsUpFailedTargets checks the overall error of a partly failed
// delivery: how many targets failed and the first failure, never a URL; each
// target's own error is in its answer.
func TestDeliverSumsUpFailedTargets(t *testing.T) {
	ok := httpdelivertest.NewServer(t, func(http.ResponseWriter, *http.Request) {})
	busy := httpdelivertest.NewServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	c := httpdeliver.NewClient(nil, "")
	defer c.Close()
	res := c.Deliver(t.Context(), []string{ok.URL, busy.URL}, httpdeliver.Message{Body: []byte("{}")})
	if want := "1 of 2 targets failed: HTTP 503 Service Unavailable"; res.Error != want {
		t.Errorf("error %q, want %q", res.Error, want)
	}
	if len(res.Targets) != 2 || res.Targets[1].Error != "HTTP 503 Service Unavailable" {
		t.Errorf("targets %+v: want the second's error to be its answer", res.Targets)
	}
}

// TestMain gives the tests the kit's policy (loopback allowed): their
// servers listen there.
func TestMain(m *testing.M) { plugintest.Main(m, nil) }
