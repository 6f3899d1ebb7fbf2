package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/siteline/outbox/ports"
)

// pipelineDepth is how many claimed batches a sweep may have in delivery and
// recording at once. The sweep claims the next batch while earlier ones are
// delivered and recorded, so that the database round trips overlap.
const pipelineDepth = 8

// claimDepth is how many claims of a sweep may be in the database at once,
// once a claim came back full (the first claim of a sweep runs alone, so an
// idle node asks once per sweep). A claim waits for its commit, which on a
// database that syncs its log is most of a claim's time: one at a time,
// claims were what bounded dispatch at the default batch of 100 (the
// pipeline's slots stood empty while the sweep waited for the next claim).
// Two claims at once skip each other's rows (the store's claim takes only
// unleased rows, and on PostgreSQL skips locked ones, which may be more
// rows than the other claim takes: each part of PostgreSQL's claim locks up
// to the claim's limit of rows). So a claim that came back short while
// another was in the database does not show that no due rows are left: only
// a short claim that ran alone ends a sweep (see sweep).
const claimDepth = 2

// maxClaimRows bounds the rows of one claim that takes several batches at
// once (see claimBatches): batches of up to 250 rows are claimed four at a
// time, of 1,000 rows or more one at a time, whatever their size.
const maxClaimRows = 1000

// recordTimeout bounds one try of a write that records a batch's outcomes,
// and how long those writes go on after shutdown began (they run on, so that
// finished deliveries are not sent again, but a dead database cannot hold a
// shutdown up for longer).
const recordTimeout = 30 * time.Second

