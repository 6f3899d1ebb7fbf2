package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// transitionFixture inserts rows for the transition tests and returns them by
// name: p1, p2 (Parked, list L1), p3 (Parked, list L2), d1 (Delivered, L1),
// r1 (Retrying, L1) and x1 (Discarded, L1). p1 carries retry fields and was
// parked at +10m; p2 and p3 at +30m.
func transitionFixture(t *testing.T, s ports.Store) map[string]ports.Notification {
	t.Helper()
	at := func(m int) time.Time { return BaseTime.Add(time.Duration(m) * time.Minute) }
	mk := func(i int, st ports.Status, list string, updated int) ports.Notification {
		n := NewNotification(at(i))
		n.Status = st
		n.List = list
		n.UpdatedAt = at(updated)
		return n
	}
	p1 := mk(1, ports.StatusParked, "L1", 10)
	p1.RetryCount = 5
	p1.LastError = "retries exhausted: smtp 421"
	p1.LastAttemptAt = at(9)
	p1.NextAttemptAt = at(11)
	p1.Targets = NewTargetStates(at(9))
	p2 := mk(2, ports.StatusParked, "L1", 30)
	p2.LastError = "expired"
	p3 := mk(3, ports.StatusParked, "L2", 30)
	p3.LastError = "smtp 550"
	p3.RetryCount = 1
	d1 := mk(4, ports.StatusDelivered, "L1", 5)
	d1.DeliveredAt = at(5)
	d1.ResolvedTargets = []string{"a@example.test"}
	d1.Targets = []ports.TargetState{{Target: "a@example.test", Status: ports.TargetDelivered, Attempts: 1,
		LastAttemptAt: at(5), DeliveredAt: at(5)}}
	r1 := mk(5, ports.StatusRetrying, "L1", 6)
	r1.RetryCount = 2
	r1.LastError = "timeout"
	r1.NextAttemptAt = at(7)
	x1 := mk(6, ports.StatusDiscarded, "L1", 8)
	x1.LastError = "smtp 550"
	rows := map[string]ports.Notification{"p1": p1, "p2": p2, "p3": p3, "d1": d1, "r1": r1, "x1": x1}
	mustInsert(t, s, p1, p2, p3, d1, r1, x1)
	return rows
}

func mustTransition(t *testing.T, s ports.Store, req ports.TransitionRequest) []string {
	t.Helper()
	moved, err := s.Transition(t.Context(), req)
	if err != nil {
		t.Fatalf("Transition %s->%s: %v", req.From, req.To, err)
	}
	ids := make([]string, len(moved))
	for i, m := range moved {
		ids[i] = m.ID
	}
	return ids
}

// checkUntouched reports rows, other than the named exceptions, that differ
// from the fixture.
func checkUntouched(t *testing.T, s ports.Store, rows map[string]ports.Notification, except ...string) {
	t.Helper()
	skip := map[string]bool{}
	for _, e := range except {
		skip[e] = true
	}
	for name, n := range rows {
		if !skip[name] {
			checkSame(t, "row "+name+" that must not move", n, mustGet(t, s, n.ID))
		}
	}
}

