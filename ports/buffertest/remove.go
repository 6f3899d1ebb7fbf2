package buffertest

import (
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

func exerciseRemove(t *testing.T, open func(t *testing.T) ports.Buffer) {
	t.Run("RemovesOnlyThoseIDs", func(t *testing.T) {
		b := open(t)
		ns := NewSubmissions(BaseTime, 5)
		mustAppend(t, b, ns...)
		mustRemove(t, b, ns[1].ID, ns[3].ID)
		requireContents(t, b, []ports.Submission{ns[0], ns[2], ns[4]})
		requireCount(t, b, 3)
		got := contains(t, b, idsOf(ns)...)
		if len(got) != 3 || got[ns[1].ID] || got[ns[3].ID] {
			t.Fatalf("Contains after Remove = %v, want only %s, %s, %s", got, ns[0].ID, ns[2].ID, ns[4].ID)
		}
	})

	t.Run("UnknownAndRepeatedIDsIgnored", func(t *testing.T) {
		b := open(t)
		ns := NewSubmissions(BaseTime, 3)
		mustAppend(t, b, ns...)
		mustRemove(t, b, NewID(), ns[0].ID, ns[0].ID, NewID())
		requireContents(t, b, ns[1:])
		requireCount(t, b, 2)
		// Removing it again, and removing only unknown ids, changes nothing.
		mustRemove(t, b, ns[0].ID)
		mustRemove(t, b, NewID())
		requireContents(t, b, ns[1:])
		requireCount(t, b, 2)
	})

	t.Run("EmptyIsNoOp", func(t *testing.T) {
		b := open(t)
		ns := NewSubmissions(BaseTime, 2)
		mustAppend(t, b, ns...)
		if err := b.Remove(t.Context(), nil); err != nil {
			t.Fatalf("Remove(nil): %v", err)
		}
		if err := b.Remove(t.Context(), []string{}); err != nil {
			t.Fatalf("Remove(empty): %v", err)
		}
		requireContents(t, b, ns)
	})

	t.Run("RemoveAllThenAppend", func(t *testing.T) {
		b := open(t)
		ns := NewSubmissions(BaseTime, 4)
		mustAppend(t, b, ns...)
		mustRemove(t, b, idsOf(ns)...)
		requireContents(t, b, nil)
		st := requireCount(t, b, 0)
		if !st.OldestEnqueuedAt.IsZero() {
			t.Fatalf("Stats.OldestEnqueuedAt of an emptied buffer = %s, want zero", fmtTime(st.OldestEnqueuedAt))
		}
		// A removed id may be appended again: it is a new notification then.
		back := ns[2]
		back.Subject = "appended again"
		mustAppend(t, b, back)
		requireContents(t, b, []ports.Submission{back})
	})

	t.Run("SeqNeverReused", func(t *testing.T) {
		b := open(t)
		ns := NewSubmissions(BaseTime, 3)
		mustAppend(t, b, ns...)
		before := requireContents(t, b, ns)
		// Remove the highest Seq: a buffer that numbers from the last key
		// still held would hand the same Seq out again.
		mustRemove(t, b, ns[2].ID)
		d := NewSubmission(BaseTime.Add(time.Minute))
		mustAppend(t, b, d)
		after := requireContents(t, b, []ports.Submission{ns[0], ns[1], d})
		if after[2].Seq <= before[2].Seq {
			t.Fatalf("a notification appended after removing Seq %d got Seq %d: Seq was reused",
				before[2].Seq, after[2].Seq)
		}
		// Emptying the buffer does not reset the numbering either.
		mustRemove(t, b, ns[0].ID, ns[1].ID, d.ID)
		e := NewSubmission(BaseTime.Add(2 * time.Minute))
		mustAppend(t, b, e)
		last := requireContents(t, b, []ports.Submission{e})
		if last[0].Seq <= after[2].Seq {
			t.Fatalf("a notification appended to an emptied buffer got Seq %d, not above the last one (%d)",
				last[0].Seq, after[2].Seq)
		}
	})
}
