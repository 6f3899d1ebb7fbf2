package core

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/siteline/outbox/ports"
)

// Forward is the forwarder: it sends the buffer's notifications to
// central in batches, oldest first, and removes a batch from the buffer only
// after central acknowledged it. It runs until ctx is done. The wiring runs
// it on the Raft leader only, for as long as the node leads; a new leader
// starts over from its replicated copy of the buffer.
//
// While central cannot be reached it retries the same batch every
// RetryInterval, forever: notifications never park at a site. Central
// de-duplicates on the id, so a batch sent twice (the leader died between
// central's acknowledgement and the removal) is stored once.
//
// The removal of what central acknowledged does not hold up the next
// batch, and costs the buffer few commits (on Raft, log entries that
// share the disk with the Sends'): acknowledged ids gather until there are
// ForwardBatch of them or the oldest has waited removeLinger, then go in
// one Remove, which runs while the next batches go to central (see
// removals). Before it pauses, and before it starts a new pass from the
// oldest, the forwarder waits for its removals, so that the backlog counts
// what central holds for removeLinger and a commit at most.
//
// A batch central refuses as a whole (more than it takes at once) is sent
// again in halves, down to single notifications.
//
// A batch central refuses for now (a *ports.RetryLaterError: the site is
// over its ingest quota at central) is sent again after the wait central
// asks for; it is not a failure and is logged at most once a minute.
//
// A notification central rejects as invalid (a limit lower at central than
// at the site, a site id central does not accept) stays buffered, is logged,
// and is offered again every RetryInterval; the forwarder moves past it so
// that it never holds up the notifications behind it.
func (s *Site) Forward(ctx context.Context) {
	s.log.Info("forwarder started", "site", s.cfg.Site, "batch", s.cfg.ForwardBatch,
		"retry_interval", s.cfg.RetryInterval.String())
	defer s.log.Info("forwarder stopped", "site", s.cfg.Site)
	rm := &removals{s: s, batch: s.cfg.ForwardBatch, limit: removalsLimit * s.cfg.ForwardBatch}
	defer rm.wg.Wait()
	var (
		after    uint64 // Scan from just after this Seq
		rejected bool   // this pass left rejected notifications behind
		limit    = s.cfg.ForwardBatch
		// throttled counts central's requests to slow down since the last
		// line about them, written at throttleLogged.
		throttled      int
		throttleLogged time.Time
	)
	for ctx.Err() == nil {
		batch, err := s.buffer.Scan(ctx, after, limit)
		if err != nil {
			if ctx.Err() != nil {
				return // stopping: a read cut short is no failure
			}
			s.log.Error("forwarder: read the buffer", "err", err)
			rm.flush(ctx)
			s.pause(ctx, false)
			continue
		}
		batch = s.capBytes(batch)
		if len(batch) == 0 && rm.waiting() {
			// Nothing new: let the acknowledged ids gather until a Send
			// comes or the oldest is due, without starting a new pass.
			if !rm.linger(ctx) {
				after = 0 // send again what could not be removed
			}
			continue
		}
		if len(batch) == 0 {
			if after == 0 {
				s.pause(ctx, true) // idle: until a Send wakes us
				continue
			}
			after = 0 // end of a pass: start the next from the oldest
			if rejected {
				rejected = false
				s.pause(ctx, false)
			}
			continue
		}
		res, err := s.submit(ctx, batch)
		if errors.Is(err, ports.ErrInvalid) && len(batch) > 1 {
			// Central refused the batch as a whole: more rows or bytes than
			// it takes. Halve the batch until it fits.
			limit = max(1, len(batch)/2)
			s.log.Warn("forwarder: central refused a batch as a whole; sending smaller batches",
				"notifications", len(batch), "now", limit, "err", err)
			continue
		}
		if after, ok := ports.RetryAfter(err); ok && ctx.Err() == nil {
			// Central refused the batch for now, storing nothing (the
			// site is over its ingest quota): wait as long as it asks and
			// send the same batch again. Not a failure: logged at most
			// once a minute, with the count.
			throttled++
			if now := s.clock.Now(); now.Sub(throttleLogged) >= time.Minute {
				s.log.Info("forwarder: central asks this site to slow down; waiting as it says",
					"refusals", throttled, "wait", throttleWait(after, s.cfg.RetryInterval).String(), "reason", err)
				throttleLogged, throttled = now, 0
			}
			rm.flush(ctx)
			s.sleep(ctx, throttleWait(after, s.cfg.RetryInterval))
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("forwarder: central did not acknowledge; retrying after the interval",
					"notifications", len(batch), "retry_interval", s.cfg.RetryInterval.String(), "err", err)
				rm.flush(ctx)
				s.pause(ctx, false)
			}
			continue
		}
		if len(res.Accepted) > 0 && !rm.add(ctx, res.Accepted) {
			// A removal failed (typically leadership lost): send again
			// from the oldest what is still buffered; central stores it
			// once.
			after = 0
			continue
		}
		for _, r := range res.Rejected {
			rejected = true
			s.log.Error("central rejected a notification; it stays buffered and is offered again",
				"id", r.ID, "reason", r.Reason, "retry_interval", s.cfg.RetryInterval.String())
		}
		after = batch[len(batch)-1].Seq
	}
}