func exerciseTransition(t *testing.T, newHarness func(t *testing.T) Harness) {
	now := BaseTime.Add(time.Hour)

	t.Run("ByIDsWithReset", func(t *testing.T) {
		s := newHarness(t).Store
		rows := transitionFixture(t, s)
		req := ports.TransitionRequest{
			Selection: ports.Selection{IDs: []string{rows["p1"].ID, rows["d1"].ID, rows["r1"].ID, rows["p1"].ID, NewID()}},
			From:      ports.StatusParked,
			To:        ports.StatusPending,
			Now:       now,
			Reset:     true,
		}
		moved := mustTransition(t, s, req)
		checkIDs(t, "moved", []string{rows["p1"].ID}, moved)

		want := rows["p1"]
		want.Status = ports.StatusPending
		want.RetryCount = 0
		want.NextAttemptAt = time.Time{}
		want.LastError = ""
		want.UpdatedAt = now
		checkSame(t, "retried row", want, mustGet(t, s, want.ID))
		checkUntouched(t, s, rows, "p1")

		// From is checked against the row as it is now: a repeat moves nothing.
		if moved := mustTransition(t, s, req); len(moved) != 0 {
			t.Errorf("repeated transition moved %v", moved)
		}
		checkSame(t, "retried row after a repeat", want, mustGet(t, s, want.ID))
	})

	t.Run("ByFilterWithoutReset", func(t *testing.T) {
		s := newHarness(t).Store
		rows := transitionFixture(t, s)
		moved := mustTransition(t, s, ports.TransitionRequest{
			Selection: ports.Selection{Filter: ports.Filter{List: "L1"}},
			From:      ports.StatusParked,
			To:        ports.StatusDiscarded,
			Now:       now,
		})
		checkIDSet(t, "moved", []string{rows["p1"].ID, rows["p2"].ID}, moved)
		for _, name := range []string{"p1", "p2"} {
			want := rows[name]
			want.Status = ports.StatusDiscarded
			want.UpdatedAt = now
			checkSame(t, "discarded row "+name+" (retry fields kept)", want, mustGet(t, s, want.ID))
		}
		checkUntouched(t, s, rows, "p1", "p2")
	})

	// The moved rows come back with their site and type, which an
	// operator's audit record carries (Throughput counts it under them).
	t.Run("ReturnsSiteAndType", func(t *testing.T) {
		s := newHarness(t).Store
		a := NewNotification(BaseTime)
		a.Status, a.SourceSite, a.Type = ports.StatusRetrying, "site-a", "sms"
		b := NewNotification(BaseTime.Add(time.Second))
		b.Status, b.SourceSite, b.Type = ports.StatusRetrying, "site-b", "email"
		mustInsert(t, s, a, b)
		moved, err := s.Transition(t.Context(), ports.TransitionRequest{
			Selection: ports.Selection{IDs: []string{a.ID, b.ID}},
			From:      ports.StatusRetrying, To: ports.StatusParked, Now: now, LeaseEndedBy: now,
		})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]ports.Moved{}
		for _, m := range moved {
			got[m.ID] = m
		}
		for _, n := range []ports.Notification{a, b} {
			if want := (ports.Moved{ID: n.ID, SourceSite: n.SourceSite, Type: n.Type}); got[n.ID] != want {
				t.Errorf("moved %+v, want %+v", got[n.ID], want)
			}
		}
		if len(moved) != 2 {
			t.Errorf("moved %d rows, want 2: %+v", len(moved), moved)
		}
	})

	t.Run("ByFilterParkedSince", func(t *testing.T) {
		s := newHarness(t).Store
		rows := transitionFixture(t, s)
		moved := mustTransition(t, s, ports.TransitionRequest{
			Selection: ports.Selection{Filter: ports.Filter{
				List:        "L1",
				UpdatedFrom: BaseTime.Add(20 * time.Minute),
			}},
			From:  ports.StatusParked,
			To:    ports.StatusPending,
			Now:   now,
			Reset: true,
		})
		checkIDs(t, "moved", []string{rows["p2"].ID}, moved)
		want := rows["p2"]
		want.Status = ports.StatusPending
		want.LastError = ""
		want.UpdatedAt = now
		checkSame(t, "retried row", want, mustGet(t, s, want.ID))
		checkUntouched(t, s, rows, "p2")
	})

	t.Run("WithoutResetKeepsRetryFields", func(t *testing.T) {
		s := newHarness(t).Store
		rows := transitionFixture(t, s)
		moved := mustTransition(t, s, ports.TransitionRequest{
			Selection: ports.Selection{IDs: []string{rows["p1"].ID}},
			From:      ports.StatusParked,
			To:        ports.StatusPending,
			Now:       now,
		})
		checkIDs(t, "moved", []string{rows["p1"].ID}, moved)
		want := rows["p1"]
		want.Status = ports.StatusPending
		want.UpdatedAt = now
		checkSame(t, "moved row without Reset", want, mustGet(t, s, want.ID))
	})

	t.Run("IDsTakePrecedenceOverFilter", func(t *testing.T) {
		s := newHarness(t).Store
		rows := transitionFixture(t, s)
		moved := mustTransition(t, s, ports.TransitionRequest{
			Selection: ports.Selection{IDs: []string{rows["p1"].ID}, Filter: ports.Filter{List: "L2"}},
			From:      ports.StatusParked,
			To:        ports.StatusDiscarded,
			Now:       now,
		})
		checkIDs(t, "moved", []string{rows["p1"].ID}, moved)
		checkUntouched(t, s, rows, "p1")
	})

	t.Run("EmptySelectionMovesEveryRowInFrom", func(t *testing.T) {
		s := newHarness(t).Store
		rows := transitionFixture(t, s)
		moved := mustTransition(t, s, ports.TransitionRequest{
			From: ports.StatusParked,
			To:   ports.StatusDiscarded,
			Now:  now,
		})
		checkIDSet(t, "moved", []string{rows["p1"].ID, rows["p2"].ID, rows["p3"].ID}, moved)
		checkUntouched(t, s, rows, "p1", "p2", "p3")
		if n := mustCount(t, s, ports.Filter{Statuses: []ports.Status{ports.StatusParked}}); n != 0 {
			t.Errorf("%d Parked rows left", n)
		}
	})

	t.Run("ReleasesLease", func(t *testing.T) {
		s := newHarness(t).Store
		a := NewNotification(BaseTime)
		b := NewNotification(BaseTime.Add(time.Second))
		b.List = "expiring"
		mustInsert(t, s, a, b)
		if got := mustClaim(t, s, ports.ClaimRequest{Owner: "node-a", Now: now, Lease: time.Hour, Limit: 10}); len(got) != 2 {
			t.Fatalf("claimed %d rows, want 2", len(got))
		}
		byID := mustTransition(t, s, ports.TransitionRequest{
			Selection: ports.Selection{IDs: []string{a.ID}},
			From:      ports.StatusPending, To: ports.StatusParked, Now: now.Add(time.Second),
		})
		checkIDs(t, "moved by id", []string{a.ID}, byID)
		byFilter := mustTransition(t, s, ports.TransitionRequest{
			Selection: ports.Selection{Filter: ports.Filter{List: "expiring"}},
			From:      ports.StatusPending, To: ports.StatusRetrying, Now: now.Add(time.Second),
		})
		checkIDs(t, "moved by filter", []string{b.ID}, byFilter)
		for _, n := range []ports.Notification{a, b} {
			got := mustGet(t, s, n.ID)
			if got.ClaimedBy != "" || !got.ClaimedUntil.IsZero() {
				t.Errorf("row %s still leased after Transition: %q until %s", n.ID, got.ClaimedBy, fmtTime(got.ClaimedUntil))
			}
			if !sameTime(got.UpdatedAt, now.Add(time.Second)) {
				t.Errorf("row %s UpdatedAt = %s, want %s", n.ID, fmtTime(got.UpdatedAt), fmtTime(now.Add(time.Second)))
			}
		}
		// Nothing else changed on the row moved by filter.
		b.Status = ports.StatusRetrying
		b.UpdatedAt = now.Add(time.Second)
		checkSame(t, "row moved by filter", b, mustGet(t, s, b.ID))
	})

	t.Run("DueNowAndLeaseEndedBy", func(t *testing.T) {
		// An operator's Retry now of Retrying rows: the row waiting for its
		// next attempt becomes due at once, keeping its retry count and
		// error; the row a dispatcher holds is left to its lease until the
		// lease ended by LeaseEndedBy, however far Now is past it.
		s := newHarness(t).Store
		retrying := func(created, next time.Time) ports.Notification {
			n := NewNotification(created)
			n.Status = ports.StatusRetrying
			n.RetryCount = 3
			n.LastError = "smtp: 421 try later"
			n.NextAttemptAt = next
			return n
		}
		waiting := retrying(BaseTime, now.Add(time.Hour))
		held := retrying(BaseTime.Add(time.Second), now.Add(-time.Minute))
		mustInsert(t, s, waiting, held)
		got := mustClaim(t, s, ports.ClaimRequest{Owner: "node-a/1", Now: now, Lease: time.Hour, Limit: 10})
		if len(got) != 1 || got[0].ID != held.ID {
			t.Fatalf("claimed %v, want the due row %s only", idsOf(got), held.ID)
		}
		held = mustGet(t, s, held.ID)
		moved := mustTransition(t, s, ports.TransitionRequest{Selection: ports.Selection{IDs: []string{waiting.ID, held.ID}},
			From: ports.StatusRetrying, To: ports.StatusRetrying, Now: now.Add(time.Minute), DueNow: true,
			LeaseEndedBy: now.Add(time.Minute)})
		checkIDs(t, "made due", []string{waiting.ID}, moved)
		want := waiting
		want.NextAttemptAt = time.Time{}
		want.UpdatedAt = now.Add(time.Minute)
		checkSame(t, "row made due (retry count and error kept)", want, mustGet(t, s, waiting.ID))
		checkSame(t, "leased row", held, mustGet(t, s, held.ID))
		if got := mustClaim(t, s, ports.ClaimRequest{Owner: "node-b/1", Now: now.Add(2 * time.Minute), Lease: time.Minute, Limit: 10}); len(got) != 1 || got[0].ID != waiting.ID {
			t.Fatalf("after Retry now a claim takes %v, want the row made due", idsOf(got))
		}

		// Past the lease by Now, but not by LeaseEndedBy (a grace for the
		// claiming node's clock and its Record in flight): still left.
		late := now.Add(time.Hour + time.Minute)
		if moved := mustTransition(t, s, ports.TransitionRequest{Selection: ports.Selection{IDs: []string{held.ID}},
			From: ports.StatusRetrying, To: ports.StatusParked, Now: late, LeaseEndedBy: now.Add(time.Hour - time.Millisecond)}); len(moved) != 0 {
			t.Fatalf("parked %v within the grace after the lease, want none", moved)
		}
		checkSame(t, "row within the grace", held, mustGet(t, s, held.ID))
		// The dispatcher's outcome, recorded after its lease, still lands.
		mustRecord(t, s, "node-a/1", ports.Update{ID: held.ID, Status: ports.StatusRetrying, RetryCount: 4,
			LastError: "smtp: 421 still busy", NextAttemptAt: late.Add(time.Hour), LastAttemptAt: late, UpdatedAt: late})
		held = mustGet(t, s, held.ID)
		if held.RetryCount != 4 || held.ClaimedBy != "" {
			t.Fatalf("the late Record: retries %d, claimed by %q", held.RetryCount, held.ClaimedBy)
		}

		// A row no dispatcher holds moves whatever LeaseEndedBy says; a
		// held row once its lease ended by LeaseEndedBy.
		other := retrying(BaseTime.Add(2*time.Second), now.Add(-time.Minute))
		mustInsert(t, s, other)
		if got := idsOf(mustClaim(t, s, ports.ClaimRequest{Owner: "node-c/1", Now: late, Lease: time.Minute, Limit: 10})); !slices.Contains(got, other.ID) {
			t.Fatalf("claimed %v, want %s among them", got, other.ID)
		}
		other = mustGet(t, s, other.ID)
		parked := mustTransition(t, s, ports.TransitionRequest{Selection: ports.Selection{IDs: []string{held.ID, other.ID}},
			From: ports.StatusRetrying, To: ports.StatusParked, Now: late.Add(2 * time.Minute), LeaseEndedBy: late.Add(time.Minute)})
		checkIDSet(t, "parked", []string{held.ID, other.ID}, parked)
		for _, n := range []ports.Notification{held, other} {
			want = n
			want.Status = ports.StatusParked
			want.UpdatedAt = late.Add(2 * time.Minute)
			want.ClaimedBy, want.ClaimedUntil = "", time.Time{}
			checkSame(t, "parked row (retry fields kept)", want, mustGet(t, s, n.ID))
		}
	})

	t.Run("KeepsTargets", func(t *testing.T) {
		// An operator's Retry and Discard move a row the dispatcher parked
		// with its targets' states: the states stay as recorded (the core
		// reads them to send the retry to the failed targets only).
		s := newHarness(t).Store
		rs := []ports.Notification{NewNotification(BaseTime), NewNotification(BaseTime.Add(time.Second))}
		mustInsert(t, s, rs...)
		if got := mustClaim(t, s, ports.ClaimRequest{Owner: "a", Now: now, Lease: time.Hour, Limit: 10}); len(got) != 2 {
			t.Fatalf("claimed %d rows, want 2", len(got))
		}
		parked := func(n ports.Notification) ports.Update {
			return ports.Update{ID: n.ID, Status: ports.StatusParked, LastError: "smtp: 550 5.1.1 no such user",
				Targets: NewTargetStates(now), LastAttemptAt: now, UpdatedAt: now}
		}
		mustRecord(t, s, "a", parked(rs[0]), parked(rs[1]))
		retried := mustTransition(t, s, ports.TransitionRequest{Selection: ports.Selection{IDs: []string{rs[0].ID}},
			From: ports.StatusParked, To: ports.StatusPending, Now: now.Add(time.Minute), Reset: true})
		checkIDs(t, "retried", []string{rs[0].ID}, retried)
		discarded := mustTransition(t, s, ports.TransitionRequest{Selection: ports.Selection{IDs: []string{rs[1].ID}},
			From: ports.StatusParked, To: ports.StatusDiscarded, Now: now.Add(time.Minute)})
		checkIDs(t, "discarded", []string{rs[1].ID}, discarded)
		for _, n := range rs {
			if d := diffTargetStates(NewTargetStates(now), mustGet(t, s, n.ID).Targets); len(d) > 0 {
				t.Errorf("row %s after Transition: %v", n.ID, d)
			}
		}
	})
}