// dispatchLoop sweeps at start, whenever ingest or an operator Retry wakes it,
// when a retry this node scheduled falls due, and every DispatchInterval as the
// fallback. It returns when ctx is done.
func (s *Service) dispatchLoop(ctx context.Context) {
	ticker := time.NewTicker(s.cfg.DispatchInterval)
	defer ticker.Stop()
	retry := time.NewTimer(0)
	defer retry.Stop()
	<-retry.C
	var retryAt time.Time // when retry fires; zero when idle
	for {
		next := s.sweep(ctx)
		if ctx.Err() != nil {
			return
		}
		if !next.IsZero() && (retryAt.IsZero() || next.Before(retryAt)) {
			retryAt = next
			retry.Reset(max(next.Sub(s.clock.Now()), time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-ticker.C:
		case <-retry.C:
			retryAt = time.Time{}
		}
	}
}

// sweep claims and dispatches batches until a claim that ran alone comes
// back short, and returns the earliest retry it scheduled (zero if none). It
// returns after every batch it claimed is recorded or released.
//
// Up to claimDepth claims run at once (see claimDepth). A claim that came
// back short while another claim of the sweep was in the database proves
// nothing (the other may have held due rows it did not take): the next
// claim then waits for every claim in flight and runs alone. Their rows wait in
// a pool kept in claim order (priority, then age, then id) until their
// batch's turn comes, and each batch then takes its rows from the front of
// the pool: DispatchBatchSize rows, or for the last batch of a claim the
// rest of what that claim brought. So the batches of a sweep go out in
// priority order even when two claims overlap and the later one took the
// rows that come first.
//
// While the last claim to end came back full, each claim takes the rows of
// several batches at once (claimBatches) and first holds a pipeline slot
// for each: the rows in flight stay within pipelineDepth batches, and at
// the default batch of 100 a backlog costs a quarter of the claims. A claim
// then waits for that many free slots, so two such claims are seldom in the
// database at once; claimDepth matters for batches of 1,000 rows or more,
// claimed one at a time.
func (s *Service) sweep(ctx context.Context) time.Time {
	var (
		wg       sync.WaitGroup
		slots    = make(chan struct{}, pipelineDepth)
		claiming = make(chan struct{}, claimDepth)
		mu       sync.Mutex
		next     time.Time
		pool     claimPool
		stop     atomic.Bool          // a claim that ran alone came back short, a claim failed, or a batch's rows went back untouched
		alone    atomic.Bool          // a claim that overlapped another came back short: the next runs alone
		backlog  atomic.Bool          // the last claim to end came back full: the next takes several batches
		full     = make(chan bool, 1) // the first claim's answer: whether it came back full
		overlaps overlapTracker
	)
	defer wg.Wait()
	if s.claimDoubt {
		s.renewOwner(ctx)
	}
	owner := s.Owner()
	// turn is closed once the batch before has taken its rows from the
	// pool and handed every one to a delivery slot: the next batch's turn
	// (see dispatch).
	turn := make(chan struct{})
	close(turn)
	// deliver dispatches one batch of n rows from the pool once wait is
	// closed, calling launch once its rows are in delivery slots.
	deliver := func(n int, wait <-chan struct{}, launch func()) {
		<-wait
		t, ok := s.dispatch(ctx, owner, pool.take(n), launch)
		if !ok {
			// Its rows went back untouched; claiming again now would
			// only spin on them. The next wake-up or poll retries.
			stop.Store(true)
		}
		mu.Lock()
		next = earliest(next, t)
		mu.Unlock()
	}
	for first := true; !stop.Load(); first = false {
		batches := 1
		if backlog.Load() {
			batches = s.claimBatches()
		}
		if !acquireN(ctx, slots, batches) {
			return time.Time{}
		}
		tokens := 1
		if alone.Swap(false) {
			tokens = claimDepth // wait for every other claim in flight: this one runs alone
		}
		if !acquireN(ctx, claiming, tokens) {
			releaseN(slots, batches)
			return time.Time{}
		}
		if stop.Load() { // a claim in flight came back short meanwhile
			releaseN(claiming, tokens)
			releaseN(slots, batches)
			break
		}
		wait, launched := turn, make(chan struct{})
		turn = launched
		limit := batches * s.cfg.DispatchBatchSize
		wg.Go(func() {
			launch := sync.OnceFunc(func() { close(launched) })
			defer launch()
			end := overlaps.begin()
			rows, err := s.claim(ctx, owner, limit)
			overlapped := end()
			// A store that broke its contract and returned more rows
			// than asked would make more batches than the slots held:
			// the extra rows stay leased until their lease runs out.
			rows = rows[:min(len(rows), limit)]
			// Decided before the claim's tokens go back, so that the
			// loop's next claim sees it.
			switch {
			case err != nil:
				stop.Store(true)
			case len(rows) == limit:
			case overlapped:
				alone.Store(true)
			default:
				stop.Store(true)
			}
			backlog.Store(err == nil && len(rows) == limit)
			releaseN(claiming, tokens)
			if first {
				full <- len(rows) == limit
			}
			if err != nil && ctx.Err() == nil {
				s.log.Error("dispatch sweep failed", "err", err)
				// The claim may have committed all the same (the
				// connection died before its answer): rows leased to
				// this run that no batch holds. The next sweep renews
				// the owner and releases them.
				mu.Lock()
				s.claimDoubt = s.claimDoubt || !unfixable(err)
				mu.Unlock()
			}
			// The claim's rows go out as batches of DispatchBatchSize,
			// each holding one of the slots and taking its turn after the
			// one before; the slots no batch needs go back at once.
			size := s.cfg.DispatchBatchSize
			m := (len(rows) + size - 1) / size
			releaseN(slots, batches-m)
			pool.add(rows)
			if m == 0 {
				<-wait // the turn passes on in order
				return
			}
			for range m - 1 {
				prev, after := wait, make(chan struct{})
				wg.Go(func() {
					defer releaseN(slots, 1)
					deliver(size, prev, sync.OnceFunc(func() { close(after) }))
				})
				wait = after
			}
			defer releaseN(slots, 1)
			deliver(len(rows)-(m-1)*size, wait, launch) // the last batch: the next claim's turn follows
		})
		if first && !<-full {
			break
		}
	}
	wg.Wait()
	return next
}

// acquireN puts n tokens into the semaphore sem, waiting for room, and
// reports true; if ctx ends first it takes back those it put and reports
// false.
func acquireN(ctx context.Context, sem chan struct{}, n int) bool {
	for held := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			releaseN(sem, held)
			return false
		}
	}
	return true
}

// releaseN takes n tokens out of the semaphore sem.
func releaseN(sem chan struct{}, n int) {
	for range n {
		<-sem
	}
}

// claimBatches is how many batches one claim takes while the last claim of
// the sweep to end came back full: half the pipeline (so that one claim's
// batches are delivered while the next claim waits for its slots), and no
// more than maxClaimRows rows.
func (s *Service) claimBatches() int {
	return max(1, min(pipelineDepth/claimDepth, maxClaimRows/s.cfg.DispatchBatchSize))
}

// overlapTracker tells whether a claim was in the database at the same time
// as another claim of the sweep.
type overlapTracker struct {
	mu     sync.Mutex
	active map[*bool]struct{}
}

