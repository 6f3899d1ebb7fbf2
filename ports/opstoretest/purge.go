package opstoretest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

func exercisePurge(t *testing.T, open func(t *testing.T) ports.OpStore) {
	t.Run("TerminalRowsBeforeTheCutoff", func(t *testing.T) {
		s := open(t)
		cutoff := BaseTime.Add(7 * 24 * time.Hour)
		term := func(op ports.Operation, st ports.OpStatus, at time.Time) ports.Operation {
			op.Status, op.TerminalAt = st, at.In(zone)
			return op
		}
		old := []ports.Operation{
			term(NewCall(BaseTime), ports.OpDelivered, cutoff.Add(-time.Hour)),
			term(NewWrite(BaseTime), ports.OpFailed, cutoff.Add(-time.Microsecond)),
			term(NewCall(BaseTime), ports.OpDiscarded, BaseTime),
		}
		atCutoff := term(NewCall(BaseTime), ports.OpDelivered, cutoff)
		recent := term(NewWrite(BaseTime), ports.OpFailed, cutoff.Add(time.Hour))
		// Buffered rows are never purged, whatever their times say.
		pending := NewCall(BaseTime)
		parked := NewWrite(BaseTime)
		parked.Status = ports.OpParked
		oddParked := NewCall(BaseTime)
		oddParked.Status, oddParked.TerminalAt = ports.OpParked, BaseTime
		retrying := NewCall(BaseTime)
		retrying.Status, retrying.TerminalAt = ports.OpRetrying, BaseTime
		insert(t, s, append(slices.Clone(old), atCutoff, recent, pending, parked, oddParked, retrying)...)

		n, err := s.Purge(t.Context(), cutoff, 2)
		if err != nil || n != 2 {
			t.Fatalf("Purge(limit 2) = %d, %v; want 2", n, err)
		}
		n, err = s.Purge(t.Context(), cutoff, 100)
		if err != nil || n != 1 {
			t.Fatalf("second Purge = %d, %v; want the 1 left", n, err)
		}
		n, err = s.Purge(t.Context(), cutoff, 100)
		if err != nil || n != 0 {
			t.Fatalf("third Purge = %d, %v; want 0", n, err)
		}
		for _, op := range old {
			if _, err := s.Get(t.Context(), op.ID); !errors.Is(err, ports.ErrNotFound) {
				t.Fatalf("purged %s: Get err = %v, want ErrNotFound", op.ID, err)
			}
		}
		for _, op := range []ports.Operation{atCutoff, recent, pending, parked, oddParked, retrying} {
			requireStored(t, s, stored(op, 1))
		}
		kept := []ports.Operation{atCutoff, recent, pending, parked, oddParked, retrying}
		if got := listAll(t, s, ports.OpFilter{}, 4); !slices.Equal(got, newestFirst(kept)) {
			t.Fatalf("List after the purge = %v, want %v", got, newestFirst(kept))
		}
		st := stats(t, s)
		if c, w := st[ports.OpCall], st[ports.OpWrite]; c.Terminal != 1 || w.Terminal != 1 {
			t.Fatalf("Terminal counts after the purge: calls %d, writes %d; want 1 and 1", c.Terminal, w.Terminal)
		}
	})

	t.Run("RowsThatBecameTerminal", func(t *testing.T) {
		s := open(t)
		a, b := NewCall(BaseTime), NewWrite(BaseTime)
		insert(t, s, a, b)
		ad := a
		ad.Status, ad.TerminalAt = ports.OpDelivered, BaseTime.Add(time.Minute)
		bp := b
		bp.Status = ports.OpParked
		bd := bp
		bd.Status, bd.TerminalAt = ports.OpDiscarded, BaseTime.Add(2*time.Minute)
		put(t, s, []bool{true, true, true}, Move(ports.OpPending, ad), Move(ports.OpPending, bp), Move(ports.OpParked, bd))
		if n, err := s.Purge(t.Context(), BaseTime.Add(90*time.Second), 10); err != nil || n != 1 {
			t.Fatalf("Purge = %d, %v; want 1 (a)", n, err)
		}
		if _, err := s.Get(t.Context(), a.ID); !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("a is still stored: %v", err)
		}
		requireStored(t, s, stored(bd, 3))
		if n, err := s.Purge(t.Context(), BaseTime.Add(time.Hour), 10); err != nil || n != 1 {
			t.Fatalf("Purge = %d, %v; want 1 (b)", n, err)
		}
		// A purged id is absent: it may be stored again.
		insert(t, s, a)
		requireStored(t, s, stored(a, 1))
	})

	t.Run("LimitBelowOneIsInvalid", func(t *testing.T) {
		s := open(t)
		done := NewCall(BaseTime)
		done.Status, done.TerminalAt = ports.OpDelivered, BaseTime
		insert(t, s, done)
		for _, limit := range []int{0, -1} {
			if n, err := s.Purge(t.Context(), BaseTime.Add(time.Hour), limit); !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("Purge with limit %d = %d, %v; want an error wrapping ErrInvalid", limit, n, err)
			}
		}
		requireStored(t, s, stored(done, 1))
	})

	t.Run("NothingToPurge", func(t *testing.T) {
		s := open(t)
		if n, err := s.Purge(t.Context(), BaseTime, 10); err != nil || n != 0 {
			t.Fatalf("Purge of an empty store = %d, %v", n, err)
		}
	})
}

