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

	for name, act := range map[string]func() (ports.ActionResult, error){
		"RetryNow": func() (ports.ActionResult, error) {
			return e.svc.RetryNow(t.Context(), ports.Action{Actor: "ann", IDs: []string{id}})
		},
		"Park": func() (ports.ActionResult, error) {
			return e.svc.Park(t.Context(), ports.Action{Actor: "ann", IDs: []string{id}})
		},
	} {
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

// TestRetryNowAndParkLeaveARowBeingDelivered: a Retrying row a dispatcher
// holds (its lease live) is refused, with the reason, and left to the
// lease; once the lease has expired it can be parked.
func TestRetryNowAndParkLeaveARowBeingDelivered(t *testing.T) {
	e := newTargetEnv(t, []string{"busy@example.com"}, map[string][]ports.Outcome{"busy@example.com": {ports.OutcomeTransient}})
	id := e.send()
	e.dispatch()
	e.row(id, ports.StatusRetrying)
	e.clock.advance(2 * time.Minute)
	if got, err := e.store.Claim(t.Context(), ports.ClaimRequest{Owner: "node-b/1", Now: e.clock.Now(), Lease: time.Minute, Limit: 10}); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v, %v", got, err)
	}
	for name, act := range map[string]func() (ports.ActionResult, error){
		"RetryNow": func() (ports.ActionResult, error) {
			return e.svc.RetryNow(t.Context(), ports.Action{Actor: "ann", IDs: []string{id}})
		},
		"Park": func() (ports.ActionResult, error) {
			return e.svc.Park(t.Context(), ports.Action{Actor: "ann", IDs: []string{id}})
		},
	} {
		res, err := act()
		if err != nil || len(res.Moved) != 0 || len(res.Refused) != 1 || !errors.Is(res.Refused[0].Err, ports.ErrConflict) ||
			!strings.Contains(res.Refused[0].Err.Error(), "is being delivered now") {
			t.Errorf("%s of a row being delivered: %+v, %v", name, res, err)
		}
	}
	if n, err := e.store.Get(t.Context(), id); err != nil || n.ClaimedBy != "node-b/1" {
		t.Fatalf("the lease was taken from the dispatcher: %+v, %v", n, err)
	}
	e.clock.advance(2 * time.Minute)
	if res, err := e.svc.Park(t.Context(), ports.Action{Actor: "ann", IDs: []string{id}}); err != nil || len(res.Moved) != 1 {
		t.Fatalf("Park after the lease: %+v, %v", res, err)
	}
	e.row(id, ports.StatusParked)
}