// begin notes a claim starting; the returned end notes it ending and reports
// whether another claim ran at any moment in between.
func (o *overlapTracker) begin() (end func() bool) {
	var overlapped bool
	o.mu.Lock()
	if o.active == nil {
		o.active = make(map[*bool]struct{})
	}
	for other := range o.active {
		*other, overlapped = true, true
	}
	o.active[&overlapped] = struct{}{}
	o.mu.Unlock()
	return func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		delete(o.active, &overlapped)
		return overlapped
	}
}

// claimPool holds the rows of a sweep's claims that no batch took yet, in
// claim order. A row leaves it only from the front, so a claimed row waits
// while later claims bring rows that rank before it (ingested since, of a
// higher priority, or skipped locked before): under a steady stream of such
// rows it can wait for many batches. It keeps its lease meanwhile, and a
// row whose lease would run out within DeliveryTimeout is released
// untouched instead of delivered (see attempt), for a later claim.
type claimPool struct {
	mu   sync.Mutex
	rows []ports.Notification
}

// add puts the rows of a claim (in claim order) into the pool.
func (p *claimPool) add(rows []ports.Notification) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.rows) == 0 {
		p.rows = slices.Clone(rows)
		return
	}
	merged := make([]ports.Notification, 0, len(p.rows)+len(rows))
	i, j := 0, 0
	for i < len(p.rows) && j < len(rows) {
		if claimOrder(rows[j], p.rows[i]) < 0 {
			merged = append(merged, rows[j])
			j++
		} else {
			merged = append(merged, p.rows[i])
			i++
		}
	}
	p.rows = append(append(merged, p.rows[i:]...), rows[j:]...)
}

// take removes the first n rows of the pool and returns them.
func (p *claimPool) take(n int) []ports.Notification {
	p.mu.Lock()
	defer p.mu.Unlock()
	n = min(n, len(p.rows))
	out := slices.Clone(p.rows[:n])
	p.rows = p.rows[n:]
	return out
}

// claimOrder is the order Store.Claim returns rows in: Priority descending,
// then CreatedAt, then ID.
func claimOrder(a, b ports.Notification) int {
	if a.Priority != b.Priority {
		return cmp.Compare(b.Priority, a.Priority)
	}
	if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// renewOwner follows a claim that failed and may have committed all the
// same: its rows would stay leased to this run, held by no batch, until the
// lease ran out. Between sweeps no batch of this node is in flight, so every
// lease the node holds is such an orphan (or an earlier run's): the
// dispatcher takes a new run id for its owner name and releases every lease
// of the node but the new name's, so those rows are claimable at once. When
// the release fails the doubt stays, and the next sweep tries again.
func (s *Service) renewOwner(ctx context.Context) {
	owner := s.setOwner()
	rctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	n, err := s.store.ReleaseNode(rctx, s.cfg.NodeID, owner)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("dispatch: cannot release the leases of a claim whose answer was lost; trying again at the next sweep",
				"err", err)
		}
		return
	}
	s.claimDoubt = false
	if n > 0 {
		s.log.Info("dispatch: released the leases of a claim whose answer was lost", "rows", n, "owner", owner)
	}
}

// DispatchOnce claims one batch of due rows, delivers it and records the
// outcomes, and returns how many rows it handled. The dispatcher of Run does
// the same in a loop; tests call DispatchOnce to step through the lifecycle.
// It must not run while Run does: the dispatcher then takes every lease of
// this node that no batch of its own holds for an orphan (see renewOwner,
// and Run's release of earlier runs' leases) and releases it, and the rows
// of a DispatchOnce in flight would be claimed and delivered again.
func (s *Service) DispatchOnce(ctx context.Context) (int, error) {
	owner := s.Owner()
	rows, err := s.claim(ctx, owner, s.cfg.DispatchBatchSize)
	if err != nil {
		return 0, err
	}
	if _, ok := s.dispatch(ctx, owner, rows, func() {}); !ok {
		return len(rows), errors.New("dispatch: some notifications went back untouched (the directory failed, or their channel had no room)")
	}
	return len(rows), nil
}

// claim leases the next limit due rows to owner.
func (s *Service) claim(ctx context.Context, owner string, limit int) ([]ports.Notification, error) {
	rows, err := s.store.Claim(ctx, ports.ClaimRequest{
		Owner: owner, Now: s.clock.Now(), Lease: s.cfg.ClaimLease, Limit: limit,
	})
	if err != nil {
		return nil, fmt.Errorf("claim due notifications: %w", err)
	}
	return rows, nil
}

