package core

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
)

// recordingChannel succeeds and remembers every delivery it made.
type recordingChannel struct {
	mu  sync.Mutex
	got []ports.Delivery
}

func (c *recordingChannel) Deliver(_ context.Context, d ports.Delivery) ports.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, d)
	return ports.Result{Outcome: ports.OutcomeSuccess}
}

func (c *recordingChannel) deliveries() []ports.Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]ports.Delivery(nil), c.got...)
}

// typedEnv is a Service whose directory holds an email list "mail" and a
// webhook list "hooks", with a recording channel for each type.
type typedEnv struct {
	svc          *Service
	store        *memstore.Store
	dir          *memdir.Directory
	email, hooks *recordingChannel
}

func newTypedEnv(t *testing.T) *typedEnv {
	t.Helper()
	dir, err := memdir.New([]ports.List{
		{Name: "mail", Type: "email", Targets: []string{"ops@example.com"}},
		{Name: "hooks", Type: "webhook", Targets: []string{"https://hooks.example.com/x"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &typedEnv{store: memstore.New(), dir: dir, email: &recordingChannel{}, hooks: &recordingChannel{}}
	e.svc, err = New(Config{}, Deps{Store: e.store, Audit: e.store, Directory: dir,
		Channels: ports.ChannelMap{"email": e.email, "webhook": e.hooks}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func sub(site, list, typ string) ports.Submission {
	return ports.Submission{ID: uuid.NewString(), List: list, Type: typ, Subject: "s", SourceSite: site}
}

// TestIngestTheListDecidesTheType: a site that names another type than its
// list's (to send an e-mail list's addresses to a webhook) is rejected with
// the reason and nothing is stored; an empty or matching type takes the
// list's; a row to an unknown list is stored without the type it claimed.
func TestIngestTheListDecidesTheType(t *testing.T) {
	e := newTypedEnv(t)
	forged := sub("site-a", "mail", "webhook")
	empty := sub("site-a", "mail", "")
	same := sub("site-a", "hooks", "webhook")
	unknown := sub("site-a", "nowhere", "webhook")
	res, err := e.svc.Submit(t.Context(), ports.SubmitRequest{Site: "site-a",
		Notifications: []ports.Submission{forged, empty, same, unknown}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rejected) != 1 || res.Rejected[0].ID != forged.ID {
		t.Fatalf("Rejected = %+v, want only %s", res.Rejected, forged.ID)
	}
	for _, w := range []string{`type "webhook"`, `list "mail"`, `"email"`, "the list decides"} {
		if !strings.Contains(res.Rejected[0].Reason, w) {
			t.Errorf("reason %q does not say %s", res.Rejected[0].Reason, w)
		}
	}
	if _, err := e.store.Get(t.Context(), forged.ID); err == nil {
		t.Errorf("the row with a forged type is stored")
	}
	for id, want := range map[string]string{empty.ID: "email", same.ID: "webhook", unknown.ID: ""} {
		n, err := e.store.Get(t.Context(), id)
		if err != nil {
			t.Fatalf("row %s: %v", id, err)
		}
		if n.Type != want {
			t.Errorf("row %s to list %s: Type = %q, want %q", id, n.List, n.Type, want)
		}
	}
}

// TestDispatchThroughTheListsCurrentType: whatever type a stored row carries
// (a row stored before ingest checked it, or a list whose type changed since),
// it goes out through the channel of its list's type at delivery, with that
// list's targets, never through another channel.
func TestDispatchThroughTheListsCurrentType(t *testing.T) {
	e := newTypedEnv(t)
	ctx := t.Context()
	now := e.svc.clock.Now()
	stale := ports.Notification{ID: uuid.NewString(), Type: "webhook", List: "mail", Subject: "stale type",
		Status: ports.StatusPending, SourceSite: "site-a", CreatedAt: now, UpdatedAt: now}
	if _, err := e.store.Insert(ctx, []ports.Notification{stale}); err != nil {
		t.Fatal(err)
	}
	moved := sub("site-a", "hooks", "")
	if res, err := e.svc.Submit(ctx, ports.SubmitRequest{Notifications: []ports.Submission{moved}}); err != nil || len(res.Accepted) != 1 {
		t.Fatalf("Submit: %+v, %v", res, err)
	}
	// The operator turns "hooks" into an e-mail list before dispatch.
	if err := e.dir.PutList(ctx, ports.List{Name: "hooks", Type: "email", Targets: []string{"new@example.com"}}); err != nil {
		t.Fatal(err)
	}
	if n, err := e.svc.DispatchOnce(ctx); n != 2 || err != nil {
		t.Fatalf("DispatchOnce = %d, %v", n, err)
	}
	if got := e.hooks.deliveries(); len(got) != 0 {
		t.Errorf("the webhook channel delivered %d rows whose lists are e-mail lists: %+v", len(got), got)
	}
	got := e.email.deliveries()
	if len(got) != 2 {
		t.Fatalf("the email channel delivered %d rows, want 2", len(got))
	}
	for _, d := range got {
		want := "ops@example.com"
		if d.Notification.List == "hooks" {
			want = "new@example.com"
		}
		if len(d.Targets) != 1 || d.Targets[0] != want {
			t.Errorf("row to list %s went to %v, want the list's targets [%s]", d.Notification.List, d.Targets, want)
		}
	}
}

// TestIngestPriorityRange: a priority outside MinPriority to MaxPriority is
// rejected with the range in the reason; the bounds themselves are accepted.
func TestIngestPriorityRange(t *testing.T) {
	e := newTypedEnv(t)
	var subs []ports.Submission
	for _, p := range []int{ports.MinPriority, ports.MaxPriority, 0, ports.MaxPriority + 1, ports.MinPriority - 1, 2147483647} {
		s := sub("site-a", "mail", "")
		s.Priority = p
		subs = append(subs, s)
	}
	res, err := e.svc.Submit(t.Context(), ports.SubmitRequest{Site: "site-a", Notifications: subs})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Accepted) != 3 || len(res.Rejected) != 3 {
		t.Fatalf("accepted %d, rejected %d (%+v); want 3 and 3", len(res.Accepted), len(res.Rejected), res.Rejected)
	}
	for i, r := range res.Rejected {
		if r.ID != subs[3+i].ID || !strings.Contains(r.Reason, "outside -100 to 100") {
			t.Errorf("rejection %d = %+v, want %s refused for its priority's range", i, r, subs[3+i].ID)
		}
	}
}

// TestIngestParksANotificationWithNeitherSubjectNorBody: a site refuses a
// notification with neither subject nor body at Send, but one a site
// buffered before that rule still reaches central. Central takes it (a
// refusal would keep it in the site's buffer for ever) and parks it at once
// with the reason, never delivered, even when retried; an operator discards
// it. A subject alone or a body alone is delivered.
func TestIngestParksANotificationWithNeitherSubjectNorBody(t *testing.T) {
	e := newTypedEnv(t)
	ctx := t.Context()
	empty, blank, subjectOnly, bodyOnly := sub("site-a", "mail", ""), sub("site-a", "mail", ""), sub("site-a", "mail", ""), sub("site-a", "mail", "")
	empty.Subject = ""
	blank.Subject, blank.Body = "  ", "\r\n"
	bodyOnly.Subject, bodyOnly.Body = "", "pressure low"
	res, err := e.svc.Submit(ctx, ports.SubmitRequest{Site: "site-a",
		Notifications: []ports.Submission{empty, blank, subjectOnly, bodyOnly}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Accepted) != 4 || len(res.Rejected) != 0 {
		t.Fatalf("accepted %d, rejected %+v; want all 4 accepted, so that none stays in the site's buffer", len(res.Accepted), res.Rejected)
	}
	parked := func(when string) {
		t.Helper()
		for _, id := range []string{empty.ID, blank.ID} {
			n, err := e.store.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if n.Status != ports.StatusParked || !strings.Contains(n.LastError, "subject and body are both empty") ||
				!strings.Contains(n.LastError, "discard it") {
				t.Errorf("%s: row %s is %s (%q), want parked, saying why and what to do", when, id, n.Status, n.LastError)
			}
		}
	}
	parked("at ingest")
	if n, err := e.svc.DispatchOnce(ctx); n != 2 || err != nil {
		t.Fatalf("DispatchOnce = %d, %v; want the two with content", n, err)
	}
	if got := e.email.deliveries(); len(got) != 2 {
		t.Fatalf("delivered %d, want the two with content: %+v", len(got), got)
	}

	// Retried by mistake: parked again, never delivered empty.
	if r, err := e.svc.Retry(ctx, ports.Action{Actor: "op", IDs: []string{empty.ID}}); err != nil || len(r.Moved) != 1 {
		t.Fatalf("Retry = %+v, %v", r, err)
	}
	if _, err := e.svc.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.email.deliveries(); len(got) != 2 {
		t.Errorf("a retried empty notification was delivered: %+v", got[2:])
	}
	parked("after a retry")

	r, err := e.svc.Discard(ctx, ports.Action{Actor: "op", IDs: []string{empty.ID, blank.ID}})
	if err != nil || len(r.Moved) != 2 {
		t.Fatalf("Discard = %+v, %v; want both discarded", r, err)
	}
}
