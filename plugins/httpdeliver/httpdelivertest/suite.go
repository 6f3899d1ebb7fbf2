// Package httpdelivertest is the contract suite of the HTTP channels: it
// runs a channel against real HTTP servers on loopback and checks how it
// classifies every kind of answer, that it honours Retry-After, deadlines and
// several targets, that it never leaks a target's secrets into errors or
// logs, and that it is safe for concurrent use.
package httpdelivertest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/channel/v1/plugintest"
)

// Channel is an HTTP channel under test.
type Channel interface {
	channel.Channel
	channel.Describer
	// Close releases the channel's idle connections.
	Close()
}

// Suite describes the channel under test.
type Suite struct {
	// New builds the channel, logging to logger. The channel takes its
	// delivery network policy from the environment when it is built
	// (channel.NetworkPolicyFromEnv): the suite sets the environment to
	// check the policy.
	New func(logger *slog.Logger) Channel
	// Settings are valid settings for the channel; the suite adds
	// "timeout" where it needs one.
	Settings map[string]string
	// HidesPath says that ResolvedTargets hide the path (scheme://host/…);
	// otherwise they show scheme://host/path.
	HidesPath bool
}

// Secrets put into the targets of the leak test. None may appear in an error
// or a log line; the path ones may appear in ResolvedTargets only when the
// channel shows paths.
const (
	secretPath  = "PATHSECRET7f3a9c"
	secretQuery = "QUERYSECRET51bd0e"
	secretUser  = "USERSECRET0c4e2a"
	secretPass  = "PASSSECRET9e8d7c"
)

// Run runs the suite as subtests of t.
func (s Suite) Run(t *testing.T) {
	t.Run("Describe", s.testDescribe)
	t.Run("Status", s.testStatus)
	t.Run("RedirectNotFollowed", s.testRedirect)
	t.Run("RetryAfter", s.testRetryAfter)
	t.Run("ConnectionRefused", s.testRefused)
	t.Run("DeadlineOfTheAttempt", s.testDeadline)
	t.Run("TimeoutSetting", s.testTimeoutSetting)
	t.Run("CanceledBeforeStart", s.testCanceled)
	t.Run("SeveralTargets", s.testSeveralTargets)
	t.Run("InvalidTargets", s.testInvalidTargets)
	t.Run("NoTargets", s.testNoTargets)
	t.Run("InvalidTimeout", s.testInvalidTimeout)
	t.Run("NoSecretsInErrorsOrLogs", s.testNoLeaks)
	t.Run("Concurrent", s.testConcurrent)
	t.Run("Close", s.testClose)
	t.Run("NetworkPolicy", s.testNetworkPolicy)
}

func (s Suite) newChannel(t *testing.T) Channel {
	t.Helper()
	ch := s.New(nil)
	t.Cleanup(ch.Close)
	return ch
}

func (s Suite) settings(extra ...string) map[string]string {
	out := maps.Clone(s.Settings)
	if out == nil {
		out = map[string]string{}
	}
	for i := 0; i+1 < len(extra); i += 2 {
		out[extra[i]] = extra[i+1]
	}
	return out
}

// Notification returns a plain notification whose subject is subject.
func Notification(subject string) channel.Notification {
	return channel.Notification{
		ID:         "0190c1b4-7e6a-7c3e-9d1e-3f2a1b0c9d8e",
		List:       "ops",
		Subject:    subject,
		Body:       "Pump 3 pressure low.\nCheck <valve> & filter.",
		Priority:   1,
		SourceSite: "site-a",
		CreatedAt:  time.Date(2026, 3, 1, 12, 30, 0, 123456000, time.UTC),
		Attempt:    2,
	}
}

func (s Suite) request(targets ...string) channel.Request {
	return channel.Request{Notification: Notification("Alarm"), Targets: targets, Settings: s.settings()}
}

// Server is a loopback HTTP server that counts the requests it receives.
type Server struct {
	*httptest.Server
	mu       sync.Mutex
	requests int
}

// Requests returns how many requests the server has received.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// NewServer starts a server answering every request with h, closed when the
// test ends.
func NewServer(t testing.TB, h http.HandlerFunc) *Server {
	t.Helper()
	s := &Server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests++
		s.mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// statusServer answers every request with status and, if not blank, the
// Retry-After header.
func statusServer(t *testing.T, status int, retryAfter string) *Server {
	return NewServer(t, func(w http.ResponseWriter, _ *http.Request) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(status)
	})
}

