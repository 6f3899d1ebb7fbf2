package acceptance

import (
	"context"
	"slices"
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
	// byTarget scripts answers per target; reached counts the deliveries
	// that reached each target, and sentTo the targets of each id's
	// attempts, in order.
	byTarget map[string][]Behaviour
	reached  map[string]int
	sentTo   map[string][][]string

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
		attempts: map[string]int{}, success: map[string]int{},
		byTarget: map[string][]Behaviour{}, reached: map[string]int{}, sentTo: map[string][][]string{}}
}

// Script queues behaviours for the next deliveries of id, in order; after
// they are used up the fallback applies.
func (c *ScriptedChannel) Script(id string, b ...Behaviour) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.script[id] = append(c.script[id], b...)
}

// ScriptTarget queues behaviours for the next deliveries that go to target
// (Succeed, FailTransient or FailPermanent), in order. While a delivery
// holds a target with behaviours queued, the channel answers per target:
// such a target by its queue, the others as the delivery's own behaviour
// says.
func (c *ScriptedChannel) ScriptTarget(target string, b ...Behaviour) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byTarget[target] = append(c.byTarget[target], b...)
}

// Reached returns how many deliveries reached target.
func (c *ScriptedChannel) Reached(target string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reached[target]
}

// SentTo returns the targets of each attempt of id, in order.
func (c *ScriptedChannel) SentTo(id string) [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sentTo[id])
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
	c.sentTo[id] = append(c.sentTo[id], slices.Clone(d.Targets))
	var perTarget []Behaviour
	for _, t := range d.Targets {
		if len(c.byTarget[t]) > 0 {
			perTarget = make([]Behaviour, len(d.Targets))
			break
		}
	}
	if perTarget != nil && b != Hang {
		res := ports.Result{Outcome: ports.OutcomeSuccess, Targets: make([]ports.TargetResult, len(d.Targets))}
		all := true
		for i, t := range d.Targets {
			tb := b
			if q := c.byTarget[t]; len(q) > 0 {
				tb, c.byTarget[t] = q[0], q[1:]
			}
			res.Targets[i] = scripted(tb)
			if tb == Succeed {
				c.reached[t]++
			} else {
				all = false
			}
		}
		if all {
			c.success[id]++
		}
		c.mu.Unlock()
		if c.Attempted != nil {
			c.Attempted <- id
		}
		return res
	}
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
		for _, t := range d.Targets {
			c.reached[t]++
		}
		c.mu.Unlock()
	}
	if c.Attempted != nil {
		c.Attempted <- id
	}
	return res
}

// scripted is the answer for one target that behaves as b.
func scripted(b Behaviour) ports.TargetResult {
	switch b {
	case FailTransient:
		return ports.TargetResult{Outcome: ports.OutcomeTransient, Error: "scripted transient failure"}
	case FailPermanent:
		return ports.TargetResult{Outcome: ports.OutcomePermanent, Error: "scripted permanent failure"}
	}
	return ports.TargetResult{Outcome: ports.OutcomeSuccess}
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
