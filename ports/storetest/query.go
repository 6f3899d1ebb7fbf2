package storetest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// queryFixture inserts eight rows, r1 oldest to r8 newest, and returns them by
// name.
//
//	name status     type    site   list created updated subject
//	r1   Pending    email   site-1 L1   +1m     +1m     Pump 7 failure
//	r2   Retrying   email   site-1 L2   +2m     +10m    Disk 100% full
//	r3   Delivered  webhook site-2 L1   +3m     +4m     pump restarted
//	r4   Parked     email   site-2 L3   +4m     +20m    Tank_level low
//	r5   Discarded  slack   site-3 L1   +5m     +30m    TankXlevel ok
//	r6   Pending    webhook site-3 L2   +6m     +6m     Disk 100 full
//	r7   Parked     slack   site-1 L1   +7m     +8m     PUMP 7 FAILURE again
//	r8   Retrying   email   site-2 L3   +8m     +9m     Valve stuck
func queryFixture(t *testing.T, s ports.Store) map[string]ports.Notification {
	t.Helper()
	type spec struct {
		status               ports.Status
		typ, site, list      string
		created, updated     int
		subject              string
		deliveredAt, nextTry int
	}
	specs := []spec{
		{ports.StatusPending, "email", "site-1", "L1", 1, 1, "Pump 7 failure", 0, 0},
		{ports.StatusRetrying, "email", "site-1", "L2", 2, 10, "Disk 100% full", 0, 11},
		{ports.StatusDelivered, "webhook", "site-2", "L1", 3, 4, "pump restarted", 4, 0},
		{ports.StatusParked, "email", "site-2", "L3", 4, 20, "Tank_level low", 0, 0},
		{ports.StatusDiscarded, "slack", "site-3", "L1", 5, 30, "TankXlevel ok", 0, 0},
		{ports.StatusPending, "webhook", "site-3", "L2", 6, 6, "Disk 100 full", 0, 0},
		{ports.StatusParked, "slack", "site-1", "L1", 7, 8, "PUMP 7 FAILURE again", 0, 0},
		{ports.StatusRetrying, "email", "site-2", "L3", 8, 9, "Valve stuck", 0, 12},
	}
	rows := map[string]ports.Notification{}
	var ns []ports.Notification
	for i, sp := range specs {
		n := NewNotification(BaseTime.Add(time.Duration(sp.created) * time.Minute))
		n.Status = sp.status
		n.Type = sp.typ
		n.SourceSite = sp.site
		n.List = sp.list
		n.UpdatedAt = BaseTime.Add(time.Duration(sp.updated) * time.Minute)
		n.Subject = sp.subject
		if sp.deliveredAt > 0 {
			n.DeliveredAt = BaseTime.Add(time.Duration(sp.deliveredAt) * time.Minute)
			n.ResolvedTargets = []string{"ops@example.test"}
			n.Targets = []ports.TargetState{{Target: "ops@example.test", Status: ports.TargetDelivered, Attempts: 1,
				LastAttemptAt: n.DeliveredAt, DeliveredAt: n.DeliveredAt}}
		}
		if sp.nextTry > 0 {
			n.NextAttemptAt = BaseTime.Add(time.Duration(sp.nextTry) * time.Minute)
			n.RetryCount = 1
		}
		rows[fmt.Sprintf("r%d", i+1)] = n
		ns = append(ns, n)
	}
	// Insert in an order unrelated to CreatedAt.
	mustInsert(t, s, ns[3], ns[0], ns[6], ns[1], ns[7], ns[5], ns[2], ns[4])
	return rows
}

