package core

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/siteline/outbox/ports"
)

// Redeliver is the redelivery loop of cached operations: it takes the
// operations due (Pending or Retrying, NextAttemptAt passed), OpBatch at a
// time, attempts up to OpConcurrency of them at once, and commits each
// outcome on condition that the row is still as it read it:
//
//   - Success: Delivered, its message dropped;
//   - Transient: one more retry counted; Retrying, due again after the
//     target's fixed interval (or the longer wait the target asked for),
//     or Parked once the count reaches the target's MaxRetries;
//   - Permanent: Failed, its message dropped.
//
// An operation whose target the configuration no longer defines parks
// without an attempt, for an operator to discard (or retry once the
// definition is back). A change that does not apply (an operator acted on
// the row meanwhile) is left alone. A commit that fails is tried again
// through a blip for up to RetryInterval; failing still, the row stays as
// it was, due, and is attempted again after RetryInterval.
//
// Between batches it sleeps until the earliest NextAttemptAt of the
// buffered operations, a wake-up (a call buffered, an operator's Retry) or
// a minute at most. A store that cannot be read is logged and read again
// after RetryInterval.
//
// It runs until ctx is done; the wiring runs it on the Raft leader only,
// for as long as the node leads, and a new leader starts over from its
// replicated copy. An attempt cut short by ctx is no failure: its row is
// left as it was, due, for the next leader (the target may have done the
// work: the repeat is the at-least-once delivery the site promises).
func (s *Site) Redeliver(ctx context.Context) {
	if s.ops == nil {
		<-ctx.Done()
		return
	}
	s.log.Info("redelivery of cached operations started", "site", s.cfg.Site,
		"concurrency", s.cfg.OpConcurrency, "batch", s.cfg.OpBatch)
	defer s.log.Info("redelivery of cached operations stopped", "site", s.cfg.Site)
	for ctx.Err() == nil {
		due, err := s.ops.Due(ctx, s.clock.Now().UTC(), s.cfg.OpBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("redelivery: read the due operations", "err", err)
				s.opWait(ctx, s.cfg.RetryInterval)
			}
			continue
		}
		if len(due) == 0 {
			s.opWait(ctx, s.nextDue(ctx))
			continue
		}
		if !s.redeliverBatch(ctx, due) && ctx.Err() == nil {
			s.opWait(ctx, s.cfg.RetryInterval)
		}
	}
}

// nextDue is how long the loop may sleep: until the earliest NextAttemptAt
// of the buffered operations, at most opPollCap.
func (s *Site) nextDue(ctx context.Context) time.Duration {
	next, err := s.ops.Due(ctx, farFuture, 1)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error("redelivery: read the next due operation", "err", err)
		}
		return s.cfg.RetryInterval
	}
	if len(next) == 0 {
		return opPollCap
	}
	return min(max(next[0].NextAttemptAt.Sub(s.clock.Now()), 0), opPollCap)
}

// opWait waits d, a wake-up, or the end of ctx.
func (s *Site) opWait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-s.opWake:
	}
}

// redeliverBatch attempts the operations of one batch, OpConcurrency at a
// time, and reports whether every outcome it meant to commit was committed.
func (s *Site) redeliverBatch(ctx context.Context, due []ports.Operation) bool {
	sem := make(chan struct{}, s.cfg.OpConcurrency)
	var (
		wg     sync.WaitGroup
		failed atomic.Bool
	)
	for _, op := range due {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if !s.redeliverOne(ctx, op) {
				failed.Store(true)
			}
		})
	}
	wg.Wait()
	return !failed.Load()
}

