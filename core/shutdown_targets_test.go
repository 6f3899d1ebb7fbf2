package core

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
)

// cutShort delivers "a" at once and waits on "b" until the attempt's
// context ends (a shutdown), answering each target.
type cutShort struct{}

func (cutShort) Deliver(ctx context.Context, d ports.Delivery) ports.Result {
	rs := make([]ports.TargetResult, len(d.Targets))
	for i, t := range d.Targets {
		if t == "b@example.com" {
			<-ctx.Done()
			rs[i] = ports.TargetResult{Outcome: ports.OutcomeTransient, Error: "interrupted: " + ctx.Err().Error()}
			continue
		}
		rs[i] = ports.TargetResult{Outcome: ports.OutcomeSuccess}
	}
	return ports.Result{Outcome: ports.OutcomeTransient, Targets: rs}
}

// TestShutdownMidAttemptKeepsWhatWasDelivered: an attempt cut short by a
// shutdown after one target of two was delivered records that target
// delivered, counts no retry (the shutdown is no failure, even on the last
// retry allowed), and leaves the other due at once; the next run sends to
// it alone.
func TestShutdownMidAttemptKeepsWhatWasDelivered(t *testing.T) {
	dir, err := memdir.New(
		[]ports.List{{Name: "mail", Type: "email", Targets: []string{"a@example.com", "b@example.com"}}},
		[]ports.ChannelSettings{{Type: "email", Retry: ports.RetrySettings{Backoff: ports.BackoffFixed, MaxRetries: 1, Interval: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New()
	svc, err := New(Config{DeliveryTimeout: 10 * time.Second}, Deps{Store: store, Audit: store, Directory: dir,
		Channels: ports.ChannelMap{"email": cutShort{}}})
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	if res, err := svc.Submit(t.Context(), ports.SubmitRequest{Notifications: []ports.Submission{
		{ID: id, List: "mail", Subject: "s", SourceSite: "site-a"}}}); err != nil || len(res.Accepted) != 1 {
		t.Fatalf("submit: %+v, %v", res, err)
	}
	ctx, shutdown := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, shutdown)
	_, _ = svc.DispatchOnce(ctx)
	n, err := store.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if n.Status != ports.StatusRetrying || n.RetryCount != 0 || n.NextAttemptAt.After(time.Now()) || n.ClaimedBy != "" {
		t.Fatalf("after a shutdown mid-attempt: %s, retry count %d, next attempt %v, claimed by %q",
			n.Status, n.RetryCount, n.NextAttemptAt, n.ClaimedBy)
	}
	if got := statuses(n.Targets); got != "a@example.com=Delivered b@example.com=" {
		t.Fatalf("targets %s", got)
	}
	// The attempt is recorded Interrupted, which the charts do not count
	// as a failed attempt.
	h, err := store.History(t.Context(), id)
	if err != nil || len(h) != 1 || h[0].Kind != ports.AuditAttempted || h[0].Outcome != ports.OutcomeInterrupted ||
		h[0].Status != ports.StatusRetrying {
		t.Fatalf("history after a shutdown mid-attempt: %+v, %v; want one Attempted record, Interrupted, Retrying", h, err)
	}
	tp, err := svc.Throughput(t.Context(), ports.ThroughputQuery{From: h[0].At.Add(-time.Hour), To: h[0].At.Add(time.Hour), Bucket: time.Hour})
	if err != nil || tp.Series[0].Total != (ports.ThroughputCounts{}) {
		t.Fatalf("throughput after a shutdown mid-attempt: %+v, %v; want nothing counted", tp, err)
	}

	ch := newTargetChannel(nil)
	again, err := New(Config{}, Deps{Store: store, Audit: store, Directory: dir, Channels: ports.ChannelMap{"email": ch}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.DispatchOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n, _ := store.Get(t.Context(), id); n.Status != ports.StatusDelivered || ch.asked["a@example.com"] != 0 || ch.received["b@example.com"] != 1 {
		t.Fatalf("the next run: %s, asked %v", n.Status, ch.asked)
	}
}