// removeAcked removes the notifications central acknowledged from the
// buffer, trying again through a blip (a Raft commit that timed out) for up
// to RetryInterval, the wait the forwarder would take before sending them
// again anyway. It reports whether they were removed. When they were not
// (typically leadership lost), they are sent again, by this node or the
// next leader, and central stores them once: retrying only spares that
// second round trip.
func (s *Site) removeAcked(ctx context.Context, ids []string) bool {
	tries, err := retryBlip(ctx, s.log, time.Now().Add(s.cfg.RetryInterval),
		"forwarder: remove acknowledged notifications from the buffer",
		"they are sent again and central stores them once", func(ctx context.Context) error {
			return s.buffer.Remove(ctx, ids)
		}, "notifications", len(ids))
	if err == nil {
		return true
	}
	if tries == 1 && ctx.Err() == nil {
		// Failed at once, with no time spent retrying: wait, so that
		// sending the batch again does not spin.
		if unfixable(err) { // retryBlip said nothing
			s.log.Warn("forwarder: remove acknowledged notifications from the buffer", "notifications",
				len(ids), "err", err)
		}
		s.pause(ctx, false)
	}
	return false
}

// removeLinger is the longest an acknowledged id waits for its Remove
// while the forwarder has fewer than ForwardBatch of them: short against
// the backlog's reading (Health, the reports to central), long against the
// time between the acknowledgements of a trickle of Sends, which then share
// one Remove rather than take a commit each.
const removeLinger = 50 * time.Millisecond

// removalsLimit × ForwardBatch is the most acknowledged ids the forwarder
// holds while a Remove is under way; past it, it waits for that Remove
// before it sends more.
const removalsLimit = 4

// removals runs the forwarder's removals beside its sending: one Remove at
// a time, of the ids acknowledged since the last one started, once there
// are batch of them or the oldest has waited removeLinger. It is the
// forwarder's own (not safe for concurrent use); the forwarder waits for its
// goroutine (wg) before it returns.
type removals struct {
	s     *Site
	batch int
	limit int
	wg    sync.WaitGroup
	// pending are acknowledged ids no Remove has taken yet, the first of
	// them acknowledged at since.
	pending []string
	since   time.Time
	// running receives the outcome of the Remove under way (removeAcked's);
	// nil when none is.
	running chan bool
}

// add takes ids central acknowledged. A Remove of every pending id starts
// when none is under way and there are batch of them or the oldest is
// due; add waits for the Remove under way only when limit ids are pending.
// It returns false when a Remove failed (then every pending id is dropped:
// the caller sends them again).
func (r *removals) add(ctx context.Context, ids []string) bool {
	if len(r.pending) == 0 {
		r.since = time.Now()
	}
	r.pending = append(r.pending, ids...)
	if r.running != nil {
		if len(r.pending) < r.limit {
			select {
			case ok := <-r.running:
				r.running = nil
				if !ok {
					r.pending = nil
					return false
				}
			default:
				return true // with the next
			}
		} else if !r.wait() {
			return false
		}
	}
	if len(r.pending) >= r.batch || time.Since(r.since) >= removeLinger {
		r.start(ctx)
	}
	return true
}

