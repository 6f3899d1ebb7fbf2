package opstoretest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

func exerciseUnavailable(t *testing.T, h Harness) {
	t.Run("WritesRefusedReadsAnswer", func(t *testing.T) {
		s := h.Open(t)
		op := NewCall(BaseTime)
		done := NewWrite(BaseTime)
		done.Status, done.TerminalAt = ports.OpDelivered, BaseTime
		insert(t, s, op, done)

		r := h.Refusing(t, s)
		next := op
		next.Status = ports.OpRetrying
		newcomer := NewCall(BaseTime.Add(time.Second))
		applied, err := r.Put(t.Context(), []ports.OpChange{Move(ports.OpPending, next), Insert(newcomer)})
		if !errors.Is(err, ports.ErrUnavailable) {
			t.Fatalf("Put where writes are refused = %v, %v; want an error wrapping ErrUnavailable", applied, err)
		}
		n, err := r.Purge(t.Context(), BaseTime.Add(time.Hour), 10)
		if !errors.Is(err, ports.ErrUnavailable) {
			t.Fatalf("Purge where writes are refused = %d, %v; want an error wrapping ErrUnavailable", n, err)
		}

		// Reads answer from the refusing copy, unchanged.
		for _, store := range []ports.OpStore{r, s} {
			requireStored(t, store, stored(op, 1))
			requireStored(t, store, stored(done, 1))
			if _, err := store.Get(t.Context(), newcomer.ID); !errors.Is(err, ports.ErrNotFound) {
				t.Fatalf("a refused insert was stored: %v", err)
			}
			if got := due(t, store, BaseTime.Add(time.Hour), 10); !slices.Equal(got, []string{op.ID}) {
				t.Fatalf("Due = %v, want [%s]", got, op.ID)
			}
			if got := listAll(t, store, ports.OpFilter{}, 1); !slices.Equal(got, newestFirst([]ports.Operation{op, done})) {
				t.Fatalf("List = %v", got)
			}
			if c := stats(t, store)[ports.OpCall]; c.Backlog != 1 {
				t.Fatalf("OpStats calls = %+v, want backlog 1", c)
			}
		}
	})
}
