package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// diffAudit lists the fields in which got differs from want. Durations are
// compared to the microsecond; nil and empty Targets are equal.
func diffAudit(want, got ports.AuditRecord) []string {
	var d []string
	str := func(name, w, g string) {
		if w != g {
			d = append(d, fmt.Sprintf("%s: want %q, got %q", name, w, g))
		}
	}
	str("NotificationID", want.NotificationID, got.NotificationID)
	if !sameTime(want.At, got.At) {
		d = append(d, fmt.Sprintf("At: want %s, got %s", fmtTime(want.At), fmtTime(got.At)))
	}
	str("Kind", string(want.Kind), string(got.Kind))
	str("Actor", want.Actor, got.Actor)
	str("Outcome", string(want.Outcome), string(got.Outcome))
	str("Status", string(want.Status), string(got.Status))
	if want.Duration.Truncate(time.Microsecond) != got.Duration.Truncate(time.Microsecond) {
		d = append(d, fmt.Sprintf("Duration: want %s, got %s", want.Duration, got.Duration))
	}
	str("Error", want.Error, got.Error)
	str("SourceSite", want.SourceSite, got.SourceSite)
	str("Type", want.Type, got.Type)
	if !(len(want.Targets) == 0 && len(got.Targets) == 0) && !slices.Equal(want.Targets, got.Targets) {
		d = append(d, fmt.Sprintf("Targets: want %+v, got %+v", want.Targets, got.Targets))
	}
	return d
}

// checkHistory reports when got is not want, record by record.
func checkHistory(t *testing.T, what string, want, got []ports.AuditRecord) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d records, want %d:\n  got  %+v\n  want %+v", what, len(got), len(want), got, want)
		return
	}
	for i := range want {
		if d := diffAudit(want[i], got[i]); len(d) > 0 {
			t.Errorf("%s: record %d differs: %v", what, i, d)
		}
	}
}

func mustHistory(t *testing.T, a ports.AuditLog, id string) []ports.AuditRecord {
	t.Helper()
	h, err := a.History(t.Context(), id)
	if err != nil {
		t.Fatalf("History(%s): %v", id, err)
	}
	return h
}

func mustAppend(t *testing.T, a ports.AuditLog, rs ...ports.AuditRecord) {
	t.Helper()
	if err := a.Append(t.Context(), rs); err != nil {
		t.Fatalf("Append: %v", err)
	}
}