// hangingServer never answers until the client gives up or the test ends.
func hangingServer(t *testing.T) *Server {
	release := make(chan struct{})
	srv := NewServer(t, func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // runs before the server's Close
	return srv
}

func (s Suite) testDescribe(t *testing.T) {
	d, err := s.newChannel(t).Describe(t.Context())
	if err != nil {
		t.Fatalf("Describe: %v", err)
	}
	if d.Name == "" || d.Version == "" {
		t.Errorf("Describe: name %q, version %q: want both", d.Name, d.Version)
	}
	var timeout bool
	for _, st := range d.Settings {
		if st.Description == "" {
			t.Errorf("setting %q has no description", st.Name)
		}
		timeout = timeout || st.Name == "timeout"
	}
	if !timeout {
		t.Errorf("the schema has no timeout setting")
	}
	if err := d.Validate(s.settings("timeout", "5s")); err != nil {
		t.Errorf("Validate(the suite's settings): %v", err)
	}
	if err := d.Validate(s.settings("no_such_setting", "x")); err == nil {
		t.Errorf("Validate accepted an unknown setting")
	}
}

func (s Suite) testStatus(t *testing.T) {
	cases := []struct {
		status int
		want   channel.Outcome
	}{
		{200, channel.Success}, {201, channel.Success}, {202, channel.Success}, {204, channel.Success},
		{408, channel.Transient}, {429, channel.Transient}, {500, channel.Transient},
		{502, channel.Transient}, {503, channel.Transient}, {504, channel.Transient},
		{400, channel.Permanent}, {401, channel.Permanent}, {403, channel.Permanent},
		{404, channel.Permanent}, {405, channel.Permanent}, {410, channel.Permanent},
		{413, channel.Permanent}, {422, channel.Permanent},
	}
	ch := s.newChannel(t)
	for _, c := range cases {
		t.Run(strconv.Itoa(c.status), func(t *testing.T) {
			srv := statusServer(t, c.status, "")
			res := ch.Deliver(t.Context(), s.request(srv.URL+"/hook"))
			if res.Outcome != c.want {
				t.Fatalf("HTTP %d: outcome %v (%q), want %v", c.status, res.Outcome, res.Error, c.want)
			}
			if got := srv.Requests(); got != 1 {
				t.Errorf("server received %d requests, want 1", got)
			}
			if c.want == channel.Success {
				if res.Error != "" || len(res.ResolvedTargets) != 1 {
					t.Errorf("Success: error %q, resolved %q", res.Error, res.ResolvedTargets)
				}
				return
			}
			if !strings.Contains(res.Error, strconv.Itoa(c.status)) {
				t.Errorf("error %q does not name the status %d", res.Error, c.status)
			}
			if res.RetryAfter != 0 {
				t.Errorf("RetryAfter %v without a Retry-After header", res.RetryAfter)
			}
		})
	}
}

func (s Suite) testRedirect(t *testing.T) {
	ok := statusServer(t, http.StatusOK, "")
	for _, status := range []int{301, 302, 307, 308} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			srv := NewServer(t, func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, ok.URL+"/elsewhere", status)
			})
			res := s.newChannel(t).Deliver(t.Context(), s.request(srv.URL+"/hook"))
			if res.Outcome != channel.Permanent {
				t.Errorf("HTTP %d: outcome %v (%q), want Permanent", status, res.Outcome, res.Error)
			}
		})
	}
	if n := ok.Requests(); n != 0 {
		t.Errorf("a redirect was followed: the target of the redirects received %d requests", n)
	}
}

