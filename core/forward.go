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
// ForwardBatch of them or the oldest has waited removeLinger (a timer, not
// held up by a Submit that hangs), then go in one Remove, which runs while
// the next batches go to central (see removals). So the backlog counts
// what central holds for removeLinger, or the Remove under way, and a
// commit. Before it pauses, and before it starts a new pass from the
// oldest, the forwarder waits for its removals; when one failed, it starts
// the next pass from the oldest (what could not be removed is sent again,
// and central stores it once).
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
	rm := newRemovals(ctx, s)
	defer rm.close()
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
			if !rm.flush() {
				after = 0 // send again what could not be removed
			}
			s.pause(ctx, false)
			continue
		}
		batch = s.capBytes(batch)
		if len(batch) == 0 && rm.waiting() {
			// Nothing new: let the acknowledged ids be removed (when there
			// are few, removeLinger after the oldest) or a Send come,
			// without starting a new pass, which would send them again.
			if !rm.linger() {
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
		if asked, ok := ports.RetryAfter(err); ok && ctx.Err() == nil {
			// Central refused the batch for now, storing nothing (the
			// site is over its ingest quota): wait as long as it asks and
			// send the same batch again. Not a failure: logged at most
			// once a minute, with the count.
			throttled++
			if now := s.clock.Now(); now.Sub(throttleLogged) >= time.Minute {
				s.log.Info("forwarder: central asks this site to slow down; waiting as it says",
					"refusals", throttled, "wait", throttleWait(asked, s.cfg.RetryInterval).String(), "reason", err)
				throttleLogged, throttled = now, 0
			}
			if !rm.flush() {
				after = 0 // send again what could not be removed
			}
			s.sleep(ctx, throttleWait(asked, s.cfg.RetryInterval))
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("forwarder: central did not acknowledge; retrying after the interval",
					"notifications", len(batch), "retry_interval", s.cfg.RetryInterval.String(), "err", err)
				if !rm.flush() {
					after = 0 // send again what could not be removed
				}
				s.pause(ctx, false)
			}
			continue
		}
		if len(res.Accepted) > 0 && !rm.add(res.Accepted) {
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
// while the forwarder has fewer than ForwardBatch of them (and no Remove is
// under way): short against the backlog's reading (Health, the reports to
// central), long against the time between the acknowledgements of a
// trickle of Sends, which then share one Remove rather than take a commit
// each.
const removeLinger = 50 * time.Millisecond

// removalsLimit × ForwardBatch acknowledged ids not yet removed (under way
// and waiting) make the forwarder wait for the Remove under way before it
// sends more. So a new leader sends again, after a failover, fewer than
// (removalsLimit+1) × ForwardBatch notifications central already has.
const removalsLimit = 4

// removals runs the forwarder's removals beside its sending: one Remove at
// a time, of the ids acknowledged since the last one started, once there
// are batch of them or the oldest has waited removeLinger: a timer of its
// own, so that a Submit that hangs holds no removal up. Its goroutines (a
// Remove, the timer's) end before close returns.
type removals struct {
	s     *Site
	ctx   context.Context
	batch int
	limit int
	wg    sync.WaitGroup

	mu sync.Mutex
	// pending are acknowledged ids no Remove has taken yet, the first of
	// them acknowledged at since; timer starts their Remove at
	// since+removeLinger.
	pending []string
	since   time.Time
	timer   *time.Timer
	// running is how many ids the Remove under way holds (0: none).
	running int
	// failed reports a Remove that failed since the forwarder last asked
	// (then the pending ids were dropped: the forwarder sends them again).
	failed bool
	closed bool
	// ended is closed, and replaced, when a Remove ends.
	ended chan struct{}
}

func newRemovals(ctx context.Context, s *Site) *removals {
	return &removals{s: s, ctx: ctx, batch: s.cfg.ForwardBatch, limit: removalsLimit * s.cfg.ForwardBatch,
		ended: make(chan struct{})}
}

// add takes ids central acknowledged. A Remove of every pending id starts
// when none is under way and there are batch of them; otherwise the oldest
// waits at most removeLinger (the timer). add waits for the Remove under
// way when limit ids are not yet removed. It returns false when a Remove
// failed (then every pending id is dropped: the caller sends them again).
func (r *removals) add(ids []string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed {
		r.failedSeen()
		return false
	}
	if len(r.pending) == 0 {
		r.since = time.Now()
		r.timer = time.AfterFunc(removeLinger, r.due)
	}
	r.pending = append(r.pending, ids...)
	for r.running > 0 && r.running+len(r.pending) >= r.limit {
		r.awaitEnd()
		if r.ctx.Err() != nil {
			return true // stopping
		}
		if r.failed {
			r.failedSeen()
			return false
		}
	}
	if r.running == 0 && len(r.pending) >= r.batch {
		r.start()
	}
	return true
}

// due is the timer's: the oldest pending id has waited removeLinger.
func (r *removals) due() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.running > 0 || len(r.pending) == 0 {
		return // the Remove under way starts the next when it ends
	}
	if wait := removeLinger - time.Since(r.since); wait > 0 {
		// A timer of ids already taken: the pending ones came later.
		r.timer = time.AfterFunc(wait, r.due)
		return
	}
	r.start()
}

// start starts a Remove of the pending ids; none is under way; mu is held.
// When it ends, the next starts at once if the pending ids are due.
func (r *removals) start() {
	ids := r.pending
	r.pending = nil
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	r.running = len(ids)
	r.wg.Go(func() {
		ok := r.s.removeAcked(r.ctx, ids)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.running = 0
		if !ok {
			r.failed = true
			r.dropPending()
		} else if len(r.pending) > 0 && !r.closed &&
			(len(r.pending) >= r.batch || time.Since(r.since) >= removeLinger) {
			r.start()
		}
		close(r.ended)
		r.ended = make(chan struct{})
	})
}

// dropPending drops the pending ids; mu is held.
func (r *removals) dropPending() {
	r.pending = nil
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
}

// failedSeen clears failed, which the forwarder is being told; mu is held.
func (r *removals) failedSeen() {
	r.failed = false
	r.dropPending()
}

// waiting reports whether acknowledged ids are not yet removed.
func (r *removals) waiting() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running > 0 || len(r.pending) > 0
}

