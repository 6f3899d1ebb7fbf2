package core

import (
	"context"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// TestAuditRecordsCarrySiteAndType: every record of a history, the
// dispatcher's (a failed attempt, a parking, a delivery) and the
// operator's (a Park, a Retry now), carries its notification's source site
// and channel type, so that the throughput split per site counts an
// operator's parking under its site and not under none.
func TestAuditRecordsCarrySiteAndType(t *testing.T) {
	e := newTargetEnv(t, []string{"ops@example.com"}, map[string][]ports.Outcome{
		"ops@example.com": {ports.OutcomeTransient, ports.OutcomePermanent}})
	failed := e.send()
	e.dispatch() // a failed attempt: Retrying
	e.row(failed, ports.StatusRetrying)
	if res, err := e.svc.RetryNow(t.Context(), ports.Action{Actor: "ann", IDs: []string{failed}}); err != nil || len(res.Moved) != 1 {
		t.Fatalf("RetryNow: %+v, %v", res, err)
	}
	if res, err := e.svc.Park(t.Context(), ports.Action{Actor: "ann", IDs: []string{failed}}); err != nil || len(res.Moved) != 1 {
		t.Fatalf("Park: %+v, %v", res, err)
	}
	parked := e.send()
	e.dispatch() // a permanent failure: Parked
	e.row(parked, ports.StatusParked)
	delivered := e.send()
	e.dispatch()
	e.row(delivered, ports.StatusDelivered)

	kinds := map[string]int{}
	for _, id := range []string{failed, parked, delivered} {
		h, err := e.store.History(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range h {
			kinds[r.Actor+":"+string(r.Kind)+"/"+string(r.Status)]++
			if r.SourceSite != "site-a" || r.Type != "email" {
				t.Errorf("%s record %s/%s by %s: site %q, type %q; want site-a, email", id, r.Kind, r.Status, r.Actor, r.SourceSite, r.Type)
			}
		}
	}
	for _, k := range []string{"system:Attempted/Retrying", "ann:Retried/Retrying", "ann:Parked/Parked",
		"system:Attempted/Parked", "system:Parked/Parked", "system:Attempted/Delivered"} {
		if kinds[k] == 0 {
			t.Errorf("no %s record in the histories: %v", k, kinds)
		}
	}

	tp, err := e.svc.Throughput(t.Context(), ports.ThroughputQuery{From: tAt.Add(-time.Hour), To: tAt.Add(time.Hour),
		Bucket: time.Hour, By: ports.ThroughputBySite})
	if err != nil {
		t.Fatal(err)
	}
	if len(tp.Series) != 1 || tp.Series[0].Key != "site-a" ||
		tp.Series[0].Total != (ports.ThroughputCounts{Delivered: 1, Failed: 1, Parked: 2}) {
		t.Errorf("throughput per site: %+v; want site-a alone with 1 delivered, 1 failed, 2 parked", tp.Series)
	}
}

// throughputSpy records the throughput queries a store is asked.
type throughputSpy struct {
	ports.Store
	asked []ports.ThroughputQuery
}

func (s *throughputSpy) Throughput(ctx context.Context, q ports.ThroughputQuery) (ports.Throughput, error) {
	s.asked = append(s.asked, q)
	return s.Store.Throughput(ctx, q)
}

// TestKPIRateCountsDeliveredOnly: the delivered rate of the KPIs asks the
// store for the delivered rows alone (one index range, not the failures
// and parkings it would not show), and reads one per site.
func TestKPIRateCountsDeliveredOnly(t *testing.T) {
	e := newTargetEnv(t, []string{"ops@example.com"}, nil)
	spy := &throughputSpy{Store: e.store}
	svc, err := New(Config{}, Deps{Store: spy, Audit: e.store, Channels: ports.ChannelMap{"email": e.ch},
		Directory: e.dir, Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	e.send()
	e.dispatch()
	e.clock.advance(time.Minute)
	k, err := svc.KPIs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(spy.asked) != 1 || !spy.asked[0].DeliveredOnly || spy.asked[0].By != ports.ThroughputBySite {
		t.Errorf("the KPIs asked %+v; want one query of the delivered rows per site", spy.asked)
	}
	if want := 1 / DeliveredRateWindow.Minutes(); k.Global.DeliveredPerMinute != want {
		t.Errorf("delivered rate %v, want %v", k.Global.DeliveredPerMinute, want)
	}
}