// job is one claimed row on its way through dispatch.
type job struct {
	row     ports.Notification
	typ     string // the channel type it is delivered through
	channel ports.Channel
	policy  RetryPolicy
	req     ports.Delivery
	// states are the row's target states brought up to the list, and due
	// the indexes of those req.Targets holds (see targetsDue).
	states []ports.TargetState
	due    []int

	update  ports.Update
	records []ports.AuditRecord
	done    bool // update and records are final
	// deferUntil, when set, is when a row the channel did not attempt
	// (NotAttempted) may be tried again; the row is released untouched.
	deferUntil time.Time
}

// minDefer is the shortest wait before a row the channel did not attempt
// is claimed again, so that a channel without room is not asked again at
// once.
const minDefer = 100 * time.Millisecond

// dispatch delivers one batch claimed under owner with bounded parallelism,
// calling launched once it has handed every row to a delivery slot (the
// sweep starts the next batch's deliveries then), then records
// every outcome with its audit records in one write (see record) and
// releases the rows it could not attempt. One bad row never stops the
// batch. Both writes are tried again through a blip of the database while
// the batch's lease lasts, and for at most recordTimeout once ctx ends
// (shutdown). It returns the earliest retry it
// scheduled, and false when some rows went back untouched because the
// directory failed or their channel had no room (NotAttempted).
func (s *Service) dispatch(ctx context.Context, owner string, rows []ports.Notification, launched func()) (time.Time, bool) {
	defer launched()
	now := s.clock.Now()
	jobs := make([]job, len(rows))
	var (
		release []string
		planErr error
	)
	cache := batchCache{lists: make(map[string]listLookup), channels: make(map[string]channelLookup)}
	for i, row := range rows {
		jobs[i].row = row
		if err := s.plan(ctx, &jobs[i], now, cache); err != nil {
			// The directory failed (not "not found"): no attempt was made,
			// so the row goes back untouched.
			planErr = cmp.Or(planErr, err)
			release = append(release, row.ID)
			jobs[i].done = true
		}
	}
	if planErr != nil && ctx.Err() == nil {
		s.log.Error("dispatch: cannot prepare notifications; released for a later sweep",
			"rows", len(release), "err", planErr)
	}

	// The batches of a sweep take delivery slots one after the other (the
	// sweep calls dispatch once the batch before has called launched, see
	// sweep). Interleaved, every batch of the pipeline would finish late and
	// together, and a crash would find that many more rows delivered and not
	// yet recorded, each of which is delivered again.
	var wg sync.WaitGroup
	for i := range jobs {
		j := &jobs[i]
		if j.done {
			continue
		}
		if !s.acquire(ctx) {
			break // shutdown: the rest of the batch is released untouched
		}
		wg.Go(func() {
			defer func() { <-s.inFlight }()
			s.attempt(ctx, j)
		})
	}
	launched()
	wg.Wait()

	var (
		updates  []ports.Update
		next     time.Time
		deferred bool
	)
	for i := range jobs {
		j := &jobs[i]
		switch {
		case !j.done:
			release = append(release, j.row.ID) // not attempted: shutdown, or no room in the channel
			if !j.deferUntil.IsZero() {
				next, deferred = earliest(next, j.deferUntil), true
			}
		case j.update.ID != "":
			u := j.update
			u.Records = j.records
			updates = append(updates, u)
			if j.update.Status == ports.StatusRetrying {
				next = earliest(next, j.update.NextAttemptAt)
			}
		}
	}
	// The writes below record what has happened: they go on through a
	// shutdown (for at most recordTimeout after it began), and through a
	// blip of the database for as long as the batch's lease lasts. After
	// that another node may claim the rows, and the delivery repeats.
	wctx, stop := graceContext(ctx, recordTimeout)
	defer stop()
	until := s.realDeadline(leaseEnd(rows))
	if len(updates) > 0 {
		// First, while the lease is young: the outcomes are what a
		// blip could make the rows be delivered again for. Their audit
		// records go with them, all or nothing.
		s.record(wctx, owner, until, updates)
	}
	if len(release) > 0 {
		s.release(wctx, owner, until, release)
	}
	// A channel without room: claiming again now would only get the same
	// answer. The sweep stops; the retry timer brings it back at next.
	return next, planErr == nil && !deferred
}

// leaseEnd is when the first lease of a claimed batch runs out, by the
// service's clock.
func leaseEnd(rows []ports.Notification) time.Time {
	var end time.Time
	for _, r := range rows {
		end = earliest(end, r.ClaimedUntil)
	}
	return end
}

