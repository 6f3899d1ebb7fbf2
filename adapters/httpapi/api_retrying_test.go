package httpapi_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// TestAPIRetryNowAndParkRetryingRows: an operator retries a Retrying
// notification now through the API (it is tried again at once, its retry
// count growing) and then parks it; each requested id comes back done or
// refused with why (a Parked row is a conflict, an unknown id not found).
// No credential, a viewer, a bad or oversize body, a stuck filter and a
// post from another origin are refused and move nothing.
func TestAPIRetryNowAndParkRetryingRows(t *testing.T) {
	e := newEnv(t)
	if code, body := e.do(ports.RoleAdmin, http.MethodPut, "/api/v1/lists/flaky",
		api.List{Name: "flaky", Type: "email", Targets: []string{"ops@example.com"}}); code != http.StatusOK {
		t.Fatalf("put list: %d %s", code, body)
	}
	id := e.submit("flaky", "keeps failing")[0]
	parked := e.submit("bad", "failed for good")[0]
	e.waitStatus(ports.StatusRetrying, id)
	e.waitStatus(ports.StatusParked, parked)
	retries := func() int {
		d, err := e.svc.Notification(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return d.RetryCount
	}
	before := retries()

	for _, path := range []string{"/api/v1/notifications/retry-now", "/api/v1/notifications/park"} {
		req := api.ActionRequest{IDs: []string{id}}
		if code, body := e.do("", http.MethodPost, path, req); code != http.StatusUnauthorized {
			t.Errorf("%s without a credential: %d %s", path, code, body)
		}
		if code, body := e.do(ports.RoleViewer, http.MethodPost, path, req); code != http.StatusForbidden ||
			!strings.Contains(string(body), "operator role") {
			t.Errorf("%s as a viewer: %d %s", path, code, body)
		}
		for _, c := range []struct{ body, want string }{
			{`{"ids":["` + id + `"],"force":true}`, "unknown field"},
			{`{"ids":`, "malformed JSON"},
			{`{"ids":["not-a-uuid"]}`, "not a UUID"},
			{`{}`, "select notifications by ids or by a filter"},
			{`{"filter":{"stuck":true}}`, "does not select by the stuck threshold"},
			{`{"ids":["` + id + `"],"filter":{"list":"flaky"}}`, "not both"},
		} {
			r := e.request(http.MethodPost, path, nil)
			r.Body = ioNopCloser(c.body)
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Authorization", "Bearer "+e.tokens[ports.RoleOperator])
			code, body := e.send(http.DefaultClient, r)
			if code != http.StatusBadRequest || !strings.Contains(string(body), c.want) {
				t.Errorf("%s %s: %d %s, want 400 saying %q", path, c.body, code, body, c.want)
			}
		}
		r := e.request(http.MethodPost, path, nil)
		r.Body = ioNopCloser(`{"ids":["` + strings.Repeat("a", 2<<20) + `"]}`)
		r.Header.Set("Authorization", "Bearer "+e.tokens[ports.RoleOperator])
		if code, body := e.send(http.DefaultClient, r); code != http.StatusRequestEntityTooLarge {
			t.Errorf("%s with an oversize body: %d %.200s", path, code, body)
		}
		c := e.loginBrowser("operator")
		r = e.request(http.MethodPost, path, req)
		r.Header.Set("Origin", "https://evil.example")
		if code, body := e.send(c, r); code != http.StatusForbidden || !strings.Contains(string(body), "cross-origin") {
			t.Errorf("%s from another origin: %d %s", path, code, body)
		}
	}
	e.waitStatus(ports.StatusRetrying, id) // nothing refused moved it
	e.waitStatus(ports.StatusParked, parked)

	unknown := uuid.NewString()
	code, body := e.do(ports.RoleOperator, http.MethodPost, "/api/v1/notifications/retry-now",
		api.ActionRequest{IDs: []string{id, parked, unknown}})
	if code != http.StatusOK {
		t.Fatalf("retry now: %d %s", code, body)
	}
	res := decode[api.ActionResult](t, body)
	refused := map[string]api.Refusal{}
	for _, r := range res.Refused {
		refused[r.ID] = r
	}
	if !slices.Equal(res.Moved, []string{id}) || len(res.Refused) != 2 ||
		refused[parked].Code != api.CodeConflict || !strings.Contains(refused[parked].Message, "only Retrying notifications can be retried now") ||
		refused[unknown].Code != api.CodeNotFound {
		t.Fatalf("retry now: %s", body)
	}
	waittest.For(t, 10*time.Second, "the row tried again at once", func() (bool, string) {
		n := retries()
		return n > before, fmt.Sprintf("retry count %d", n)
	})

	e.waitStatus(ports.StatusRetrying, id)
	code, body = e.do(ports.RoleOperator, http.MethodPost, "/api/v1/notifications/park", api.ActionRequest{IDs: []string{id, parked}})
	res = decode[api.ActionResult](t, body)
	if code != http.StatusOK || !slices.Equal(res.Moved, []string{id}) || len(res.Refused) != 1 || res.Refused[0].ID != parked {
		t.Fatalf("park: %d %s", code, body)
	}
	e.waitStatus(ports.StatusParked, id)
	d, err := e.svc.Notification(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if last := d.History[len(d.History)-1]; last.Kind != ports.AuditParked || !strings.Contains(last.Actor, "operator") {
		t.Errorf("the history ends with %+v, want the operator's park", last)
	}
}

// TestAPIListsOldestFirst: order=oldest lists the oldest notification
// first, newest (or no order) the newest first, and another order is a
// 400 naming the parameter.
func TestAPIListsOldestFirst(t *testing.T) {
	e := newEnv(t)
	ids := e.submit("ok", "first", "second", "third")
	e.waitStatus(ports.StatusDelivered, ids...)
	list := func(order string) []string {
		path := "/api/v1/notifications?list=ok"
		if order != "" {
			path += "&order=" + order
		}
		code, body := e.do(ports.RoleViewer, http.MethodGet, path, nil)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		var out []string
		for _, n := range decode[api.NotificationPage](t, body).Items {
			out = append(out, n.Subject)
		}
		return out
	}
	if got, want := list("oldest"), []string{"first", "second", "third"}; !slices.Equal(got, want) {
		t.Errorf("order=oldest: %v, want %v", got, want)
	}
	for _, order := range []string{"", "newest", "Newest"} {
		if got, want := list(order), []string{"third", "second", "first"}; !slices.Equal(got, want) {
			t.Errorf("order=%q: %v, want %v", order, got, want)
		}
	}
	code, body := e.do(ports.RoleViewer, http.MethodGet, "/api/v1/notifications?order=sideways", nil)
	if eb := decode[api.ErrorBody](t, body); code != http.StatusBadRequest || !strings.Contains(eb.Error.Message, `order: "sideways" is neither newest nor oldest`) {
		t.Errorf("order=sideways: %d %s", code, body)
	}
}
