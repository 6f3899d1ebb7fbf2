package kept

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestKeepsTheNewestAndWakesWait: beyond the limit the oldest go; Wait
// returns once an Add from another goroutine reaches the count, and with
// the context's error when it ends first.
func TestKeepsTheNewestAndWakesWait(t *testing.T) {
	l := New[int](2)
	for i := range 3 {
		l.Add(i)
	}
	if got := l.All(); !slices.Equal(got, []int{1, 2}) || l.Len() != 2 {
		t.Fatalf("All = %v, want [1 2]", got)
	}
	l = New[int](10)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := l.Wait(ctx, 2)
		done <- err
	}()
	l.Add(1)
	l.Add(2)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got, err := l.Wait(ctx, 3); got != 2 || !errors.Is(err, context.Canceled) {
		t.Errorf("Wait past the count on an ended context = %d, %v", got, err)
	}
}
