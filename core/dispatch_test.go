package core

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
)

// brokenDirectory fails every lookup, like a directory whose database is down.
type brokenDirectory struct{ calls atomic.Int64 }

func (d *brokenDirectory) List(context.Context, string) (ports.List, error) {
	d.calls.Add(1)
	return ports.List{}, errors.New("directory database unreachable")
}

func (d *brokenDirectory) ChannelSettings(context.Context, string) (ports.ChannelSettings, error) {
	return ports.ChannelSettings{}, errors.New("directory database unreachable")
}

// TestSweepStopsWhenTheDirectoryFails: rows that cannot be prepared go back
// untouched, and the sweep ends instead of claiming them again at once (which
// would spin on the database for as long as the directory is down).
func TestSweepStopsWhenTheDirectoryFails(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	dir := &brokenDirectory{}
	svc, err := New(Config{DispatchBatchSize: 1}, Deps{Store: store, Audit: store, Directory: dir,
		Channels: ports.ChannelMap{}})
	if err != nil {
		t.Fatal(err)
	}
	// More rows than the sweep pipeline holds leased at once (8 batches of
	// 1): without the stop, some row is always free to claim again.
	var ids []string
	for range 20 {
		res, err := svc.Submit(ctx, ports.SubmitRequest{Notifications: []ports.Submission{{
			ID: uuid.NewString(), List: "ops", Type: "email", SourceSite: "site-a"}}})
		if err != nil || len(res.Accepted) != 1 {
			t.Fatalf("submit: %+v, %v", res, err)
		}
		ids = append(ids, res.Accepted[0])
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		svc.sweep(ctx)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("the sweep did not end: it went on claiming released rows (%d directory calls)", dir.calls.Load())
	}
	for _, id := range ids {
		n, err := store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if n.Status != ports.StatusPending || n.RetryCount != 0 || n.ClaimedBy != "" {
			t.Errorf("row %s changed: %s, %d retries, claimed by %q", id, n.Status, n.RetryCount, n.ClaimedBy)
		}
	}
	if _, err := svc.DispatchOnce(ctx); err == nil || !strings.Contains(err.Error(), "could not be prepared") {
		t.Errorf("DispatchOnce with a failing directory: %v", err)
	}
}
