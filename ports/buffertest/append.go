package buffertest

import (
	"errors"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

func exerciseAppend(t *testing.T, open func(t *testing.T) ports.Buffer) {
	t.Run("AllFieldsRoundTrip", func(t *testing.T) {
		b := open(t)
		full := NewSubmission(BaseTime)
		// A second notification with the optional fields empty, a negative
		// priority and an enqueue time in another zone.
		bare := ports.Submission{
			ID:             NewID(),
			List:           "ops",
			Priority:       -4,
			SiteEnqueuedAt: BaseTime.Add(time.Second + 9*time.Microsecond).In(time.FixedZone("x", 5*3600)),
		}
		third := NewSubmission(BaseTime.Add(-time.Hour))
		third.Type = ""
		third.TypeData = []byte(`[1,"two",{"three":3}]`)
		third.Priority = 1 << 30
		mustAppend(t, b, full, bare)
		mustAppend(t, b, third)

		got := requireContents(t, b, []ports.Submission{full, bare, third})
		if got[0].Seq == 0 {
			t.Errorf("the first notification has Seq 0; Seq starts above 0 so that Scan(after 0) finds it")
		}
		if !(got[0].Seq < got[1].Seq && got[1].Seq < got[2].Seq) {
			t.Errorf("Seqs %d, %d, %d are not increasing in append order", got[0].Seq, got[1].Seq, got[2].Seq)
		}
		requireCount(t, b, 3)
	})

	t.Run("AlreadyBufferedIsKept", func(t *testing.T) {
		b := open(t)
		a := NewSubmission(BaseTime)
		mustAppend(t, b, a)
		before := requireContents(t, b, []ports.Submission{a})

		again := a
		again.Subject = "a different subject"
		again.SiteEnqueuedAt = BaseTime.Add(time.Hour)
		c := NewSubmission(BaseTime.Add(time.Second))
		mustAppend(t, b, again, c)

		after := requireContents(t, b, []ports.Submission{a, c})
		if after[0].Seq != before[0].Seq {
			t.Errorf("re-appending %s moved it from Seq %d to %d", a.ID, before[0].Seq, after[0].Seq)
		}
		requireCount(t, b, 2)
	})

	t.Run("DuplicateInOneAppendStoredOnce", func(t *testing.T) {
		b := open(t)
		x := NewSubmission(BaseTime)
		y := NewSubmission(BaseTime.Add(time.Second))
		x2 := x
		x2.Body = "the second copy"
		mustAppend(t, b, x, y, x2, y)
		requireContents(t, b, []ports.Submission{x, y})
		requireCount(t, b, 2)
	})

	t.Run("EmptyIDRefused", func(t *testing.T) {
		b := open(t)
		ok := NewSubmission(BaseTime)
		bad := NewSubmission(BaseTime)
		bad.ID = ""
		err := b.Append(t.Context(), []ports.Submission{ok, bad})
		if !errors.Is(err, ports.ErrInvalid) {
			t.Fatalf("Append with an empty id: err = %v, want one wrapping ErrInvalid", err)
		}
		requireContents(t, b, nil)
		requireCount(t, b, 0)
	})

	t.Run("EmptyIsNoOp", func(t *testing.T) {
		b := open(t)
		if err := b.Append(t.Context(), nil); err != nil {
			t.Fatalf("Append(nil): %v", err)
		}
		if err := b.Append(t.Context(), []ports.Submission{}); err != nil {
			t.Fatalf("Append(empty): %v", err)
		}
		requireCount(t, b, 0)
	})

	t.Run("Contains", func(t *testing.T) {
		b := open(t)
		ns := NewSubmissions(BaseTime, 3)
		mustAppend(t, b, ns...)
		unknown := NewID()
		got := contains(t, b, ns[0].ID, unknown, ns[2].ID, ns[0].ID)
		if len(got) != 2 || !got[ns[0].ID] || !got[ns[2].ID] {
			t.Fatalf("Contains(%s, unknown, %s) = %v, want exactly those two", ns[0].ID, ns[2].ID, got)
		}
		if got[unknown] {
			t.Fatalf("Contains reports an id that was never appended")
		}
		if got := contains(t, b); len(got) != 0 {
			t.Fatalf("Contains() = %v, want empty", got)
		}
		if got := contains(t, b, unknown); len(got) != 0 {
			t.Fatalf("Contains(unknown) = %v, want empty", got)
		}
	})
}
