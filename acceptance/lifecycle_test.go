package acceptance

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

// TestLifecycle walks every legal move of the state machine through the
// driving port, on each real store.
func TestLifecycle(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()

		t.Run("PendingToDelivered", func(t *testing.T) {
			e := newEnv(t, b, core.Config{})
			id := e.send("ops")
			e.status(id, ports.StatusPending)
			if n := e.dispatch(); n != 1 {
				t.Fatalf("dispatched %d rows, want 1", n)
			}
			d := e.status(id, ports.StatusDelivered)
			if !d.DeliveredAt.Equal(t0) || !d.LastAttemptAt.Equal(t0) {
				t.Errorf("DeliveredAt %v, LastAttemptAt %v; want both %v", d.DeliveredAt, d.LastAttemptAt, t0)
			}
			if !slices.Equal(d.ResolvedTargets, testLists[0].Targets) {
				t.Errorf("ResolvedTargets %v, want the list's targets %v", d.ResolvedTargets, testLists[0].Targets)
			}
			if d.ClaimedBy != "" || !d.ClaimedUntil.IsZero() {
				t.Errorf("lease not released: %q until %v", d.ClaimedBy, d.ClaimedUntil)
			}
			// An attempt that delivers the row and leaves no error is one
			// record: its status is the row's terminal one.
			want := []ports.AuditKind{ports.AuditIngested, ports.AuditAttempted}
			if got := kinds(d.History); !slices.Equal(got, want) {
				t.Fatalf("history %v, want %v", got, want)
			}
			if a := d.History[1]; a.Outcome != ports.OutcomeSuccess || a.Actor != ports.ActorSystem || a.Status != ports.StatusDelivered ||
				!a.At.Equal(t0) || a.Error != "" {
				t.Errorf("attempt record %+v", a)
			}
			if e.dispatch() != 0 {
				t.Error("a Delivered row was claimed again")
			}
		})

		t.Run("PendingToRetryingToRetryingToDelivered", func(t *testing.T) {
			e := newEnv(t, b, core.Config{})
			id := e.send("ops")
			e.ch.Script(id, FailTransient, FailTransient, Succeed)
			e.dispatch()
			d := e.status(id, ports.StatusRetrying)
			if d.RetryCount != 1 || d.LastError != "scripted transient failure" || !d.NextAttemptAt.Equal(t0.Add(time.Minute)) {
				t.Fatalf("after one transient failure: RetryCount %d, LastError %q, NextAttemptAt %v",
					d.RetryCount, d.LastError, d.NextAttemptAt)
			}
			if e.dispatch() != 0 {
				t.Fatal("a Retrying row was claimed before its NextAttemptAt")
			}
			e.clock.Advance(time.Minute)
			e.dispatch()
			if d := e.status(id, ports.StatusRetrying); d.RetryCount != 2 {
				t.Fatalf("RetryCount %d after two failures", d.RetryCount)
			}
			e.clock.Advance(time.Minute)
			e.dispatch()
			d = e.status(id, ports.StatusDelivered)
			if d.RetryCount != 2 || !d.NextAttemptAt.IsZero() {
				t.Errorf("delivered row: RetryCount %d, NextAttemptAt %v", d.RetryCount, d.NextAttemptAt)
			}
			if n := e.ch.Attempts(id); n != 3 {
				t.Errorf("%d attempts, want 3", n)
			}
			// A delivery after failures keeps its Delivered record, which
			// carries the last error before it.
			want := []ports.AuditKind{ports.AuditIngested, ports.AuditAttempted, ports.AuditAttempted, ports.AuditAttempted, ports.AuditDelivered}
			if got := kinds(d.History); !slices.Equal(got, want) {
				t.Fatalf("history %v, want %v", got, want)
			}
			if a, last := d.History[3], d.History[4]; a.Outcome != ports.OutcomeSuccess || a.Status != ports.StatusDelivered ||
				last.Status != ports.StatusDelivered || last.Error != "scripted transient failure" {
				t.Errorf("last attempt %+v, Delivered record %+v", a, last)
			}
		})

		t.Run("RetriesExhaustedPark", func(t *testing.T) {
			e := newEnv(t, b, core.Config{})
			e.ch = NewScriptedChannel(FailTransient)
			e.svc = e.service(e.store, core.Config{})
			id := e.send("ops")
			for i := 1; i < maxRetries; i++ {
				e.dispatch()
				e.status(id, ports.StatusRetrying)
				e.clock.Advance(time.Minute)
			}
			e.dispatch()
			d := e.status(id, ports.StatusParked)
			if d.RetryCount != maxRetries || !strings.Contains(d.LastError, "retries exhausted after 3 attempts") {
				t.Fatalf("parked row: RetryCount %d, LastError %q", d.RetryCount, d.LastError)
			}
			if last := d.History[len(d.History)-1]; last.Kind != ports.AuditParked {
				t.Errorf("last history record %+v, want Parked", last)
			}
		})

		t.Run("PermanentParksAtOnce", func(t *testing.T) {
			e := newEnv(t, b, core.Config{})
			fromPending := e.send("ops")
			fromRetrying := e.send("ops")
			e.ch.Script(fromPending, FailPermanent)
			e.ch.Script(fromRetrying, FailTransient, FailPermanent)
			e.dispatch()
			if d := e.status(fromPending, ports.StatusParked); d.RetryCount != 0 || d.LastError != "scripted permanent failure" {
				t.Fatalf("Pending→Parked: RetryCount %d, LastError %q", d.RetryCount, d.LastError)
			}
			e.status(fromRetrying, ports.StatusRetrying)
			e.clock.Advance(time.Minute)
			e.dispatch()
			e.status(fromRetrying, ports.StatusParked)
		})

		t.Run("RetryResetsAndRedelivers", func(t *testing.T) {
			e := newEnv(t, b, core.Config{})
			id := e.send("ops")
			e.ch.Script(id, FailTransient, FailPermanent)
			e.dispatch()
			e.clock.Advance(time.Minute)
			e.dispatch()
			if d := e.status(id, ports.StatusParked); d.RetryCount != 1 {
				t.Fatalf("RetryCount %d before the operator Retry, want 1", d.RetryCount)
			}
			res, err := e.svc.Retry(ctx, ports.Action{Actor: "alice", IDs: []string{id}})
			if err != nil || !slices.Equal(res.Moved, []string{id}) || len(res.Refused) != 0 {
				t.Fatalf("Retry: %+v, %v", res, err)
			}
			d := e.status(id, ports.StatusPending)
			if d.RetryCount != 0 || !d.NextAttemptAt.IsZero() || d.LastError != "" {
				t.Fatalf("Retry did not reset: RetryCount %d, NextAttemptAt %v, LastError %q", d.RetryCount, d.NextAttemptAt, d.LastError)
			}
			last := d.History[len(d.History)-1]
			if last.Kind != ports.AuditRetried || last.Actor != "alice" {
				t.Errorf("last history record %+v, want Retried by alice", last)
			}
			e.dispatch()
			e.status(id, ports.StatusDelivered)
		})

		// Each target on its own: of the list's two targets, one is
		// delivered at once and never sent to again; the other retries,
		// fails for good and parks the row; the operator's Retry sends to
		// it alone.
		t.Run("OneTargetOfTwoParksAndIsRetriedAlone", func(t *testing.T) {
			e := newEnv(t, b, core.Config{})
			ops, oncall := testLists[0].Targets[0], testLists[0].Targets[1]
			id := e.send("ops")
			e.ch.ScriptTarget(oncall, FailTransient, FailPermanent)
			e.dispatch()
			d := e.status(id, ports.StatusRetrying)
			if got := targetStatuses(d); got != ops+"=Delivered "+oncall+"=Retrying" || d.RetryCount != 1 {
				t.Fatalf("after the first attempt: %s, RetryCount %d", got, d.RetryCount)
			}
			if !d.Targets[0].DeliveredAt.Equal(t0) || d.Targets[1].Attempts != 1 || d.Targets[1].LastError != "scripted transient failure" {
				t.Errorf("target states %+v", d.Targets)
			}
			e.clock.Advance(time.Minute)
			e.dispatch()
			d = e.status(id, ports.StatusParked)
			if got := targetStatuses(d); got != ops+"=Delivered "+oncall+"=Failed" {
				t.Fatalf("parked: %s", got)
			}
			if d.LastError != "1 of 2 targets not delivered: scripted permanent failure" || !slices.Equal(d.ResolvedTargets, []string{ops}) {
				t.Errorf("parked: LastError %q, ResolvedTargets %q", d.LastError, d.ResolvedTargets)
			}
			if _, err := e.svc.Retry(ctx, ports.Action{Actor: "alice", IDs: []string{id}}); err != nil {
				t.Fatal(err)
			}
			e.dispatch()
			d = e.status(id, ports.StatusDelivered)
			want := [][]string{{ops, oncall}, {oncall}, {oncall}}
			if got := e.ch.SentTo(id); !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("attempts went to %q, want %q", got, want)
			}
			if e.ch.Reached(ops) != 1 || e.ch.Reached(oncall) != 1 {
				t.Errorf("reached %s %d times and %s %d times, want once each", ops, e.ch.Reached(ops), oncall, e.ch.Reached(oncall))
			}
			if d.Targets[1].Attempts != 3 || !slices.Equal(d.ResolvedTargets, []string{ops, oncall}) {
				t.Errorf("delivered: %+v, resolved %q", d.Targets, d.ResolvedTargets)
			}
			var went [][]string
			for _, r := range d.History {
				if r.Kind == ports.AuditAttempted {
					var ts []string
					for _, at := range r.Targets {
						ts = append(ts, at.Target)
					}
					went = append(went, ts)
				}
			}
			if !slices.EqualFunc(went, want, slices.Equal) {
				t.Errorf("the history's attempts went to %q, want %q", went, want)
			}
		})

		t.Run("DiscardOnlyFromParked", func(t *testing.T) {
			e := newEnv(t, b, core.Config{})
			parked, delivered, retrying := e.send("ops"), e.send("ops"), e.send("ops")
			e.ch.Script(parked, FailPermanent)
			e.ch.Script(retrying, FailTransient)
			e.dispatch()
			pending := e.send("ops")
			e.status(delivered, ports.StatusDelivered)
			e.status(retrying, ports.StatusRetrying)
			e.status(pending, ports.StatusPending)

			for _, id := range []string{delivered, retrying, pending} {
				res, err := e.svc.Discard(ctx, ports.Action{Actor: "alice", IDs: []string{id}})
				if err != nil {
					t.Fatal(err)
				}
				refusedWith(t, res, id, ports.ErrConflict, "only Parked notifications can be discarded")
				res, err = e.svc.Retry(ctx, ports.Action{Actor: "alice", IDs: []string{id}})
				if err != nil {
					t.Fatal(err)
				}
				refusedWith(t, res, id, ports.ErrConflict, "only Parked notifications can be retried")
			}
			e.status(delivered, ports.StatusDelivered)
			e.status(pending, ports.StatusPending)

			res, err := e.svc.Discard(ctx, ports.Action{Actor: "bob", IDs: []string{parked}})
			if err != nil || !slices.Equal(res.Moved, []string{parked}) {
				t.Fatalf("Discard of a Parked row: %+v, %v", res, err)
			}
			d := e.status(parked, ports.StatusDiscarded)
			if last := d.History[len(d.History)-1]; last.Kind != ports.AuditDiscarded || last.Actor != "bob" {
				t.Errorf("last history record %+v, want Discarded by bob", last)
			}
			res, _ = e.svc.Discard(ctx, ports.Action{Actor: "bob", IDs: []string{parked}})
			refusedWith(t, res, parked, ports.ErrConflict, "is Discarded")
			res, _ = e.svc.Retry(ctx, ports.Action{Actor: "bob", IDs: []string{parked}})
			refusedWith(t, res, parked, ports.ErrConflict, "is Discarded")

			unknown := submission("ops").ID
			res, _ = e.svc.Discard(ctx, ports.Action{Actor: "bob", IDs: []string{unknown}})
			refusedWith(t, res, unknown, ports.ErrNotFound, "")
			if _, err := e.svc.Discard(ctx, ports.Action{Actor: "bob"}); !errors.Is(err, ports.ErrInvalid) {
				t.Errorf("Discard with no selection: %v, want ErrInvalid", err)
			}
		})

		t.Run("BulkByIDsAndByFilter", func(t *testing.T) {
			e := newEnv(t, b, core.Config{})
			e.ch = NewScriptedChannel(FailPermanent)
			e.svc = e.service(e.store, core.Config{})
			var siteA, siteB []string
			for range 5 {
				siteA = append(siteA, e.send("ops"))
				s := submission("ops")
				s.SourceSite = "site-b"
				siteB = append(siteB, e.submit(s)[0])
			}
			e.dispatch()
			e.clock.Advance(time.Hour)
			delivered := e.send("ops")
			e.ch.Script(delivered, Succeed)
			e.dispatch()

			// By ids, mixing a parked row with a delivered one.
			res, err := e.svc.Retry(ctx, ports.Action{Actor: "alice", IDs: []string{siteA[0], delivered}})
			if err != nil || !slices.Equal(res.Moved, []string{siteA[0]}) || len(res.Refused) != 1 || res.Refused[0].ID != delivered {
				t.Fatalf("Retry by ids: %+v, %v", res, err)
			}
			// By filter: every row parked for site-b, and nothing else.
			res, err = e.svc.Discard(ctx, ports.Action{Actor: "alice", Filter: ports.Filter{SourceSite: "site-b", List: "ops"}})
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Sorted(slices.Values(res.Moved)); !slices.Equal(got, slices.Sorted(slices.Values(siteB))) {
				t.Fatalf("Discard by filter moved %v, want %v", got, siteB)
			}
			for _, id := range siteB {
				e.status(id, ports.StatusDiscarded)
			}
			// "Parked since T": nothing was parked in the last minute.
			res, _ = e.svc.Retry(ctx, ports.Action{Actor: "alice", Filter: ports.Filter{UpdatedFrom: e.clock.Now().Add(-time.Minute)}})
			if len(res.Moved) != 0 {
				t.Fatalf("Retry of rows parked in the last minute moved %v", res.Moved)
			}
			res, _ = e.svc.Retry(ctx, ports.Action{Actor: "alice", All: true})
			if len(res.Moved) != 4 {
				t.Fatalf("Retry of all parked rows moved %d, want the 4 left of site-a", len(res.Moved))
			}
			for _, id := range siteA {
				e.status(id, ports.StatusPending)
			}
		})
	})
}