// redeliverOne attempts one buffered operation and commits its outcome. It
// reports false when the commit failed.
func (s *Site) redeliverOne(ctx context.Context, op ports.Operation) bool {
	next := op
	pol, err := s.gateway.Policy(op.Kind, op.Target)
	var res ports.OpResult
	if err != nil {
		res = ports.OpResult{Outcome: ports.OutcomeTransient, Error: "not attempted: " + err.Error()}
		pol.MaxRetries = 0 // park it: retrying cannot help until the definition is back
	} else {
		res = s.gateway.Attempt(ctx, op)
		if ctx.Err() != nil && res.Outcome != ports.OutcomeSuccess {
			return true // cut short: not a failure; the row stays due
		}
	}
	now := s.clock.Now().UTC()
	next.UpdatedAt = now
	switch res.Outcome {
	case ports.OutcomeSuccess:
		next.Status, next.TerminalAt, next.NextAttemptAt = ports.OpDelivered, now, time.Time{}
		next.Payload = ports.OpPayload{}
	case ports.OutcomePermanent:
		next.Status, next.TerminalAt, next.NextAttemptAt = ports.OpFailed, now, time.Time{}
		next.LastError, next.Payload = failure(res), ports.OpPayload{}
	default:
		next.LastError = failure(res)
		if err == nil {
			next.RetryCount++
		}
		if next.RetryCount >= pol.MaxRetries {
			next.Status, next.NextAttemptAt = ports.OpParked, time.Time{}
		} else {
			next.Status, next.NextAttemptAt = ports.OpRetrying, now.Add(s.retryWait(pol, res))
		}
	}
	cctx := ctx
	if ctx.Err() != nil {
		// Delivered as the loop was stopping: record it if the node still
		// can, so that it is not attempted again.
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), blipMaxWait)
		defer cancel()
	}
	var applied []bool
	_, err = retryBlip(cctx, s.log, time.Now().Add(s.cfg.RetryInterval),
		"redelivery: commit an outcome", "the operation stays due and is attempted again",
		func(ctx context.Context) error {
			var err error
			applied, err = s.ops.Put(ctx, []ports.OpChange{{From: op.Status, Op: next}})
			return err
		}, "id", op.ID, "outcome", res.Outcome)
	if err != nil {
		return false
	}
	if applied[0] {
		next.Version = op.Version + 1
		s.emit(next)
	}
	attrs := []any{"id", op.ID, "kind", op.Kind, "target", op.Summary(), "retries", next.RetryCount}
	switch {
	case !applied[0]:
		s.log.Info("redelivery: the operation changed meanwhile; its outcome is not recorded", attrs...)
	case next.Status == ports.OpParked:
		s.log.Warn("redelivery: operation parked; an operator may retry or discard it",
			append(attrs, "max_retries", pol.MaxRetries, "last_error", next.LastError)...)
	case next.Status == ports.OpFailed:
		s.log.Warn("redelivery: the target refused the operation for good", append(attrs, "last_error", next.LastError)...)
	}
	return true
}

// PurgeOperations is the purge loop of the tracking table: at start and
// then every OpPurgeInterval, it removes the terminal operations (Delivered,
// Failed, Discarded) that became terminal more than OpRetention ago,
// OpBatch at a time. Buffered operations are never purged. It runs until
// ctx is done; the wiring runs it on the Raft leader only, as Redeliver.
func (s *Site) PurgeOperations(ctx context.Context) {
	if s.ops == nil {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(s.cfg.OpPurgeInterval)
	defer t.Stop()
	for {
		s.purgeOps(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// purgeOps makes one purge, logging what it did.
func (s *Site) purgeOps(ctx context.Context) {
	cutoff := s.clock.Now().UTC().Add(-s.cfg.OpRetention)
	total := 0
	for {
		n, err := s.ops.Purge(ctx, cutoff, s.cfg.OpBatch)
		total += n
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("purge of terminal operations failed; trying again at the next purge",
					"purged", total, "err", err)
			}
			return
		}
		if n < s.cfg.OpBatch {
			break
		}
	}
	if total > 0 {
		s.log.Info("purged terminal operations", "rows", total, "retention", s.cfg.OpRetention.String())
	}
}
