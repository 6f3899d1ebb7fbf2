package acceptance

import (
	"context"
	"sync"
	"time"

	"github.com/siteline/outbox/ports"
)

// Behaviour is what the scripted channel does with one delivery.
type Behaviour int

const (
	// Succeed delivers to the request's targets.
	Succeed Behaviour = iota
	// FailTransient fails with a transient error.
	FailTransient
	// FailPermanent fails with a permanent error.
	FailPermanent
	// Hang blocks until the delivery's context ends, then fails transiently.
	Hang
)

// ScriptedChannel is an in-process ports.Channel whose answers a test
// scripts per notification id, falling back to a default behaviour. It counts
// every delivery per id and reports each on Delivered.
type ScriptedChannel struct {
	mu       sync.Mutex
	fallback Behaviour
	script   map[string][]Behaviour
	attempts map[string]int
	success  map[string]int

	// Attempted receives the id of every finished attempt when non-nil
	// (the channel must be drained by the test).
	Attempted chan string
	// Hanging receives the id of every delivery that starts hanging when
	// non-nil.
	Hanging chan string
}

var _ ports.Channel = (*ScriptedChannel)(nil)

// NewScriptedChannel returns a channel that does fallback unless scripted.
func NewScriptedChannel(fallback Behaviour) *ScriptedChannel {
	return &ScriptedChannel{fallback: fallback, script: map[string][]Behaviour{},
		attempts: map[string]int{}, success: map[string]int{}}
}

// Script queues behaviours for the next deliveries of id, in order; after
// they are used up the fallback applies.
func (c *ScriptedChannel) Script(id string, b ...Behaviour) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.script[id] = append(c.script[id], b...)
}

// Attempts returns how many deliveries of id were attempted.
func (c *ScriptedChannel) Attempts(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attempts[id]
}

// Successes returns a copy of the count of successful deliveries per id.
func (c *ScriptedChannel) Successes() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.success))
	for id, n := range c.success {
		out[id] = n
	}
	return out
}

// Deliver implements ports.Channel.
func (c *ScriptedChannel) Deliver(ctx context.Context, d ports.Delivery) ports.Result {
	id := d.Notification.ID
	c.mu.Lock()
	b := c.fallback
	if q := c.script[id]; len(q) > 0 {
		b, c.script[id] = q[0], q[1:]
	}
	c.attempts[id]++
	c.mu.Unlock()

	var res ports.Result
	switch b {
	case Succeed:
		res = ports.Result{Outcome: ports.OutcomeSuccess}
	case FailTransient:
		res = ports.Result{Outcome: ports.OutcomeTransient, Error: "scripted transient failure"}
	case FailPermanent:
		res = ports.Result{Outcome: ports.OutcomePermanent, Error: "scripted permanent failure"}
	case Hang:
		if c.Hanging != nil {
			c.Hanging <- id
		}
		<-ctx.Done()
		res = ports.Result{Outcome: ports.OutcomeTransient, Error: "timed out: " + ctx.Err().Error()}
	}
	if res.Outcome == ports.OutcomeSuccess {
		c.mu.Lock()
		c.success[id]++
		c.mu.Unlock()
	}
	if c.Attempted != nil {
		c.Attempted <- id
	}
	return res
}

// Clock is a manual ports.Clock for tests that move time.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock stopped at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start.UTC().Truncate(time.Microsecond)} }

// Now implements ports.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
