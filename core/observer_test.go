package core

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
)

// observed is one call of DeliveryObserver.Attempted.
type observed struct {
	channel string
	outcome ports.Outcome
	d       time.Duration
}

// recordingObserver keeps every Attempted call.
type recordingObserver struct {
	mu    sync.Mutex
	calls []observed
}

func (o *recordingObserver) Attempted(channel string, outcome ports.Outcome, d time.Duration, _ []ports.Outcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, observed{channel, outcome, d})
}

// bySubject answers the outcome its notification's subject names; "panic"
// panics, "slow" is a Transient failure that takes slowFor.
type bySubject struct{}

const slowFor = 2 * time.Millisecond

func (bySubject) Deliver(_ context.Context, d ports.Delivery) ports.Result {
	switch d.Notification.Subject {
	case "panic":
		panic("boom")
	case "slow":
		time.Sleep(slowFor) // the channel's own latency, measured by the core
		return ports.Result{Outcome: ports.OutcomeTransient, Error: "slow and failed"}
	case "bogus":
		return ports.Result{Outcome: "Maybe"}
	}
	return ports.Result{Outcome: ports.Outcome(d.Notification.Subject), Error: "as asked"}
}

// TestObserverSeesEveryAttemptAndNothingElse: each attempt the channel made
// is reported once with its channel type and outcome (a panic or an unknown
// answer as Transient); rows the channel did not attempt, and rows parked
// without an attempt, are not reported.
func TestObserverSeesEveryAttemptAndNothingElse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := memstore.New()
		obs := &recordingObserver{}
		svc, err := New(Config{}, Deps{Store: store, Audit: store, Directory: okDirectory{}, Observer: obs,
			Channels: ports.ChannelMap{"email": bySubject{}, "webhook": bySubject{}, "slack": &roomless{}}})
		if err != nil {
			t.Fatal(err)
		}
		subs := []ports.Submission{
			{Type: "email", Subject: string(ports.OutcomeSuccess)},
			{Type: "email", Subject: string(ports.OutcomeTransient)},
			{Type: "webhook", Subject: string(ports.OutcomePermanent)},
			{Type: "webhook", Subject: "slow"},
			{Type: "webhook", Subject: "panic"},
			{Type: "email", Subject: "bogus"},
			// Not attempts: the channel had no room; expired; no channel.
			{Type: "slack", Subject: string(ports.OutcomeSuccess)},
			{Type: "email", Subject: string(ports.OutcomeSuccess), ExpiresAt: time.Now().Add(-time.Minute)},
			{Type: "sms", Subject: string(ports.OutcomeSuccess)},
		}
		for i := range subs {
			subs[i].ID, subs[i].List, subs[i].SourceSite = uuid.NewString(), "ops:"+subs[i].Type, "site-a"
		}
		res, err := svc.Submit(ctx, ports.SubmitRequest{Notifications: subs})
		if err != nil || len(res.Accepted) != len(subs) {
			t.Fatalf("submit: %+v, %v", res, err)
		}
		if n, err := svc.DispatchOnce(ctx); n != len(subs) {
			t.Fatalf("dispatch: %d rows, %v", n, err)
		}

		obs.mu.Lock()
		got := slices.Clone(obs.calls)
		obs.mu.Unlock()
		var slow time.Duration
		type key struct {
			channel string
			outcome ports.Outcome
		}
		var keys []key
		for _, c := range got {
			keys = append(keys, key{c.channel, c.outcome})
			if c.d < 0 {
				t.Errorf("negative duration %v", c.d)
			}
			if c.channel == "webhook" && c.outcome == ports.OutcomeTransient {
				slow = max(slow, c.d)
			}
		}
		cmpKey := func(a, b key) int {
			if a.channel != b.channel {
				return strings.Compare(a.channel, b.channel)
			}
			return strings.Compare(string(a.outcome), string(b.outcome))
		}
		slices.SortFunc(keys, cmpKey)
		want := []key{
			{"email", ports.OutcomeSuccess},
			{"email", ports.OutcomeTransient}, // the unknown answer
			{"email", ports.OutcomeTransient},
			{"webhook", ports.OutcomePermanent},
			{"webhook", ports.OutcomeTransient}, // the panic
			{"webhook", ports.OutcomeTransient}, // slow
		}
		if !slices.Equal(keys, want) {
			t.Errorf("observed attempts:\n got %v\nwant %v", keys, want)
		}
		if slow != slowFor {
			t.Errorf("the slow attempt was observed taking %v; it took %v of the bubble's clock", slow, slowFor)
		}

		// The observer agrees with the audit trail: one call per Attempted record.
		var attempted int
		for _, s := range subs {
			h, err := store.History(ctx, s.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range h {
				if r.Kind == ports.AuditAttempted {
					attempted++
				}
			}
		}
		if attempted != len(got) {
			t.Errorf("%d Attempted audit records, %d observed attempts", attempted, len(got))
		}
	})
}

// TestNoObserverIsFine: a Service built without an observer dispatches.
func TestNoObserverIsFine(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	svc, err := New(Config{}, Deps{Store: store, Audit: store, Directory: okDirectory{},
		Channels: ports.ChannelMap{"email": bySubject{}}})
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	if _, err := svc.Submit(ctx, ports.SubmitRequest{Notifications: []ports.Submission{{
		ID: id, List: "ops", Type: "email", Subject: string(ports.OutcomeSuccess), SourceSite: "site-a"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := store.Get(ctx, id); err != nil || n.Status != ports.StatusDelivered {
		t.Fatalf("row: %+v, %v", n, err)
	}
}