// release gives the leases on ids back, trying again through a blip of the
// database until until (the batch's lease), after which they have run out
// on their own. A failure costs only a wait: the rows are claimed again when
// their lease runs out.
func (s *Service) release(ctx context.Context, owner string, until time.Time, ids []string) {
	tries, err := retryBlip(ctx, s.log, until, "dispatch: release leases",
		"the rows wait until their leases run out, then any node claims them",
		func(ctx context.Context) error {
			tctx, cancel := context.WithTimeout(ctx, recordTimeout)
			defer cancel()
			return s.store.Release(tctx, owner, ids)
		}, "rows", len(ids))
	if err != nil && tries == 1 && unfixable(err) { // retryBlip said nothing
		s.log.Warn("dispatch: release leases failed; they expire on their own", "rows", len(ids), "err", err)
	}
}

// record writes a batch's outcomes and returns the ids whose lease another
// owner took first (lost), or ok false when it could not write them.
//
// A failed write is tried again, with backoff, until until (the batch's
// lease) or for ClaimLease from now, whichever is later: a database back
// within ClaimLease of the failure costs no delivery twice, however little
// of the batch's lease was left when its deliveries ended (slow deliveries,
// a batch that waited its turn). Writing after the lease ran out is still
// right: Record is guarded by the owner, not by the lease's end, so it
// applies while no other node has claimed the rows — and none can while
// the database is away; a node that could (the database was away for this
// node only) makes Record report the rows lost, and their delivery repeats,
// which nothing could have prevented. Each try is bounded by recordTimeout;
// ctx (see graceContext) bounds the whole at shutdown. When the store still
// fails at the end, record gives up: the rows are claimed again once their
// leases ran out and delivered again, the accepted at-least-once cost.
//
// A try that failed may have committed all the same (the database committed
// and the connection died before the answer), its audit records with it.
// Record then reports those rows lost on the next try, as their leases are
// gone; recordedAfterAll tells them from rows another owner took, so that
// only those are reported lost and warned of.
func (s *Service) record(ctx context.Context, owner string, until time.Time, updates []ports.Update) (lost map[string]bool, ok bool) {
	lease := until
	until = later(until, time.Now().Add(s.cfg.ClaimLease))
	ids, tries, err := retryValue(ctx, s.log, until, "dispatch: record outcomes",
		"the leases run out and the rows are delivered again",
		func(ctx context.Context) ([]string, error) {
			tctx, cancel := context.WithTimeout(ctx, recordTimeout)
			defer cancel()
			return s.store.Record(tctx, owner, updates)
		}, "rows", len(updates))
	if err != nil {
		if tries == 1 && unfixable(err) { // retryBlip said nothing
			s.log.Error("dispatch: record outcomes failed; the leases run out and the rows are delivered again",
				"rows", len(updates), "err", err)
		}
		return nil, false
	}
	if tries > 1 && len(ids) > 0 {
		ids = s.recordedAfterAll(ctx, lease, updates, ids)
	}
	if len(ids) > 0 {
		s.log.Warn("dispatch: lease lost before recording; another node owns these rows now (a likely cause: two running centrals share one node id, and the one that started later released this one's leases)",
			"rows", len(ids))
	}
	lost = make(map[string]bool, len(ids))
	for _, id := range ids {
		lost[id] = true
	}
	return lost, true
}

// recordedAfterAll returns those of the lost ids whose row does not show
// exactly the update this node wrote: no lease, the update's status, retry
// count, last attempt and last change (to the store's precision). A row that
// shows it was written by an earlier try whose answer was lost. A row that
// cannot be read stays lost. A failed read is tried again until until (the
// batch's lease: only a warning is at stake), and all the reads together take
// at most recordTimeout: the batch, and the sweep that waits for it, must
// not wait for as long as the database stays away.
func (s *Service) recordedAfterAll(ctx context.Context, until time.Time, updates []ports.Update, lost []string) []string {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	byID := make(map[string]*ports.Update, len(updates))
	for i := range updates {
		byID[updates[i].ID] = &updates[i]
	}
	var still []string
	for _, id := range lost {
		u := byID[id]
		row, _, err := retryValue(ctx, s.log, until, "dispatch: read back a recorded row",
			"it is reported as a lease lost", func(ctx context.Context) (ports.Notification, error) {
				tctx, cancel := context.WithTimeout(ctx, recordTimeout)
				defer cancel()
				return s.store.Get(tctx, id)
			})
		if err != nil || u == nil || !shows(row, *u) {
			still = append(still, id)
		}
	}
	if n := len(lost) - len(still); n > 0 {
		s.log.Info("dispatch: an earlier try had recorded these rows after all; its answer was lost",
			"rows", n)
	}
	return still
}

