// Package waittest is how tests wait for an outcome: they name a condition
// and a deadline, and a test that waits too long fails with what it waited
// for and the last state it saw, instead of sleeping for a time that is
// long enough on an idle machine only.
//
// Inside a testing/synctest bubble the same wait runs on the bubble's fake
// clock: polling costs no real time, and a condition that can never hold
// fails at once, at the fake deadline.
package waittest

import (
	"testing"
	"time"
)

// Poll bounds how often For checks its condition: it checks at once, then
// after 1 ms, doubling up to Poll between checks.
const Poll = 20 * time.Millisecond

// For calls cond until it reports done, and fails t with t.Fatalf when
// within passes first. The message names what the test waited for, how
// long, and the state cond reported last (cond may report "" when it has
// nothing to add). It must be called from the test's goroutine.
func For(t testing.TB, within time.Duration, what string, cond func() (done bool, state string)) {
	t.Helper()
	start := time.Now()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	every := time.Millisecond
	for checks := 1; ; checks++ {
		done, state := cond()
		if done {
			return
		}
		next := time.NewTimer(every)
		select {
		case <-deadline.C:
			next.Stop()
			if state != "" {
				state = "; last: " + state
			}
			t.Fatalf("waited %s (%d checks) for %s%s", time.Since(start).Round(time.Millisecond), checks, what, state)
		case <-next.C:
		}
		every = min(2*every, Poll)
	}
}

// Holds adapts a plain condition for For, reporting no state.
func Holds(cond func() bool) func() (bool, string) {
	return func() (bool, string) { return cond(), "" }
}