// linger waits, while the forwarder has nothing to send and acknowledged
// ids are not yet removed, until a Send wakes it (then a moment more, as
// pause does) or a Remove ends. It reports false when a Remove failed.
func (r *removals) linger() bool {
	r.mu.Lock()
	if r.failed {
		r.failedSeen()
		r.mu.Unlock()
		return false
	}
	if r.running == 0 && len(r.pending) == 0 {
		r.mu.Unlock()
		return true // removed meanwhile
	}
	ended := r.ended
	r.mu.Unlock()
	select {
	case <-r.ctx.Done():
		return true
	case <-ended:
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.failed {
			r.failedSeen()
			return false
		}
		return true
	case <-r.s.wake:
		r.s.sleep(r.ctx, forwardLinger)
		return true
	}
}

// flush removes every acknowledged id before it returns, and reports
// whether all were removed.
func (r *removals) flush() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.ctx.Err() == nil {
		if r.failed {
			r.failedSeen()
			return false
		}
		if r.running == 0 && len(r.pending) == 0 {
			return true
		}
		if r.running == 0 {
			r.start()
		}
		r.awaitEnd()
	}
	return true // stopping
}

// awaitEnd waits, r.mu held, until the Remove under way ends or r stops;
// it releases r.mu meanwhile and holds it again when it returns.
func (r *removals) awaitEnd() {
	ended := r.ended
	r.mu.Unlock()
	select {
	case <-ended:
	case <-r.ctx.Done():
	}
	r.mu.Lock()
}

// close stops the timer and waits for the Remove under way.
func (r *removals) close() {
	r.mu.Lock()
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
	r.mu.Unlock()
	r.wg.Wait()
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