func (s Suite) testRetryAfter(t *testing.T) {
	ch := s.newChannel(t)
	t.Run("Seconds", func(t *testing.T) {
		srv := statusServer(t, http.StatusTooManyRequests, "7")
		res := ch.Deliver(t.Context(), s.request(srv.URL))
		if res.Outcome != channel.Transient || res.RetryAfter != 7*time.Second {
			t.Errorf("429 Retry-After 7: %v, RetryAfter %v; want Transient, 7s", res.Outcome, res.RetryAfter)
		}
	})
	t.Run("HTTPDate", func(t *testing.T) {
		// The date has a resolution of a second, and time passes between
		// formatting it and parsing it.
		date := time.Now().Add(10 * time.Minute).UTC().Format(http.TimeFormat)
		srv := statusServer(t, http.StatusServiceUnavailable, date)
		res := ch.Deliver(t.Context(), s.request(srv.URL))
		if res.Outcome != channel.Transient || res.RetryAfter < 9*time.Minute || res.RetryAfter > 10*time.Minute {
			t.Errorf("503 Retry-After %s: %v, RetryAfter %v; want Transient, about 10m", date, res.Outcome, res.RetryAfter)
		}
	})
	t.Run("Malformed", func(t *testing.T) {
		srv := statusServer(t, http.StatusServiceUnavailable, "soon")
		res := ch.Deliver(t.Context(), s.request(srv.URL))
		if res.Outcome != channel.Transient || res.RetryAfter != 0 {
			t.Errorf("503 Retry-After soon: %v, RetryAfter %v; want Transient, 0", res.Outcome, res.RetryAfter)
		}
	})
	t.Run("LargestOfTheTargets", func(t *testing.T) {
		a := statusServer(t, http.StatusServiceUnavailable, "5")
		b := statusServer(t, http.StatusTooManyRequests, "120")
		c := statusServer(t, http.StatusOK, "")
		res := ch.Deliver(t.Context(), s.request(a.URL, b.URL, c.URL))
		if res.Outcome != channel.Transient || res.RetryAfter != 2*time.Minute {
			t.Errorf("Retry-After 5 and 120: %v, RetryAfter %v; want Transient, 2m", res.Outcome, res.RetryAfter)
		}
	})
	t.Run("IgnoredOnPermanent", func(t *testing.T) {
		srv := statusServer(t, http.StatusNotFound, "60")
		res := ch.Deliver(t.Context(), s.request(srv.URL))
		if res.Outcome != channel.Permanent || res.RetryAfter != 0 {
			t.Errorf("404 Retry-After 60: %v, RetryAfter %v; want Permanent, 0", res.Outcome, res.RetryAfter)
		}
	})
}

func (s Suite) testRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/hook"
	srv.Close()
	res := s.newChannel(t).Deliver(t.Context(), s.request(url))
	if res.Outcome != channel.Transient {
		t.Fatalf("closed server: %v (%q), want Transient", res.Outcome, res.Error)
	}
	if res.Error == "" {
		t.Errorf("closed server: no error text")
	}
}

func (s Suite) testDeadline(t *testing.T) {
	srv := hangingServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	res := s.newChannel(t).Deliver(ctx, s.request(srv.URL))
	took := time.Since(start)
	if res.Outcome != channel.Transient {
		t.Errorf("hanging server: %v (%q), want Transient", res.Outcome, res.Error)
	}
	// Promptly: well before the default per-request timeout of 30 s.
	if took > 5*time.Second {
		t.Errorf("Deliver returned %v after the deadline of 200ms", took)
	}
}

func (s Suite) testTimeoutSetting(t *testing.T) {
	srv := hangingServer(t)
	req := s.request(srv.URL)
	req.Settings = s.settings("timeout", "200ms")
	start := time.Now()
	res := s.newChannel(t).Deliver(context.Background(), req)
	if res.Outcome != channel.Transient || !strings.Contains(res.Error, "timeout") {
		t.Errorf("timeout 200ms: %v (%q), want Transient naming the timeout", res.Outcome, res.Error)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Deliver returned %v after a timeout of 200ms", took)
	}
}

func (s Suite) testCanceled(t *testing.T) {
	srv := statusServer(t, http.StatusOK, "")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	res := s.newChannel(t).Deliver(ctx, s.request(srv.URL))
	if res.Outcome != channel.Transient {
		t.Errorf("canceled context: %v (%q), want Transient", res.Outcome, res.Error)
	}
}

