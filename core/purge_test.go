package core

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
)

// TestRunPurgesAtStartAndEveryInterval: Run's purge loop deletes the
// terminal rows older than TerminalRetention as it starts and again every
// PurgeInterval, and leaves younger rows alone until they are as old. The
// days pass on the bubble's clock, at once.
func TestRunPurgesAtStartAndEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := memstore.New()
		svc, err := New(Config{TerminalRetention: 36 * time.Hour, PurgeInterval: 24 * time.Hour,
			DispatchInterval: time.Hour}, Deps{Store: store, Audit: store, Directory: okDirectory{},
			Channels: ports.ChannelMap{"email": &countingChannel{}}})
		if err != nil {
			t.Fatal(err)
		}
		deliver := func(n int) []string {
			t.Helper()
			ids := submitN(t, svc, n)
			if got, err := svc.DispatchOnce(ctx); got != n || err != nil {
				t.Fatalf("dispatched %d of %d: %v", got, n, err)
			}
			return ids
		}
		kept := func(id string) bool {
			t.Helper()
			_, err := store.Get(ctx, id)
			if err != nil && !errors.Is(err, ports.ErrNotFound) {
				t.Fatal(err)
			}
			return err == nil
		}
		old := deliver(2)
		time.Sleep(72 * time.Hour)
		young := deliver(1)[0]

		runService(t, svc)
		synctest.Wait() // the purge at start is done; the loop waits for its ticker
		for _, id := range old {
			if kept(id) {
				t.Errorf("row %s, delivered 72 h ago, survived the purge at start (retention 36 h)", id)
			}
		}
		if !kept(young) {
			t.Fatal("the row delivered just now was purged at start")
		}
		time.Sleep(24 * time.Hour)
		synctest.Wait()
		if !kept(young) {
			t.Fatal("the row was purged 24 h after its delivery (retention 36 h)")
		}
		time.Sleep(24 * time.Hour)
		synctest.Wait()
		if kept(young) {
			t.Error("the row survived the purge 48 h after its delivery (retention 36 h)")
		}
		if h, err := store.History(ctx, young); err != nil || len(h) != 0 {
			t.Errorf("the purged row's history: %d records, %v; want none", len(h), err)
		}
	})
}
