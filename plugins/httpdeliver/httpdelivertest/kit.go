package httpdelivertest

import (
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/channel/v1/plugintest"
)

// Received is one request as a Recorder got it.
type Received struct {
	Path     string
	RawQuery string
	Header   http.Header
	Body     []byte
}

// Recorder is a loopback HTTP server that keeps every request it receives and
// answers it with a fixed status, for checking at the receiving end what a
// channel sent.
type Recorder struct {
	*httptest.Server
	mu  sync.Mutex
	got []Received
}

// NewRecorder starts a Recorder answering status, closed when the test ends.
func NewRecorder(t testing.TB, status int) *Recorder {
	t.Helper()
	r := &Recorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.got = append(r.got, Received{req.URL.Path, req.URL.RawQuery, req.Header.Clone(), body})
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

// Find returns the first request received so far for which match is true.
// It is safe for concurrent use; match must not modify the request.
func (r *Recorder) Find(match func(Received) bool) (Received, bool) {
	r.mu.Lock()
	got := r.got[:len(r.got):len(r.got)]
	r.mu.Unlock()
	for _, rec := range got {
		if match(rec) {
			return rec, true
		}
	}
	return Received{}, false
}

// KitToken is the token every failing target of KitCases carries, in its
// path and in its query, so that the kit's check that no error text holds a
// target has something to find.
const KitToken = "s3cr3t-kit-token"

// KitCases returns the delivery cases of the channel plugin kit (plugintest)
// for an HTTP channel: delivered, a Success case the caller builds against a
// receiver it runs (a Recorder, say), first; then the failures every HTTP
// channel classifies alike, each with delivered's notification and settings
// and one target holding KitToken:
//
//   - HTTP 503: Transient;
//   - HTTP 429 with Retry-After 7: Transient, RetryAfter 7 s;
//   - HTTP 404: Permanent;
//   - a server that is down: Transient;
//   - a server that never answers, under a deadline of 300 ms: Transient;
//   - a target that is not an http(s) URL: Permanent;
//   - delivered's targets and one more answering 503: Transient, while
//     delivered's Check confirms that its own targets got the notification
//     (the resolved targets are the delivered ones).
//
// The servers are closed when t ends.
func KitCases(t *testing.T, delivered plugintest.Case) []plugintest.Case {
	t.Helper()
	at := func(target string) channel.Request {
		r := delivered.Request
		r.Targets = []string{target}
		r.Settings = maps.Clone(r.Settings)
		return r
	}
	// besides returns delivered's request with one more target.
	besides := func(target string) channel.Request {
		r := delivered.Request
		r.Targets = append(slices.Clone(r.Targets), target)
		r.Settings = maps.Clone(r.Settings)
		return r
	}
	withToken := func(base string) string { return base + "/hook/" + KitToken + "?token=" + KitToken }
	status := func(code int, retryAfter string) string {
		return withToken(statusServer(t, code, retryAfter).URL)
	}
	// wantStatus checks that the error names the server's status.
	wantStatus := func(code string) func(*testing.T, channel.Request, channel.Result) {
		return func(t *testing.T, _ channel.Request, res channel.Result) {
			t.Helper()
			if !strings.Contains(res.Error, code) {
				t.Errorf("the error %q does not name the status %s", res.Error, code)
			}
		}
	}
	down := "http://" + plugintest.RefusedAddr(t)

	return []plugintest.Case{
		delivered,
		{Name: "ServiceUnavailable", Request: at(status(http.StatusServiceUnavailable, "")),
			Want: channel.Transient, Check: wantStatus("503")},
		{Name: "TooManyRequestsWithRetryAfter", Request: at(status(http.StatusTooManyRequests, "7")),
			Want: channel.Transient, Check: func(t *testing.T, _ channel.Request, res channel.Result) {
				t.Helper()
				if res.RetryAfter != 7*time.Second {
					t.Errorf("RetryAfter %v, want 7s from the server's Retry-After", res.RetryAfter)
				}
			}},
		{Name: "NotFound", Request: at(status(http.StatusNotFound, "")),
			Want: channel.Permanent, Check: wantStatus("404")},
		{Name: "ServerDown", Request: at(withToken(down)), Want: channel.Transient},
		{Name: "ServerHangs", Request: at(withToken(hangingServer(t).URL)), Want: channel.Transient,
			Timeout: 300 * time.Millisecond},
		{Name: "NotAURL", Request: at("mailto:ops@example.com?token=" + KitToken), Want: channel.Permanent},
		{Name: "OneOfTwoTargetsFails", Request: besides(status(http.StatusServiceUnavailable, "")),
			Want: channel.Transient, Check: delivered.Check,
			WantTargets: append(slices.Repeat([]channel.Outcome{channel.Success}, len(delivered.Request.Targets)), channel.Transient)},
	}
}