// wantTargets checks that res answers each target: len(want) results, the
// i-th with outcome want[i], an error on each failure and none on a
// Success, and no target's URL in any error.
func wantTargets(t *testing.T, res channel.Result, targets []string, want []channel.Outcome) {
	t.Helper()
	if len(res.Targets) != len(want) {
		t.Fatalf("%d target results (%+v), want %d: one per target", len(res.Targets), res.Targets, len(want))
	}
	for i, r := range res.Targets {
		if r.Outcome != want[i] {
			t.Errorf("target %d: %v (%q), want %v", i+1, r.Outcome, r.Error, want[i])
		}
		if (r.Outcome == channel.Success) != (r.Error == "") {
			t.Errorf("target %d: %v with error %q", i+1, r.Outcome, r.Error)
		}
		for _, target := range targets {
			if u := strings.TrimSpace(target); u != "" && strings.Contains(r.Error, u) {
				t.Errorf("target %d: the error %q holds a target", i+1, r.Error)
			}
		}
	}
}

// testSeveralTargets posts to several receivers, some failing: each
// receiver gets exactly one POST and each target its own answer, with its
// own Retry-After; the overall outcome is Transient when any target is,
// else Permanent when any is, with the largest Retry-After.
func (s Suite) testSeveralTargets(t *testing.T) {
	ch := s.newChannel(t)
	ok1 := statusServer(t, http.StatusOK, "")
	ok2 := statusServer(t, http.StatusAccepted, "")
	busy := statusServer(t, http.StatusServiceUnavailable, "30")
	limited := statusServer(t, http.StatusTooManyRequests, "")
	gone := statusServer(t, http.StatusGone, "")
	cases := []struct {
		name       string
		targets    []*Server
		want       []channel.Outcome
		outcome    channel.Outcome
		retryAfter []time.Duration // per target; nil: none
	}{
		{"AllSucceed", []*Server{ok1, ok2}, []channel.Outcome{channel.Success, channel.Success}, channel.Success, nil},
		{"OneOfThreeTransient", []*Server{ok1, busy, ok2},
			[]channel.Outcome{channel.Success, channel.Transient, channel.Success}, channel.Transient,
			[]time.Duration{0, 30 * time.Second, 0}},
		{"OnePermanent", []*Server{ok1, gone}, []channel.Outcome{channel.Success, channel.Permanent}, channel.Permanent, nil},
		{"TransientWinsOverPermanent", []*Server{gone, limited, busy},
			[]channel.Outcome{channel.Permanent, channel.Transient, channel.Transient}, channel.Transient,
			[]time.Duration{0, 0, 30 * time.Second}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := make([]int, len(c.targets))
			targets := make([]string, len(c.targets))
			for i, srv := range c.targets {
				before[i] = srv.Requests()
				targets[i] = srv.URL + "/hook/" + strconv.Itoa(i)
			}
			res := ch.Deliver(t.Context(), s.request(targets...))
			if res.Outcome != c.outcome {
				t.Errorf("outcome %v (%q), want %v", res.Outcome, res.Error, c.outcome)
			}
			wantTargets(t, res, targets, c.want)
			for i, srv := range c.targets {
				if got := srv.Requests() - before[i]; got != 1 {
					t.Errorf("target %d received %d requests, want 1", i+1, got)
				}
			}
			var largest time.Duration
			for i, d := range c.retryAfter {
				if got := res.Targets[i].RetryAfter; got != d {
					t.Errorf("target %d: RetryAfter %v, want %v", i+1, got, d)
				}
				largest = max(largest, d)
			}
			if res.RetryAfter != largest {
				t.Errorf("RetryAfter %v, want %v, the largest of the targets'", res.RetryAfter, largest)
			}
			delivered := 0
			for _, o := range c.want {
				if o == channel.Success {
					delivered++
				}
			}
			if len(res.ResolvedTargets) != delivered {
				t.Errorf("resolved %q, want the %d delivered targets", res.ResolvedTargets, delivered)
			}
			if c.outcome == channel.Success {
				return
			}
			if !strings.Contains(res.Error, fmt.Sprintf("of %d targets failed", len(targets))) {
				t.Errorf("error %q does not say how many targets failed", res.Error)
			}
		})
	}
}

