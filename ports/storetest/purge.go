package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

func mustPurge(t *testing.T, s ports.Store, cutoff time.Time, limit int) []string {
	t.Helper()
	deleted, err := s.Purge(t.Context(), cutoff, limit)
	if err != nil {
		t.Fatalf("Purge: %v", err)
	}
	return deleted
}

func exercisePurge(t *testing.T, newHarness func(t *testing.T) Harness) {
	cutoff := BaseTime.Add(365 * 24 * time.Hour)

	// mk returns a row in status st last updated at updated.
	mk := func(st ports.Status, updated time.Time) ports.Notification {
		n := NewNotification(BaseTime)
		n.Status = st
		n.UpdatedAt = updated
		switch st {
		case ports.StatusDelivered:
			n.DeliveredAt = updated
		case ports.StatusRetrying:
			n.NextAttemptAt = updated.Add(time.Minute)
			n.RetryCount = 3
		}
		return n
	}

	t.Run("UnsetUpdatedAtCountsAsOld", func(t *testing.T) {
		s := newHarness(t).Store
		terminal, pending := mk(ports.StatusParked, time.Time{}), mk(ports.StatusPending, time.Time{})
		mustInsert(t, s, terminal, pending)
		checkIDSet(t, "deleted", []string{terminal.ID}, mustPurge(t, s, cutoff, 10))
		mustGet(t, s, pending.ID)
	})

	t.Run("OnlyTerminalRowsBeforeCutoff", func(t *testing.T) {
		s := newHarness(t).Store
		old := cutoff.Add(-time.Microsecond)
		var gone, kept []ports.Notification
		for _, st := range []ports.Status{ports.StatusDelivered, ports.StatusParked, ports.StatusDiscarded} {
			gone = append(gone, mk(st, old), mk(st, BaseTime))
			kept = append(kept, mk(st, cutoff), mk(st, cutoff.Add(time.Hour)))
		}
		kept = append(kept,
			mk(ports.StatusPending, BaseTime), mk(ports.StatusRetrying, BaseTime),
			mk(ports.StatusPending, old), mk(ports.StatusRetrying, old))
		mustInsert(t, s, append(gone, kept...)...)

		deleted := mustPurge(t, s, cutoff, 100)
		checkIDSet(t, "deleted", idsOf(gone), deleted)
		for _, n := range gone {
			requireNotFound(t, s, n.ID)
		}
		for _, n := range kept {
			checkSame(t, "row that must stay", n, mustGet(t, s, n.ID))
		}
		if again := mustPurge(t, s, cutoff, 100); len(again) != 0 {
			t.Errorf("second purge deleted %v", again)
		}
	})

	t.Run("RespectsLimit", func(t *testing.T) {
		s := newHarness(t).Store
		var gone []ports.Notification
		for i := range 25 {
			st := []ports.Status{ports.StatusDelivered, ports.StatusParked, ports.StatusDiscarded}[i%3]
			gone = append(gone, mk(st, BaseTime.Add(time.Duration(i)*time.Second)))
		}
		young := mk(ports.StatusDelivered, cutoff)
		mustInsert(t, s, append(gone, young)...)

		// Call Purge until it deletes nothing, as the core does.
		var all []string
		var sizes []int
		for calls := 0; ; calls++ {
			if calls > len(gone) {
				t.Fatalf("Purge still deleting after %d calls: sizes %v", calls, sizes)
			}
			deleted := mustPurge(t, s, cutoff, 10)
			if len(deleted) > 10 {
				t.Fatalf("Purge with limit 10 deleted %d rows", len(deleted))
			}
			sizes = append(sizes, len(deleted))
			all = append(all, deleted...)
			if len(deleted) == 0 {
				break
			}
		}
		checkIDSet(t, fmt.Sprintf("deleted over all calls (sizes %v)", sizes), idsOf(gone), all)
		checkSame(t, "young row", young, mustGet(t, s, young.ID))
	})

	t.Run("NeverNonTerminal", func(t *testing.T) {
		s := newHarness(t).Store
		ancient := time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)
		var ns []ports.Notification
		for i := range 40 {
			st := ports.StatusPending
			if i%2 == 1 {
				st = ports.StatusRetrying
			}
			n := mk(st, ancient.Add(time.Duration(i)*time.Second))
			n.CreatedAt = ancient
			n.SiteEnqueuedAt = ancient
			ns = append(ns, n)
		}
		mustInsert(t, s, ns...)
		if deleted := mustPurge(t, s, cutoff.Add(100*365*24*time.Hour), 1000); len(deleted) != 0 {
			t.Errorf("Purge deleted non-terminal rows %v", deleted)
		}
		if n := mustCount(t, s, ports.Filter{}); n != int64(len(ns)) {
			t.Errorf("%d rows left, want %d", n, len(ns))
		}
	})
}