// pageAll reads every page of f with the given page size and returns the ids
// in the order the pages gave them. It checks the paging invariants: no page
// exceeds the limit, a page with a Next cursor is full and is followed by a
// page with at least one row, and the page with the last row has an empty
// Next.
func pageAll(t *testing.T, s ports.Store, f ports.Filter, limit, atMost int) []string {
	t.Helper()
	var ids []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > atMost/limit+2 {
			t.Fatalf("paging did not end after %d pages of %d (%d rows read)", pages, limit, len(ids))
		}
		p, err := s.Query(t.Context(), f, ports.PageRequest{Limit: limit, After: after})
		if err != nil {
			t.Fatalf("Query page %d: %v", pages+1, err)
		}
		if len(p.Items) > limit {
			t.Fatalf("page %d has %d items, Limit %d", pages+1, len(p.Items), limit)
		}
		if pages > 0 && len(p.Items) == 0 {
			t.Fatalf("page %d is empty: the page before it had a Next cursor though no row followed", pages+1)
		}
		ids = append(ids, idsOf(p.Items)...)
		if p.Next == "" {
			return ids
		}
		if len(p.Items) != limit {
			t.Fatalf("page %d has %d items and a Next cursor; a page before the last must be full (%d)", pages+1, len(p.Items), limit)
		}
		after = p.Next
	}
}