// testInvalidTargets puts a target that is no http(s) URL beside a valid
// one: the invalid one is Permanent, without its text in the error, and the
// valid one is still posted to.
func (s Suite) testInvalidTargets(t *testing.T) {
	ok := statusServer(t, http.StatusOK, "")
	ch := s.newChannel(t)
	for _, target := range []string{
		"", "   ", "not a url", "hooks.example.com/x", "/relative/path", "ftp://example.com/x",
		"mailto:ops@example.com", "http://", "https:///path", "https://exa mple.com/",
		"https://example.com/%zz", "file:///etc/passwd", "javascript:alert(1)",
	} {
		before := ok.Requests()
		targets := []string{ok.URL, target}
		res := ch.Deliver(t.Context(), s.request(targets...))
		if res.Outcome != channel.Permanent {
			t.Errorf("target %q: %v (%q), want Permanent", target, res.Outcome, res.Error)
		}
		if strings.TrimSpace(target) != "" && strings.Contains(res.Error, target) {
			t.Errorf("target %q: the error %q repeats it", target, res.Error)
		}
		wantTargets(t, res, targets, []channel.Outcome{channel.Success, channel.Permanent})
		if n := ok.Requests() - before; n != 1 {
			t.Errorf("target %q: the valid target beside it received %d requests, want 1", target, n)
		}
	}
}

func (s Suite) testNoTargets(t *testing.T) {
	ch := s.newChannel(t)
	for _, targets := range [][]string{nil, {}} {
		if res := ch.Deliver(t.Context(), s.request(targets...)); res.Outcome != channel.Permanent {
			t.Errorf("targets %#v: %v (%q), want Permanent", targets, res.Outcome, res.Error)
		}
	}
}

func (s Suite) testInvalidTimeout(t *testing.T) {
	srv := statusServer(t, http.StatusOK, "")
	ch := s.newChannel(t)
	for _, v := range []string{"soon", "-1s", "0", "10"} {
		req := s.request(srv.URL)
		req.Settings = s.settings("timeout", v)
		if res := ch.Deliver(t.Context(), req); res.Outcome != channel.Permanent {
			t.Errorf("timeout %q: %v (%q), want Permanent", v, res.Outcome, res.Error)
		}
	}
	if n := srv.Requests(); n != 0 {
		t.Errorf("the server received %d requests despite an invalid timeout", n)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// secretURL returns base (scheme://host) with every kind of secret in it.
func secretURL(base string) string {
	scheme, host, _ := strings.Cut(base, "://")
	return scheme + "://" + secretUser + ":" + secretPass + "@" + host +
		"/services/T0001/" + secretPath + "?sig=" + secretQuery + "&api-version=1"
}

func (s Suite) testNoLeaks(t *testing.T) {
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ch := s.New(logger)
	t.Cleanup(ch.Close)

	// Servers that echo what they were sent, in every way an answer can.
	echo := func(status int) *Server {
		return NewServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			_, _ = fmt.Fprintf(w, "bad %s %s", r.URL.Path, r.URL.RawQuery)
		})
	}
	short := func(status int) *Server {
		return NewServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			_, _ = io.WriteString(w, "invalid "+secretPath)
		})
	}
	redirect := NewServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://example.invalid"+r.URL.RequestURI(), http.StatusFound)
	})
	ok := statusServer(t, http.StatusOK, "")
	refused := "http://" + plugintest.RefusedAddr(t)
	hanging := hangingServer(t)

	cases := []struct {
		name    string
		base    string
		timeout string
		want    channel.Outcome
	}{
		{"EchoPermanent", echo(http.StatusBadRequest).URL, "", channel.Permanent},
		{"EchoTransient", echo(http.StatusInternalServerError).URL, "", channel.Transient},
		{"ShortBody", short(http.StatusNotFound).URL, "", channel.Permanent},
		{"Redirect", redirect.URL, "", channel.Permanent},
		{"Refused", refused, "", channel.Transient},
		{"Timeout", hanging.URL, "100ms", channel.Transient},
		{"UnknownHost", "http://no-such-host.invalid", "2s", channel.Transient},
		{"Success", ok.URL, "", channel.Success},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			target := secretURL(c.base)
			req := s.request(target)
			if c.timeout != "" {
				req.Settings = s.settings("timeout", c.timeout)
			}
			res := ch.Deliver(t.Context(), req)
			if res.Outcome != c.want {
				t.Errorf("outcome %v (%q), want %v", res.Outcome, res.Error, c.want)
			}
			if c.want != channel.Success && res.Error == "" {
				t.Errorf("no error text")
			}
			for _, secret := range []string{secretPath, secretQuery, secretUser, secretPass, "T0001"} {
				if strings.Contains(res.Error, secret) {
					t.Errorf("the error %q holds the secret %q", res.Error, secret)
				}
			}
			for _, r := range res.ResolvedTargets {
				hidden := []string{secretQuery, secretUser, secretPass}
				if s.HidesPath {
					hidden = append(hidden, secretPath, "T0001")
				}
				for _, secret := range hidden {
					if strings.Contains(r, secret) {
						t.Errorf("the resolved target %q holds the secret %q", r, secret)
					}
				}
			}
		})
	}
	// Invalid targets holding secrets.
	for _, target := range []string{
		"https://" + secretUser + ":" + secretPass + "@exa mple.com/" + secretPath,
		"ftp://example.com/" + secretPath + "?q=" + secretQuery,
		"https://example.com/" + secretPath + "%zz",
	} {
		res := ch.Deliver(t.Context(), s.request(target))
		if res.Outcome != channel.Permanent {
			t.Errorf("invalid target: %v (%q), want Permanent", res.Outcome, res.Error)
		}
		for _, secret := range []string{secretPath, secretQuery, secretUser, secretPass} {
			if strings.Contains(res.Error, secret) {
				t.Errorf("the error %q holds the secret %q", res.Error, secret)
			}
		}
	}

	out := logs.String()
	if !strings.Contains(out, "127.0.0.1") {
		t.Errorf("the channel logged no attempt:\n%s", out)
	}
	for _, secret := range []string{secretPath, secretQuery, secretUser, secretPass, "T0001"} {
		if strings.Contains(out, secret) {
			t.Errorf("the logs hold the secret %q:\n%s", secret, out)
		}
	}
}

