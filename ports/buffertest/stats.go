package buffertest

import (
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

func exerciseStats(t *testing.T, open func(t *testing.T) ports.Buffer) {
	t.Run("CountAndOldest", func(t *testing.T) {
		b := open(t)
		st := requireCount(t, b, 0)
		if !st.OldestEnqueuedAt.IsZero() {
			t.Fatalf("Stats.OldestEnqueuedAt of an empty buffer = %s, want zero", fmtTime(st.OldestEnqueuedAt))
		}

		// The oldest is the lowest Seq's enqueue time, not the earliest
		// enqueue time: first is appended first but enqueued later.
		first := NewSubmission(BaseTime.Add(2 * time.Second))
		second := NewSubmission(BaseTime.Add(time.Second))
		third := NewSubmission(BaseTime.Add(3 * time.Second))
		mustAppend(t, b, first, second)
		mustAppend(t, b, third)
		st = requireCount(t, b, 3)
		if !sameTime(st.OldestEnqueuedAt, first.SiteEnqueuedAt) {
			t.Fatalf("Stats.OldestEnqueuedAt = %s, want %s (the lowest Seq's)",
				fmtTime(st.OldestEnqueuedAt), fmtTime(first.SiteEnqueuedAt))
		}

		mustRemove(t, b, first.ID)
		st = requireCount(t, b, 2)
		if !sameTime(st.OldestEnqueuedAt, second.SiteEnqueuedAt) {
			t.Fatalf("after removing the lowest Seq, Stats.OldestEnqueuedAt = %s, want %s",
				fmtTime(st.OldestEnqueuedAt), fmtTime(second.SiteEnqueuedAt))
		}

		mustRemove(t, b, third.ID)
		st = requireCount(t, b, 1)
		if !sameTime(st.OldestEnqueuedAt, second.SiteEnqueuedAt) {
			t.Fatalf("after removing the highest Seq, Stats.OldestEnqueuedAt = %s, want %s",
				fmtTime(st.OldestEnqueuedAt), fmtTime(second.SiteEnqueuedAt))
		}

		mustRemove(t, b, second.ID)
		st = requireCount(t, b, 0)
		if !st.OldestEnqueuedAt.IsZero() {
			t.Fatalf("Stats.OldestEnqueuedAt of an emptied buffer = %s, want zero", fmtTime(st.OldestEnqueuedAt))
		}
	})

	t.Run("ReplicaIsLeader", func(t *testing.T) {
		b := open(t)
		st, err := b.Stats(t.Context())
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		r := st.Replica
		if r.Role != ports.RoleLeader {
			t.Errorf("Replica.Role of the writable buffer = %q, want %q", r.Role, ports.RoleLeader)
		}
		if r.Node == "" {
			t.Errorf("Replica.Node is empty")
		}
		if r.Leader != r.Node {
			t.Errorf("Replica.Leader = %q, want the node itself (%q)", r.Leader, r.Node)
		}
		if r.Term == 0 {
			t.Errorf("Replica.Term is 0; a leader is elected in a term of at least 1")
		}
	})
}
