package client_test

// These tests check the client's encoding and decoding against a server
// that answers canned JSON; the client against the real server is tested
// with adapters/httpapi.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/client"
	"github.com/siteline/outbox/ports"
)

const token = "tok_s3cr3t-value"

// seen is one request as the canned server received it.
type seen struct {
	Method, Path, RawQuery, Auth, ContentType string
	Body                                      string
}

// canned is a server that records each request and answers status and body.
type canned struct {
	mu     sync.Mutex
	reqs   []seen
	status int
	body   string
	header http.Header
}

func (c *canned) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.reqs = append(c.reqs, seen{Method: r.Method, Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery,
		Auth: r.Header.Get("Authorization"), ContentType: r.Header.Get("Content-Type"), Body: string(b)})
	status, body := c.status, c.body
	for k, v := range c.header {
		w.Header()[k] = v
	}
	c.mu.Unlock()
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func (c *canned) answer(status int, body string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.status, c.body, c.reqs = status, body, nil
}

func (c *canned) requests() []seen {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]seen(nil), c.reqs...)
}

func newServer(t *testing.T) (*canned, *client.Client) {
	t.Helper()
	h := &canned{status: http.StatusOK, body: "{}"}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL+"/", token)
	if err != nil {
		t.Fatal(err)
	}
	return h, c
}

func tp(s string) *time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return &t
}

