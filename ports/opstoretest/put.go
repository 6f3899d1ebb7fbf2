package opstoretest

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

func exercisePut(t *testing.T, open func(t *testing.T) ports.OpStore) {
	t.Run("InsertRoundTripsEveryField", func(t *testing.T) {
		s := open(t)
		call, write := NewCall(BaseTime), NewWrite(BaseTime.Add(time.Millisecond))
		// A bare row: no method, no error, no provenance, no payload.
		bare := ports.Operation{
			ID: NewID(), Kind: ports.OpCall, Target: "historian", Status: ports.OpRetrying,
			RetryCount:    3,
			NextAttemptAt: BaseTime.Add(-time.Hour),
			CreatedAt:     BaseTime.Add(-2 * time.Hour), UpdatedAt: BaseTime.Add(-time.Hour),
		}
		// A caller's Version is not the store's.
		call.Version = 99
		insert(t, s, call, write, bare)
		requireStored(t, s, stored(call, 1))
		requireStored(t, s, stored(write, 1))
		requireStored(t, s, stored(bare, 1))
	})

	t.Run("PayloadBytesRoundTripExactly", func(t *testing.T) {
		s := open(t)
		op := NewWrite(BaseTime)
		// Odd but valid JSON spacing, escapes and big numbers are kept as
		// they are: the store never re-encodes them.
		op.Payload.Args = json.RawMessage(" [ 1e400 , \"\\u00fc\\n\" ,\t{} ]\n")
		op.Payload.SQL = "UPDATE t SET v = ? -- 日本語 ☃ \x01\ttab"
		op.Payload.Params = json.RawMessage(`{"b":2,"a":1,"a":3}`)
		insert(t, s, op)
		requireStored(t, s, stored(op, 1))
	})

	t.Run("CopiesAreOwnedByTheCaller", func(t *testing.T) {
		s := open(t)
		op := NewCall(BaseTime)
		want := stored(op, 1)
		want.Payload.Params = slices.Clone(op.Payload.Params)
		insert(t, s, op)
		op.Payload.Params[0] = 'X' // the caller reuses its slice
		got := requireStored(t, s, want)
		got.Payload.Params[0] = 'Y' // and scribbles on what it read
		requireStored(t, s, want)
	})

	t.Run("AppliesOnlyFromTheStoredStatus", func(t *testing.T) {
		s := open(t)
		op := NewCall(BaseTime)
		// From a status on an absent row: nothing is created.
		put(t, s, []bool{false}, Move(ports.OpPending, op))
		if _, err := s.Get(t.Context(), op.ID); !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("a change from Pending created an absent row: Get err = %v", err)
		}
		insert(t, s, op)

		// Inserting again (From "") does not overwrite the stored row.
		again := op
		again.LastError = "a second insert"
		put(t, s, []bool{false}, Insert(again))
		requireStored(t, s, stored(op, 1))

		// From the wrong status: nothing changes.
		parked := op
		parked.Status = ports.OpParked
		put(t, s, []bool{false}, Move(ports.OpRetrying, parked))
		requireStored(t, s, stored(op, 1))

		// From the stored status: applied, Version 2.
		retry := op
		retry.Status, retry.RetryCount = ports.OpRetrying, 1
		retry.NextAttemptAt = BaseTime.Add(time.Minute)
		put(t, s, []bool{true}, Move(ports.OpPending, retry))
		requireStored(t, s, stored(retry, 2))

		// The same change again is stale now.
		put(t, s, []bool{false}, Move(ports.OpPending, retry))
		requireStored(t, s, stored(retry, 2))

		// A change to the same status applies too, and counts.
		retry2 := retry
		retry2.RetryCount = 2
		put(t, s, []bool{true}, Move(ports.OpRetrying, retry2))
		requireStored(t, s, stored(retry2, 3))
	})

	t.Run("ReplacesTheRowWhole", func(t *testing.T) {
		s := open(t)
		op := NewCall(BaseTime)
		insert(t, s, op)
		next := ports.Operation{
			ID: op.ID, Kind: ports.OpWrite, Target: "other", Status: ports.OpRetrying,
			NextAttemptAt: BaseTime.Add(time.Hour),
			CreatedAt:     BaseTime.Add(time.Second), UpdatedAt: BaseTime.Add(time.Minute),
			Payload: ports.OpPayload{SQL: "DELETE FROM x"},
		}
		put(t, s, []bool{true}, Move(ports.OpPending, next))
		requireStored(t, s, stored(next, 2))
	})

	t.Run("TerminalRowKeepsNoPayload", func(t *testing.T) {
		s := open(t)
		op := NewCall(BaseTime)
		insert(t, s, op)
		done := op
		done.Status, done.TerminalAt = ports.OpDelivered, BaseTime.Add(time.Minute)
		put(t, s, []bool{true}, Move(ports.OpPending, done))
		got := requireStored(t, s, stored(done, 2))
		if len(got.Payload.Params) != 0 || got.Payload.SQL != "" || len(got.Payload.Args) != 0 {
			t.Fatalf("a Delivered row kept its payload: %+v", got.Payload)
		}

		// Stored terminal at once (a permanent failure on the first
		// attempt), with the payload handed over: it is not kept.
		failed := NewWrite(BaseTime)
		failed.Status, failed.TerminalAt = ports.OpFailed, BaseTime.Add(time.Second)
		failed.LastError = "duplicate key value violates unique constraint"
		insert(t, s, failed)
		requireStored(t, s, stored(failed, 1))
	})

	t.Run("ChangesOfOneCallApplyInOrder", func(t *testing.T) {
		s := open(t)
		x, y := NewCall(BaseTime), NewWrite(BaseTime)
		xr := x
		xr.Status, xr.RetryCount = ports.OpRetrying, 1
		xp := x
		xp.Status = ports.OpParked
		xd := xr
		xd.Status, xd.TerminalAt = ports.OpDiscarded, BaseTime.Add(time.Hour)
		// x is inserted then moved on by the same call; the change from
		// Pending comes after x left Pending, so it does not apply; the
		// change from Retrying does.
		put(t, s, []bool{true, true, false, true, true},
			Insert(x), Move(ports.OpPending, xr), Move(ports.OpPending, xp), Insert(y), Move(ports.OpRetrying, xd))
		requireStored(t, s, stored(xd, 3))
		requireStored(t, s, stored(y, 1))
	})

	t.Run("InvalidChangesWriteNothing", func(t *testing.T) {
		s := open(t)
		good := NewCall(BaseTime)
		noID := NewCall(BaseTime)
		noID.ID = ""
		badStatus := NewCall(BaseTime)
		badStatus.Status = "Sleeping"
		noStatus := NewCall(BaseTime)
		noStatus.Status = ""
		badKind := NewCall(BaseTime)
		badKind.Kind = "Telegram"
		for name, bad := range map[string]ports.OpChange{
			"empty id":       Insert(noID),
			"unknown status": Insert(badStatus),
			"empty status":   Insert(noStatus),
			"unknown from":   Move("Sleeping", NewCall(BaseTime)),
			"unknown kind":   Insert(badKind),
		} {
			applied, err := s.Put(t.Context(), []ports.OpChange{Insert(good), bad})
			if !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("Put with %s: err = %v (applied %v), want one wrapping ErrInvalid", name, err, applied)
			}
			if _, err := s.Get(t.Context(), good.ID); !errors.Is(err, ports.ErrNotFound) {
				t.Fatalf("Put with %s wrote the valid change beside it: Get err = %v", name, err)
			}
		}
		page, err := s.List(t.Context(), ports.OpFilter{}, ports.PageRequest{Limit: 10})
		if err != nil || len(page.Items) != 0 {
			t.Fatalf("after refused Puts the store lists %v, %v; want nothing", idList(page.Items), err)
		}
	})

	t.Run("EmptyIsNoOp", func(t *testing.T) {
		s := open(t)
		for _, changes := range [][]ports.OpChange{nil, {}} {
			applied, err := s.Put(t.Context(), changes)
			if err != nil || len(applied) != 0 {
				t.Fatalf("Put(%v) = %v, %v; want nothing and no error", changes, applied, err)
			}
		}
	})

	t.Run("CancelledChangesNothing", func(t *testing.T) {
		s := open(t)
		op := NewCall(BaseTime)
		insert(t, s, op)
		next := op
		next.Status = ports.OpRetrying
		if _, err := s.Put(cancelled(t), []ports.OpChange{Move(ports.OpPending, next), Insert(NewCall(BaseTime))}); err == nil {
			t.Fatalf("Put with a cancelled context succeeded")
		}
		requireStored(t, s, stored(op, 1))
		if n, err := s.Purge(cancelled(t), BaseTime.Add(time.Hour), 10); err == nil {
			t.Fatalf("Purge with a cancelled context succeeded (%d)", n)
		}
	})
}

func exerciseGet(t *testing.T, open func(t *testing.T) ports.OpStore) {
	t.Run("UnknownIsNotFound", func(t *testing.T) {
		s := open(t)
		insert(t, s, NewCall(BaseTime))
		for _, id := range []string{NewID(), "", "not-a-uuid"} {
			if op, err := s.Get(t.Context(), id); !errors.Is(err, ports.ErrNotFound) {
				t.Fatalf("Get(%q) = %+v, %v; want an error wrapping ErrNotFound", id, op, err)
			}
		}
	})

	t.Run("OtherIDsAreKept", func(t *testing.T) {
		s := open(t)
		// The store is not limited to canonical UUIDs.
		op := NewCall(BaseTime)
		op.ID = "call-7 ünï"
		upper := NewWrite(BaseTime)
		upper.ID = "0192F0E2-8A3B-7C1D-9E2F-0123456789AB"
		insert(t, s, op, upper)
		requireStored(t, s, stored(op, 1))
		requireStored(t, s, stored(upper, 1))
	})
}