// storePrecision is the finest time a store keeps (the SQL stores keep
// microseconds).
const storePrecision = time.Microsecond

// shows reports whether row is exactly as u left it.
func shows(row ports.Notification, u ports.Update) bool {
	same := func(a, b time.Time) bool { return a.Truncate(storePrecision).Equal(b.Truncate(storePrecision)) }
	return row.ClaimedBy == "" && row.ClaimedUntil.IsZero() && row.Status == u.Status &&
		row.RetryCount == u.RetryCount && same(row.LastAttemptAt, u.LastAttemptAt) &&
		same(row.UpdatedAt, u.UpdatedAt)
}

// batchCache keeps the directory's answers for one batch, so a batch asks
// once per list and once per channel type.
type batchCache struct {
	lists    map[string]listLookup
	channels map[string]channelLookup
}

type listLookup struct {
	list ports.List
	err  error
}

type channelLookup struct {
	settings ports.ChannelSettings
	policy   RetryPolicy
	err      error
}

// plan decides what a claimed row needs: a park without an attempt (expired,
// neither subject nor body, unknown list, no channel for its list's type) or a delivery through the
// channel of its list's current type. It returns an error only when the
// directory itself failed.
func (s *Service) plan(ctx context.Context, j *job, now time.Time, cache batchCache) error {
	row := j.row
	if !row.ExpiresAt.IsZero() && !now.Before(row.ExpiresAt) {
		s.park(j, now, "expired")
		return nil
	}
	if emptyContent(row.Subject, row.Body) {
		// Parked at ingest, then retried by an operator: it still says
		// nothing, and is never delivered.
		s.park(j, now, emptyParkReason)
		return nil
	}
	l, ok := cache.lists[row.List]
	if !ok {
		l.list, l.err = s.directory.List(ctx, row.List)
		cache.lists[row.List] = l
	}
	if errors.Is(l.err, ports.ErrNotFound) {
		s.park(j, now, fmt.Sprintf("unknown list %q", row.List))
		return nil
	}
	if l.err != nil {
		return fmt.Errorf("resolve list: %w", l.err)
	}
	// A target no store can keep (a list stored before the directory
	// refused NUL bytes, say) would make the row's outcome, and its whole
	// batch's, unrecordable: the row parks instead, untried.
	if i := slices.IndexFunc(l.list.Targets, func(t string) bool { return storableText(t) != t }); i >= 0 {
		s.park(j, now, fmt.Sprintf("list %q: target %d holds a NUL byte or is not valid UTF-8; correct the list and retry", row.List, i+1))
		return nil
	}
	// The list's current type decides the channel, whatever the row's Type
	// says: a list's targets never go through another list type's channel.
	typ := l.list.Type
	ch, ok := s.channels.Channel(typ)
	if !ok {
		s.park(j, now, fmt.Sprintf("no delivery adapter for type %s", typ))
		return nil
	}
	c, ok := cache.channels[typ]
	if !ok {
		c.settings, c.policy, c.err = s.channelPolicy(ctx, typ)
		cache.channels[typ] = c
	}
	if c.err != nil {
		return c.err
	}
	j.typ, j.channel, j.policy = typ, ch, c.policy
	j.req = ports.Delivery{Notification: row, Settings: c.settings.Settings, RateLimit: c.settings.RateLimit}
	if len(l.list.Targets) > 0 {
		j.states, j.due = targetsDue(row, l.list.Targets)
		if len(j.due) == 0 {
			// Every target the list holds was delivered, or failed for
			// good and waits for an operator: nothing to attempt.
			s.finish(j, settle(row, j.states, nil, nil, j.policy, now, false))
			return nil
		}
		j.req.Targets = make([]string, len(j.due))
		for i, k := range j.due {
			j.req.Targets[i] = j.states[k].Target
		}
	}
	return nil
}

// finish ends a job with the row settled as its targets stand, without an
// attempt, and the terminal audit record.
func (s *Service) finish(j *job, st settled) {
	if err := Move(j.row.Status, st.update.Status); err != nil {
		s.log.Error("dispatch: refusing an illegal move", "id", j.row.ID, "err", err)
		return // not done: released untouched
	}
	j.update, j.done = st.update, true
	j.records = []ports.AuditRecord{terminalRecord(j.row, st.update)}
}