func TestOpsClientRoutesEncodeAndDecode(t *testing.T) {
	ctx := context.Background()
	h, c := newServer(t)
	created := tp("2026-03-01T10:00:00Z")
	parked := api.Filter{Status: []ports.Status{ports.StatusParked}, Site: "plant-1", From: tp("2026-03-01T00:00:00Z")}
	cases := []struct {
		name           string
		call           func() (any, error)
		status         int
		answer         string
		method, path   string
		query, reqBody string
		want           any
	}{
		{name: "me", call: func() (any, error) { return c.Me(ctx) },
			answer: `{"name":"ann","role":"operator"}`, method: "GET", path: "/api/v1/me",
			want: api.Me{Name: "ann", Role: ports.RoleOperator}},
		{name: "notifications", call: func() (any, error) { return c.Notifications(ctx, parked, 50, "cur 1") },
			answer: `{"items":[{"id":"0195","type":"email","list":"ops","subject":"hot","priority":0,"status":"Parked","stuck":true,"retry_count":3,"created_at":"2026-03-01T10:00:00Z"}],"next":"c2"}`,
			method: "GET", path: "/api/v1/notifications",
			query: "after=cur+1&from=2026-03-01T00%3A00%3A00Z&limit=50&site=plant-1&status=Parked",
			want: api.NotificationPage{Items: []api.Notification{{ID: "0195", Type: "email", List: "ops", Subject: "hot",
				Status: ports.StatusParked, Stuck: true, RetryCount: 3, CreatedAt: created}}, Next: "c2"}},
		{name: "notifications default page", call: func() (any, error) { return c.Notifications(ctx, api.Filter{}, 0, "") },
			answer: `{"items":[]}`, method: "GET", path: "/api/v1/notifications",
			want: api.NotificationPage{Items: []api.Notification{}}},
		{name: "count", call: func() (any, error) { return c.Count(ctx, api.Filter{Stuck: true, Q: "oven"}) },
			answer: `{"count":42}`, method: "GET", path: "/api/v1/notifications/count", query: "q=oven&stuck=true",
			want: int64(42)},
		{name: "notification", call: func() (any, error) { return c.Notification(ctx, "a/b c") },
			answer: `{"id":"x","type":"email","list":"ops","subject":"s","body":"b","priority":1,"status":"Delivered","stuck":false,"retry_count":0,"targets":[{"target":"env:HOOK","status":"Delivered","attempts":1,"last_attempt_at":"2026-03-01T10:00:00Z","delivered_at":"2026-03-01T10:00:00Z"}],"history":[{"at":"2026-03-01T10:00:00Z","kind":"Attempted","actor":"dispatcher","outcome":"Success","duration_seconds":0.25,"targets":[{"target":"env:HOOK","outcome":"Success"}]}]}`,
			method: "GET", path: "/api/v1/notifications/a%2Fb%20c",
			want: api.Detail{Notification: api.Notification{ID: "x", Type: "email", List: "ops", Subject: "s", Body: "b",
				Priority: 1, Status: ports.StatusDelivered},
				Targets: []api.TargetState{{Target: "env:HOOK", Status: ports.TargetDelivered, Attempts: 1, LastAttemptAt: created, DeliveredAt: created}},
				History: []api.AuditRecord{{At: *created, Kind: "Attempted", Actor: "dispatcher", Outcome: "Success", DurationSeconds: 0.25,
					Targets: []api.AuditTarget{{Target: "env:HOOK", Outcome: ports.OutcomeSuccess}}}}}},
		{name: "retry", call: func() (any, error) { return c.Retry(ctx, api.ActionRequest{IDs: []string{"a", "b"}}) },
			answer: `{"moved":["a"],"refused":[{"id":"b","code":"conflict","message":"b is Delivered"}]}`,
			method: "POST", path: "/api/v1/notifications/retry", reqBody: `{"ids":["a","b"]}`,
			want: api.ActionResult{Moved: []string{"a"}, Refused: []api.Refusal{{ID: "b", Code: "conflict", Message: "b is Delivered"}}}},
		{name: "discard", call: func() (any, error) { return c.Discard(ctx, api.ActionRequest{Filter: &parked}) },
			answer: `{"moved":[]}`, method: "POST", path: "/api/v1/notifications/discard",
			reqBody: `{"filter":{"status":["Parked"],"site":"plant-1","from":"2026-03-01T00:00:00Z"}}`,
			want:    api.ActionResult{Moved: []string{}}},
		{name: "notifications oldest first", call: func() (any, error) { return c.NotificationsOldestFirst(ctx, api.Filter{}, 10, "c3") },
			answer: `{"items":[]}`, method: "GET", path: "/api/v1/notifications", query: "after=c3&limit=10&order=oldest",
			want: api.NotificationPage{Items: []api.Notification{}}},
		{name: "retry now", call: func() (any, error) { return c.RetryNow(ctx, api.ActionRequest{IDs: []string{"a", "b"}}) },
			answer: `{"moved":["a"],"refused":[{"id":"b","code":"conflict","message":"b is Parked"}]}`,
			method: "POST", path: "/api/v1/notifications/retry-now", reqBody: `{"ids":["a","b"]}`,
			want: api.ActionResult{Moved: []string{"a"}, Refused: []api.Refusal{{ID: "b", Code: "conflict", Message: "b is Parked"}}}},
		{name: "park", call: func() (any, error) { return c.Park(ctx, api.ActionRequest{IDs: []string{"a"}}) },
			answer: `{"moved":["a"]}`, method: "POST", path: "/api/v1/notifications/park", reqBody: `{"ids":["a"]}`,
			want: api.ActionResult{Moved: []string{"a"}}},
		{name: "site calls", call: func() (any, error) {
			return c.SiteCalls(ctx, api.SiteCallFilter{Site: "plant-1", Kind: ports.OpCall, Status: []ports.OpStatus{ports.OpParked}}, 20, "c1")
		},
			answer: `{"items":[{"site":"plant-1","id":"op1","kind":"ExternalCall","target":"erp","status":"Parked","retry_count":3,"version":4,"requested":"Retry","requested_by":"ann"}],"next":"c2"}`,
			method: "GET", path: "/api/v1/site-calls", query: "after=c1&kind=ExternalCall&limit=20&site=plant-1&status=Parked",
			want: api.SiteCallPage{Items: []api.SiteCall{{Site: "plant-1", ID: "op1", Kind: ports.OpCall, Target: "erp",
				Status: ports.OpParked, RetryCount: 3, Version: 4, Requested: ports.SiteRetry, RequestedBy: "ann"}}, Next: "c2"}},
		{name: "site call count", call: func() (any, error) { return c.CountSiteCalls(ctx, api.SiteCallFilter{Target: "erp"}) },
			answer: `{"count":7}`, method: "GET", path: "/api/v1/site-calls/count", query: "target=erp", want: int64(7)},
		{name: "site call", call: func() (any, error) { return c.SiteCall(ctx, "plant/1", "op 1") },
			answer: `{"site":"plant/1","id":"op 1","kind":"DatabaseWrite","target":"hist","status":"Parked","retry_count":0,"version":1,"commands":[{"id":"k1","action":"Discard","actor":"ann","requested_at":"2026-03-01T10:00:00Z","state":"Refused","result":"no longer parked"}]}`,
			method: "GET", path: "/api/v1/site-calls/plant%2F1/op%201",
			want: api.SiteCallDetail{SiteCall: api.SiteCall{Site: "plant/1", ID: "op 1", Kind: ports.OpWrite, Target: "hist",
				Status: ports.OpParked, Version: 1}, Commands: []api.SiteCommand{{ID: "k1", Action: ports.SiteDiscard, Actor: "ann",
				RequestedAt: *created, State: ports.CommandRefused, Result: "no longer parked"}}}},
		{name: "site call kpis", call: func() (any, error) { return c.SiteCallKPIs(ctx) },
			answer: `[{"site":"plant-1","pending":1,"retrying":2,"parked":3,"failed_last_hour":4}]`,
			method: "GET", path: "/api/v1/site-calls/kpis",
			want: []api.SiteCallKPI{{Site: "plant-1", Pending: 1, Retrying: 2, Parked: 3, FailedLastHour: 4}}},
		{name: "retry site calls", call: func() (any, error) {
			return c.RetrySiteCalls(ctx, api.SiteCallActionRequest{Keys: []api.SiteCallKey{{Site: "p", ID: "a"}, {Site: "p", ID: "b"}}})
		},
			answer: `{"requested":[{"site":"p","id":"a"}],"refused":[{"site":"p","id":"b","reason":"b is Delivered"}]}`,
			method: "POST", path: "/api/v1/site-calls/retry", reqBody: `{"keys":[{"site":"p","id":"a"},{"site":"p","id":"b"}]}`,
			want: api.SiteCallActionResult{Requested: []api.SiteCallKey{{Site: "p", ID: "a"}},
				Refused: []api.SiteCallRefusal{{SiteCallKey: api.SiteCallKey{Site: "p", ID: "b"}, Reason: "b is Delivered"}}}},
		{name: "discard site calls", call: func() (any, error) {
			return c.DiscardSiteCalls(ctx, api.SiteCallActionRequest{Filter: &api.SiteCallFilter{Site: "p", UpdatedTo: created}})
		},
			answer: `{"requested":[]}`, method: "POST", path: "/api/v1/site-calls/discard",
			reqBody: `{"filter":{"site":"p","updated_to":"2026-03-01T10:00:00Z"}}`,
			want:    api.SiteCallActionResult{Requested: []api.SiteCallKey{}}},
		{name: "sites", call: func() (any, error) { return c.Sites(ctx) },
			answer: `[{"site":"p","state":"stale","last_contact":"2026-03-01T10:00:00Z","leader":"n1","nodes":[{"node":"n1","role":"leader","backlog":2}],"calls":{"site":"p","pending":0,"retrying":0,"parked":1,"failed_last_hour":0}}]`,
			method: "GET", path: "/api/v1/sites",
			want: []api.Site{{Site: "p", State: ports.SiteStale, LastContact: created, Leader: "n1",
				Nodes: []api.SiteNode{{Node: "n1", Role: ports.RoleLeader, Backlog: 2}}, Calls: api.SiteCallKPI{Site: "p", Parked: 1}}}},
		{name: "site", call: func() (any, error) { return c.Site(ctx, "p 1") },
			answer: `{"site":"p 1","state":"connected","nodes":[],"calls":{"site":"p 1","pending":0,"retrying":0,"parked":0,"failed_last_hour":0}}`,
			method: "GET", path: "/api/v1/sites/p%201",
			want: api.Site{Site: "p 1", State: ports.SiteConnected, Nodes: []api.SiteNode{}, Calls: api.SiteCallKPI{Site: "p 1"}}},
		{name: "discard all", call: func() (any, error) { return c.Discard(ctx, api.ActionRequest{All: true}) },
			answer: `{"moved":["a"]}`, method: "POST", path: "/api/v1/notifications/discard", reqBody: `{"all":true}`,
			want: api.ActionResult{Moved: []string{"a"}}},
		{name: "kpis", call: func() (any, error) { return c.KPIs(ctx) },
			answer: `{"at":"2026-03-01T10:00:00Z","window_seconds":3600,"global":{"queue_depth":5,"stuck":1,"parked":2,"delivered":90,"oldest_pending_age_seconds":192},"sites":[{"site":"p1","queue_depth":5,"stuck":1,"parked":2,"delivered":90,"oldest_pending_age_seconds":192}]}`,
			method: "GET", path: "/api/v1/kpis",
			want: api.KPIReport{At: *created, WindowSeconds: 3600,
				Global: api.KPI{QueueDepth: 5, Stuck: 1, Parked: 2, Delivered: 90, OldestPendingAgeSeconds: 192},
				Sites:  []api.SiteKPI{{Site: "p1", KPI: api.KPI{QueueDepth: 5, Stuck: 1, Parked: 2, Delivered: 90, OldestPendingAgeSeconds: 192}}}}},
		{name: "lists", call: func() (any, error) { return c.Lists(ctx) },
			answer: `[{"name":"ops","type":"email","targets":["a@x"]}]`, method: "GET", path: "/api/v1/lists",
			want: []api.List{{Name: "ops", Type: "email", Targets: []string{"a@x"}}}},
		{name: "list", call: func() (any, error) { return c.List(ctx, "ops team") },
			answer: `{"name":"ops team","type":"email","targets":[]}`, method: "GET", path: "/api/v1/lists/ops%20team",
			want: api.List{Name: "ops team", Type: "email", Targets: []string{}}},
		{name: "put list", call: func() (any, error) {
			return c.PutList(ctx, api.List{Name: "ops", Type: "email", Targets: []string{"a@x", "b@x"}})
		},
			answer: `{"name":"ops","type":"email","targets":["a@x","b@x"]}`, method: "PUT", path: "/api/v1/lists/ops",
			reqBody: `{"name":"ops","type":"email","targets":["a@x","b@x"]}`,
			want:    api.List{Name: "ops", Type: "email", Targets: []string{"a@x", "b@x"}}},
		{name: "delete list", call: func() (any, error) { return nil, c.DeleteList(ctx, "ops") },
			status: http.StatusNoContent, method: "DELETE", path: "/api/v1/lists/ops"},
		{name: "channels", call: func() (any, error) { return c.Channels(ctx) },
			answer: `[{"type":"email","settings":{"host":"smtp"},"retry":{"backoff":"fixed","max_retries":5,"interval_seconds":60}}]`,
			method: "GET", path: "/api/v1/channels",
			want: []api.Channel{{Type: "email", Settings: map[string]string{"host": "smtp"},
				Retry: api.Retry{Backoff: ports.BackoffFixed, MaxRetries: 5, IntervalSeconds: 60}}}},
		{name: "channel", call: func() (any, error) { return c.Channel(ctx, "webhook") },
			answer: `{"type":"webhook","settings":{},"retry":{},"rate_limit":2.5}`, method: "GET", path: "/api/v1/channels/webhook",
			want: api.Channel{Type: "webhook", Settings: map[string]string{}, RateLimit: 2.5}},
		{name: "put channel", call: func() (any, error) {
			return c.PutChannel(ctx, api.Channel{Type: "slack", Settings: map[string]string{"url": "env:SLACK"},
				Retry: api.Retry{Backoff: ports.BackoffExponential, IntervalSeconds: 30, MaxIntervalSeconds: 600}})
		},
			answer: `{"type":"slack","settings":{"url":"env:SLACK"},"retry":{"backoff":"exponential","interval_seconds":30,"max_interval_seconds":600}}`,
			method: "PUT", path: "/api/v1/channels/slack",
			reqBody: `{"type":"slack","settings":{"url":"env:SLACK"},"retry":{"backoff":"exponential","interval_seconds":30,"max_interval_seconds":600}}`,
			want: api.Channel{Type: "slack", Settings: map[string]string{"url": "env:SLACK"},
				Retry: api.Retry{Backoff: ports.BackoffExponential, IntervalSeconds: 30, MaxIntervalSeconds: 600}}},
		{name: "delete channel", call: func() (any, error) { return nil, c.DeleteChannel(ctx, "slack") },
			status: http.StatusNoContent, method: "DELETE", path: "/api/v1/channels/slack"},
		{name: "users", call: func() (any, error) { return c.Users(ctx) },
			answer: `[{"name":"ann","role":"admin","created_at":"2026-03-01T10:00:00Z"}]`, method: "GET", path: "/api/v1/users",
			want: []api.User{{Name: "ann", Role: ports.RoleAdmin, CreatedAt: created}}},
		{name: "put user", call: func() (any, error) {
			return c.PutUser(ctx, "bob", api.PutUser{Role: ports.RoleViewer, Password: "pw"})
		},
			answer: `{"name":"bob","role":"viewer"}`, method: "PUT", path: "/api/v1/users/bob",
			reqBody: `{"role":"viewer","password":"pw"}`, want: api.User{Name: "bob", Role: ports.RoleViewer}},
		{name: "delete user", call: func() (any, error) { return nil, c.DeleteUser(ctx, "bob") },
			status: http.StatusNoContent, method: "DELETE", path: "/api/v1/users/bob"},
		{name: "tokens", call: func() (any, error) { return c.Tokens(ctx) },
			answer: `[{"id":"t1","name":"ci","role":"operator"}]`, method: "GET", path: "/api/v1/tokens",
			want: []api.Token{{ID: "t1", Name: "ci", Role: ports.RoleOperator}}},
		{name: "create token", call: func() (any, error) {
			return c.CreateToken(ctx, api.NewToken{Name: "ci", Role: ports.RoleOperator})
		},
			status: http.StatusCreated, answer: `{"id":"t1","name":"ci","role":"operator","secret":"abc"}`,
			method: "POST", path: "/api/v1/tokens", reqBody: `{"name":"ci","role":"operator"}`,
			want: api.CreatedToken{Token: api.Token{ID: "t1", Name: "ci", Role: ports.RoleOperator}, Secret: "abc"}},
		{name: "delete token", call: func() (any, error) { return nil, c.DeleteToken(ctx, "t1") },
			status: http.StatusNoContent, method: "DELETE", path: "/api/v1/tokens/t1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status := tc.status
			if status == 0 {
				status = http.StatusOK
			}
			h.answer(status, tc.answer)
			got, err := tc.call()
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			if tc.want != nil && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("decoded\n%#v\nwant\n%#v", got, tc.want)
			}
			reqs := h.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.Method != tc.method || r.Path != tc.path || r.RawQuery != tc.query {
				t.Errorf("request %s %s ?%s, want %s %s ?%s", r.Method, r.Path, r.RawQuery, tc.method, tc.path, tc.query)
			}
			if r.Auth != "Bearer "+token {
				t.Errorf("Authorization %q", r.Auth)
			}
			if tc.reqBody == "" {
				if r.Body != "" {
					t.Errorf("request body %q, want none", r.Body)
				}
				return
			}
			if r.ContentType != "application/json" {
				t.Errorf("Content-Type %q", r.ContentType)
			}
			if !jsonEqual(t, r.Body, tc.reqBody) {
				t.Errorf("request body %s, want %s", r.Body, tc.reqBody)
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

func TestOpsClientErrorsMapToSentinels(t *testing.T) {
	h, c := newServer(t)
	sentinels := []error{ports.ErrInvalid, ports.ErrUnauthenticated, ports.ErrForbidden, ports.ErrNotFound,
		ports.ErrConflict, ports.ErrUnavailable}
	cases := []struct {
		status int
		code   string
		want   error
	}{
		{400, api.CodeInvalid, ports.ErrInvalid},
		{401, api.CodeUnauthenticated, ports.ErrUnauthenticated},
		{403, api.CodeForbidden, ports.ErrForbidden},
		{404, api.CodeNotFound, ports.ErrNotFound},
		{409, api.CodeConflict, ports.ErrConflict},
		{413, api.CodeTooLarge, ports.ErrInvalid},
		{503, api.CodeUnavailable, ports.ErrUnavailable},
		{500, api.CodeInternal, nil},
	}
	for _, tc := range cases {
		t.Run(tc.code, func(t *testing.T) {
			h.answer(tc.status, `{"error":{"code":"`+tc.code+`","message":"the reason"}}`)
			_, err := c.List(context.Background(), "ops")
			var ae *client.Error
			if !errors.As(err, &ae) {
				t.Fatalf("error %v (%T), want *client.Error", err, err)
			}
			if ae.Status != tc.status || ae.Code != tc.code || ae.Message != "the reason" {
				t.Errorf("got %+v", ae)
			}
			// The message alone: the code is for machines (ae.Code).
			if want := "the reason"; err.Error() != want {
				t.Errorf("text %q, want %q", err.Error(), want)
			}
			for _, s := range sentinels {
				if got := errors.Is(err, s); got != (s == tc.want) {
					t.Errorf("errors.Is(err, %v) = %v", s, got)
				}
			}
		})
	}
}

func TestOpsClientErrorWithoutAPIBody(t *testing.T) {
	h, c := newServer(t)
	h.mu.Lock()
	h.header = http.Header{"Content-Type": {"text/html"}}
	h.mu.Unlock()
	h.answer(http.StatusBadGateway, "<html>bad gateway</html>")
	_, err := c.KPIs(context.Background())
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != 502 || ae.Code != api.CodeUnavailable {
		t.Fatalf("got %#v", err)
	}
	if !errors.Is(err, ports.ErrUnavailable) || !strings.Contains(err.Error(), "502") || !strings.Contains(err.Error(), "text/html") {
		t.Errorf("error %q", err)
	}
}

func TestOpsClientTokenNeverInErrors(t *testing.T) {
	h, c := newServer(t)
	h.answer(http.StatusUnauthorized, `{"error":{"code":"unauthenticated","message":"token `+token+` is unknown"}}`)
	_, err := c.Me(context.Background())
	if err == nil || strings.Contains(err.Error(), token) || !errors.Is(err, ports.ErrUnauthenticated) {
		t.Errorf("error %v", err)
	}

	// A server out of reach.
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close()
	c2, err := client.New(addr, token)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c2.Tokens(context.Background())
	if err == nil || strings.Contains(err.Error(), token) || !errors.Is(err, ports.ErrUnavailable) {
		t.Errorf("error %v", err)
	}
	if !strings.Contains(err.Error(), "GET /api/v1/tokens") {
		t.Errorf("error %q does not name the route", err)
	}
}

func TestOpsClientCancelledContext(t *testing.T) {
	_, c := newServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Users(ctx)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ports.ErrUnavailable) {
		t.Errorf("error %v", err)
	}
}

func TestOpsClientBodiesCapped(t *testing.T) {
	// pad bytes of white space follow a valid answer.
	var pad atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"count":1}`)
		_, _ = io.CopyN(w, spaces{}, pad.Load())
	}))
	defer srv.Close()
	const limit = 64 << 10
	c, err := client.New(srv.URL, token, client.WithMaxResponseBytes(limit))
	if err != nil {
		t.Fatal(err)
	}
	pad.Store(limit)
	if _, err := c.Count(context.Background(), api.Filter{}); err == nil || !strings.Contains(err.Error(), "over") {
		t.Errorf("oversize answer: %v", err)
	}
	pad.Store(limit - int64(len(`{"count":1}`)))
	if n, err := c.Count(context.Background(), api.Filter{}); err != nil || n != 1 {
		t.Errorf("answer under the cap: %d, %v", n, err)
	}

	// An oversize error body still gives an error of the right status.
	h, c := newServer(t)
	h.answer(http.StatusForbidden, `{"error":{"code":"forbidden","message":"`+strings.Repeat("x", client.MaxErrorBytes)+`"}}`)
	_, err = c.Lists(context.Background())
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != 403 || !errors.Is(err, ports.ErrForbidden) || len(err.Error()) > 1000 {
		t.Errorf("oversize error body: %.200v", err)
	}
}

// spaces reads as endless white space.
type spaces struct{}

var spaceBlock = bytes.Repeat([]byte{' '}, 64<<10)

func (spaces) Read(p []byte) (int, error) {
	return copy(p, spaceBlock), nil
}

func TestOpsClientEmptySegmentsRefused(t *testing.T) {
	h, c := newServer(t)
	ctx := context.Background()
	calls := map[string]func() error{
		"list":          func() error { _, err := c.List(ctx, ""); return err },
		"putlist":       func() error { _, err := c.PutList(ctx, api.List{Type: "email"}); return err },
		"dotdot":        func() error { return c.DeleteList(ctx, "..") },
		"channel":       func() error { _, err := c.PutChannel(ctx, api.Channel{}); return err },
		"user":          func() error { return c.DeleteUser(ctx, " ") },
		"token":         func() error { return c.DeleteToken(ctx, "") },
		"notif":         func() error { _, err := c.Notification(ctx, ""); return err },
		"limit":         func() error { _, err := c.Notifications(ctx, api.Filter{}, -1, ""); return err },
		"sitecall site": func() error { _, err := c.SiteCall(ctx, "", "op1"); return err },
		"sitecall id":   func() error { _, err := c.SiteCall(ctx, "plant-1", ".."); return err },
		"site":          func() error { _, err := c.Site(ctx, " "); return err },
		"sitecall limit": func() error {
			_, err := c.SiteCalls(ctx, api.SiteCallFilter{}, -1, "")
			return err
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("%s: error %v, want ErrInvalid", name, err)
		}
	}
	if n := len(h.requests()); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

func TestOpsClientNew(t *testing.T) {
	for _, bad := range []string{"", "ftp://h", "http://", "http://u:p@h", "http://h?x=1", "::"} {
		if _, err := client.New(bad, token); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("New(%q): %v", bad, err)
		} else if strings.Contains(err.Error(), "p@") {
			t.Errorf("New(%q) error shows the password: %v", bad, err)
		}
	}

	// A path prefix in front of api.Prefix, and no token.
	h := &canned{status: http.StatusOK, body: `{"name":"x","role":"viewer"}`}
	srv := httptest.NewServer(h)
	defer srv.Close()
	c, err := client.New(srv.URL+"/outbox/", "", client.WithHTTPClient(srv.Client()), client.WithUserAgent("t"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Me(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := h.requests()[0]
	if r.Path != "/outbox/api/v1/me" || r.Auth != "" {
		t.Errorf("request %+v", r)
	}
}