func exerciseQuery(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Run("NewestFirstFullRows", func(t *testing.T) {
		s := newHarness(t).Store
		rows := queryFixture(t, s)
		p, err := s.Query(t.Context(), ports.Filter{}, ports.PageRequest{Limit: 100})
		if err != nil {
			t.Fatalf("Query: %v", err)
		}
		want := []string{"r8", "r7", "r6", "r5", "r4", "r3", "r2", "r1"}
		if p.Next != "" {
			t.Errorf("Next = %q on the only page, want \"\"", p.Next)
		}
		if len(p.Items) != len(want) {
			t.Fatalf("Query returned %d rows, want %d", len(p.Items), len(want))
		}
		for i, name := range want {
			checkSame(t, fmt.Sprintf("item %d (%s)", i, name), rows[name], p.Items[i])
		}
	})

	at := func(m int) time.Time { return BaseTime.Add(time.Duration(m) * time.Minute) }
	cases := []struct {
		name   string
		filter ports.Filter
		want   []string
	}{
		{"NoFilter", ports.Filter{}, []string{"r8", "r7", "r6", "r5", "r4", "r3", "r2", "r1"}},
		{"OneStatus", ports.Filter{Statuses: []ports.Status{ports.StatusPending}}, []string{"r6", "r1"}},
		{"SeveralStatuses", ports.Filter{Statuses: []ports.Status{ports.StatusParked, ports.StatusDiscarded}}, []string{"r7", "r5", "r4"}},
		{"NonTerminalStatuses", ports.Filter{Statuses: []ports.Status{ports.StatusPending, ports.StatusRetrying}}, []string{"r8", "r6", "r2", "r1"}},
		{"Type", ports.Filter{Type: "email"}, []string{"r8", "r4", "r2", "r1"}},
		{"OtherType", ports.Filter{Type: "slack"}, []string{"r7", "r5"}},
		{"SourceSite", ports.Filter{SourceSite: "site-2"}, []string{"r8", "r4", "r3"}},
		{"List", ports.Filter{List: "L1"}, []string{"r7", "r5", "r3", "r1"}},
		{"CreatedFromInclusive", ports.Filter{CreatedFrom: at(3)}, []string{"r8", "r7", "r6", "r5", "r4", "r3"}},
		{"CreatedToExclusive", ports.Filter{CreatedTo: at(3)}, []string{"r2", "r1"}},
		{"CreatedRange", ports.Filter{CreatedFrom: at(2), CreatedTo: at(5)}, []string{"r4", "r3", "r2"}},
		{"UpdatedFromInclusive", ports.Filter{UpdatedFrom: at(9)}, []string{"r8", "r5", "r4", "r2"}},
		{"UpdatedToExclusive", ports.Filter{UpdatedTo: at(9)}, []string{"r7", "r6", "r3", "r1"}},
		{"UpdatedRange", ports.Filter{UpdatedFrom: at(9), UpdatedTo: at(21)}, []string{"r8", "r4", "r2"}},
		{"UpdatedToTheMicrosecond", ports.Filter{UpdatedTo: at(9).Add(time.Microsecond), Statuses: []ports.Status{ports.StatusRetrying}}, []string{"r8"}},
		{"StuckBeforeExclusive", ports.Filter{StuckBefore: at(6)}, []string{"r2", "r1"}},
		{"StuckBeforeLater", ports.Filter{StuckBefore: at(8).Add(time.Microsecond)}, []string{"r8", "r6", "r2", "r1"}},
		{"SubjectIgnoresCase", ports.Filter{Subject: "pump 7"}, []string{"r7", "r1"}},
		{"SubjectUpperCase", ports.Filter{Subject: "PUMP"}, []string{"r7", "r3", "r1"}},
		{"SubjectMiddle", ports.Filter{Subject: "lve st"}, []string{"r8"}},
		{"SubjectUnderscoreLiteral", ports.Filter{Subject: "k_level"}, []string{"r4"}},
		{"SubjectLoneUnderscore", ports.Filter{Subject: "_"}, []string{"r4"}},
		{"SubjectPercentLiteral", ports.Filter{Subject: "100% full"}, []string{"r2"}},
		{"SubjectLonePercent", ports.Filter{Subject: "%"}, []string{"r2"}},
		{"SubjectNoMatch", ports.Filter{Subject: "no such words"}, nil},
		{"TypeNoMatch", ports.Filter{Type: "teams"}, nil},
		{"Combination", ports.Filter{
			Statuses:   []ports.Status{ports.StatusPending, ports.StatusRetrying, ports.StatusParked},
			SourceSite: "site-1",
			Subject:    "pump",
		}, []string{"r7", "r1"}},
		{"CombinationNarrowed", ports.Filter{
			Statuses:   []ports.Status{ports.StatusPending, ports.StatusRetrying, ports.StatusParked},
			SourceSite: "site-1",
			Subject:    "pump",
			CreatedTo:  at(7),
		}, []string{"r1"}},
		{"CombinationTypeListUpdated", ports.Filter{Type: "email", List: "L3", UpdatedFrom: at(9)}, []string{"r8", "r4"}},
		{"CombinationStuckSite", ports.Filter{StuckBefore: at(9), SourceSite: "site-3"}, []string{"r6"}},
	}
	t.Run("Filters", func(t *testing.T) {
		s := newHarness(t).Store
		rows := queryFixture(t, s)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				want := make([]string, len(tc.want))
				for i, name := range tc.want {
					want[i] = rows[name].ID
				}
				p, err := s.Query(t.Context(), tc.filter, ports.PageRequest{Limit: 100})
				if err != nil {
					t.Fatalf("Query: %v", err)
				}
				checkIDs(t, fmt.Sprintf("Query %s (want %v)", tc.name, tc.want), want, idsOf(p.Items))
				if p.Next != "" {
					t.Errorf("Next = %q on the only page", p.Next)
				}
				if n := mustCount(t, s, tc.filter); n != int64(len(want)) {
					t.Errorf("Count = %d, want %d", n, len(want))
				}
				byStatus := map[ports.Status]int64{}
				for _, name := range tc.want {
					byStatus[rows[name].Status]++
				}
				checkCountByStatus(t, s, tc.filter, byStatus)
			})
		}
	})

	t.Run("SubjectEdges", func(t *testing.T) { exerciseSubjectEdges(t, newHarness) })

	t.Run("SubjectFollowsInsertAndPurge", func(t *testing.T) {
		s := newHarness(t).Store
		cutoff := BaseTime.Add(24 * time.Hour)
		mk := func(created int, subject string, st ports.Status) ports.Notification {
			n := NewNotification(BaseTime.Add(time.Duration(created) * time.Minute))
			n.Subject, n.Status = subject, st
			if st == ports.StatusDelivered {
				n.DeliveredAt = n.UpdatedAt
			}
			return n
		}
		old := mk(1, "Boiler 9 flooded", ports.StatusDelivered) // purgeable at cutoff
		live := mk(2, "Boiler 9 FLOODED again", ports.StatusPending)
		decoy := mk(3, "Boiler 9 flood", ports.StatusPending)
		mustInsert(t, s, old, live, decoy)
		f := ports.Filter{Subject: "flooded"}
		checkSubject := func(what string, want ...string) {
			t.Helper()
			p, err := s.Query(t.Context(), f, ports.PageRequest{Limit: 10})
			if err != nil {
				t.Fatalf("Query %s: %v", what, err)
			}
			checkIDs(t, "Query "+what, want, idsOf(p.Items))
			if n := mustCount(t, s, f); n != int64(len(want)) {
				t.Errorf("Count %s = %d, want %d", what, n, len(want))
			}
		}
		checkSubject("before", live.ID, old.ID)
		// A row inserted after the store has answered a keyword is found by it.
		later := mk(4, "basement flooded", ports.StatusPending)
		mustInsert(t, s, later)
		checkSubject("after an insert", later.ID, live.ID, old.ID)
		// A purged row is no longer found, nor counted.
		checkIDSet(t, "purged", []string{old.ID}, mustPurge(t, s, cutoff, 10))
		checkSubject("after the purge", later.ID, live.ID)
	})

	t.Run("PagingWithSubject", func(t *testing.T) {
		s := newHarness(t).Store
		var ns []ports.Notification
		var want []string
		for i := range 60 {
			n := NewNotification(BaseTime.Add(time.Duration(i) * time.Millisecond))
			switch i % 3 {
			case 0:
				n.Subject = fmt.Sprintf("Valve %d STUCK open", i)
				want = append(want, n.ID)
			case 1:
				n.Subject = fmt.Sprintf("valve %d stuck closed", i)
				want = append(want, n.ID)
			default:
				n.Subject = fmt.Sprintf("Valve %d stopped", i)
			}
			ns = append(ns, n)
		}
		slices.Reverse(want)
		mustInsert(t, s, ns...)
		f := ports.Filter{Subject: "stuck"}
		checkIDs(t, "rows with the keyword paged by 7", want, pageAll(t, s, f, 7, len(want)))
		if n := mustCount(t, s, f); n != int64(len(want)) {
			t.Errorf("Count of the keyword = %d, want %d", n, len(want))
		}
	})

	t.Run("Paging", func(t *testing.T) {
		s := newHarness(t).Store
		const total = 120
		ns := make([]ports.Notification, total)
		for i := range ns {
			ns[i] = NewNotification(BaseTime.Add(time.Duration(i) * time.Second))
		}
		want := idsOf(ns)
		slices.Reverse(want)
		// Insert in ID order, unrelated to CreatedAt.
		byID := slices.Clone(ns)
		slices.SortFunc(byID, func(a, b ports.Notification) int { return strings.Compare(a.ID, b.ID) })
		mustInsert(t, s, byID...)
		checkIDs(t, "120 rows paged by 25", want, pageAll(t, s, ports.Filter{}, 25, total))
		checkIDs(t, "120 rows paged by 1", want, pageAll(t, s, ports.Filter{}, 1, total))
		checkIDs(t, "120 rows paged by 120", want, pageAll(t, s, ports.Filter{}, 120, total))
		checkIDs(t, "120 rows paged by 40 (an exact multiple)", want, pageAll(t, s, ports.Filter{}, 40, total))
	})

	t.Run("PagingEqualCreatedAt", func(t *testing.T) {
		s := newHarness(t).Store
		var ns []ports.Notification
		for range 30 {
			ns = append(ns, NewNotification(BaseTime))
		}
		// Surround the tied rows with older and newer ones.
		older := NewNotification(BaseTime.Add(-time.Microsecond))
		newer := NewNotification(BaseTime.Add(time.Microsecond))
		mustInsert(t, s, append(ns, older, newer)...)
		tied := idsOf(ns)
		slices.Sort(tied)
		slices.Reverse(tied)
		want := append(append([]string{newer.ID}, tied...), older.ID)
		checkIDs(t, "rows with one CreatedAt paged by 7 (ID descending)", want, pageAll(t, s, ports.Filter{}, 7, len(want)))
		checkIDs(t, "rows with one CreatedAt paged by 1", want, pageAll(t, s, ports.Filter{}, 1, len(want)))
	})

	t.Run("PagingWithFilter", func(t *testing.T) {
		s := newHarness(t).Store
		statuses := []ports.Status{ports.StatusPending, ports.StatusParked, ports.StatusDelivered}
		var ns []ports.Notification
		var want []string
		for i := range 120 {
			n := NewNotification(BaseTime.Add(time.Duration(i) * time.Millisecond))
			n.Status = statuses[i%3]
			ns = append(ns, n)
			if n.Status == ports.StatusParked {
				want = append(want, n.ID)
			}
		}
		slices.Reverse(want)
		mustInsert(t, s, ns...)
		f := ports.Filter{Statuses: []ports.Status{ports.StatusParked}}
		checkIDs(t, "Parked rows paged by 7", want, pageAll(t, s, f, 7, len(want)))
		if n := mustCount(t, s, f); n != int64(len(want)) {
			t.Errorf("Count of Parked = %d, want %d", n, len(want))
		}
	})

	t.Run("KeysetStableUnderInserts", func(t *testing.T) {
		s := newHarness(t).Store
		var ns []ports.Notification
		for i := range 30 {
			ns = append(ns, NewNotification(BaseTime.Add(time.Duration(i)*time.Second)))
		}
		mustInsert(t, s, ns...)
		want := idsOf(ns)
		slices.Reverse(want)

		p1, err := s.Query(t.Context(), ports.Filter{}, ports.PageRequest{Limit: 10})
		if err != nil {
			t.Fatalf("Query page 1: %v", err)
		}
		checkIDs(t, "page 1", want[:10], idsOf(p1.Items))
		if p1.Next == "" {
			t.Fatalf("page 1 of 3 has no Next cursor")
		}
		// Rows newer than the first page arrive between the page reads: a
		// keyset cursor is not shifted by them.
		var newer []ports.Notification
		for i := range 5 {
			newer = append(newer, NewNotification(BaseTime.Add(time.Hour+time.Duration(i)*time.Second)))
		}
		mustInsert(t, s, newer...)
		p2, err := s.Query(t.Context(), ports.Filter{}, ports.PageRequest{Limit: 10, After: p1.Next})
		if err != nil {
			t.Fatalf("Query page 2: %v", err)
		}
		checkIDs(t, "page 2 after newer inserts", want[10:20], idsOf(p2.Items))
		if p2.Next == "" {
			t.Fatalf("page 2 of 3 has no Next cursor")
		}
		p3, err := s.Query(t.Context(), ports.Filter{}, ports.PageRequest{Limit: 10, After: p2.Next})
		if err != nil {
			t.Fatalf("Query page 3: %v", err)
		}
		checkIDs(t, "page 3 after newer inserts", want[20:], idsOf(p3.Items))
		if p3.Next != "" {
			t.Errorf("Next = %q on the page with the last row", p3.Next)
		}
	})

	t.Run("OldestFirstPagesByKeyset", func(t *testing.T) {
		s := newHarness(t).Store
		var ns []ports.Notification
		for i := range 25 {
			ns = append(ns, NewNotification(BaseTime.Add(time.Duration(i)*time.Second)))
		}
		// Two rows of one instant are ordered by id, in both orders.
		twin := NewNotification(BaseTime.Add(7 * time.Second))
		ns = append(ns, twin)
		mustInsert(t, s, ns...)
		want := slices.Clone(ns)
		slices.SortFunc(want, func(a, b ports.Notification) int {
			return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
		})
		oldest := idsOf(want)
		newest := slices.Clone(oldest)
		slices.Reverse(newest)
		for _, tc := range []struct {
			name   string
			oldest bool
			want   []string
		}{{"newest first", false, newest}, {"oldest first", true, oldest}} {
			var got []string
			after := ""
			for page := 0; ; page++ {
				p, err := s.Query(t.Context(), ports.Filter{}, ports.PageRequest{Limit: 10, After: after, Oldest: tc.oldest})
				if err != nil {
					t.Fatalf("%s: Query page %d: %v", tc.name, page, err)
				}
				got = append(got, idsOf(p.Items)...)
				if p.Next == "" {
					break
				}
				if page > 5 {
					t.Fatalf("%s: more pages than rows", tc.name)
				}
				// A row older than every other arrives between the pages:
				// oldest first, the cursor does not shift for it either.
				if page == 0 && tc.oldest {
					mustInsert(t, s, NewNotification(BaseTime.Add(-time.Hour)))
				}
				after = p.Next
			}
			checkIDs(t, tc.name, tc.want, got)
		}
	})

	t.Run("MalformedCursorIsInvalid", func(t *testing.T) {
		s := newHarness(t).Store
		queryFixture(t, s)
		for _, after := range []string{"not a cursor", "%%%", "\x00\xff", "r1|2025"} {
			_, err := s.Query(t.Context(), ports.Filter{}, ports.PageRequest{Limit: 10, After: after})
			if !errors.Is(err, ports.ErrInvalid) {
				t.Errorf("Query with cursor %q = %v, want an error wrapping ports.ErrInvalid", after, err)
			}
		}
	})

	t.Run("CountByStatusCapped", func(t *testing.T) {
		s := newHarness(t).Store
		var ns []ports.Notification
		add := func(k int, st ports.Status, subject string) {
			for i := range k {
				n := NewNotification(BaseTime.Add(time.Duration(len(ns)+i) * time.Second))
				n.Status, n.Subject = st, fmt.Sprintf("%s %d", subject, i)
				ns = append(ns, n)
			}
		}
		add(30, ports.StatusPending, "Boiler alarm")
		add(4, ports.StatusParked, "Boiler alarm")
		add(12, ports.StatusDelivered, "Fan ok")
		mustInsert(t, s, ns...)
		all := map[ports.Status]int64{ports.StatusPending: 30, ports.StatusParked: 4, ports.StatusDelivered: 12}
		for _, limit := range []int64{1, 4, 10, 12, 29, 30, 100} {
			checkCappedCountByStatus(t, s, ports.Filter{}, limit, all)
			checkCappedCountByStatus(t, s, ports.Filter{Subject: "boiler"}, limit,
				map[ports.Status]int64{ports.StatusPending: 30, ports.StatusParked: 4})
			checkCappedCountByStatus(t, s, ports.Filter{Statuses: []ports.Status{ports.StatusDelivered, ports.StatusParked}}, limit,
				map[ports.Status]int64{ports.StatusParked: 4, ports.StatusDelivered: 12})
			checkCappedCountByStatus(t, s, ports.Filter{Subject: "no such subject"}, limit, map[ports.Status]int64{})
		}
	})

	t.Run("CountEmptyStore", func(t *testing.T) {
		s := newHarness(t).Store
		if n := mustCount(t, s, ports.Filter{}); n != 0 {
			t.Errorf("Count of an empty store = %d", n)
		}
		checkCountByStatus(t, s, ports.Filter{}, map[ports.Status]int64{})
		p, err := s.Query(t.Context(), ports.Filter{}, ports.PageRequest{Limit: 10})
		if err != nil {
			t.Fatalf("Query of an empty store: %v", err)
		}
		if len(p.Items) != 0 || p.Next != "" {
			t.Errorf("Query of an empty store = %d items, Next %q", len(p.Items), p.Next)
		}
	})
}

