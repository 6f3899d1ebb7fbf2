package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/siteline/outbox/ports"
)

// Group commit of Sends. Every Send waits for its notification to be
// committed to the replicated buffer, which costs a round of the buffer's
// replication (on Raft, an fsync on a quorum). Concurrent Sends share that
// cost: the Sends that arrive while one Append is under way go together in
// the next, one Append of many submissions.
//
// There is no goroutine and no timer: the batch is led by a caller. A Send
// that finds no Append under way leads at once, with its own notification
// alone, so a lone caller waits for nobody. A Send that finds one under way
// queues. When an Append ends, its leader answers each caller of its batch,
// takes the queue (up to sendBatchMax notifications and sendBatchBytes) as
// the next batch, and hands it to the caller in it with the latest
// deadline, who leads it; the former leader returns at once.
//
// No caller waits past its own deadline: the Append of a batch runs until
// the latest deadline in it, its leader's, and a caller of the batch whose
// deadline comes first is answered then that the outcome is unknown (it
// sends again; Append keeps one notification per id).
//
// Each caller gets its own answer: an Append that fails as unavailable
// (not the leader, leadership lost, outcome unknown) is answered to every
// caller of the batch, who sends again (Append keeps one notification per
// id); a batch the buffer refuses otherwise is tried again one notification
// at a time, so that a refusal is answered only to the caller it concerns.

const (
	// sendBatchMax bounds the notifications of one coalesced Append.
	sendBatchMax = 256
	// sendBatchBytes bounds the estimated size of one coalesced Append: no
	// larger than one notification at the default limits (a 64 KiB body),
	// so that a batch is one Raft log entry of the replicated buffer no
	// larger than one Send could make before Sends were coalesced, and what
	// Raft holds in memory (its log cache, an AppendEntries to a follower
	// catching up: so many entries each) is bounded as before; see
	// raftbuffer's DESIGN.md. 64 concurrent Sends of a few hundred bytes
	// take about 20 KB. The first notification of a batch goes whatever its
	// size.
	sendBatchBytes = 64 << 10
	// sendOverhead is what a submission costs besides its fields' text: the
	// sequence number, the enqueue time, the framing.
	sendOverhead = 64
)

// sendBatcher coalesces concurrent Sends into one Buffer.Append.
type sendBatcher struct {
	buffer ports.Buffer

	mu    sync.Mutex
	busy  bool           // a batch is being appended
	queue []*pendingSend // waiting for the next batch, in arrival order
}

// pendingSend is one Send waiting in, or taken into, a batch.
type pendingSend struct {
	sub      ports.Submission
	deadline time.Time
	// taken reports that a leader took it into a batch (under mu).
	taken bool
	// answer receives its outcome, or the batch it is to lead; buffered, so
	// that a leader never waits for a caller that gave up.
	answer chan sendAnswer
}

// sendAnswer is the outcome of a pendingSend, or the batch it leads.
type sendAnswer struct {
	err  error
	lead []*pendingSend
}

func newSendBatcher(b ports.Buffer) *sendBatcher { return &sendBatcher{buffer: b} }

// size estimates what sub takes in a batch.
func (p *pendingSend) size() int {
	s := p.sub
	return sendOverhead + len(s.ID) + len(s.List) + len(s.Subject) + len(s.Body) + len(s.SourceSite) +
		len(s.SourceInstance) + len(s.SourceScript) + len(s.ExecutionID) + len(s.ParentExecutionID) + len(s.TypeData)
}

// append commits sub, alone or with the Sends that arrive with it, and
// returns its own outcome. ctx must carry a deadline. When ctx ends before
// the outcome is known, the error wraps ports.ErrUnavailable: the caller
// sends again.
func (b *sendBatcher) append(ctx context.Context, sub ports.Submission) error {
	p := &pendingSend{sub: sub, answer: make(chan sendAnswer, 1)}
	p.deadline, _ = ctx.Deadline()
	b.mu.Lock()
	if !b.busy {
		b.busy, p.taken = true, true
		b.mu.Unlock()
		return b.lead(ctx, []*pendingSend{p}, p)
	}
	b.queue = append(b.queue, p)
	b.mu.Unlock()
	return b.await(ctx, p)
}

