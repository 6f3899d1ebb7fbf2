package core

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// TestRetryNowAndParkOfARetryingRow: an operator makes a Retrying row due
// at once (the dispatcher tries it without waiting for its interval, the
// retry count and error kept), then parks it; both are in its history
// under the operator's name. A Parked row cannot be retried now, nor
// parked again.
func TestRetryNowAndParkOfARetryingRow(t *testing.T) {
	e := newTargetEnv(t, []string{"busy@example.com"}, map[string][]ports.Outcome{
		"busy@example.com": {ports.OutcomeTransient, ports.OutcomeTransient, ports.OutcomeTransient}})
	id := e.send()
	e.dispatch()
	d := e.row(id, ports.StatusRetrying)
	if !d.NextAttemptAt.After(e.clock.Now()) || d.RetryCount != 1 {
		t.Fatalf("after the first attempt: next %s, retries %d", d.NextAttemptAt, d.RetryCount)
	}
	e.dispatch() // not due yet
	if e.ch.asked["busy@example.com"] != 1 {
		t.Fatalf("a row waiting for its interval was tried: %v", e.ch.asked)
	}

	res, err := e.svc.RetryNow(t.Context(), ports.Action{Actor: "ann", IDs: []string{id}})
	if err != nil || len(res.Moved) != 1 || len(res.Refused) != 0 {
		t.Fatalf("RetryNow: %+v, %v", res, err)
	}
	d = e.row(id, ports.StatusRetrying)
	if !d.NextAttemptAt.IsZero() || d.RetryCount != 1 || d.LastError == "" {
		t.Errorf("retried now: next %s, retries %d, error %q: want due, count and error kept", d.NextAttemptAt, d.RetryCount, d.LastError)
	}
	e.dispatch() // due now: tried at the same instant
	if e.ch.asked["busy@example.com"] != 2 {
		t.Fatalf("Retry now did not make the row due: %v", e.ch.asked)
	}

	res, err = e.svc.Park(t.Context(), ports.Action{Actor: "ann", IDs: []string{id}})
	if err != nil || len(res.Moved) != 1 {
		t.Fatalf("Park: %+v, %v", res, err)
	}
	d = e.row(id, ports.StatusParked)
	if d.RetryCount != 2 || d.LastError == "" {
		t.Errorf("parked: retries %d, error %q: want both kept", d.RetryCount, d.LastError)
	}
	var ops []string
	for _, h := range d.History {
		if h.Actor == "ann" {
			ops = append(ops, string(h.Kind)+"→"+string(h.Status))
		}
	}
	if strings.Join(ops, " ") != "Retried→Retrying Parked→Parked" {
		t.Errorf("the operator's history reads %q", ops)
	}

	for name, act := range e.retryingActions(id) {
		res, err := act()
		if err != nil || len(res.Moved) != 0 || len(res.Refused) != 1 ||
			!strings.Contains(res.Refused[0].Err.Error(), "is Parked; only Retrying notifications can be") {
			t.Errorf("%s of a Parked row: %+v, %v", name, res, err)
		}
	}
	if _, err := e.svc.Park(t.Context(), ports.Action{Actor: "ann"}); !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("Park without a selection: %v", err)
	}
}

// retryingActions is an operator's actions on a Retrying row id, by
// name: Retry now and Park, by "ann".
func (e *targetEnv) retryingActions(id string) map[string]func() (ports.ActionResult, error) {
	a := ports.Action{Actor: "ann", IDs: []string{id}}
	return map[string]func() (ports.ActionResult, error){
		"RetryNow": func() (ports.ActionResult, error) { return e.svc.RetryNow(e.t.Context(), a) },
		"Park":     func() (ports.ActionResult, error) { return e.svc.Park(e.t.Context(), a) },
	}
}