func exerciseAudit(t *testing.T, newHarness func(t *testing.T) Harness) {
	// stored inserts a notification for the records to belong to, as the
	// core always does before appending.
	stored := func(t *testing.T, h Harness) string {
		t.Helper()
		n := NewNotification(BaseTime)
		mustInsert(t, h.Store, n)
		return n.ID
	}

	t.Run("AllFieldsRoundTrip", func(t *testing.T) {
		h := newHarness(t)
		id := stored(t, h)
		want := []ports.AuditRecord{
			{NotificationID: id, At: BaseTime, Kind: ports.AuditIngested, Actor: "site:site-north", Status: ports.StatusPending},
			{
				NotificationID: id, At: BaseTime.Add(time.Second), Kind: ports.AuditAttempted, Actor: ports.ActorSystem,
				Outcome: ports.OutcomeTransient, Status: ports.StatusRetrying, Duration: 1234567 * time.Microsecond,
				Error: "smtp: 421 4.7.0 try again later — ünïcode \"quoted\"", SourceSite: "site-north", Type: "email",
				Targets: []ports.AuditTarget{
					{Target: "a@example.test", Outcome: ports.OutcomeSuccess},
					{Target: "env:OPS_HOOK", Outcome: ports.OutcomeTransient, Error: "http: 503 \"busy\" — réessayez"},
					{Target: "b@example.test", Outcome: ports.OutcomePermanent, Error: "smtp: 550 5.1.1 no such user"},
				},
			},
			{
				NotificationID: id, At: BaseTime.Add(time.Minute), Kind: ports.AuditAttempted, Actor: ports.ActorSystem,
				Outcome: ports.OutcomePermanent, Status: ports.StatusParked, Duration: 3 * time.Microsecond, Error: "smtp: 550",
				Targets: []ports.AuditTarget{{Target: "b@example.test", Outcome: ports.OutcomePermanent, Error: "smtp: 550"}},
			},
			{NotificationID: id, At: BaseTime.Add(time.Minute), Kind: ports.AuditParked, Actor: ports.ActorSystem, Status: ports.StatusParked, Error: "smtp: 550"},
			{NotificationID: id, At: BaseTime.Add(time.Hour), Kind: ports.AuditRetried, Actor: "alice", Status: ports.StatusPending},
			{
				NotificationID: id, At: BaseTime.Add(time.Hour + time.Second), Kind: ports.AuditAttempted, Actor: ports.ActorSystem,
				Outcome: ports.OutcomeSuccess, Status: ports.StatusDelivered, Duration: 2*time.Hour + 17*time.Microsecond,
			},
			{NotificationID: id, At: BaseTime.Add(time.Hour + time.Second), Kind: ports.AuditDelivered, Actor: ports.ActorSystem, Status: ports.StatusDelivered},
			{NotificationID: id, At: BaseTime.Add(2 * time.Hour), Kind: ports.AuditDiscarded, Actor: "bob", Status: ports.StatusDiscarded},
		}
		mustAppend(t, h.Audit, want...)
		got := mustHistory(t, h.Audit, id)
		checkHistory(t, "History", want, got)
		// A record without targets (every record but an Attempted one, and
		// an Attempted one from before targets were tracked) has none.
		for i, r := range got {
			if len(want[i].Targets) == 0 && r.Targets != nil {
				t.Errorf("record %d: Targets = %+v, want nil", i, r.Targets)
			}
		}
	})

	t.Run("OldestFirstThenAppendOrder", func(t *testing.T) {
		h := newHarness(t)
		id := stored(t, h)
		rec := func(at time.Time, actor string) ports.AuditRecord {
			return ports.AuditRecord{NotificationID: id, At: at, Kind: ports.AuditRetried, Actor: actor, Status: ports.StatusPending}
		}
		t1, t2, t3 := BaseTime, BaseTime.Add(time.Microsecond), BaseTime.Add(time.Second)
		mustAppend(t, h.Audit, rec(t3, "c1"), rec(t2, "b1"), rec(t2, "b2"))
		mustAppend(t, h.Audit, rec(t1, "a1"), rec(t3, "c2"))
		mustAppend(t, h.Audit, rec(t2, "b3"))
		mustAppend(t, h.Audit, rec(t3, "c3"), rec(t3, "c4"), rec(t1, "a2"))
		want := []ports.AuditRecord{
			rec(t1, "a1"), rec(t1, "a2"),
			rec(t2, "b1"), rec(t2, "b2"), rec(t2, "b3"),
			rec(t3, "c1"), rec(t3, "c2"), rec(t3, "c3"), rec(t3, "c4"),
		}
		checkHistory(t, "History", want, mustHistory(t, h.Audit, id))
	})

	t.Run("HistoryOfOneNotificationOnly", func(t *testing.T) {
		h := newHarness(t)
		a, b := stored(t, h), stored(t, h)
		ra := ports.AuditRecord{NotificationID: a, At: BaseTime, Kind: ports.AuditIngested, Actor: "site:1", Status: ports.StatusPending}
		rb := ports.AuditRecord{NotificationID: b, At: BaseTime, Kind: ports.AuditIngested, Actor: "site:2", Status: ports.StatusPending}
		mustAppend(t, h.Audit, ra, rb)
		checkHistory(t, "History of a", []ports.AuditRecord{ra}, mustHistory(t, h.Audit, a))
		checkHistory(t, "History of b", []ports.AuditRecord{rb}, mustHistory(t, h.Audit, b))
	})

	t.Run("UnknownIsEmpty", func(t *testing.T) {
		h := newHarness(t)
		if got := mustHistory(t, h.Audit, NewID()); len(got) != 0 {
			t.Errorf("History of an unknown id = %v, want empty", got)
		}
		id := stored(t, h)
		if got := mustHistory(t, h.Audit, id); len(got) != 0 {
			t.Errorf("History of a row without records = %v, want empty", got)
		}
	})

	t.Run("EmptyAppend", func(t *testing.T) {
		h := newHarness(t)
		if err := h.Audit.Append(t.Context(), nil); err != nil {
			t.Errorf("Append of no records: %v", err)
		}
	})

	t.Run("ForgetOnlyNamed", func(t *testing.T) {
		h := newHarness(t)
		ids := []string{stored(t, h), stored(t, h), stored(t, h)}
		var all [][]ports.AuditRecord
		for i, id := range ids {
			rs := []ports.AuditRecord{
				{NotificationID: id, At: BaseTime, Kind: ports.AuditIngested, Actor: "site:1", Status: ports.StatusPending},
				{NotificationID: id, At: BaseTime.Add(time.Duration(i+1) * time.Second), Kind: ports.AuditDelivered, Actor: ports.ActorSystem, Status: ports.StatusDelivered},
			}
			mustAppend(t, h.Audit, rs...)
			all = append(all, rs)
		}
		if err := h.Audit.Forget(t.Context(), []string{ids[0], ids[2], NewID()}); err != nil {
			t.Fatalf("Forget: %v", err)
		}
		for _, i := range []int{0, 2} {
			if got := mustHistory(t, h.Audit, ids[i]); len(got) != 0 {
				t.Errorf("History of forgotten %s = %v, want empty", ids[i], got)
			}
		}
		checkHistory(t, "History of the one not forgotten", all[1], mustHistory(t, h.Audit, ids[1]))
		if err := h.Audit.Forget(t.Context(), nil); err != nil {
			t.Errorf("Forget of no ids: %v", err)
		}
		checkHistory(t, "History after Forget(nil)", all[1], mustHistory(t, h.Audit, ids[1]))
	})

	t.Run("ForgetAfterPurge", func(t *testing.T) {
		h := newHarness(t)
		n := NewNotification(BaseTime)
		n.Status = ports.StatusDelivered
		n.DeliveredAt = BaseTime
		mustInsert(t, h.Store, n)
		mustAppend(t, h.Audit, ports.AuditRecord{NotificationID: n.ID, At: BaseTime, Kind: ports.AuditDelivered, Actor: ports.ActorSystem, Status: ports.StatusDelivered})
		// The core purges rows first and forgets their history after: the
		// history must survive the purge of its row until then.
		deleted, err := h.Store.Purge(t.Context(), BaseTime.Add(time.Hour), 10)
		if err != nil {
			t.Fatalf("Purge: %v", err)
		}
		checkIDs(t, "purged", []string{n.ID}, deleted)
		if got := mustHistory(t, h.Audit, n.ID); len(got) != 1 {
			t.Errorf("History after the purge of its row has %d records, want 1", len(got))
		}
		if err := h.Audit.Forget(t.Context(), deleted); err != nil {
			t.Fatalf("Forget: %v", err)
		}
		if got := mustHistory(t, h.Audit, n.ID); len(got) != 0 {
			t.Errorf("History after Forget = %v, want empty", got)
		}
	})
}
