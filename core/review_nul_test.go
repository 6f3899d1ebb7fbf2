package core

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/ports"
)

// byTarget answers each target: Permanent for one that holds a NUL byte
// (no address or URL does), Success for the others, and counts what each
// target was sent.
type byTarget struct {
	mu   sync.Mutex
	sent map[string]int
}

func (c *byTarget) Deliver(_ context.Context, d ports.Delivery) ports.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	rs := make([]ports.TargetResult, len(d.Targets))
	for i, t := range d.Targets {
		if t == "bad\x00@example.com" {
			rs[i] = ports.TargetResult{Outcome: ports.OutcomePermanent, Error: "not a valid e-mail address"}
			continue
		}
		c.sent[t]++
		rs[i] = ports.TargetResult{Outcome: ports.OutcomeSuccess}
	}
	return ports.Result{Outcome: ports.OutcomePermanent, Targets: rs}
}

// Review: a list target holding a NUL byte passes List.Validate and the
// SQL directory, but the target states central writes for it are refused
// by the SQL store (sqlstore.encodeTargetStates): Record fails for the
// whole batch, so the healthy target of that row, and every other row of
// the batch, stays claimed and unrecorded and is delivered again when the
// lease runs out, forever. Before per-target tracking, the row parked.
func TestReviewNULTargetMakesTheBatchUnrecordable(t *testing.T) {
	ctx := context.Background()
	lists := []ports.List{
		{Name: "mail", Type: "email", Targets: []string{"good@example.com", "bad\x00@example.com"}},
		{Name: "other", Type: "email", Targets: []string{"other@example.com"}},
	}
	for _, l := range lists {
		if err := l.Validate(); err != nil {
			t.Fatalf("List.Validate refuses it: %v", err)
		}
	}
	db, err := sqlstore.Open(ctx, sqlstore.Config{Driver: sqlstore.DriverSQLite, DSN: filepath.Join(t.TempDir(), "o.db")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Directory().PutList(ctx, lists[0]); err != nil {
		t.Fatalf("the SQL directory refuses it: %v", err)
	}
	dir, err := memdir.New(lists, nil)
	if err != nil {
		t.Fatal(err)
	}
	store := db.Notifications()
	ch := &byTarget{sent: map[string]int{}}
	svc, err := New(Config{DispatchBatchSize: 10}, Deps{Store: store, Audit: store, Directory: dir,
		Channels: ports.ChannelMap{"email": ch}})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{uuid.NewString(), uuid.NewString()}
	res, err := svc.Submit(ctx, ports.SubmitRequest{Notifications: []ports.Submission{
		{ID: ids[0], List: "mail", Subject: "s", SourceSite: "site-a"},
		{ID: ids[1], List: "other", Subject: "s", SourceSite: "site-a"},
	}})
	if err != nil || len(res.Accepted) != 2 {
		t.Fatalf("submit: %+v, %v", res, err)
	}
	_, derr := svc.DispatchOnce(ctx)
	for _, id := range ids {
		n, err := store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if n.ClaimedBy != "" || n.Status == ports.StatusPending {
			t.Errorf("row %s after its delivery: %s, claimed by %q (DispatchOnce: %v); its outcome was not recorded and it will be delivered again",
				n.List, n.Status, n.ClaimedBy, derr)
		}
	}
}
