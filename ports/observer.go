package ports

import "time"

// DeliveryObserver is told about every delivery attempt central makes, so
// that attempt counts and latencies can be exported. It is optional: the
// core works without one. adapters/metrics' DeliveryMetrics implements it.
//
// The dispatcher calls it from its delivery goroutines, many at once, in the
// middle of dispatching a batch: every method must be safe for concurrent
// use, cheap, and must never block.
type DeliveryObserver interface {
	// Attempted reports one delivery attempt the channel actually made:
	// its channel type, its outcome (Success, Transient or Permanent; a
	// channel's panic or unknown answer counts as Transient) and how long
	// the channel took, and the outcome of each target the attempt went to
	// (one per target, in order). It is called exactly when the dispatcher makes the
	// attempt's Attempted audit record, whether or not that record is
	// written afterwards (the batch's outcomes may fail to be recorded).
	//
	// It is not called for what is not an attempt: a result marked
	// NotAttempted (no room in the channel), a delivery cut short by
	// shutdown without a Success, a row released before delivery because
	// its lease was too short, and a row parked without a delivery
	// (expired, unknown list, no channel for its type).
	Attempted(channel string, outcome Outcome, d time.Duration, targets []Outcome)
}
