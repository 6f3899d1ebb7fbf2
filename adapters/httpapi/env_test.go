package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
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
	"github.com/siteline/outbox/ports/waittest"
)

// env is central's HTTP surface over the real core (memory store, a real
// dispatcher, the sites' mirror in the store) with one account and one API
// token per role.
type env struct {
	t      *testing.T
	srv    *httptest.Server
	svc    *core.Service
	ops    *core.Operators
	dir    *memdir.Directory
	store  *memstore.Store
	tokens map[ports.OperatorRole]string
}

// password is every test account's password; accounts are named after
// their role.
const password = "correct horse battery"

// listChannel delivers by list name: "ok" succeeds, "bad" fails for good,
// "flaky" fails for now (the row retries), and "mixed" answers target by
// target: a target starting with "bad" fails for good, any other is
// delivered.
type listChannel struct{}

func (listChannel) Deliver(_ context.Context, d ports.Delivery) ports.Result {
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
				res.Targets[i] = ports.TargetResult{Outcome: ports.OutcomePermanent, Error: "550 5.1.1 <b>mailbox</b> unavailable"}
			}
		}
		return res
	}
	return ports.Result{Outcome: ports.OutcomeSuccess}
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, nil)
}

// newEnvWith is newEnv with the server's configuration changed by edit.
func newEnvWith(t *testing.T, edit func(*httpapi.Config)) *env {
	t.Helper()
	store := memstore.New()
	dir, err := memdir.New([]ports.List{
		{Name: "ok", Type: "email", Targets: []string{"ops@example.com"}},
		{Name: "bad", Type: "email", Targets: []string{"nobody@example.com"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := core.New(core.Config{DispatchInterval: 50 * time.Millisecond}, core.Deps{
		Store: store, Audit: store, Directory: dir, Clock: ports.SystemClock{},
		Channels: ports.ChannelMap{"email": listChannel{}}, SiteCalls: store,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = svc.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })

	ops, err := core.NewOperators(store, ports.SystemClock{}, core.OperatorsConfig{BcryptCost: bcrypt.MinCost}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, svc: svc, ops: ops, dir: dir, store: store, tokens: map[ports.OperatorRole]string{}}
	for _, role := range ports.OperatorRoles {
		if _, err := ops.PutUser(ctx, ports.UserRequest{Actor: ports.ActorSystem, Name: string(role), Role: role, Password: password}); err != nil {
			t.Fatal(err)
		}
		secret, _, err := ops.CreateToken(ctx, ports.TokenRequest{Actor: ports.ActorSystem, Name: "cli-" + string(role), Role: role})
		if err != nil {
			t.Fatal(err)
		}
		e.tokens[role] = secret
	}
	editor, err := core.NewDirectoryEditor(dir, store, ports.SystemClock{}, core.DirectoryEditorConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := httpapi.Config{Outbox: svc, Directory: dir, Editor: editor, Operators: ops, SiteCalls: svc,
		Mailbox: func() []httpapi.Mail {
			return []httpapi.Mail{{At: time.Now(), From: "outbox@example.com", To: []string{"ops@example.com"}, Subject: "captured <b>mail</b>", Body: "hello"}}
		}}
	if edit != nil {
		edit(&cfg)
	}
	s, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(s.Handler())
	t.Cleanup(e.srv.Close)
	return e
}

// submit ingests notifications for list with the given subjects and
// returns their ids.
func (e *env) submit(list string, subjects ...string) []string {
	e.t.Helper()
	var subs []ports.Submission
	var ids []string
	for _, s := range subjects {
		id := uuid.Must(uuid.NewV7()).String()
		ids = append(ids, id)
		subs = append(subs, ports.Submission{ID: id, List: list, Subject: s, Body: "body of " + s,
			SourceSite: "plant-1", SiteEnqueuedAt: time.Now()})
	}
	res, err := e.svc.Submit(context.Background(), ports.SubmitRequest{Notifications: subs})
	if err != nil || len(res.Accepted) != len(subs) {
		e.t.Fatalf("submit: %v %+v", err, res)
	}
	return ids
}

// waitStatus waits until every id has status want.
func (e *env) waitStatus(want ports.Status, ids ...string) {
	e.t.Helper()
	waittest.For(e.t, 10*time.Second, fmt.Sprintf("%d notifications %s", len(ids), want), func() (bool, string) {
		st, err := e.svc.Status(context.Background(), ports.StatusRequest{IDs: ids})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, id := range ids {
			if st[id] != want {
				return false, fmt.Sprintf("statuses %v", st)
			}
		}
		return true, ""
	})
}

// do makes a request with the token of role ("" for none) and returns the
// status and body.
func (e *env) do(role ports.OperatorRole, method, path string, body any) (int, []byte) {
	e.t.Helper()
	req := e.request(method, path, body)
	if role != "" {
		req.Header.Set("Authorization", "Bearer "+e.tokens[role])
	}
	return e.send(http.DefaultClient, req)
}

func (e *env) request(method, path string, body any) *http.Request {
	e.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			e.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

func (e *env) send(c *http.Client, req *http.Request) (int, []byte) {
	e.t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// browser is a client that keeps cookies and does not follow redirects.
func (e *env) browser() *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// loginBrowser logs a browser in through the page's form as user.
func (e *env) loginBrowser(user string) *http.Client {
	e.t.Helper()
	c := e.browser()
	form := strings.NewReader("name=" + user + "&password=" + strings.ReplaceAll(password, " ", "+") + "&next=/notifications")
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/login", form)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if code, body := e.send(c, req); code != http.StatusSeeOther {
		e.t.Fatalf("login: %d %s", code, body)
	}
	return c
}

// decode unmarshals a JSON body.
func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %T: %v in %s", v, err, b)
	}
	return v
}

// ioNopCloser is a request body holding s.
func ioNopCloser(s string) io.ReadCloser { return io.NopCloser(strings.NewReader(s)) }
