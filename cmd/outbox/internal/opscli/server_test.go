package opscli

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/crypto/bcrypt"

	"github.com/siteline/outbox/adapters/httpapi"
	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/clocktest"
)

// testPassword is every test account's password; accounts are named after
// their role.
const testPassword = "correct horse battery"

// testNow is when the notifications of a test central are created.
var testNow = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// testCentral is central's real HTTP API (adapters/httpapi over the real
// core and a memory store, which also holds the sites' mirror) on a
// loopback server, with one account and one API token per role, and a
// record of the requests it got.
type testCentral struct {
	t     *testing.T
	srv   *httptest.Server
	svc   *core.Service
	clock *clocktest.Manual
	// tokens are the API tokens by role.
	tokens map[ports.OperatorRole]string

	mu   sync.Mutex
	reqs []sentRequest
}

// sentRequest is one request the server got.
type sentRequest struct {
	Method, Path string
	Query        url.Values
	Auth         string
	Body         string
}

// outcomeByList delivers by list name: "bad" fails for good (the row
// parks); "flaky" fails for now (the row retries); "mixed" answers target by target, a target starting with "bad"
// failing for good and any other delivered; any other list succeeds.
type outcomeByList struct{}

func (outcomeByList) Deliver(_ context.Context, d ports.Delivery) ports.Result {
	switch d.Notification.List {
	case "bad":
		return ports.Result{Outcome: ports.OutcomePermanent, Error: "550 mailbox unavailable"}
	case "flaky":
		return ports.Result{Outcome: ports.OutcomeTransient, Error: "421 try again later"}
	case "mixed":
		res := ports.Result{Outcome: ports.OutcomePermanent, Targets: make([]ports.TargetResult, len(d.Targets))}
		for i, t := range d.Targets {
			res.Targets[i] = ports.TargetResult{Outcome: ports.OutcomeSuccess}
			if strings.HasPrefix(t, "bad") {
				res.Targets[i] = ports.TargetResult{Outcome: ports.OutcomePermanent, Error: "550 5.1.1 mailbox\x1b[31m unavailable"}
			}
		}
		return res
	}
	return ports.Result{Outcome: ports.OutcomeSuccess}
}