// terminalRecord is the audit record of row reaching Delivered or Parked.
func terminalRecord(row ports.Notification, u ports.Update) ports.AuditRecord {
	kind := ports.AuditDelivered
	if u.Status == ports.StatusParked {
		kind = ports.AuditParked
	}
	return ports.AuditRecord{NotificationID: row.ID, SourceSite: row.SourceSite, Type: row.Type, At: u.UpdatedAt, Kind: kind, Actor: ports.ActorSystem,
		Status: u.Status, Error: u.LastError}
}

// attemptRecords returns the audit records of an attempt whose Attempted
// record is attempt and whose outcome is u: the attempt's record, and the
// terminal record when the row reached Delivered or Parked. An attempt that
// delivered the row and leaves no error to tell (the common case: its
// record says Success, status Delivered, no error, and the row keeps no
// error from earlier attempts) is the one record: it tells all the
// Delivered record would (the status, the instant, the actor), and each
// record costs the audit log an insert on the dispatcher's hot path. Every
// other terminal attempt (a parking, or a delivery after failures, whose
// Delivered record carries the last error) keeps both records. Readers
// that wait for a row's settling record take either (see ports.AuditKind).
func attemptRecords(row ports.Notification, attempt ports.AuditRecord, u ports.Update) []ports.AuditRecord {
	if !u.Status.Terminal() || (u.Status == ports.StatusDelivered && attempt.Outcome == ports.OutcomeSuccess &&
		attempt.Error == "" && u.LastError == "") {
		return []ports.AuditRecord{attempt}
	}
	return []ports.AuditRecord{attempt, terminalRecord(row, u)}
}

// park finishes a job as Parked without a delivery attempt.
func (s *Service) park(j *job, now time.Time, reason string) {
	if err := Move(j.row.Status, ports.StatusParked); err != nil {
		s.log.Error("dispatch: refusing an illegal move", "id", j.row.ID, "err", err)
		return // not done: released untouched
	}
	j.update = ports.Update{
		ID: j.row.ID, Status: ports.StatusParked, RetryCount: j.row.RetryCount, LastError: reason,
		ResolvedTargets: j.row.ResolvedTargets, Targets: j.row.Targets, LastAttemptAt: j.row.LastAttemptAt, UpdatedAt: now,
	}
	j.records = []ports.AuditRecord{{NotificationID: j.row.ID, SourceSite: j.row.SourceSite, Type: j.row.Type, At: now, Kind: ports.AuditParked,
		Actor: ports.ActorSystem, Status: ports.StatusParked, Error: reason}}
	j.done = true
}

// attempt makes one delivery to the targets due and maps the answers to the
// row's next status (settle). It makes none when the row's lease would run
// out within DeliveryTimeout (the job stays not done, and its row is
// released). If ctx ends during the attempt (shutdown) and no target was
// delivered, the attempt does not count and the job stays not done, so its
// row is released untouched.
func (s *Service) attempt(ctx context.Context, j *job) {
	if s.clock.Now().Add(s.cfg.DeliveryTimeout).After(j.row.ClaimedUntil) {
		// The lease would run out before a slow delivery could finish, and
		// another node could then deliver the row too. Leave it: its row is
		// released untouched for a fresh claim.
		return
	}
	dctx, cancel := context.WithTimeout(ctx, s.cfg.DeliveryTimeout)
	start := time.Now()
	res := deliverSafely(dctx, j.channel, j.req)
	took := time.Since(start)
	cancel()
	if j.states == nil {
		// The list holds no target: the channel's one answer is the row's.
		s.settleWhole(ctx, j, res, took)
		return
	}
	rs := targetResults(res, len(j.due))
	if !anySuccess(rs) {
		if ctx.Err() != nil {
			// Cut short by shutdown: not an attempt. (When a target was
			// delivered, that is recorded, or it would be sent the
			// notification again; the others stay due, see settle.)
			return
		}
		if res.NotAttempted {
			// The channel had no room: the row goes back untouched.
			j.deferUntil = s.clock.Now().Add(max(res.RetryAfter, minDefer))
			return
		}
	}
	at := s.clock.Now()
	st := settle(j.row, j.states, j.due, rs, j.policy, at, ctx.Err() != nil)
	if err := Move(j.row.Status, st.update.Status); err != nil {
		// Claim only returns Pending or Retrying rows, from which every
		// outcome is legal; reaching this is a store bug.
		s.log.Error("dispatch: refusing an illegal move", "id", j.row.ID, "err", err)
		return
	}
	j.update = st.update
	j.records = attemptRecords(j.row, ports.AuditRecord{
		NotificationID: j.row.ID, SourceSite: j.row.SourceSite, Type: j.row.Type, At: at, Kind: ports.AuditAttempted, Actor: ports.ActorSystem,
		Outcome: st.outcome, Status: st.update.Status, Duration: took, Error: st.err, Targets: st.audit,
	}, st.update)
	outcomes := make([]ports.Outcome, len(rs))
	for i, r := range rs {
		outcomes[i] = r.Outcome
	}
	s.observer.Attempted(j.typ, st.outcome, took, outcomes)
	j.done = true
}

