package buffertest

import (
	"testing"

	"github.com/siteline/outbox/ports"
)

func exerciseContext(t *testing.T, open func(t *testing.T) ports.Buffer) {
	t.Run("CancelledChangesNothing", func(t *testing.T) {
		b := open(t)
		kept := NewSubmissions(BaseTime, 2)
		mustAppend(t, b, kept...)

		ctx := cancelled(t)
		if err := b.Append(ctx, NewSubmissions(BaseTime.Add(1), 3)); err == nil {
			t.Errorf("Append with a cancelled context succeeded")
		}
		if err := b.Remove(ctx, idsOf(kept)); err == nil {
			t.Errorf("Remove with a cancelled context succeeded")
		}
		requireContents(t, b, kept)
		requireCount(t, b, 2)
	})
}
