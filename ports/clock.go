package ports

import "time"

// Clock tells the time. The core reads every timestamp it writes from a Clock
// so tests can move time (expiry, retry schedules, retention).
type Clock interface {
	// Now returns the current time in UTC.
	Now() time.Time
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now implements Clock.
func (SystemClock) Now() time.Time { return time.Now().UTC() }