// settleWhole maps the one answer of a delivery to a list without targets
// onto the row: Success delivers it, Permanent parks it, Transient retries it
// per the policy. (A channel answers Permanent to an empty target list.)
func (s *Service) settleWhole(ctx context.Context, j *job, res ports.Result, took time.Duration) {
	if ctx.Err() != nil && res.Outcome != ports.OutcomeSuccess {
		return // cut short by shutdown: not an attempt
	}
	if res.NotAttempted && res.Outcome != ports.OutcomeSuccess {
		j.deferUntil = s.clock.Now().Add(max(res.RetryAfter, minDefer))
		return
	}
	at := s.clock.Now()
	row := j.row
	u := ports.Update{
		ID: row.ID, RetryCount: row.RetryCount, LastError: row.LastError, ResolvedTargets: row.ResolvedTargets,
		Targets: row.Targets, LastAttemptAt: at, UpdatedAt: at,
	}
	r := targetResults(ports.Result{Outcome: res.Outcome, Error: res.Error, RetryAfter: res.RetryAfter}, 1)[0]
	switch r.Outcome {
	case ports.OutcomeSuccess:
		u.Status, u.DeliveredAt = ports.StatusDelivered, at
	case ports.OutcomePermanent:
		u.Status, u.LastError = ports.StatusParked, r.Error
	default:
		u.RetryCount++
		u.LastError = r.Error
		if delay, ok := j.policy.Next(u.RetryCount); ok {
			u.Status, u.NextAttemptAt = ports.StatusRetrying, at.Add(max(delay, r.RetryAfter))
		} else {
			u.Status = ports.StatusParked
			u.LastError = fmt.Sprintf("retries exhausted after %d attempts: %s", u.RetryCount, r.Error)
		}
	}
	if err := Move(row.Status, u.Status); err != nil {
		s.log.Error("dispatch: refusing an illegal move", "id", row.ID, "err", err)
		return
	}
	j.update = u
	j.records = attemptRecords(row, ports.AuditRecord{
		NotificationID: row.ID, SourceSite: row.SourceSite, Type: row.Type, At: at, Kind: ports.AuditAttempted, Actor: ports.ActorSystem,
		Outcome: r.Outcome, Status: u.Status, Duration: took, Error: r.Error,
	}, u)
	s.observer.Attempted(j.typ, r.Outcome, took, nil)
	j.done = true
}

// acquire takes a delivery slot, or returns false once ctx is done.
func (s *Service) acquire(ctx context.Context) bool {
	select {
	case s.inFlight <- struct{}{}:
		if ctx.Err() != nil {
			<-s.inFlight
			return false
		}
		return true
	case <-ctx.Done():
		return false
	}
}

// deliverSafely calls the channel and turns a panic into a transient failure,
// so one bad channel call never takes the dispatcher down.
func deliverSafely(ctx context.Context, ch ports.Channel, d ports.Delivery) (res ports.Result) {
	defer func() {
		if r := recover(); r != nil {
			res = ports.Result{Outcome: ports.OutcomeTransient, Error: fmt.Sprintf("channel panicked: %v", r)}
		}
	}()
	return ch.Deliver(ctx, d)
}

// cachedPolicy is a channel's retry policy, rebuilt when its settings change
// (so a clamp warning is logged once per change, not once per sweep).
type cachedPolicy struct {
	settings ports.RetrySettings
	policy   RetryPolicy
}

// channelPolicy returns a channel type's settings and retry policy.
func (s *Service) channelPolicy(ctx context.Context, typ string) (ports.ChannelSettings, RetryPolicy, error) {
	cs, err := s.directory.ChannelSettings(ctx, typ)
	if err != nil && !errors.Is(err, ports.ErrNotFound) {
		return cs, nil, fmt.Errorf("channel settings of %s: %w", typ, err)
	}
	s.policyMu.Lock()
	defer s.policyMu.Unlock()
	c, ok := s.policies[typ]
	if !ok || c.settings != cs.Retry {
		c = cachedPolicy{settings: cs.Retry, policy: NewRetryPolicy(cs.Retry, typ, s.log)}
		s.policies[typ] = c
	}
	return cs, c.policy, nil
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
