package waittest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the goroutine, as the real one does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls For in a goroutine of its own, so that Fatalf can end it.
func run(within time.Duration, what string, cond func() (bool, string)) string {
	r := &fatalRecorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		For(r, within, what, cond)
	}()
	<-done
	return r.msg
}

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ready := start.Add(300 * time.Millisecond)
		checks := 0
		msg := run(time.Second, "ready", func() (bool, string) {
			checks++
			return !time.Now().Before(ready), ""
		})
		if msg != "" {
			t.Fatalf("For failed: %s", msg)
		}
		if took := time.Since(start); took < 300*time.Millisecond || took > 300*time.Millisecond+Poll {
			t.Errorf("For returned after %s; the condition held from 300 ms, checked every %s at most", took, Poll)
		}
		if checks > 30 {
			t.Errorf("%d checks in 300 ms", checks)
		}
	})
}

func TestForFailsAtTheDeadlineSayingWhatAndTheLastState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		n := 0
		msg := run(2*time.Second, "the queue to empty", func() (bool, string) {
			n++
			return false, fmt.Sprintf("%d queued", 100-n)
		})
		if took := time.Since(start); took != 2*time.Second {
			t.Errorf("For failed after %s, want the 2 s it was given", took)
		}
		want := fmt.Sprintf("waited 2s (%d checks) for the queue to empty; last: %d queued", n, 100-n)
		if msg != want {
			t.Errorf("message %q, want %q", msg, want)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		msg := run(time.Second, "a flag", Holds(func() bool { return false }))
		if !strings.HasPrefix(msg, "waited 1s (") || !strings.HasSuffix(msg, "checks) for a flag") {
			t.Errorf("message %q", msg)
		}
	})
}
