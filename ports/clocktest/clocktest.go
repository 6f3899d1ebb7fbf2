// Package clocktest holds a ports.Clock that tests move by hand, so that
// what waits on time (throttles, caches, leases) is tested without sleeping.
package clocktest

import (
	"sync"
	"time"

	"github.com/siteline/outbox/ports"
)

// Manual is a clock that stands still until the test moves it. It is safe
// for concurrent use.
type Manual struct {
	mu sync.Mutex
	t  time.Time
}

var _ ports.Clock = (*Manual)(nil)

// New returns a clock that reads t.
func New(t time.Time) *Manual { return &Manual{t: t} }

// Now implements ports.Clock.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Manual) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