// markerRE finds the marker a concurrent delivery puts in its subject.
var markerRE = regexp.MustCompile(`concurrent-(\d{4})`)

func (s Suite) testConcurrent(t *testing.T) {
	const n = 200
	var (
		mu       sync.Mutex
		received = make(map[int]int, n)
		unknown  int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		m := markerRE.FindSubmatch(body)
		mu.Lock()
		defer mu.Unlock()
		if err != nil || m == nil {
			unknown++
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		i, _ := strconv.Atoi(string(m[1]))
		received[i]++
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)

	ch := s.newChannel(t)
	results := make([]channel.Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req := s.request(srv.URL + "/hook")
			req.Notification = Notification(fmt.Sprintf("concurrent-%04d", i))
			results[i] = ch.Deliver(t.Context(), req)
		})
	}
	wg.Wait()

	for i, res := range results {
		if res.Outcome != channel.Success {
			t.Errorf("delivery %d: %v (%q), want Success", i, res.Outcome, res.Error)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if unknown != 0 {
		t.Errorf("%d requests without a marker", unknown)
	}
	for i := range n {
		if received[i] != 1 {
			t.Errorf("delivery %d received %d times, want once", i, received[i])
		}
	}
}

func (s Suite) testClose(t *testing.T) {
	srv := statusServer(t, http.StatusOK, "")
	ch := s.New(nil)
	defer ch.Close()
	for i := range 2 {
		if res := ch.Deliver(t.Context(), s.request(srv.URL)); res.Outcome != channel.Success {
			t.Fatalf("delivery %d: %v (%q), want Success", i, res.Outcome, res.Error)
		}
		ch.Close()
	}
	ch.Close() // twice is harmless
}

// NewServerOn starts a server on host (a loopback address such as
// 127.0.0.2) answering every request with h, closed when the test ends. It
// skips the test when host cannot be bound here.
func NewServerOn(t testing.TB, host string, h http.HandlerFunc) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Skipf("cannot listen on %s here: %v", host, err)
	}
	s := &Server{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests++
		s.mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		h(w, r)
	}))
	_ = s.Listener.Close()
	s.Listener = ln
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// withPolicy builds the channel under policy, set in the environment as
// central sets it for a plugin process.
func (s Suite) withPolicy(t *testing.T, policy *channel.NetworkPolicy) Channel {
	t.Helper()
	t.Setenv(channel.NetworkPolicyEnv, policy.Encode())
	return s.newChannel(t)
}