// exerciseSubjectEdges checks the keyword filter where an index of the
// subjects could answer otherwise than the contract: keywords of one or two
// bytes or characters, letters outside ASCII (whose case counts, though an
// index may fold it), LIKE wildcards, regular-expression and query-syntax
// characters taken literally, and keywords longer than any subject.
func exerciseSubjectEdges(t *testing.T, newHarness func(t *testing.T) Harness) {
	subjects := []string{
		"Café au lait",                // 0
		"CAFÉ NOIR",                   // 1
		"Temperature 5 \u212a rising", // 2: the Kelvin sign, not an ASCII K
		"\u017ftop valve",             // 3: a long s, not an ASCII s
		`Path C:\Temp\x.log`,          // 4
		`a.b*c+d?(e)[f]{g}|h^$ end`,   // 5
		`say "hello" now`,             // 6
		"100% of 5_6",                 // 7
		"x",                           // 8
		"Ünïcödé straße",              // 9
		"aXb*c+d 5X6 100X of",         // 10: what wildcards would match
	}
	cases := []struct {
		name, keyword string
		want          []int // newest first
	}{
		{"OneASCIILetter", "X", []int{10, 8, 4}},
		{"TwoBytes", "5_", []int{7}},
		{"OneLetterTwoBytes", "é", []int{9, 0}},
		{"OneUpperLetterTwoBytes", "É", []int{1}},
		{"TwoLettersThreeBytes", "dé", []int{9}},
		{"ThreeLettersFiveBytes", "ïcö", []int{9}},
		{"ThreeLettersOtherCase", "ÏCÖ", nil},
		{"NonASCIICaseCounts", "café", []int{0}},
		{"NonASCIICaseCountsUpper", "CAFÉ", []int{1}},
		{"ASCIIFoldedBesideNonASCII", "cafÉ nOiR", []int{1}},
		{"NonASCIIWord", "ünïcödé", nil},
		{"NonASCIIWordExact", "ünïcÖdé", nil},
		{"NonASCIIWordASCIIFolded", "ÜNÏCÖDÉ", nil},
		{"NonASCIIWordOwnCase", "Ünïcödé STRAßE", []int{9}},
		{"SharpSIsNotSS", "strasse", nil},
		{"KelvinSignIsNotK", "5 k", nil},
		{"KelvinSign", "5 \u212a", []int{2}},
		{"LongSIsNotS", "stop valve", nil},
		{"LongS", "\u017ftop", []int{3}},
		{"Backslash", `\`, []int{4}},
		{"BackslashLetter", `\x`, []int{4}},
		{"BackslashPath", `c:\temp\X.LOG`, []int{4}},
		{"RegexpCharacters", `.b*c+d?(e)[f]{g}|h^$`, []int{5}},
		{"DotIsLiteral", "a.b", []int{5}},
		{"Brackets", "[F]", []int{5}},
		{"Braces", "{g}", []int{5}},
		{"AlternationAndAnchors", "|h^$ END", []int{5}},
		{"DoubleQuotes", `"hello"`, []int{6}},
		{"DoubleQuote", `"`, []int{6}},
		{"PercentUnderscore", "0% of 5_6", []int{7}},
		{"UnderscoreIsLiteral", "5_6", []int{7}},
		{"PercentIsLiteral", "100% of", []int{7}},
		{"WholeSubject", "100% OF 5_6", []int{7}},
		{"LongerThanAnySubject", "Temperature 5 \u212a rising and more words than any subject holds", nil},
		{"LongerThanItsSubject", "xx", nil},
		{"Space", " ", []int{10, 9, 7, 6, 5, 4, 3, 2, 1, 0}},
	}
	s := newHarness(t).Store
	var ns []ports.Notification
	for i, subject := range subjects {
		n := NewNotification(BaseTime.Add(time.Duration(i) * time.Minute))
		n.Subject = subject
		ns = append(ns, n)
	}
	mustInsert(t, s, ns...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := make([]string, len(tc.want))
			for i, k := range tc.want {
				want[i] = ns[k].ID
			}
			f := ports.Filter{Subject: tc.keyword}
			p, err := s.Query(t.Context(), f, ports.PageRequest{Limit: 100})
			if err != nil {
				t.Fatalf("Query %q: %v", tc.keyword, err)
			}
			checkIDs(t, fmt.Sprintf("Query %q (want subjects %v)", tc.keyword, tc.want), want, idsOf(p.Items))
			if n := mustCount(t, s, f); n != int64(len(want)) {
				t.Errorf("Count %q = %d, want %d", tc.keyword, n, len(want))
			}
		})
	}
}