// await waits for the outcome of p, queued, or for the batch it is to
// lead, and returns p's outcome.
func (b *sendBatcher) await(ctx context.Context, p *pendingSend) error {
	select {
	case a := <-p.answer:
		if a.lead != nil {
			return b.lead(ctx, a.lead, p)
		}
		return a.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	if !p.taken {
		// Still queued: nothing was sent for it.
		for i, q := range b.queue {
			if q == p {
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				break
			}
		}
		b.mu.Unlock()
		return fmt.Errorf("wait for the buffer: %w: %w", ctx.Err(), ports.ErrUnavailable)
	}
	b.mu.Unlock()
	// Taken: either its batch is under way (led by a caller whose deadline
	// is not before its own), or it was handed the next batch to lead (then
	// the batch is already in answer, sent under mu), which it must lead
	// whatever its own context says: the others wait for it.
	select {
	case a := <-p.answer:
		if a.lead != nil {
			return b.lead(ctx, a.lead, p)
		}
		return a.err
	default:
		return fmt.Errorf("wait for the buffer: %w: outcome unknown: %w", ctx.Err(), ports.ErrUnavailable)
	}
}

// lead appends batch (which holds self), answers the others in it, hands
// the queue on to the next leader, and returns self's outcome. The Append
// runs until the latest deadline in the batch (self's, unless self was
// handed the lead after its context ended), whether or not self's ctx is
// cancelled first: the others wait for it.
func (b *sendBatcher) lead(ctx context.Context, batch []*pendingSend, self *pendingSend) error {
	errs := b.appendBatch(ctx, batch)
	var mine error
	for i, p := range batch {
		if p == self {
			mine = errs[i]
			continue
		}
		p.answer <- sendAnswer{err: errs[i]}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	next := b.take()
	if len(next) == 0 {
		b.busy = false
		return mine
	}
	// The caller with the latest deadline leads, so that the Append, which
	// runs until that deadline, holds no caller past its own.
	l := next[0]
	for _, p := range next[1:] {
		if p.deadline.After(l.deadline) {
			l = p
		}
	}
	l.answer <- sendAnswer{lead: next}
	return mine
}

// take removes the next batch from the queue and marks it taken; mu is
// held.
func (b *sendBatcher) take() []*pendingSend {
	n, size := 0, 0
	for n < len(b.queue) && n < sendBatchMax {
		s := b.queue[n].size()
		if n > 0 && size+s > sendBatchBytes {
			break
		}
		size += s
		n++
	}
	if n == 0 {
		return nil
	}
	batch := make([]*pendingSend, n)
	copy(batch, b.queue)
	for _, p := range batch {
		p.taken = true
	}
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return batch
}

// appendBatch appends the batch's submissions in one Append and returns
// each one's outcome.
func (b *sendBatcher) appendBatch(ctx context.Context, batch []*pendingSend) []error {
	var deadline time.Time
	subs := make([]ports.Submission, len(batch))
	for i, p := range batch {
		subs[i] = p.sub
		if p.deadline.After(deadline) {
			deadline = p.deadline
		}
	}
	actx, cancel := ctx, context.CancelFunc(func() {})
	if !deadline.IsZero() { // Send gives every caller one
		actx, cancel = context.WithDeadline(context.WithoutCancel(ctx), deadline)
	}
	defer cancel()
	errs := make([]error, len(batch))
	err := b.buffer.Append(actx, subs)
	if err != nil && len(batch) > 1 && !errors.Is(err, ports.ErrUnavailable) &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		// The buffer refused the batch: find whose notification it
		// refuses, so that the others are buffered.
		for i, s := range subs {
			errs[i] = b.buffer.Append(actx, []ports.Submission{s})
		}
		return errs
	}
	for i := range errs {
		errs[i] = err
	}
	return errs
}
