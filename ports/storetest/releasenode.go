package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

func exerciseReleaseNode(t *testing.T, newHarness func(t *testing.T) Harness) {
	const lease = 5 * time.Minute
	now := BaseTime.Add(time.Hour)

	// leasedRow returns a row in status st leased to owner until until.
	leasedRow := func(i int, st ports.Status, owner string, until time.Time) ports.Notification {
		n := NewNotification(BaseTime.Add(time.Duration(i) * time.Second))
		n.Status = st
		switch {
		case st == ports.StatusRetrying:
			n.RetryCount, n.LastError = 1, "smtp: 451 try later"
			n.LastAttemptAt = n.CreatedAt.Add(time.Second)
			n.NextAttemptAt = now.Add(-time.Minute)
		case st.Terminal():
			n.UpdatedAt = n.CreatedAt.Add(time.Second)
			if st == ports.StatusDelivered {
				n.DeliveredAt = n.UpdatedAt
			}
		}
		n.ClaimedBy, n.ClaimedUntil = owner, until
		return n
	}
	held := now.Add(lease) // a lease that still holds at now

	t.Run("EarlierRunsOfTheNodeOnly", func(t *testing.T) {
		s := newHarness(t).Store
		// The node id holds both LIKE wildcards: a pattern that does not
		// escape them would match the leases of other nodes below.
		const node = "central_1%"
		run1, run2, keep := ports.LeaseOwner(node, "r1"), ports.LeaseOwner(node, "r2"), ports.LeaseOwner(node, "now")
		mine := []ports.Notification{
			leasedRow(0, ports.StatusPending, run1, held),
			leasedRow(1, ports.StatusPending, run1, held),
			leasedRow(2, ports.StatusRetrying, run2, held),
			leasedRow(3, ports.StatusPending, run2, now.Add(-time.Minute)), // expired, still marked
		}
		untouched := []ports.Notification{
			leasedRow(10, ports.StatusPending, keep, held), // the kept owner
			// Other nodes, each of which a careless comparison would take
			// for central_1%: wildcards, another case, no separator, a node
			// whose id merely begins with this one, an owner that is the
			// bare node id, an owner that contains it further on.
			leasedRow(11, ports.StatusPending, ports.LeaseOwner("centralx1abc", "r1"), held),
			leasedRow(12, ports.StatusRetrying, ports.LeaseOwner("central_1", "r1"), held),
			leasedRow(13, ports.StatusPending, ports.LeaseOwner("CENTRAL_1%", "r1"), held),
			leasedRow(14, ports.StatusPending, ports.LeaseOwner("central_1%2", "r1"), held),
			leasedRow(15, ports.StatusPending, node, held),
			leasedRow(16, ports.StatusPending, "x"+run1, held),
			// Rows in a terminal status whose lease marks were left
			// behind: only Pending and Retrying leases matter.
			leasedRow(17, ports.StatusDelivered, run1, held),
			leasedRow(18, ports.StatusParked, run1, held),
			leasedRow(19, ports.StatusDiscarded, run2, held),
		}
		free := leasedRow(20, ports.StatusPending, "", time.Time{}) // a row nobody holds
		untouched = append(untouched, free)
		mustInsert(t, s, append(append([]ports.Notification{}, mine...), untouched...)...)

		n, err := s.ReleaseNode(t.Context(), node, keep)
		if err != nil {
			t.Fatalf("ReleaseNode: %v", err)
		}
		if n != len(mine) {
			t.Errorf("ReleaseNode released %d rows, want %d", n, len(mine))
		}
		for _, r := range mine {
			checkSame(t, "row of an earlier run", released(r), mustGet(t, s, r.ID))
		}
		for _, r := range untouched {
			checkSame(t, "row ReleaseNode must not touch", r, mustGet(t, s, r.ID))
		}
		// The released rows are claimable at once, long before their
		// leases would have run out; the others still hold.
		got := mustClaim(t, s, ports.ClaimRequest{Owner: keep, Now: now, Lease: lease, Limit: 100})
		checkIDSet(t, "claimed right after ReleaseNode", append(idsOf(mine), free.ID), idsOf(got))

		// Nothing is left to release but the kept owner's leases: the row
		// it held from the start and the rows it just claimed.
		if n, err := s.ReleaseNode(t.Context(), node, keep); err != nil || n != 0 {
			t.Errorf("second ReleaseNode = %d, %v; want 0, nil", n, err)
		}
		if n, err := s.ReleaseNode(t.Context(), node, ""); err != nil || n != 1+len(got) {
			t.Errorf("ReleaseNode without an owner to keep = %d, %v; want %d (every lease of the node)", n, err, 1+len(got))
		}
	})

	t.Run("NodeIDsWithQuotesBracketsBackslashesAndUnicode", func(t *testing.T) {
		s := newHarness(t).Store
		// ' ends a literal, [ ] make an MS SQL class, \ is the LIKE escape
		// character, and é is two bytes but one character.
		const node = `é'[ab]\_`
		mine := leasedRow(0, ports.StatusPending, ports.LeaseOwner(node, "r1"), held)
		others := []ports.Notification{
			leasedRow(1, ports.StatusPending, ports.LeaseOwner(`é'a\_`, "r1"), held),   // [ab] as a class
			leasedRow(2, ports.StatusPending, ports.LeaseOwner(`é'[ab]x`, "r1"), held), // \_ as a wildcard
			leasedRow(3, ports.StatusPending, ports.LeaseOwner(`É'[AB]\_`, "r1"), held),
			leasedRow(4, ports.StatusPending, ports.LeaseOwner(`e'[ab]\_`, "r1"), held),
		}
		mustInsert(t, s, append([]ports.Notification{mine}, others...)...)
		n, err := s.ReleaseNode(t.Context(), node, ports.LeaseOwner(node, "r2"))
		if err != nil || n != 1 {
			t.Fatalf("ReleaseNode = %d, %v; want 1, nil", n, err)
		}
		checkSame(t, "row of the node", released(mine), mustGet(t, s, mine.ID))
		for _, r := range others {
			checkSame(t, "row of another node", r, mustGet(t, s, r.ID))
		}
	})

	t.Run("NothingToRelease", func(t *testing.T) {
		s := newHarness(t).Store
		if n, err := s.ReleaseNode(t.Context(), "central-1", ports.LeaseOwner("central-1", "r1")); err != nil || n != 0 {
			t.Errorf("ReleaseNode on an empty store = %d, %v; want 0, nil", n, err)
		}
	})

	t.Run("InvalidNode", func(t *testing.T) {
		s := newHarness(t).Store
		r := leasedRow(0, ports.StatusPending, ports.LeaseOwner("a", "r1"), held)
		mustInsert(t, s, r)
		for _, node := range []string{"", "a/r1", "/"} {
			if _, err := s.ReleaseNode(t.Context(), node, ""); !errors.Is(err, ports.ErrInvalid) {
				t.Errorf("ReleaseNode(%q) = %v, want an error wrapping ports.ErrInvalid", node, err)
			}
		}
		checkSame(t, "row after refused calls", r, mustGet(t, s, r.ID))
	})
}