// newTestCentral starts a test central. Its lists: "ok" and "bad" (email),
// "hooks" (webhook). Its core's clock stands at testNow until moved; the
// dispatcher runs only when a test calls dispatch.
func newTestCentral(t *testing.T) *testCentral {
	t.Helper()
	ctx := t.Context()
	store := memstore.New()
	dir, err := memdir.New([]ports.List{
		{Name: "ok", Type: "email", Targets: []string{"ops@example.com"}},
		{Name: "bad", Type: "email", Targets: []string{"nobody@example.com"}},
		{Name: "hooks", Type: "webhook", Targets: []string{"https://hooks.example/x"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktest.New(testNow)
	svc, err := core.New(core.Config{DeliveredKpiWindow: time.Hour}, core.Deps{Store: store, Audit: store, Directory: dir, Clock: clock,
		Channels: ports.ChannelMap{"email": outcomeByList{}, "webhook": outcomeByList{}}, SiteCalls: store})
	if err != nil {
		t.Fatal(err)
	}
	ops, err := core.NewOperators(store, ports.SystemClock{}, core.OperatorsConfig{BcryptCost: bcrypt.MinCost}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &testCentral{t: t, svc: svc, clock: clock, tokens: map[ports.OperatorRole]string{}}
	for _, role := range ports.OperatorRoles {
		if _, err := ops.PutUser(ctx, ports.UserRequest{Actor: ports.ActorSystem, Name: string(role), Role: role, Password: testPassword}); err != nil {
			t.Fatal(err)
		}
		secret, _, err := ops.CreateToken(ctx, ports.TokenRequest{Actor: ports.ActorSystem, Name: "cli-" + string(role), Role: role})
		if err != nil {
			t.Fatal(err)
		}
		c.tokens[role] = secret
	}
	editor, err := core.NewDirectoryEditor(dir, store, ports.SystemClock{}, core.DirectoryEditorConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := httpapi.New(httpapi.Config{Outbox: svc, Directory: dir, Editor: editor, Operators: ops, SiteCalls: svc})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		c.mu.Lock()
		c.reqs = append(c.reqs, sentRequest{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.Query(),
			Auth: r.Header.Get("Authorization"), Body: string(b)})
		c.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// environ is a CLI user's environment: the server, the admin's token, times
// in UTC, then extra.
func (c *testCentral) environ(extra ...string) []string {
	return c.environToken(c.tokens[ports.RoleAdmin], extra...)
}

// environToken is environ with another token.
func (c *testCentral) environToken(token string, extra ...string) []string {
	return append([]string{"OUTBOX_SERVER=" + c.srv.URL, "OUTBOX_TOKEN=" + token, "TZ=UTC"}, extra...)
}

// requests returns the requests the server got so far.
func (c *testCentral) requests() []sentRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]sentRequest(nil), c.reqs...)
}

// last returns the last request the server got.
func (c *testCentral) last() sentRequest {
	c.t.Helper()
	reqs := c.requests()
	if len(reqs) == 0 {
		c.t.Fatal("no request sent")
	}
	return reqs[len(reqs)-1]
}

// submit ingests one notification a subject for list from site, at the
// clock's time, and returns the ids.
func (c *testCentral) submit(list, site string, subjects ...string) []string {
	c.t.Helper()
	var subs []ports.Submission
	var ids []string
	for _, s := range subjects {
		id := uuid.Must(uuid.NewV7()).String()
		ids = append(ids, id)
		subs = append(subs, ports.Submission{ID: id, List: list, Subject: s, Body: "body of " + s,
			SourceSite: site, SiteEnqueuedAt: c.clock.Now()})
	}
	res, err := c.svc.Submit(c.t.Context(), ports.SubmitRequest{Notifications: subs})
	if err != nil || len(res.Accepted) != len(subs) {
		c.t.Fatalf("submit: %v %+v", err, res)
	}
	return ids
}

// dispatch delivers every due notification: "bad" ones park, the others
// are delivered.
func (c *testCentral) dispatch() {
	c.t.Helper()
	for {
		n, err := c.svc.DispatchOnce(c.t.Context())
		if err != nil {
			c.t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
}

// status is the status of id.
func (c *testCentral) status(id string) ports.Status {
	c.t.Helper()
	st, err := c.svc.Status(c.t.Context(), ports.StatusRequest{IDs: []string{id}})
	if err != nil {
		c.t.Fatal(err)
	}
	return st[id]
}

// noTLS is Env.TLS for these tests, which serve plain HTTP on loopback.
func noTLS(string, string, string) (*tls.Config, error) {
	return nil, errors.New("no TLS in these tests")
}

// command is an operator command of this package.
type command func(ctx context.Context, env Env, args []string) int

// runCmd runs cmd with environ and stdin and returns its exit code and
// output. Every secret of the test central's is checked to be absent from
// the output.
func runCmd(t *testing.T, cmd command, environ []string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errw bytes.Buffer
	code = cmd(t.Context(), Env{Environ: environ, Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errw,
		Version: "test", TLS: noTLS}, args)
	for _, kv := range environ {
		if tok, ok := strings.CutPrefix(kv, "OUTBOX_TOKEN="); ok && tok != "" && strings.Contains(out.String()+errw.String(), tok) {
			t.Errorf("%v: the token appeared in the output", args)
		}
	}
	return code, out.String(), errw.String()
}

// get sends GET path to the server with the admin's token and returns the
// status and body.
func (c *testCentral) get(path string) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), http.MethodGet, c.srv.URL+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.tokens[ports.RoleAdmin])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, b
}
