package acceptance

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

// TestQueriesAndKPIs checks the operator's view through the driving port:
// filters, the stuck badge, paging, status by id and the KPIs per site.
func TestQueriesAndKPIs(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		e := newEnv(t, b, core.Config{})
		from := func(site, subject string) ports.Submission {
			s := submission("ops")
			s.SourceSite, s.Subject = site, subject
			return s
		}
		// site-a: one delivered, one parked. site-b: one retrying.
		delivered := e.submit(from("site-a", "Boiler OK"))[0]
		e.clock.Advance(time.Second)
		parked := e.submit(from("site-a", "Boiler FAULT"))[0]
		e.clock.Advance(time.Second)
		retrying := e.submit(from("site-b", "Valve stuck"))[0]
		e.ch.Script(parked, FailPermanent)
		e.ch.Script(retrying, FailTransient)
		e.dispatch()
		e.clock.Advance(11 * time.Minute)
		// site-b: one fresh pending row; the retrying one is now stuck.
		pending := e.submit(from("site-b", "Valve ok"))[0]

		query := func(q ports.Query) []string {
			t.Helper()
			page, err := e.svc.Query(ctx, q)
			if err != nil {
				t.Fatalf("query %+v: %v", q, err)
			}
			var ids []string
			for _, r := range page.Items {
				ids = append(ids, r.ID)
			}
			return ids
		}
		for name, c := range map[string]struct {
			q    ports.Query
			want []string
		}{
			"all newest first": {ports.Query{}, []string{pending, retrying, parked, delivered}},
			"status":           {ports.Query{Filter: ports.Filter{Statuses: []ports.Status{ports.StatusParked}}}, []string{parked}},
			"site":             {ports.Query{Filter: ports.Filter{SourceSite: "site-b"}}, []string{pending, retrying}},
			"keyword":          {ports.Query{Filter: ports.Filter{Subject: "boiler"}}, []string{parked, delivered}},
			"stuck only":       {ports.Query{StuckOnly: true}, []string{retrying}},
			"time range":       {ports.Query{Filter: ports.Filter{CreatedFrom: t0.Add(time.Second), CreatedTo: t0.Add(time.Minute)}}, []string{retrying, parked}},
			"list and type":    {ports.Query{Filter: ports.Filter{List: "ops", Type: "email", SourceSite: "site-a"}}, []string{parked, delivered}},
		} {
			if got := query(c.q); !slices.Equal(got, c.want) {
				t.Errorf("%s: got %v, want %v", name, got, c.want)
			}
		}
		page, _ := e.svc.Query(ctx, ports.Query{})
		for _, r := range page.Items {
			if r.Stuck != (r.ID == retrying) {
				t.Errorf("row %s (%s) stuck badge %v", r.ID, r.Status, r.Stuck)
			}
		}
		first, _ := e.svc.Query(ctx, ports.Query{Limit: 3})
		second, _ := e.svc.Query(ctx, ports.Query{Limit: 3, After: first.Next})
		if len(first.Items) != 3 || len(second.Items) != 1 || second.Next != "" || second.Items[0].ID != delivered {
			t.Errorf("paging: %d then %d items, next %q", len(first.Items), len(second.Items), second.Next)
		}
		if _, err := e.svc.Query(ctx, ports.Query{Filter: ports.Filter{Statuses: []ports.Status{"Lost"}}}); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("unknown status filter: %v, want ErrInvalid", err)
		}
		if n, err := e.svc.Count(ctx, ports.Query{Filter: ports.Filter{SourceSite: "site-a"}}); err != nil || n != 2 {
			t.Errorf("count site-a: %d, %v", n, err)
		}

		unknown := submission("ops").ID
		st, err := e.svc.Status(ctx, ports.StatusRequest{IDs: []string{delivered, retrying, unknown, "garbage"}})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]ports.Status{delivered: ports.StatusDelivered, retrying: ports.StatusRetrying,
			unknown: ports.StatusUnknown, "garbage": ports.StatusUnknown}
		for id, w := range want {
			if st[id] != w {
				t.Errorf("status of %s: %s, want %s", id, st[id], w)
			}
		}

		k, err := e.svc.KPIs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// delivered at t0, more than the 1-minute window ago but within
		// the 15 minutes of the rate: one in 15 minutes.
		if k.RateWindow != 15*time.Minute {
			t.Errorf("rate window %s, want 15m", k.RateWindow)
		}
		wantGlobal := ports.KPI{QueueDepth: 2, Stuck: 1, Parked: 1, Delivered: 0, DeliveredPerMinute: 1.0 / 15, OldestPendingAge: 11 * time.Minute}
		if k.Global != wantGlobal {
			t.Errorf("global KPIs %+v, want %+v", k.Global, wantGlobal)
		}
		wantSites := []ports.SiteKPI{
			{Site: "site-a", KPI: ports.KPI{Parked: 1, DeliveredPerMinute: 1.0 / 15}},
			{Site: "site-b", KPI: ports.KPI{QueueDepth: 2, Stuck: 1, OldestPendingAge: 11 * time.Minute}},
		}
		if !slices.Equal(k.Sites, wantSites) {
			t.Errorf("site KPIs %+v, want %+v", k.Sites, wantSites)
		}
		e.clock.Advance(-12 * time.Minute) // back inside the delivered window of the delivery at t0+2s
		if k, _ := e.svc.KPIs(ctx); k.Global.Delivered != 1 {
			t.Errorf("delivered in the last minute: %d, want 1", k.Global.Delivered)
		}

		// The dispatcher's outcomes, per site and per minute: site-a's
		// delivery and parking, site-b's failed attempt, all in the first
		// minute.
		tp, err := e.svc.Throughput(ctx, ports.ThroughputQuery{From: t0, To: t0.Add(time.Hour), Bucket: time.Minute, By: ports.ThroughputBySite})
		if err != nil {
			t.Fatal(err)
		}
		if len(tp.Series) != 2 || tp.Series[0].Key != "site-a" || tp.Series[1].Key != "site-b" ||
			tp.Series[0].Buckets[0] != (ports.ThroughputCounts{Delivered: 1, Parked: 1}) ||
			tp.Series[1].Buckets[0] != (ports.ThroughputCounts{Failed: 1}) || len(tp.Series[0].Buckets) != 60 {
			t.Errorf("throughput by site: %+v", tp.Series)
		}
		if _, err := e.svc.Throughput(ctx, ports.ThroughputQuery{From: t0, To: t0.Add(time.Hour)}); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("throughput without a bucket: %v, want ErrInvalid", err)
		}
	})
}