// testNetworkPolicy plays the attacker who points a list at what central's
// own host can reach: under the default policy a loopback receiver, by
// address or by a name that resolves to it, is refused at connect time,
// Permanent, with an error that names the address and not the URL, and the
// receiver gets nothing; a redirect from an allowed receiver to a denied one
// is not followed. With loopback allowed, the same receiver is reached.
func (s Suite) testNetworkPolicy(t *testing.T) {
	internal := statusServer(t, http.StatusOK, "")
	_, port, _ := net.SplitHostPort(internal.Listener.Addr().String())
	t.Run("LoopbackDeniedByDefault", func(t *testing.T) {
		ch := s.withPolicy(t, channel.DefaultNetworkPolicy())
		for _, target := range []string{
			internal.URL + "/internal-admin/" + secretPath + "?sig=" + secretQuery,
			"http://localhost:" + port + "/internal-admin/" + secretPath,
		} {
			res := ch.Deliver(t.Context(), s.request(target))
			if res.Outcome != channel.Permanent {
				t.Errorf("a loopback target: %v (%q), want Permanent", res.Outcome, res.Error)
			}
			if !strings.Contains(res.Error, "is denied by the delivery network policy") ||
				!(strings.Contains(res.Error, "address 127.0.0.1") || strings.Contains(res.Error, "address ::1")) {
				t.Errorf("error %q does not name the loopback address and the policy", res.Error)
			}
			for _, leak := range []string{secretPath, secretQuery, "internal-admin", "localhost", port} {
				if strings.Contains(res.Error, leak) {
					t.Errorf("error %q holds %q from the URL", res.Error, leak)
				}
			}
		}
		if n := internal.Requests(); n != 0 {
			t.Errorf("the loopback receiver got %d requests under the default policy", n)
		}
	})
	t.Run("MetadataDenied", func(t *testing.T) {
		ch := s.withPolicy(t, mustPolicy(t, []string{"169.254.0.0/16"}, nil))
		res := ch.Deliver(t.Context(), s.request("http://169.254.169.254/latest/meta-data/"))
		if res.Outcome != channel.Permanent || !strings.Contains(res.Error, "address 169.254.169.254 is denied by the delivery network policy") {
			t.Errorf("the metadata address with link-local allowed: %v (%q), want Permanent, denied", res.Outcome, res.Error)
		}
	})
	t.Run("RedirectToADeniedAddress", func(t *testing.T) {
		denied := NewServerOn(t, "127.0.0.2", func(http.ResponseWriter, *http.Request) {})
		allowed := NewServer(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, denied.URL+"/internal-admin", http.StatusTemporaryRedirect)
		})
		ch := s.withPolicy(t, mustPolicy(t, []string{"127.0.0.1"}, nil))
		res := ch.Deliver(t.Context(), s.request(allowed.URL+"/hook"))
		if res.Outcome != channel.Permanent {
			t.Errorf("a redirect to a denied address: %v (%q), want Permanent", res.Outcome, res.Error)
		}
		if allowed.Requests() != 1 || denied.Requests() != 0 {
			t.Errorf("allowed got %d requests, denied %d; want 1 and 0", allowed.Requests(), denied.Requests())
		}
		// The denied address is refused when named directly too.
		res = ch.Deliver(t.Context(), s.request(denied.URL+"/internal-admin"))
		if res.Outcome != channel.Permanent || !strings.Contains(res.Error, "address 127.0.0.2 is denied") || denied.Requests() != 0 {
			t.Errorf("127.0.0.2 with only 127.0.0.1 allowed: %v (%q), %d requests", res.Outcome, res.Error, denied.Requests())
		}
	})
	t.Run("LoopbackAllowed", func(t *testing.T) {
		before := internal.Requests()
		ch := s.withPolicy(t, mustPolicy(t, []string{"127.0.0.0/8", "::1"}, nil))
		for _, target := range []string{internal.URL + "/hook", "http://localhost:" + port + "/hook"} {
			if res := ch.Deliver(t.Context(), s.request(target)); res.Outcome != channel.Success {
				t.Errorf("loopback allowed, %s: %v (%q), want Success", target, res.Outcome, res.Error)
			}
		}
		if n := internal.Requests() - before; n != 2 {
			t.Errorf("the receiver got %d requests, want 2", n)
		}
	})
}

func mustPolicy(t *testing.T, allow, deny []string) *channel.NetworkPolicy {
	t.Helper()
	p, err := channel.NewNetworkPolicy(allow, deny)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
