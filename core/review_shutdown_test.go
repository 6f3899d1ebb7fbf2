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

// Review: an attempt cut short by shutdown is "not an attempt" (attempt's
// doc, ARCHITECTURE.md) when nothing was delivered; when one target was,
// the interrupted targets are settled as a real Transient failure: the
// shutdown costs a retry and, on the last one allowed, marks a target that
// never failed Failed and parks the row.
func TestReviewShutdownDoesNotFailTheInterruptedTarget(t *testing.T) {
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
	if n.Status == ports.StatusParked || n.RetryCount != 0 {
		t.Fatalf("after a shutdown mid-attempt: %s, retry count %d, targets %s, last error %q",
			n.Status, n.RetryCount, statuses(n.Targets), n.LastError)
	}
}