// refusedAsDelivered checks that each of an operator's actions on the
// Retrying row id is refused as being delivered, and leaves the row to
// owner's lease.
func (e *targetEnv) refusedAsDelivered(id, owner, when string) {
	e.t.Helper()
	for name, act := range e.retryingActions(id) {
		res, err := act()
		if err != nil || len(res.Moved) != 0 || len(res.Refused) != 1 || !errors.Is(res.Refused[0].Err, ports.ErrConflict) ||
			!strings.Contains(res.Refused[0].Err.Error(), "is being delivered now") {
			e.t.Errorf("%s of a row being delivered %s: %+v, %v", name, when, res, err)
		}
	}
	if n, err := e.store.Get(e.t.Context(), id); err != nil || n.ClaimedBy != owner {
		e.t.Fatalf("the lease was taken from the dispatcher %s: %+v, %v", when, n, err)
	}
}

// TestRetryNowAndParkLeaveARowBeingDelivered: a Retrying row a dispatcher
// holds is refused, with the reason, and left to the dispatcher during its
// lease and for a grace after it (the delivery timeout and
// LeaseGraceMargin): the lease was measured by the claiming node's clock,
// and its Record may land late. That late Record keeps the attempt's
// outcome, and the row it released is the operator's at once; a row whose
// dispatcher never records is the operator's once the grace has passed.
func TestRetryNowAndParkLeaveARowBeingDelivered(t *testing.T) {
	e := newTargetEnv(t, []string{"busy@example.com"}, map[string][]ports.Outcome{"busy@example.com": {ports.OutcomeTransient}})
	grace := DefaultDeliveryTimeout + LeaseGraceMargin
	id := e.send()
	e.dispatch()
	e.row(id, ports.StatusRetrying)
	e.clock.advance(2 * time.Minute)
	claim := func(owner string) time.Time {
		t.Helper()
		got, err := e.store.Claim(t.Context(), ports.ClaimRequest{Owner: owner, Now: e.clock.Now(), Lease: time.Minute, Limit: 10})
		if err != nil || len(got) != 1 {
			t.Fatalf("claim: %v, %v", got, err)
		}
		return got[0].ClaimedUntil
	}
	until := claim("node-b/1")
	e.refusedAsDelivered(id, "node-b/1", "during its lease")
	e.clock.advance(until.Sub(e.clock.Now()) + time.Second)
	e.refusedAsDelivered(id, "node-b/1", "just after its lease")

	// node-b's outcome, recorded after its lease, is kept.
	late := e.clock.Now()
	if lost, err := e.store.Record(t.Context(), "node-b/1", []ports.Update{{ID: id, Status: ports.StatusRetrying, RetryCount: 2,
		LastError: "smtp: 421 still busy", NextAttemptAt: late.Add(time.Hour), LastAttemptAt: late, UpdatedAt: late}}); err != nil || len(lost) != 0 {
		t.Fatalf("the late Record: lost %v, %v", lost, err)
	}
	if res, err := e.svc.RetryNow(t.Context(), ports.Action{Actor: "ann", IDs: []string{id}}); err != nil || len(res.Moved) != 1 {
		t.Fatalf("RetryNow of the row its dispatcher released: %+v, %v", res, err)
	}
	if d := e.row(id, ports.StatusRetrying); d.RetryCount != 2 || d.LastError != "smtp: 421 still busy" {
		t.Errorf("after the late Record and Retry now: retries %d, error %q", d.RetryCount, d.LastError)
	}

	// A dispatcher that never records (its node died) holds the row until
	// the grace after its lease has passed.
	until = claim("node-c/1")
	e.clock.advance(until.Sub(e.clock.Now()) + grace - time.Millisecond)
	e.refusedAsDelivered(id, "node-c/1", "within the grace after its lease")
	e.clock.advance(time.Millisecond)
	if res, err := e.svc.Park(t.Context(), ports.Action{Actor: "ann", IDs: []string{id}}); err != nil || len(res.Moved) != 1 {
		t.Fatalf("Park after the lease and the grace: %+v, %v", res, err)
	}
	if d := e.row(id, ports.StatusParked); d.RetryCount != 2 {
		t.Errorf("parked: retries %d, want 2 (node-b's outcome)", d.RetryCount)
	}
}
