package storetest

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

func exerciseClaim(t *testing.T, newHarness func(t *testing.T) Harness) {
	const lease = 5 * time.Minute
	now := BaseTime.Add(time.Hour)

	t.Run("OnlyDueRows", func(t *testing.T) {
		s := newHarness(t).Store
		mk := func(i int, st ports.Status, next time.Time) ports.Notification {
			n := NewNotification(BaseTime.Add(time.Duration(i) * time.Second))
			n.Status = st
			n.NextAttemptAt = next
			if st.Terminal() {
				n.UpdatedAt = n.CreatedAt.Add(time.Second)
			}
			return n
		}
		pending := mk(0, ports.StatusPending, time.Time{})
		// Expiry is the dispatcher's business: an expired row is still due,
		// so that it can be claimed and parked.
		expired := mk(1, ports.StatusPending, time.Time{})
		expired.ExpiresAt = now.Add(-time.Minute)
		retryPast := mk(2, ports.StatusRetrying, now.Add(-time.Minute))
		retryNow := mk(3, ports.StatusRetrying, now)
		retryFuture := mk(4, ports.StatusRetrying, now.Add(time.Microsecond))
		delivered := mk(5, ports.StatusDelivered, time.Time{})
		delivered.DeliveredAt = delivered.UpdatedAt
		parked := mk(6, ports.StatusParked, time.Time{})
		discarded := mk(7, ports.StatusDiscarded, time.Time{})
		mustInsert(t, s, pending, expired, retryPast, retryNow, retryFuture, delivered, parked, discarded)

		got := mustClaim(t, s, ports.ClaimRequest{Owner: "a", Now: now, Lease: lease, Limit: 100})
		checkIDs(t, "claimed (due rows in claim order)",
			[]string{pending.ID, expired.ID, retryPast.ID, retryNow.ID}, idsOf(got))

		for _, n := range []ports.Notification{retryFuture, delivered, parked, discarded} {
			checkSame(t, "row that is not due", n, mustGet(t, s, n.ID))
		}
		if again := mustClaim(t, s, ports.ClaimRequest{Owner: "b", Now: now, Lease: lease, Limit: 100}); len(again) != 0 {
			t.Errorf("second claim at the same instant got %v, want nothing", idsOf(again))
		}
		// The future retry becomes due once its time comes.
		later := mustClaim(t, s, ports.ClaimRequest{Owner: "b", Now: now.Add(time.Microsecond), Lease: lease, Limit: 100})
		checkIDs(t, "claimed once the retry is due", []string{retryFuture.ID}, idsOf(later))
	})

	// orderFixture returns rows in shuffled order and their IDs in claim
	// order.
	orderFixture := func() ([]ports.Notification, []string) {
		ids := sortedIDs(8)
		mk := func(id string, prio int, created time.Duration) ports.Notification {
			n := NewNotification(BaseTime.Add(created))
			n.ID = id
			n.Priority = prio
			return n
		}
		c := mk(ids[0], 5, 2*time.Minute)
		g := mk(ids[5], 5, 2*time.Minute) // same priority and CreatedAt as c: ID breaks the tie
		g.Status = ports.StatusRetrying
		g.RetryCount = 1
		g.NextAttemptAt = now.Add(-time.Second)
		b := mk(ids[1], 5, 3*time.Minute)
		f := mk(ids[7], 0, 0)
		e := mk(ids[2], 0, time.Minute)
		a := mk(ids[6], 0, time.Minute)
		h := mk(ids[3], 1, 10*time.Minute)
		d := mk(ids[4], -1, -time.Minute)
		rows := []ports.Notification{a, b, c, d, e, f, g, h}
		rand.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
		return rows, []string{c.ID, g.ID, b.ID, h.ID, f.ID, e.ID, a.ID, d.ID}
	}

	t.Run("RetryingWithoutNextAttemptIsDue", func(t *testing.T) {
		s := newHarness(t).Store
		n := NewNotification(BaseTime)
		n.Status, n.RetryCount = ports.StatusRetrying, 1
		mustInsert(t, s, n)
		got := mustClaim(t, s, ports.ClaimRequest{Owner: "a", Now: BaseTime, Lease: time.Minute, Limit: 10})
		checkIDs(t, "claimed", []string{n.ID}, idsOf(got))
	})

	t.Run("OrderPriorityCreatedAtID", func(t *testing.T) {
		s := newHarness(t).Store
		rows, want := orderFixture()
		mustInsert(t, s, rows...)
		got := mustClaim(t, s, ports.ClaimRequest{Owner: "a", Now: now, Lease: lease, Limit: 100})
		checkIDs(t, "claim order (priority desc, CreatedAt asc, ID asc)", want, idsOf(got))
	})

	t.Run("LimitTakesFirstInOrder", func(t *testing.T) {
		s := newHarness(t).Store
		rows, want := orderFixture()
		mustInsert(t, s, rows...)
		var got []string
		for i := 0; i < 10; i++ {
			batch := mustClaim(t, s, ports.ClaimRequest{Owner: fmt.Sprintf("o%d", i), Now: now, Lease: lease, Limit: 3})
			if len(batch) > 3 {
				t.Fatalf("Claim with Limit 3 returned %d rows", len(batch))
			}
			if len(batch) == 0 {
				break
			}
			got = append(got, idsOf(batch)...)
		}
		checkIDs(t, "claims of 3 concatenated", want, got)
	})

	t.Run("LimitRespected", func(t *testing.T) {
		s := newHarness(t).Store
		var rows []ports.Notification
		for i := range 10 {
			rows = append(rows, NewNotification(BaseTime.Add(time.Duration(i)*time.Second)))
		}
		mustInsert(t, s, rows...)
		for i, tc := range []struct{ limit, want int }{{3, 3}, {1, 1}, {3, 3}, {10, 3}, {10, 0}} {
			got := mustClaim(t, s, ports.ClaimRequest{Owner: fmt.Sprintf("o%d", i), Now: now, Lease: lease, Limit: tc.limit})
			if len(got) != tc.want {
				t.Errorf("claim %d with Limit %d returned %d rows, want %d", i, tc.limit, len(got), tc.want)
			}
		}
	})

	t.Run("ReturnsLeasedRows", func(t *testing.T) {
		s := newHarness(t).Store
		n := NewNotification(BaseTime)
		n.TypeData = []byte(`{"k":[1,2]}`)
		n.ExpiresAt = now.Add(time.Hour)
		n.Priority = 3
		n.Targets = NewTargetStates(BaseTime)
		mustInsert(t, s, n)
		got := mustClaim(t, s, ports.ClaimRequest{Owner: "node-a", Now: now, Lease: lease, Limit: 10})
		if len(got) != 1 {
			t.Fatalf("claimed %d rows, want 1", len(got))
		}
		want := n
		want.ClaimedBy = "node-a"
		want.ClaimedUntil = now.Add(lease)
		checkSame(t, "claimed row as returned", want, got[0])
		checkSame(t, "claimed row as stored", want, mustGet(t, s, n.ID))
	})

	t.Run("LeasedRowNotClaimedAgain", func(t *testing.T) {
		s := newHarness(t).Store
		n := NewNotification(BaseTime)
		mustInsert(t, s, n)
		if got := mustClaim(t, s, ports.ClaimRequest{Owner: "a", Now: now, Lease: lease, Limit: 10}); len(got) != 1 {
			t.Fatalf("first claim got %d rows, want 1", len(got))
		}
		for _, tc := range []struct {
			owner string
			at    time.Time
		}{
			{"b", now},
			{"b", now.Add(lease - time.Microsecond)},
			{"a", now.Add(time.Minute)}, // not even its owner claims it twice
		} {
			if got := mustClaim(t, s, ports.ClaimRequest{Owner: tc.owner, Now: tc.at, Lease: lease, Limit: 10}); len(got) != 0 {
				t.Errorf("claim by %s at %s got %v while the lease lasts", tc.owner, fmtTime(tc.at), idsOf(got))
			}
		}
		got := mustGet(t, s, n.ID)
		if got.ClaimedBy != "a" || !sameTime(got.ClaimedUntil, now.Add(lease)) {
			t.Errorf("lease = %q until %s, want %q until %s", got.ClaimedBy, fmtTime(got.ClaimedUntil), "a", fmtTime(now.Add(lease)))
		}
	})

	t.Run("ExpiredLeaseClaimedByAnother", func(t *testing.T) {
		s := newHarness(t).Store
		n := NewNotification(BaseTime)
		other := NewNotification(BaseTime.Add(time.Second))
		mustInsert(t, s, n)
		if got := mustClaim(t, s, ports.ClaimRequest{Owner: "a", Now: now, Lease: lease, Limit: 10}); len(got) != 1 {
			t.Fatalf("first claim got %d rows, want 1", len(got))
		}
		mustInsert(t, s, other)
		// A lease ends at ClaimedUntil: at that instant the row is free.
		expiry := now.Add(lease)
		got := mustClaim(t, s, ports.ClaimRequest{Owner: "b", Now: expiry, Lease: time.Minute, Limit: 10})
		checkIDs(t, "claim after the lease expired", []string{n.ID, other.ID}, idsOf(got))
		want := n
		want.ClaimedBy = "b"
		want.ClaimedUntil = expiry.Add(time.Minute)
		if len(got) > 0 {
			checkSame(t, "re-claimed row as returned", want, got[0])
		}
		checkSame(t, "re-claimed row as stored", want, mustGet(t, s, n.ID))
	})

	t.Run("ConcurrentOwnersClaimEachRowOnce", func(t *testing.T) {
		s := newHarness(t).Store
		const rows, owners, batch = 2000, 8, 25
		ns := make([]ports.Notification, rows)
		for i := range ns {
			ns[i] = NewNotification(BaseTime.Add(time.Duration(i) * time.Microsecond))
			ns[i].Priority = i % 3
		}
		mustInsert(t, s, ns...)

		var (
			mu     sync.Mutex
			counts = make(map[string]int, rows)
			wg     sync.WaitGroup
		)
		for o := range owners {
			owner := fmt.Sprintf("owner-%d", o)
			wg.Go(func() {
				for {
					got, err := s.Claim(t.Context(), ports.ClaimRequest{Owner: owner, Now: now, Lease: lease, Limit: batch})
					if err != nil {
						t.Errorf("Claim(%s): %v", owner, err)
						return
					}
					if len(got) == 0 {
						return
					}
					if len(got) > batch {
						t.Errorf("Claim(%s) returned %d rows, Limit %d", owner, len(got), batch)
					}
					us := make([]ports.Update, len(got))
					mu.Lock()
					for i, n := range got {
						counts[n.ID]++
						if n.ClaimedBy != owner {
							t.Errorf("row %s claimed by %s carries ClaimedBy %q", n.ID, owner, n.ClaimedBy)
						}
						us[i] = ports.Update{
							ID:              n.ID,
							Status:          ports.StatusDelivered,
							ResolvedTargets: []string{"a@example.test"},
							LastAttemptAt:   now,
							DeliveredAt:     now,
							UpdatedAt:       now,
						}
					}
					mu.Unlock()
					lost, err := s.Record(t.Context(), owner, us)
					if err != nil {
						t.Errorf("Record(%s): %v", owner, err)
						return
					}
					if len(lost) != 0 {
						t.Errorf("Record(%s) lost %v though no lease expired", owner, lost)
					}
				}
			})
		}
		wg.Wait()

		missing, twice := 0, 0
		for _, n := range ns {
			switch c := counts[n.ID]; {
			case c == 0:
				missing++
			case c > 1:
				twice++
				t.Errorf("row %s claimed %d times", n.ID, c)
			}
		}
		if missing > 0 || len(counts) != rows {
			t.Errorf("%d of %d rows never claimed (%d distinct claimed)", missing, rows, len(counts))
		}
		if twice > 0 {
			t.Errorf("%d rows claimed more than once", twice)
		}
		if n := mustCount(t, s, ports.Filter{Statuses: []ports.Status{ports.StatusDelivered}}); n != rows {
			t.Errorf("Delivered rows after the burn-down = %d, want %d", n, rows)
		}
	})
}