// waiting reports whether acknowledged ids are not yet removed.
func (r *removals) waiting() bool { return r.running != nil || len(r.pending) > 0 }

// linger waits, while the forwarder has nothing to send, until a Send
// wakes it (then a moment more, as pause does) or the oldest pending id is
// due (then it removes every acknowledged id). It reports false when a
// Remove failed.
func (r *removals) linger(ctx context.Context) bool {
	if len(r.pending) == 0 {
		return r.wait() // what is acknowledged is being removed
	}
	due := time.Until(r.since.Add(removeLinger))
	if due <= 0 {
		return r.flush(ctx)
	}
	t := time.NewTimer(due)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return true
	case <-t.C:
		return r.flush(ctx)
	case <-r.s.wake:
		r.s.sleep(ctx, forwardLinger)
		return true
	}
}

// flush removes every acknowledged id before it returns, and reports
// whether all were removed.
func (r *removals) flush(ctx context.Context) bool {
	if !r.wait() {
		return false
	}
	if len(r.pending) == 0 {
		return true
	}
	r.start(ctx)
	return r.wait()
}

// start starts a Remove of the pending ids; none is under way.
func (r *removals) start(ctx context.Context) {
	ids := r.pending
	r.pending = nil
	done := make(chan bool, 1)
	r.running = done
	r.wg.Go(func() { done <- r.s.removeAcked(ctx, ids) })
}

// wait waits for the Remove under way, if any, and reports whether it
// succeeded; when it failed the pending ids are dropped too.
func (r *removals) wait() bool {
	if r.running == nil {
		return true
	}
	ok := <-r.running
	r.running = nil
	if !ok {
		r.pending = nil
	}
	return ok
}

// submit sends one batch to central within CallTimeout.
func (s *Site) submit(ctx context.Context, batch []ports.Buffered) (ports.SubmitResult, error) {
	subs := make([]ports.Submission, len(batch))
	for i, b := range batch {
		subs[i] = b.Submission
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	res, err := s.central.Submit(cctx, ports.SubmitRequest{Notifications: subs})
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return res, err // we are stopping; not central's fault
	}
	s.contact(err)
	return res, err
}

// capBytes shortens batch so that its subjects and bodies stay within
// ForwardBatchBytes; the first notification always goes, whatever its size.
func (s *Site) capBytes(batch []ports.Buffered) []ports.Buffered {
	size := 0
	for i, b := range batch {
		size += len(b.Subject) + len(b.Body) + len(b.TypeData)
		if i > 0 && size > s.cfg.ForwardBatchBytes {
			return batch[:i]
		}
	}
	return batch
}

// throttleWait is how long the forwarder waits when central asks it to slow
// down: as long as central says, from 10 ms to a minute, or the retry
// interval when it did not say.
func throttleWait(asked, interval time.Duration) time.Duration {
	if asked <= 0 {
		return interval
	}
	return min(max(asked, 10*time.Millisecond), time.Minute)
}

// sleep waits d, or until ctx is done.
func (s *Site) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// pause waits RetryInterval, or until ctx is done. When wakeable, a Send
// ends the wait early.
func (s *Site) pause(ctx context.Context, wakeable bool) {
	t := time.NewTimer(s.cfg.RetryInterval)
	defer t.Stop()
	var wake <-chan struct{}
	if wakeable {
		wake = s.wake
	}
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-wake:
		// Linger a moment, so that a burst of Sends goes in one Submit and
		// one Remove rather than one each.
		l := time.NewTimer(forwardLinger)
		defer l.Stop()
		select {
		case <-ctx.Done():
		case <-l.C:
		}
	}
}

// forwardLinger is how long an idle forwarder woken by a Send waits for
// more before it reads the buffer: small against central's delivery
// latency, large against the time between Sends of a burst.
const forwardLinger = 5 * time.Millisecond