// stats returns OpStats by kind; a kind absent from the answer counts zero.
func stats(t *testing.T, s ports.OpStore) map[ports.OpKind]ports.OpKindStats {
	t.Helper()
	st, err := s.OpStats(t.Context())
	if err != nil {
		t.Fatalf("OpStats: %v", err)
	}
	out := map[ports.OpKind]ports.OpKindStats{}
	for _, k := range st.Kinds {
		if _, dup := out[k.Kind]; dup {
			t.Fatalf("OpStats lists kind %s twice", k.Kind)
		}
		if !k.OldestBufferedAt.IsZero() && k.OldestBufferedAt.Location() != time.UTC {
			t.Fatalf("OpStats: %s: OldestBufferedAt in %s, want UTC", k.Kind, k.OldestBufferedAt.Location())
		}
		out[k.Kind] = k
	}
	return out
}

func exerciseStats(t *testing.T, open func(t *testing.T) ports.OpStore) {
	t.Run("PerKind", func(t *testing.T) {
		s := open(t)
		for k, st := range stats(t, s) {
			if st.Backlog != 0 || st.Parked != 0 || st.Terminal != 0 || !st.OldestBufferedAt.IsZero() {
				t.Fatalf("an empty store counts %+v for %s", st, k)
			}
		}
		with := func(op ports.Operation, st ports.OpStatus) ports.Operation {
			op.Status = st
			if st.Terminal() {
				op.TerminalAt = op.CreatedAt
			}
			return op
		}
		oldestCall := with(NewCall(BaseTime.Add(time.Second)), ports.OpParked) // parked counts as buffered
		ops := []ports.Operation{
			with(NewCall(BaseTime), ports.OpDelivered), // older, but terminal
			oldestCall,
			with(NewCall(BaseTime.Add(2*time.Second)), ports.OpPending),
			with(NewCall(BaseTime.Add(3*time.Second)), ports.OpRetrying),
			with(NewCall(BaseTime.Add(4*time.Second)), ports.OpRetrying),
			with(NewCall(BaseTime.Add(5*time.Second)), ports.OpFailed),
			with(NewWrite(BaseTime.Add(6*time.Second)), ports.OpDiscarded),
			with(NewWrite(BaseTime.Add(7*time.Second)), ports.OpPending),
		}
		insert(t, s, ops...)
		got := stats(t, s)
		c, w := got[ports.OpCall], got[ports.OpWrite]
		if c.Backlog != 3 || c.Parked != 1 || c.Terminal != 2 || !c.OldestBufferedAt.Equal(oldestCall.CreatedAt) {
			t.Fatalf("calls: %+v; want backlog 3, parked 1, terminal 2, oldest %s", c, fmtTime(oldestCall.CreatedAt))
		}
		if w.Backlog != 1 || w.Parked != 0 || w.Terminal != 1 || !w.OldestBufferedAt.Equal(ops[7].CreatedAt) {
			t.Fatalf("writes: %+v; want backlog 1, parked 0, terminal 1, oldest %s", w, fmtTime(ops[7].CreatedAt))
		}

		// The parked call is discarded, the pending write delivered: the
		// oldest buffered call is the next one, no write is buffered.
		cd := oldestCall
		cd.Status, cd.TerminalAt = ports.OpDiscarded, BaseTime.Add(time.Hour)
		wd := ops[7]
		wd.Status, wd.TerminalAt = ports.OpDelivered, BaseTime.Add(time.Hour)
		put(t, s, []bool{true, true}, Move(ports.OpParked, cd), Move(ports.OpPending, wd))
		got = stats(t, s)
		c, w = got[ports.OpCall], got[ports.OpWrite]
		if c.Backlog != 3 || c.Parked != 0 || c.Terminal != 3 || !c.OldestBufferedAt.Equal(ops[2].CreatedAt) {
			t.Fatalf("calls after the changes: %+v; want backlog 3, parked 0, terminal 3, oldest %s", c, fmtTime(ops[2].CreatedAt))
		}
		if w.Backlog != 0 || w.Parked != 0 || w.Terminal != 2 || !w.OldestBufferedAt.IsZero() {
			t.Fatalf("writes after the changes: %+v; want backlog 0, parked 0, terminal 2, no oldest", w)
		}
	})
}
