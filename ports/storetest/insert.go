package storetest

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

func exerciseInsert(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Run("AllFieldsRoundTrip", func(t *testing.T) {
		s := newHarness(t).Store
		full := ports.Notification{
			ID:      NewID(),
			Type:    "webhook",
			List:    "ops-oncall",
			Subject: "Pump 7 — pressure low ✓ 100%_done",
			Body:    "line one\nline two\ttab \"quoted\" 'single' ünïcödé \\ backslash",
			TypeData: json.RawMessage(`{"url": "https://hooks.example.test/x",
				"headers": {"X-Trace": "1"}, "n": [1, 2.5, true, null, "s"]}`),
			Priority:          7,
			Status:            ports.StatusParked,
			RetryCount:        4,
			LastError:         "smtp: 550 mailbox unavailable",
			ResolvedTargets:   []string{"a@example.test", "b@example.test", "c@example.test"},
			Targets:           NewTargetStates(BaseTime.Add(4 * time.Minute)),
			SourceSite:        "site-north",
			SourceInstance:    "plc-12",
			SourceScript:      "alarms/pump7.script",
			ExecutionID:       "exec-42",
			ParentExecutionID: "exec-41",
			SiteEnqueuedAt:    BaseTime.Add(-90*time.Second + 7*time.Microsecond),
			CreatedAt:         BaseTime,
			UpdatedAt:         BaseTime.Add(5*time.Minute + 1*time.Microsecond),
			LastAttemptAt:     BaseTime.Add(4*time.Minute + 2*time.Microsecond),
			NextAttemptAt:     BaseTime.Add(6*time.Minute + 3*time.Microsecond),
			DeliveredAt:       BaseTime.Add(3*time.Minute + 4*time.Microsecond),
			ExpiresAt:         BaseTime.Add(24*time.Hour + 5*time.Microsecond),
			ClaimedBy:         "node-a",
			ClaimedUntil:      BaseTime.Add(10*time.Minute + 6*time.Microsecond),
		}
		negative := NewNotification(BaseTime.Add(time.Second))
		negative.Priority = -3
		negative.Type = "slack"
		negative.TypeData = json.RawMessage(`[1,"two",{"three":3}]`)
		negative.Status = ports.StatusRetrying
		negative.RetryCount = 1
		negative.NextAttemptAt = BaseTime.Add(time.Minute)

		inserted, err := s.Insert(t.Context(), []ports.Notification{full, negative})
		if err != nil {
			t.Fatalf("Insert: %v", err)
		}
		checkIDSet(t, "inserted", []string{full.ID, negative.ID}, inserted)
		checkSame(t, "Get of a fully populated row", full, mustGet(t, s, full.ID))
		checkSame(t, "Get of a negative-priority row", negative, mustGet(t, s, negative.ID))
	})

	t.Run("ZeroFieldsStayZero", func(t *testing.T) {
		s := newHarness(t).Store
		n := ports.Notification{
			ID:        NewID(),
			List:      "unknown-list",
			Subject:   "s",
			Status:    ports.StatusPending,
			CreatedAt: BaseTime,
			UpdatedAt: BaseTime,
		}
		mustInsert(t, s, n)
		got := mustGet(t, s, n.ID)
		checkSame(t, "Get of a minimal row", n, got)
		for name, tm := range map[string]time.Time{
			"SiteEnqueuedAt": got.SiteEnqueuedAt, "LastAttemptAt": got.LastAttemptAt,
			"NextAttemptAt": got.NextAttemptAt, "DeliveredAt": got.DeliveredAt,
			"ExpiresAt": got.ExpiresAt, "ClaimedUntil": got.ClaimedUntil,
		} {
			if !tm.IsZero() {
				t.Errorf("%s = %s, want the zero time", name, fmtTime(tm))
			}
		}
		if len(got.TypeData) != 0 {
			t.Errorf("TypeData = %s, want nil", got.TypeData)
		}
		if len(got.ResolvedTargets) != 0 {
			t.Errorf("ResolvedTargets = %q, want none", got.ResolvedTargets)
		}
	})

	t.Run("ExistingIDLeftUntouched", func(t *testing.T) {
		s := newHarness(t).Store
		orig := NewNotification(BaseTime)
		orig.TypeData = json.RawMessage(`{"a":1}`)
		mustInsert(t, s, orig)

		again := orig
		again.Subject = "a different subject"
		again.Body = "a different body"
		again.Status = ports.StatusDelivered
		again.Priority = 99
		again.TypeData = json.RawMessage(`{"a":2}`)
		again.ResolvedTargets = []string{"x@example.test"}
		again.UpdatedAt = BaseTime.Add(time.Hour)
		again.DeliveredAt = BaseTime.Add(time.Hour)
		fresh := NewNotification(BaseTime.Add(time.Second))

		inserted, err := s.Insert(t.Context(), []ports.Notification{again, fresh})
		if err != nil {
			t.Fatalf("Insert with an existing id: %v", err)
		}
		checkIDs(t, "inserted (the existing id must not be reported)", []string{fresh.ID}, inserted)
		checkSame(t, "existing row after a re-insert", orig, mustGet(t, s, orig.ID))
		checkSame(t, "fresh row of the same batch", fresh, mustGet(t, s, fresh.ID))

		inserted, err = s.Insert(t.Context(), []ports.Notification{again})
		if err != nil {
			t.Fatalf("Insert of only an existing id: %v", err)
		}
		if len(inserted) != 0 {
			t.Errorf("re-insert of an existing id reported inserted %v, want none", inserted)
		}
		checkSame(t, "existing row after a second re-insert", orig, mustGet(t, s, orig.ID))
	})

	t.Run("DuplicateIDsInBatchInsertedOnce", func(t *testing.T) {
		s := newHarness(t).Store
		a := NewNotification(BaseTime)
		a2 := a
		a2.Subject = "the second copy"
		b := NewNotification(BaseTime.Add(time.Second))
		inserted, err := s.Insert(t.Context(), []ports.Notification{a, b, a2, a})
		if err != nil {
			t.Fatalf("Insert with duplicate ids: %v", err)
		}
		checkIDSet(t, "inserted", []string{a.ID, b.ID}, inserted)
		if n := mustCount(t, s, ports.Filter{}); n != 2 {
			t.Errorf("Count after inserting 2 distinct ids = %d, want 2", n)
		}
		got := mustGet(t, s, a.ID)
		if got.Subject != a.Subject && got.Subject != a2.Subject {
			t.Errorf("stored subject %q is neither copy's", got.Subject)
		}
		checkSame(t, "b", b, mustGet(t, s, b.ID))
	})

	t.Run("EmptyBatch", func(t *testing.T) {
		s := newHarness(t).Store
		for _, batch := range [][]ports.Notification{nil, {}} {
			inserted, err := s.Insert(t.Context(), batch)
			if err != nil {
				t.Fatalf("Insert of an empty batch: %v", err)
			}
			if len(inserted) != 0 {
				t.Errorf("Insert of an empty batch reported %v", inserted)
			}
		}
		if n := mustCount(t, s, ports.Filter{}); n != 0 {
			t.Errorf("Count after empty inserts = %d, want 0", n)
		}
	})

	t.Run("GetUnknownIsNotFound", func(t *testing.T) {
		s := newHarness(t).Store
		requireNotFound(t, s, NewID())
		mustInsert(t, s, NewNotification(BaseTime))
		requireNotFound(t, s, NewID())
	})

	t.Run("StatusesKnownIDsOnly", func(t *testing.T) {
		s := newHarness(t).Store
		want := map[string]ports.Status{}
		var ns []ports.Notification
		for i, st := range ports.CentralStatuses {
			n := NewNotification(BaseTime.Add(time.Duration(i) * time.Second))
			n.Status = st
			ns = append(ns, n)
			want[n.ID] = st
		}
		mustInsert(t, s, ns...)
		ids := append(idsOf(ns), NewID(), NewID())
		got, err := s.Statuses(t.Context(), "", ids)
		if err != nil {
			t.Fatalf("Statuses: %v", err)
		}
		if len(got) != len(want) {
			t.Errorf("Statuses returned %d entries %v, want %d %v", len(got), got, len(want), want)
		}
		for id, st := range want {
			if got[id] != st {
				t.Errorf("Statuses[%s] = %q, want %q", id, got[id], st)
			}
		}
		got, err = s.Statuses(t.Context(), "", []string{ns[0].ID})
		if err != nil {
			t.Fatalf("Statuses of one id: %v", err)
		}
		if len(got) != 1 || got[ns[0].ID] != ns[0].Status {
			t.Errorf("Statuses of one id = %v, want only %s", got, ns[0].ID)
		}
		got, err = s.Statuses(t.Context(), "", nil)
		if err != nil {
			t.Fatalf("Statuses of no ids: %v", err)
		}
		if len(got) != 0 {
			t.Errorf("Statuses of no ids = %v, want empty", got)
		}
	})

	t.Run("StatusesOfOneSite", func(t *testing.T) {
		s := newHarness(t).Store
		own, other := NewNotification(BaseTime), NewNotification(BaseTime.Add(time.Second))
		own.SourceSite, other.SourceSite = "site-own", "site-other"
		other.Status = ports.StatusParked
		mustInsert(t, s, own, other)
		unknown := NewID()
		got, err := s.Statuses(t.Context(), "site-own", []string{own.ID, other.ID, unknown})
		if err != nil {
			t.Fatalf("Statuses of site-own: %v", err)
		}
		if want := map[string]ports.Status{own.ID: ports.StatusPending}; !maps.Equal(got, want) {
			t.Errorf("Statuses of site-own = %v, want only its own row %v", got, want)
		}
		got, err = s.Statuses(t.Context(), "site-other", []string{own.ID, other.ID})
		if err != nil {
			t.Fatalf("Statuses of site-other: %v", err)
		}
		if want := map[string]ports.Status{other.ID: ports.StatusParked}; !maps.Equal(got, want) {
			t.Errorf("Statuses of site-other = %v, want only its own row %v", got, want)
		}
		got, err = s.Statuses(t.Context(), "site-nobody", []string{own.ID, other.ID})
		if err != nil || len(got) != 0 {
			t.Errorf("Statuses of a site with no rows = %v, %v; want empty", got, err)
		}
	})

	t.Run("CallerCopiesAreIndependent", func(t *testing.T) {
		s := newHarness(t).Store
		n := NewNotification(BaseTime)
		n.TypeData = json.RawMessage(`{"k":"v"}`)
		n.ResolvedTargets = []string{"a@example.test", "b@example.test"}
		n.Targets = NewTargetStates(BaseTime)
		want := n
		want.TypeData = slices.Clone(n.TypeData)
		want.ResolvedTargets = slices.Clone(n.ResolvedTargets)
		want.Targets = NewTargetStates(BaseTime)
		mustInsert(t, s, n)

		// Mutating the caller's slices after Insert must not reach the store.
		n.TypeData[2] = 'X'
		n.ResolvedTargets[0] = "mutated"
		n.Targets[0].Target = "mutated"
		got := mustGet(t, s, want.ID)
		checkSame(t, "after mutating the inserted value", want, got)

		// Mutating a row read back must not reach the store either.
		if len(got.TypeData) > 0 {
			got.TypeData[0] = ' '
		}
		if len(got.ResolvedTargets) > 0 {
			got.ResolvedTargets[0] = "mutated"
		}
		if len(got.Targets) > 0 {
			got.Targets[0].Status = ports.TargetFailed
		}
		checkSame(t, "after mutating a row read back", want, mustGet(t, s, want.ID))
	})
}
