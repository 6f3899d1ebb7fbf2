package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// checkKPICounts reports every figure of got that differs from want.
func checkKPICounts(t *testing.T, what string, want, got ports.KPICounts) {
	t.Helper()
	num := func(name string, w, g int64) {
		if w != g {
			t.Errorf("%s %s = %d, want %d", what, name, g, w)
		}
	}
	num("QueueDepth", want.QueueDepth, got.QueueDepth)
	num("Stuck", want.Stuck, got.Stuck)
	num("Parked", want.Parked, got.Parked)
	num("Delivered", want.Delivered, got.Delivered)
	if !sameTime(want.OldestPendingAt, got.OldestPendingAt) {
		t.Errorf("%s OldestPendingAt = %s, want %s", what, fmtTime(got.OldestPendingAt), fmtTime(want.OldestPendingAt))
	}
}

func exerciseKPIs(t *testing.T, newHarness func(t *testing.T) Harness) {
	stuckBefore := BaseTime.Add(10 * time.Minute)
	deliveredSince := BaseTime.Add(30 * time.Minute)
	req := ports.KPIRequest{StuckBefore: stuckBefore, DeliveredSince: deliveredSince}
	at := func(m int) time.Time { return BaseTime.Add(time.Duration(m) * time.Minute) }

	t.Run("EmptyStore", func(t *testing.T) {
		s := newHarness(t).Store
		got, err := s.KPIs(t.Context(), req)
		if err != nil {
			t.Fatalf("KPIs: %v", err)
		}
		checkKPICounts(t, "Global", ports.KPICounts{}, got.Global)
		if len(got.Sites) != 0 {
			t.Errorf("Sites = %v, want none", got.Sites)
		}
	})

	t.Run("GlobalAndPerSite", func(t *testing.T) {
		s := newHarness(t).Store
		var ns []ports.Notification
		add := func(site string, st ports.Status, created int, delivered int) {
			n := NewNotification(at(created))
			n.SourceSite = site
			n.Status = st
			switch st {
			case ports.StatusRetrying:
				n.RetryCount = 1
				n.NextAttemptAt = at(created + 1)
			case ports.StatusDelivered:
				n.DeliveredAt = at(delivered)
				n.UpdatedAt = at(delivered)
				n.ResolvedTargets = []string{"ops@example.test"}
			case ports.StatusParked, ports.StatusDiscarded:
				n.UpdatedAt = at(created + 1)
				n.LastError = "smtp: 550"
			}
			ns = append(ns, n)
		}
		// Inserted out of site order: Sites must come back sorted.
		// site-c: only terminal rows, one of them Parked.
		add("site-c", ports.StatusParked, 3, 0)
		add("site-c", ports.StatusDelivered, 1, 2) // delivered long ago
		// site-a
		add("site-a", ports.StatusPending, 1, 0)  // stuck, oldest of all
		add("site-a", ports.StatusRetrying, 5, 0) // stuck
		add("site-a", ports.StatusPending, 10, 0) // created at StuckBefore: not stuck
		add("site-a", ports.StatusPending, 20, 0) // not stuck
		add("site-a", ports.StatusParked, 2, 0)
		add("site-a", ports.StatusParked, 25, 0)
		add("site-a", ports.StatusDelivered, 3, 40) // recent
		add("site-a", ports.StatusDelivered, 4, 30) // at DeliveredSince: recent
		add("site-a", ports.StatusDelivered, 5, 29) // before the window
		add("site-a", ports.StatusDiscarded, 0, 0)  // counted nowhere
		add("site-b", ports.StatusRetrying, 15, 0)  // not stuck
		add("site-b", ports.StatusPending, 12, 0)   // not stuck
		add("site-b", ports.StatusDiscarded, 2, 0)
		add("site-b", ports.StatusParked, 8, 0)
		add("site-b", ports.StatusDelivered, 9, 31) // recent
		add("site-d", ports.StatusDiscarded, 1, 0)  // site-d has nothing to report
		add("site-d", ports.StatusDelivered, 1, 5)
		add("site-b", ports.StatusRetrying, 9, 0)    // stuck, oldest of site-b
		add("site-b", ports.StatusDelivered, 50, 60) // recent
		mustInsert(t, s, ns...)

		got, err := s.KPIs(t.Context(), req)
		if err != nil {
			t.Fatalf("KPIs: %v", err)
		}
		checkKPICounts(t, "Global", ports.KPICounts{
			QueueDepth: 7, Stuck: 3, Parked: 4, Delivered: 4, OldestPendingAt: at(1),
		}, got.Global)

		want := []ports.SiteKPICounts{
			{Site: "site-a", KPICounts: ports.KPICounts{QueueDepth: 4, Stuck: 2, Parked: 2, Delivered: 2, OldestPendingAt: at(1)}},
			{Site: "site-b", KPICounts: ports.KPICounts{QueueDepth: 3, Stuck: 1, Parked: 1, Delivered: 2, OldestPendingAt: at(9)}},
			{Site: "site-c", KPICounts: ports.KPICounts{Parked: 1}},
		}
		var sites []string
		for _, sk := range got.Sites {
			sites = append(sites, sk.Site)
		}
		checkIDs(t, "Sites (sorted; only sites with a non-terminal row, a parked row or a recent delivery)",
			[]string{"site-a", "site-b", "site-c"}, sites)
		for i, w := range want {
			if i < len(got.Sites) && got.Sites[i].Site == w.Site {
				checkKPICounts(t, w.Site, w.KPICounts, got.Sites[i].KPICounts)
			}
		}
	})

	t.Run("SitesSortedBySite", func(t *testing.T) {
		s := newHarness(t).Store
		sites := []string{"site-m", "site-c", "site-x", "site-a", "site-q", "site-b", "site-z", "site-k"}
		var ns []ports.Notification
		for i, site := range sites {
			for j := 0; j <= i; j++ {
				n := NewNotification(at(i*10 + j))
				n.SourceSite = site
				ns = append(ns, n)
			}
		}
		mustInsert(t, s, ns...)
		got, err := s.KPIs(t.Context(), req)
		if err != nil {
			t.Fatalf("KPIs: %v", err)
		}
		want := slices.Sorted(slices.Values(sites))
		var gotSites []string
		for _, sk := range got.Sites {
			gotSites = append(gotSites, sk.Site)
		}
		checkIDs(t, "Sites", want, gotSites)
		for _, sk := range got.Sites {
			i := slices.Index(sites, sk.Site)
			if sk.QueueDepth != int64(i+1) || !sameTime(sk.OldestPendingAt, at(i*10)) {
				t.Errorf("%s: QueueDepth %d, OldestPendingAt %s; want %d, %s",
					sk.Site, sk.QueueDepth, fmtTime(sk.OldestPendingAt), i+1, fmtTime(at(i*10)))
			}
		}
	})

	t.Run("FollowsRequestInstants", func(t *testing.T) {
		s := newHarness(t).Store
		var ns []ports.Notification
		for i := range 5 {
			n := NewNotification(at(i))
			n.SourceSite = "site-x"
			ns = append(ns, n)
		}
		d := NewNotification(at(0))
		d.SourceSite = "site-x"
		d.Status = ports.StatusDelivered
		d.DeliveredAt = at(7)
		d.UpdatedAt = at(7)
		ns = append(ns, d)
		mustInsert(t, s, ns...)
		for _, tc := range []struct {
			stuckBefore, since int
			stuck, delivered   int64
		}{{0, 8, 0, 0}, {1, 7, 1, 1}, {3, 0, 3, 1}, {100, 100, 5, 0}} {
			got, err := s.KPIs(t.Context(), ports.KPIRequest{StuckBefore: at(tc.stuckBefore), DeliveredSince: at(tc.since)})
			if err != nil {
				t.Fatalf("KPIs: %v", err)
			}
			what := fmt.Sprintf("Global (StuckBefore +%dm, DeliveredSince +%dm)", tc.stuckBefore, tc.since)
			checkKPICounts(t, what, ports.KPICounts{
				QueueDepth: 5, Stuck: tc.stuck, Delivered: tc.delivered, OldestPendingAt: at(0),
			}, got.Global)
			if len(got.Sites) != 1 || got.Sites[0].Site != "site-x" {
				t.Errorf("%s: Sites = %v, want site-x only", what, got.Sites)
				continue
			}
			checkKPICounts(t, "site-x", got.Global, got.Sites[0].KPICounts)
		}
	})

	t.Run("ZeroDeliveredSinceCountsEveryDelivery", func(t *testing.T) {
		s := newHarness(t).Store
		d := NewNotification(at(0))
		d.Status, d.DeliveredAt, d.UpdatedAt = ports.StatusDelivered, at(1), at(1)
		mustInsert(t, s, d)
		got, err := s.KPIs(t.Context(), ports.KPIRequest{StuckBefore: at(0)})
		if err != nil {
			t.Fatalf("KPIs: %v", err)
		}
		if got.Global.Delivered != 1 {
			t.Errorf("Delivered with a zero DeliveredSince = %d, want 1 (every delivered row)", got.Global.Delivered)
		}
	})
}
