package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

func exerciseRecord(t *testing.T, newHarness func(t *testing.T) Harness) {
	const lease = 5 * time.Minute
	now := BaseTime.Add(time.Hour)

	// claimOne claims the one due row for owner at instant at.
	claimOne := func(t *testing.T, s ports.Store, owner string, at time.Time) {
		t.Helper()
		got := mustClaim(t, s, ports.ClaimRequest{Owner: owner, Now: at, Lease: lease, Limit: 100})
		if len(got) != 1 {
			t.Fatalf("claim by %s got %d rows, want 1", owner, len(got))
		}
	}
	// applied returns n with u written onto it and the lease released.
	applied := func(n ports.Notification, u ports.Update) ports.Notification {
		n.Status = u.Status
		n.RetryCount = u.RetryCount
		n.LastError = u.LastError
		n.ResolvedTargets = u.ResolvedTargets
		n.Targets = u.Targets
		n.LastAttemptAt = u.LastAttemptAt
		n.NextAttemptAt = u.NextAttemptAt
		n.DeliveredAt = u.DeliveredAt
		n.UpdatedAt = u.UpdatedAt
		return released(n)
	}

	t.Run("AppliesEveryFieldAndReleases", func(t *testing.T) {
		s := newHarness(t).Store
		n := NewNotification(BaseTime)
		n.TypeData = json.RawMessage(`{"k":"v"}`)
		n.Priority = 2
		n.ExpiresAt = now.Add(24 * time.Hour)
		mustInsert(t, s, n)

		claimOne(t, s, "a", now)
		failed := ports.Update{
			ID:         n.ID,
			Status:     ports.StatusRetrying,
			RetryCount: 1,
			LastError:  "smtp: 421 try again later",
			Targets: []ports.TargetState{
				{Target: "a@example.test", Status: ports.TargetRetrying, Attempts: 1, LastError: "smtp: 421 try again later",
					LastAttemptAt: now.Add(time.Second)},
				{Target: "b@example.test", Status: ports.TargetDelivered, Attempts: 1,
					LastAttemptAt: now.Add(time.Second), DeliveredAt: now.Add(time.Second + time.Microsecond)},
			},
			LastAttemptAt: now.Add(time.Second),
			NextAttemptAt: now.Add(time.Minute),
			UpdatedAt:     now.Add(2 * time.Second),
		}
		if lost := mustRecord(t, s, "a", failed); len(lost) != 0 {
			t.Fatalf("Record by the lease holder lost %v", lost)
		}
		want := applied(n, failed)
		requireSame(t, "row after a transient failure", want, mustGet(t, s, n.ID))

		// Claim the retry when it is due and record its success: every field
		// changes again, NextAttemptAt is cleared by its zero value.
		later := now.Add(time.Minute)
		claimOne(t, s, "b", later)
		success := ports.Update{
			ID:              n.ID,
			Status:          ports.StatusDelivered,
			RetryCount:      1,
			ResolvedTargets: []string{"a@example.test", "b@example.test"},
			Targets: []ports.TargetState{
				{Target: "a@example.test", Status: ports.TargetDelivered, Attempts: 2,
					LastAttemptAt: later.Add(time.Second), DeliveredAt: later.Add(2 * time.Second)},
				{Target: "b@example.test", Status: ports.TargetDelivered, Attempts: 1,
					LastAttemptAt: now.Add(time.Second), DeliveredAt: now.Add(time.Second + time.Microsecond)},
			},
			LastAttemptAt: later.Add(time.Second),
			DeliveredAt:   later.Add(2 * time.Second),
			UpdatedAt:     later.Add(3 * time.Second),
		}
		if lost := mustRecord(t, s, "b", success); len(lost) != 0 {
			t.Fatalf("Record by the lease holder lost %v", lost)
		}
		checkSame(t, "row after a success", applied(want, success), mustGet(t, s, n.ID))
	})

	t.Run("ZeroValuesClear", func(t *testing.T) {
		s := newHarness(t).Store
		n := NewNotification(BaseTime)
		n.RetryCount = 3
		n.LastError = "previous failure"
		n.ResolvedTargets = []string{"old@example.test"}
		n.Targets = NewTargetStates(BaseTime)
		n.LastAttemptAt = BaseTime.Add(time.Minute)
		n.NextAttemptAt = BaseTime.Add(2 * time.Minute)
		n.DeliveredAt = BaseTime.Add(3 * time.Minute)
		mustInsert(t, s, n)
		claimOne(t, s, "a", now)
		u := ports.Update{ID: n.ID, Status: ports.StatusParked, UpdatedAt: now}
		if lost := mustRecord(t, s, "a", u); len(lost) != 0 {
			t.Fatalf("Record lost %v", lost)
		}
		got := mustGet(t, s, n.ID)
		checkSame(t, "row after an update of zero values", applied(n, u), got)
		if !got.LastAttemptAt.IsZero() || !got.NextAttemptAt.IsZero() || !got.DeliveredAt.IsZero() {
			t.Errorf("zero times in the update did not clear the row's times")
		}
		if got.Targets != nil {
			t.Errorf("nil Targets in the update left the row's Targets %v, want nil", got.Targets)
		}
	})

	t.Run("TargetsRoundTrip", func(t *testing.T) {
		// The targets' states as Record writes them come back from Get,
		// Claim and Query, each field kept; Record with nil clears them.
		s := newHarness(t).Store
		n := NewNotification(BaseTime)
		mustInsert(t, s, n)
		claimOne(t, s, "a", now)
		u := ports.Update{
			ID: n.ID, Status: ports.StatusRetrying, RetryCount: 1, LastError: "http: 503",
			Targets:       NewTargetStates(now),
			LastAttemptAt: now, NextAttemptAt: now.Add(time.Minute), UpdatedAt: now,
		}
		if lost := mustRecord(t, s, "a", u); len(lost) != 0 {
			t.Fatalf("Record lost %v", lost)
		}
		want := applied(n, u)
		requireSame(t, "Get after Record", want, mustGet(t, s, n.ID))
		p, err := s.Query(t.Context(), ports.Filter{List: n.List}, ports.PageRequest{Limit: 10})
		if err != nil || len(p.Items) != 1 {
			t.Fatalf("Query = %d rows, %v; want the one row", len(p.Items), err)
		}
		checkSame(t, "Query after Record", want, p.Items[0])

		got := mustClaim(t, s, ports.ClaimRequest{Owner: "b", Now: now.Add(time.Minute), Lease: lease, Limit: 10})
		if len(got) != 1 {
			t.Fatalf("claim of the retry got %d rows, want 1", len(got))
		}
		claimed := want
		claimed.ClaimedBy = "b"
		claimed.ClaimedUntil = now.Add(time.Minute + lease)
		checkSame(t, "row as Claim returns it", claimed, got[0])

		// Record with nil Targets clears them; the next attempt records
		// them again.
		cleared := u
		cleared.Targets = nil
		cleared.NextAttemptAt, cleared.UpdatedAt = now.Add(2*time.Minute), now.Add(time.Minute)
		if lost := mustRecord(t, s, "b", cleared); len(lost) != 0 {
			t.Fatalf("Record lost %v", lost)
		}
		if got := mustGet(t, s, n.ID); got.Targets != nil {
			t.Errorf("Targets after a Record of nil = %v, want nil", got.Targets)
		}
		checkSame(t, "Get after a Record of nil Targets", applied(n, cleared), mustGet(t, s, n.ID))

		claimOne(t, s, "c", now.Add(2*time.Minute))
		next := cleared
		next.Status, next.NextAttemptAt, next.UpdatedAt = ports.StatusDelivered, time.Time{}, now.Add(2*time.Minute)
		next.Targets = []ports.TargetState{{Target: "env:OPS_HOOK", Status: ports.TargetDelivered, Attempts: 4,
			LastAttemptAt: now.Add(2 * time.Minute), DeliveredAt: now.Add(2*time.Minute + time.Microsecond)}}
		if lost := mustRecord(t, s, "c", next); len(lost) != 0 {
			t.Fatalf("Record lost %v", lost)
		}
		checkSame(t, "Get after the third Record", applied(n, next), mustGet(t, s, n.ID))
	})

	t.Run("BatchKeepsEachRowsTargets", func(t *testing.T) {
		// One Record of many rows, some with states and some without, as
		// the dispatcher writes a claimed batch: each row gets its own.
		s := newHarness(t).Store
		var ns []ports.Notification
		for i := range 7 {
			ns = append(ns, NewNotification(BaseTime.Add(time.Duration(i)*time.Second)))
		}
		mustInsert(t, s, ns...)
		if got := mustClaim(t, s, ports.ClaimRequest{Owner: "a", Now: now, Lease: lease, Limit: 10}); len(got) != len(ns) {
			t.Fatalf("claimed %d rows, want %d", len(got), len(ns))
		}
		us := make([]ports.Update, len(ns))
		for i, n := range ns {
			us[i] = ports.Update{ID: n.ID, Status: ports.StatusDelivered, LastAttemptAt: now, DeliveredAt: now, UpdatedAt: now}
			if i%3 != 1 {
				us[i].Targets = NewTargetStates(now.Add(time.Duration(i) * time.Microsecond))[:1+i%4]
				us[i].Targets[0].Target = fmt.Sprintf("row%d@example.test", i)
			}
		}
		if lost := mustRecord(t, s, "a", us...); len(lost) != 0 {
			t.Fatalf("Record lost %v", lost)
		}
		for i, n := range ns {
			checkSame(t, fmt.Sprintf("row %d", i), applied(n, us[i]), mustGet(t, s, n.ID))
		}
	})

	t.Run("RecordedRetryClaimableByAnyone", func(t *testing.T) {
		s := newHarness(t).Store
		n := NewNotification(BaseTime)
		mustInsert(t, s, n)
		claimOne(t, s, "a", now)
		u := ports.Update{
			ID: n.ID, Status: ports.StatusRetrying, RetryCount: 1, LastError: "timeout",
			LastAttemptAt: now, NextAttemptAt: now, UpdatedAt: now,
		}
		if lost := mustRecord(t, s, "a", u); len(lost) != 0 {
			t.Fatalf("Record lost %v", lost)
		}
		// The lease is gone: another owner claims the row at the same instant.
		got := mustClaim(t, s, ports.ClaimRequest{Owner: "b", Now: now, Lease: lease, Limit: 10})
		checkIDs(t, "claim right after Record", []string{n.ID}, idsOf(got))
	})

	t.Run("TakenOverLeaseIsLost", func(t *testing.T) {
		s := newHarness(t).Store
		n := NewNotification(BaseTime)
		mustInsert(t, s, n)
		claimOne(t, s, "a", now)
		claimOne(t, s, "b", now.Add(lease)) // a's lease expired; b took the row over
		before := mustGet(t, s, n.ID)
		if before.ClaimedBy != "b" {
			t.Fatalf("row is held by %q after b's claim", before.ClaimedBy)
		}
		byA := ports.Update{
			ID: n.ID, Status: ports.StatusDelivered, ResolvedTargets: []string{"a@example.test"},
			LastAttemptAt: now, DeliveredAt: now, UpdatedAt: now,
		}
		lost := mustRecord(t, s, "a", byA)
		checkIDs(t, "lost of the former owner", []string{n.ID}, lost)
		requireSame(t, "row after the former owner's Record", before, mustGet(t, s, n.ID))

		byB := ports.Update{
			ID: n.ID, Status: ports.StatusRetrying, RetryCount: 1, LastError: "timeout",
			LastAttemptAt: now.Add(lease), NextAttemptAt: now.Add(lease + time.Minute), UpdatedAt: now.Add(lease),
		}
		if lost := mustRecord(t, s, "b", byB); len(lost) != 0 {
			t.Errorf("Record by the current owner lost %v", lost)
		}
		checkSame(t, "row after the current owner's Record", applied(n, byB), mustGet(t, s, n.ID))
	})

	// takenOver inserts two rows that a claims, then b takes one of them
	// over (taken) once a's lease ran out; a still holds kept.
	takenOver := func(t *testing.T, s ports.Store) (kept, taken ports.Notification) {
		t.Helper()
		kept = NewNotification(BaseTime)
		taken = NewNotification(BaseTime.Add(time.Second))
		taken.Priority = 1 // claimed first by b
		mustInsert(t, s, kept, taken)
		if got := mustClaim(t, s, ports.ClaimRequest{Owner: "a", Now: now, Lease: lease, Limit: 10}); len(got) != 2 {
			t.Fatalf("a claimed %d rows, want 2", len(got))
		}
		got := mustClaim(t, s, ports.ClaimRequest{Owner: "b", Now: now.Add(lease), Lease: lease, Limit: 1})
		checkIDs(t, "b's claim", []string{taken.ID}, idsOf(got))
		return kept, taken
	}

	t.Run("MixedBatchAppliesHeldRowsOnly", func(t *testing.T) {
		s := newHarness(t).Store
		kept, taken := takenOver(t, s)
		takenBefore := mustGet(t, s, taken.ID)

		mk := func(id string) ports.Update {
			return ports.Update{
				ID: id, Status: ports.StatusDelivered, ResolvedTargets: []string{"x@example.test"},
				Targets: []ports.TargetState{{Target: "x@example.test", Status: ports.TargetDelivered, Attempts: 1,
					LastAttemptAt: now, DeliveredAt: now}},
				LastAttemptAt: now, DeliveredAt: now, UpdatedAt: now,
			}
		}
		lost := mustRecord(t, s, "a", mk(kept.ID), mk(taken.ID))
		checkIDs(t, "lost", []string{taken.ID}, lost)
		checkSame(t, "row a still held", applied(kept, mk(kept.ID)), mustGet(t, s, kept.ID))
		checkSame(t, "row b took over", takenBefore, mustGet(t, s, taken.ID))
	})

	// attempted returns the records of a delivery of id at now: the attempt
	// (with its targets) and the delivery, at one instant, as a dispatcher
	// writes them: History keeps them in this order (append order).
	attempted := func(id string) []ports.AuditRecord {
		return []ports.AuditRecord{
			{NotificationID: id, At: now, Kind: ports.AuditAttempted, Actor: ports.ActorSystem, Outcome: ports.OutcomeSuccess,
				Status: ports.StatusDelivered, Duration: 1500 * time.Microsecond, SourceSite: "site-a", Type: "email",
				Targets: []ports.AuditTarget{{Target: "x@example.test", Outcome: ports.OutcomeSuccess}}},
			{NotificationID: id, At: now, Kind: ports.AuditDelivered, Actor: ports.ActorSystem,
				Status: ports.StatusDelivered, SourceSite: "site-a", Type: "email"},
		}
	}

	t.Run("AuditRecordsGoWithAppliedUpdatesOnly", func(t *testing.T) {
		h := newHarness(t)
		s := h.Store
		kept, taken := takenOver(t, s)
		mk := func(id string) ports.Update {
			return ports.Update{ID: id, Status: ports.StatusDelivered, ResolvedTargets: []string{"x@example.test"},
				LastAttemptAt: now, DeliveredAt: now, UpdatedAt: now, Records: attempted(id)}
		}
		lost := mustRecord(t, s, "a", mk(kept.ID), mk(taken.ID))
		checkIDs(t, "lost", []string{taken.ID}, lost)
		checkHistory(t, "History of the applied update", attempted(kept.ID), mustHistory(t, h.Audit, kept.ID))
		if got := mustHistory(t, h.Audit, taken.ID); len(got) != 0 {
			t.Errorf("History of the lost update = %v, want empty", got)
		}
	})

	t.Run("LastUpdateOfAnIDWinsWithItsRecords", func(t *testing.T) {
		h := newHarness(t)
		s := h.Store
		n := NewNotification(BaseTime)
		mustInsert(t, s, n)
		claimOne(t, s, "a", now)
		first := ports.Update{ID: n.ID, Status: ports.StatusRetrying, RetryCount: 1, LastError: "x", UpdatedAt: now,
			Records: []ports.AuditRecord{{NotificationID: n.ID, At: now, Kind: ports.AuditAttempted, Status: ports.StatusRetrying}}}
		second := ports.Update{ID: n.ID, Status: ports.StatusDelivered, LastAttemptAt: now, DeliveredAt: now,
			UpdatedAt: now, Records: attempted(n.ID)}
		if lost := mustRecord(t, s, "a", first, second); len(lost) != 0 {
			t.Errorf("lost %v", lost)
		}
		checkSame(t, "row", applied(n, second), mustGet(t, s, n.ID))
		checkHistory(t, "History", attempted(n.ID), mustHistory(t, h.Audit, n.ID))
	})

	t.Run("AuditRecordOfAnotherNotificationIsInvalid", func(t *testing.T) {
		h := newHarness(t)
		s := h.Store
		n, other := NewNotification(BaseTime), NewNotification(BaseTime.Add(time.Second))
		mustInsert(t, s, n, other)
		mustClaim(t, s, ports.ClaimRequest{Owner: "a", Now: now, Lease: lease, Limit: 10})
		before := mustGet(t, s, n.ID)
		u := ports.Update{ID: n.ID, Status: ports.StatusDelivered, UpdatedAt: now, Records: attempted(other.ID)}
		if _, err := s.Record(t.Context(), "a", []ports.Update{u}); !errors.Is(err, ports.ErrInvalid) {
			t.Fatalf("Record with a record of another notification: %v, want ErrInvalid", err)
		}
		requireSame(t, "row after the refused Record", before, mustGet(t, s, n.ID))
		for _, id := range []string{n.ID, other.ID} {
			if got := mustHistory(t, h.Audit, id); len(got) != 0 {
				t.Errorf("History of %s after the refused Record = %v, want empty", id, got)
			}
		}
	})

	t.Run("AuditRecordsOfALargeBatch", func(t *testing.T) {
		h := newHarness(t)
		s := h.Store
		const rows = 1100 // beyond the SQL stores' pieces of a Record
		ns := make([]ports.Notification, rows)
		for i := range ns {
			ns[i] = NewNotification(BaseTime.Add(time.Duration(i) * time.Millisecond))
		}
		mustInsert(t, s, ns...)
		if got := mustClaim(t, s, ports.ClaimRequest{Owner: "a", Now: now, Lease: lease, Limit: rows}); len(got) != rows {
			t.Fatalf("a claimed %d rows, want %d", len(got), rows)
		}
		us := make([]ports.Update, rows)
		for i, n := range ns {
			us[i] = ports.Update{ID: n.ID, Status: ports.StatusDelivered, LastAttemptAt: now, DeliveredAt: now,
				UpdatedAt: now, Records: attempted(n.ID)}
		}
		if lost := mustRecord(t, s, "a", us...); len(lost) != 0 {
			t.Fatalf("lost %d updates", len(lost))
		}
		for _, i := range []int{0, 499, 500, 501, 999, 1000, rows - 1} {
			checkHistory(t, fmt.Sprintf("History of row %d", i), attempted(ns[i].ID), mustHistory(t, h.Audit, ns[i].ID))
		}
	})

	t.Run("ExpiredLeaseNotTakenOverStillApplies", func(t *testing.T) {
		// Record has no clock: a row still marked as the owner's is the
		// owner's, even when its lease ran out, until someone claims it.
		s := newHarness(t).Store
		n := NewNotification(BaseTime)
		mustInsert(t, s, n)
		claimOne(t, s, "a", now)
		u := ports.Update{
			ID: n.ID, Status: ports.StatusDelivered, ResolvedTargets: []string{"a@example.test"},
			LastAttemptAt: now.Add(2 * lease), DeliveredAt: now.Add(2 * lease), UpdatedAt: now.Add(2 * lease),
		}
		if lost := mustRecord(t, s, "a", u); len(lost) != 0 {
			t.Errorf("Record after the lease expired, with no other claim, lost %v", lost)
		}
		checkSame(t, "row", applied(n, u), mustGet(t, s, n.ID))
	})

	t.Run("UnclaimedOrUnknownRowIsLost", func(t *testing.T) {
		s := newHarness(t).Store
		n := NewNotification(BaseTime)
		mustInsert(t, s, n)
		unknown := NewID()
		u := func(id string) ports.Update {
			return ports.Update{ID: id, Status: ports.StatusParked, LastError: "x", UpdatedAt: now}
		}
		lost := mustRecord(t, s, "a", u(n.ID), u(unknown))
		checkIDSet(t, "lost", []string{n.ID, unknown}, lost)
		checkSame(t, "unclaimed row", n, mustGet(t, s, n.ID))
		requireNotFound(t, s, unknown)
	})

	t.Run("CallerCopiesAreIndependent", func(t *testing.T) {
		s := newHarness(t).Store
		n := NewNotification(BaseTime)
		mustInsert(t, s, n)
		claimOne(t, s, "a", now)
		u := ports.Update{
			ID: n.ID, Status: ports.StatusDelivered, ResolvedTargets: []string{"a@example.test", "b@example.test"},
			Targets:       NewTargetStates(now),
			LastAttemptAt: now, DeliveredAt: now, UpdatedAt: now,
		}
		want := applied(n, u)
		want.ResolvedTargets = []string{"a@example.test", "b@example.test"}
		want.Targets = NewTargetStates(now)
		if lost := mustRecord(t, s, "a", u); len(lost) != 0 {
			t.Fatalf("Record lost %v", lost)
		}
		// Mutating the update's slice after Record must not reach the store.
		u.ResolvedTargets[0] = "mutated"
		u.Targets[1].Attempts = 99
		checkSame(t, "row after mutating the recorded update", want, mustGet(t, s, n.ID))
	})

	t.Run("EmptyBatch", func(t *testing.T) {
		s := newHarness(t).Store
		lost, err := s.Record(t.Context(), "a", nil)
		if err != nil {
			t.Fatalf("Record of no updates: %v", err)
		}
		if len(lost) != 0 {
			t.Errorf("Record of no updates lost %v", lost)
		}
	})

	t.Run("ReleaseClearsLeaseOnly", func(t *testing.T) {
		s := newHarness(t).Store
		r1 := NewNotification(BaseTime)
		r1.Status = ports.StatusRetrying
		r1.RetryCount = 2
		r1.LastError = "timeout"
		r1.NextAttemptAt = now.Add(-time.Minute)
		r1.LastAttemptAt = now.Add(-2 * time.Minute)
		r2 := NewNotification(BaseTime.Add(time.Second))
		mustInsert(t, s, r1, r2)
		if got := mustClaim(t, s, ports.ClaimRequest{Owner: "a", Now: now, Lease: lease, Limit: 10}); len(got) != 2 {
			t.Fatalf("a claimed %d rows, want 2", len(got))
		}
		if err := s.Release(t.Context(), "a", []string{r1.ID}); err != nil {
			t.Fatalf("Release: %v", err)
		}
		checkSame(t, "released row", r1, mustGet(t, s, r1.ID))
		if got := mustGet(t, s, r2.ID); got.ClaimedBy != "a" {
			t.Errorf("row not named in Release lost its lease: ClaimedBy %q", got.ClaimedBy)
		}
		got := mustClaim(t, s, ports.ClaimRequest{Owner: "b", Now: now, Lease: lease, Limit: 10})
		checkIDs(t, "claim right after Release", []string{r1.ID}, idsOf(got))
	})

	t.Run("ReleaseByOtherOwnerIgnored", func(t *testing.T) {
		s := newHarness(t).Store
		n := NewNotification(BaseTime)
		mustInsert(t, s, n)
		claimOne(t, s, "a", now)
		if err := s.Release(t.Context(), "b", []string{n.ID}); err != nil {
			t.Fatalf("Release by another owner: %v", err)
		}
		if got := mustGet(t, s, n.ID); got.ClaimedBy != "a" || !sameTime(got.ClaimedUntil, now.Add(lease)) {
			t.Errorf("lease after another owner's Release = %q until %s, want a's", got.ClaimedBy, fmtTime(got.ClaimedUntil))
		}
		if got := mustClaim(t, s, ports.ClaimRequest{Owner: "c", Now: now, Lease: lease, Limit: 10}); len(got) != 0 {
			t.Errorf("claim got %v after another owner's Release", idsOf(got))
		}
	})
}
