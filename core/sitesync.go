package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/siteline/outbox/ports"
)

// A site keeps central's mirror of its cached operations and its view of
// the site's health current over two calls of the link, both made by the
// site (central never dials a site):
//
//   - telemetry: after every committed change of a tracking row the leader
//     queues the row's id and version, and one sender reports the rows, as
//     the node's copy holds them then, to central in batches
//     (Central.ReportOperations), off the script's path;
//   - Sync: every node reports its health at least every
//     SiteConfig.ReportInterval; the leader's Sync is a long poll that brings
//     back the operators' commands and central's requests for pages of the
//     change feed, and carries the answers to earlier commands.

const (
	// telemetryTries is how many times one batch of telemetry is sent
	// before it is dropped (reconciliation heals it), waiting
	// telemetryBackoff, then twice that, and so on, between tries.
	telemetryTries   = 4
	telemetryBackoff = time.Second
	// telemetryLinger is how long the woken sender waits for more rows
	// before it takes a batch, so that a burst goes in one report.
	telemetryLinger = 10 * time.Millisecond
	// feedPageSize is the rows of one page of the change feed sent to
	// central.
	feedPageSize = 500
	// minSyncGap is the least time between the starts of two Syncs of a
	// leader when central asked nothing: a central that answers a long
	// poll at once does not make the leader spin.
	minSyncGap = time.Second
	// maxAppliedCommands bounds the commands applied from one Sync answer;
	// the others come again.
	maxAppliedCommands = 1000
	// rememberedCommands bounds the answers kept to commands applied in
	// this process, so that a command that comes again is answered
	// without being applied again.
	rememberedCommands = 10000
	// leadCheck is how often a follower between two Syncs looks whether it
	// leads now.
	leadCheck = 250 * time.Millisecond
	// syncLogEvery bounds how often a failing Sync is logged.
	syncLogEvery = time.Minute
)

// LinkStats counts what a site node sent central on the link since it
// started. Of the rows queued for telemetry, each is sent, dropped
// (overflow), failed (its batch was given up) or still pending.
type LinkStats struct {
	// TelemetryQueued counts the rows queued after a committed change;
	// TelemetryPending the rows in the queue now.
	TelemetryQueued  int64
	TelemetryPending int64
	// TelemetryDropped counts the rows dropped, oldest first, because the
	// queue was full (TelemetryQueue).
	TelemetryDropped int64
	// TelemetrySent counts the rows central took; TelemetryFailed the rows
	// of batches given up after telemetryTries tries (or refused), and of
	// rows central would refuse as invalid.
	TelemetrySent   int64
	TelemetryFailed int64
	// Syncs and SyncFailures count the Sync calls that succeeded and
	// failed.
	Syncs        int64
	SyncFailures int64
	// CommandsApplied and CommandsRefused count the operators' commands
	// this node answered; FeedPages the pages of the change feed it sent.
	CommandsApplied int64
	CommandsRefused int64
	FeedPages       int64
}

// link is a Site's state of the link's telemetry and Sync.
type link struct {
	mu    sync.Mutex
	queue []queuedRow
	// answered are the answers to commands applied in this process, by
	// command id; order is their ids, oldest first, for eviction.
	answered map[string]ports.CommandAnswer
	order    []string

	wake chan struct{}

	queued, dropped, sent, failed atomic.Int64
	syncs, syncFailures           atomic.Int64
	applied, refused, feedPages   atomic.Int64
}

// queuedRow is a committed change queued for telemetry: the row's id and
// the version the change left. The sender reads the row itself from the
// node's copy, so the queue holds no row and costs little when central is
// out of reach and it fills.
type queuedRow struct {
	id      string
	version uint64
}

func newLink() *link {
	return &link{answered: make(map[string]ports.CommandAnswer), wake: make(chan struct{}, 1)}
}

// LinkStats returns the node's link counters, for health and metrics.
func (s *Site) LinkStats() LinkStats {
	l := s.link
	l.mu.Lock()
	pending := int64(len(l.queue))
	l.mu.Unlock()
	return LinkStats{
		TelemetryQueued: l.queued.Load(), TelemetryPending: pending, TelemetryDropped: l.dropped.Load(),
		TelemetrySent: l.sent.Load(), TelemetryFailed: l.failed.Load(),
		Syncs: l.syncs.Load(), SyncFailures: l.syncFailures.Load(),
		CommandsApplied: l.applied.Load(), CommandsRefused: l.refused.Load(), FeedPages: l.feedPages.Load(),
	}
}

// emit queues op's change for telemetry. It never blocks: a full queue
// drops its oldest row.
func (s *Site) emit(op ports.Operation) {
	l := s.link
	l.mu.Lock()
	if len(l.queue) >= s.cfg.TelemetryQueue {
		l.queue[0] = queuedRow{}
		l.queue = l.queue[1:]
		l.dropped.Add(1)
	}
	l.queue = append(l.queue, queuedRow{id: op.ID, version: op.Version})
	l.mu.Unlock()
	l.queued.Add(1)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// take removes up to n rows from the head of the queue.
func (l *link) take(n int) []queuedRow {
	l.mu.Lock()
	defer l.mu.Unlock()
	n = min(n, len(l.queue))
	batch := slices.Clone(l.queue[:n])
	clear(l.queue[:n])
	l.queue = l.queue[n:]
	if len(l.queue) == 0 {
		l.queue = nil
	}
	return batch
}

// Sync is a site node's link to central besides the forwarder, run on
// every node (leader or not) for as long as the node runs; leads says
// whether the node leads its group now (nil: never). It owns the telemetry sender and
// returns once ctx is done and the sender has stopped.
//
// A follower calls Central.Sync with its health every
// SiteConfig.ReportInterval. A leader's Sync is a long poll of up to
// SiteConfig.ReportInterval that carries its answers to earlier commands;
// it applies the commands central returns (RetryOperation,
// DiscardOperation) and answers them in its next Sync, and sends the page
// of the change feed central asks for (Central.ReportOperations with
// Feed set). A failed Sync is made again after RetryInterval (at most
// SiteConfig.ReportInterval).
func (s *Site) Sync(ctx context.Context, leads func() bool) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.sendTelemetry(ctx) })
	s.log.Info("sync with central started", "site", s.cfg.Site, "interval", s.cfg.ReportInterval.String())
	defer s.log.Info("sync with central stopped", "site", s.cfg.Site)
	var (
		answers  []ports.CommandAnswer
		failures int
		logged   time.Time
	)
	for ctx.Err() == nil {
		start := time.Now()
		lead := leads != nil && leads()
		ans, err := s.syncOnce(ctx, lead, answers)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.link.syncFailures.Add(1)
			failures++
			if now := time.Now(); now.Sub(logged) >= syncLogEvery {
				s.log.Warn("sync with central failed; trying again", "failures", failures,
					"retry_interval", s.syncRetry().String(), "err", err)
				logged, failures = now, 0
			}
			s.sleep(ctx, s.syncRetry())
			continue
		}
		s.link.syncs.Add(1)
		answers = nil // central took them (from a leader), or a new leader gets the commands again
		if !lead {
			s.followerWait(ctx, s.cfg.ReportInterval-time.Since(start), leads)
			continue
		}
		answers = s.applyCommands(ctx, ans.Commands)
		if ans.Feed != nil {
			s.sendFeedPage(ctx, *ans.Feed)
		}
		if len(ans.Commands) == 0 && ans.Feed == nil {
			s.sleep(ctx, minSyncGap-time.Since(start))
		}
	}
}

// followerWait waits d, or until ctx is done, or until the node leads:
// a node that takes over starts its long poll at once, so that commands
// relayed to its site wait no longer than leadCheck after a failover.
func (s *Site) followerWait(ctx context.Context, d time.Duration, leads func() bool) {
	end := time.Now().Add(d)
	for ctx.Err() == nil {
		left := time.Until(end)
		if left <= 0 {
			return
		}
		s.sleep(ctx, min(left, leadCheck))
		if leads != nil && leads() {
			return
		}
	}
}

// syncRetry is the wait after a failed Sync.
func (s *Site) syncRetry() time.Duration {
	return min(s.cfg.RetryInterval, s.cfg.ReportInterval)
}

// syncOnce makes one Sync: the node's health, and from a leader its
// answers and a long poll.
func (s *Site) syncOnce(ctx context.Context, lead bool, answers []ports.CommandAnswer) (ports.SyncAnswer, error) {
	h, err := s.Health(ctx)
	if err != nil {
		return ports.SyncAnswer{}, fmt.Errorf("sync: %w", err)
	}
	req := ports.SyncRequest{Site: s.cfg.Site, Health: h, Leads: lead}
	if lead {
		req.Answers, req.Wait = answers, s.cfg.ReportInterval
	}
	cctx, cancel := context.WithTimeout(ctx, req.Wait+s.cfg.CallTimeout)
	defer cancel()
	ans, err := s.central.Sync(cctx, req)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return ans, err // we are stopping; not central's fault
	}
	if !lead {
		// A leader's contact with central is its forwarder's, which carries
		// the notifications; a failed Sync of a leader is counted and
		// logged, and must not hide that forwarding works.
		s.contact(err)
	}
	if err != nil {
		return ans, fmt.Errorf("sync: %w", err)
	}
	return ans, nil
}

// applyCommands applies the operators' commands central sent and returns
// the answers to carry in the next Sync. A command whose outcome cannot be
// known now (the store cannot commit: leadership lost) gets no answer and
// comes again.
func (s *Site) applyCommands(ctx context.Context, cmds []ports.SiteCommand) []ports.CommandAnswer {
	if len(cmds) > maxAppliedCommands {
		cmds = cmds[:maxAppliedCommands]
	}
	var out []ports.CommandAnswer
	for _, c := range cmds {
		if ctx.Err() != nil {
			break
		}
		a, ok := s.answered(c.ID)
		if !ok {
			if a, ok = s.applyCommand(ctx, c); !ok {
				continue
			}
			s.remember(a)
			if a.State == ports.CommandApplied {
				s.link.applied.Add(1)
			} else {
				s.link.refused.Add(1)
			}
			s.log.Info("applied an operator's command from central", "command", c.ID, "action", c.Action,
				"id", c.OperationID, "actor", c.Actor, "state", a.State, "result", a.Result)
		}
		out = append(out, a)
	}
	return out
}

// answered returns the answer given to command id in this process.
func (s *Site) answered(id string) (ports.CommandAnswer, bool) {
	s.link.mu.Lock()
	defer s.link.mu.Unlock()
	a, ok := s.link.answered[id]
	return a, ok
}

// remember keeps a, forgetting the oldest answer past rememberedCommands.
func (s *Site) remember(a ports.CommandAnswer) {
	l := s.link
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.answered[a.ID]; ok {
		return
	}
	if len(l.order) >= rememberedCommands {
		delete(l.answered, l.order[0])
		l.order = l.order[1:]
	}
	l.answered[a.ID] = a
	l.order = append(l.order, a.ID)
}

// applyCommand applies one command and returns its answer, idempotently:
// a Retry of an operation already Pending, Retrying or Delivered, and a
// Discard of one already Discarded, are Applied; any other operation that
// is not Parked, or that the site does not know, is Refused. ok is false
// when the outcome cannot be known now.
func (s *Site) applyCommand(ctx context.Context, c ports.SiteCommand) (a ports.CommandAnswer, ok bool) {
	a = ports.CommandAnswer{ID: c.ID, State: ports.CommandApplied}
	refuse := func(format string, args ...any) (ports.CommandAnswer, bool) {
		a.State, a.Result = ports.CommandRefused, truncate(fmt.Sprintf(format, args...), ports.MaxSiteCallErrorBytes-8)
		return a, true
	}
	if c.Site != "" && c.Site != s.cfg.Site {
		return refuse("the command is for site %.64q, not %s", c.Site, s.cfg.Site)
	}
	id, err := parseID(c.OperationID)
	if err != nil {
		return refuse("operation id %.64q is not a UUID", c.OperationID)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	var done func(ports.OpStatus) bool // the statuses that mean the command is already done
	switch c.Action {
	case ports.SiteRetry:
		_, err = s.RetryOperation(cctx, id)
		done = func(st ports.OpStatus) bool {
			return st == ports.OpPending || st == ports.OpRetrying || st == ports.OpDelivered
		}
	case ports.SiteDiscard:
		_, err = s.DiscardOperation(cctx, id)
		done = func(st ports.OpStatus) bool { return st == ports.OpDiscarded }
	default:
		return refuse("action %.40q is unknown", c.Action)
	}
	switch {
	case err == nil:
		return a, true
	case errors.Is(err, ports.ErrNotFound):
		return refuse("the site does not know operation %s", id)
	case !errors.Is(err, ports.ErrConflict):
		if ctx.Err() == nil {
			s.log.Warn("could not apply an operator's command from central; it comes again", "command", c.ID,
				"action", c.Action, "id", id, "err", err)
		}
		return a, false
	}
	op, err := s.ops.Get(cctx, id)
	switch {
	case errors.Is(err, ports.ErrNotFound):
		return refuse("the site does not know operation %s", id)
	case err != nil:
		return a, false
	case done(op.Status):
		return a, true
	case op.Status == ports.OpParked:
		return a, false // parked again meanwhile: apply it when it comes again
	}
	return refuse("operation %s is %s, not Parked", id, op.Status)
}

// sendFeedPage sends central the page of the change feed it asked for:
// after cur.After when the feed's epoch is cur.Epoch, else from the start.
// A failure is logged; central asks again.
func (s *Site) sendFeedPage(ctx context.Context, cur ports.SiteCursor) {
	page, from, err := s.readFeed(ctx, cur)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("reconciliation: read the change feed; central asks again", "err", err)
		}
		return
	}
	rep := ports.OpReport{Site: s.cfg.Site, Ops: s.reportable(page.Items),
		Feed: &ports.FeedPage{Epoch: page.Epoch, From: from, Next: page.Next, Last: len(page.Items) < feedPageSize}}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	err = s.central.ReportOperations(cctx, rep)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("reconciliation: central did not take a page of the change feed; it asks again",
				"rows", len(rep.Ops), "err", err)
		}
		return
	}
	s.link.feedPages.Add(1)
}

// readFeed reads the page of the change feed after cur, and returns it
// with the position it was read after.
func (s *Site) readFeed(ctx context.Context, cur ports.SiteCursor) (ports.OpChanges, string, error) {
	if s.ops == nil {
		return ports.OpChanges{}, "", nil
	}
	after := cur.After
	page, err := s.ops.Changes(ctx, after, feedPageSize)
	if after != "" && (errors.Is(err, ports.ErrInvalid) || err == nil && page.Epoch != cur.Epoch) {
		// Another feed than central's cursor: from the start.
		after = ""
		page, err = s.ops.Changes(ctx, after, feedPageSize)
	}
	if err != nil {
		return ports.OpChanges{}, "", fmt.Errorf("read the change feed: %w", err)
	}
	return page, after, nil
}

// reportable returns ops without their payloads, leaving out (and logging)
// a row central would refuse, which would make it refuse the whole report.
func (s *Site) reportable(ops []ports.Operation) []ports.Operation {
	out := make([]ports.Operation, 0, len(ops))
	for _, op := range ops {
		op.Payload = ports.OpPayload{}
		if err := ports.ValidateSiteCallReport(op); err != nil {
			s.log.Error("an operation cannot be reported to central; it is left out", "id", op.ID, "err", err)
			continue
		}
		out = append(out, op)
	}
	return out
}

// sendTelemetry sends the queued rows to central, up to
// ports.MaxSiteCallReport at a time, until ctx is done.
func (s *Site) sendTelemetry(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.link.wake:
		}
		s.sleep(ctx, telemetryLinger)
		for ctx.Err() == nil {
			batch := s.link.take(ports.MaxSiteCallReport)
			if len(batch) == 0 {
				break
			}
			s.sendBatch(ctx, batch)
		}
	}
}

// sendBatch reports one batch of telemetry, each row as the node's copy
// holds it now (it may have changed again since it was queued, and its
// stored Version is exact), and tries again with backoff; after
// telemetryTries, or when central refuses the batch as invalid, the batch
// is dropped and counted: reconciliation heals it.
func (s *Site) sendBatch(ctx context.Context, batch []queuedRow) {
	rows, unread := s.freshest(ctx, batch)
	merged := len(batch) - len(rows) - unread // queued again before they were sent: they go as one
	ops := s.reportable(rows)
	s.link.failed.Add(int64(len(rows) - len(ops) + unread))
	if len(ops) == 0 {
		return
	}
	wait := telemetryBackoff
	var err error
	for try := 1; ; try++ {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		err = s.central.ReportOperations(cctx, ports.OpReport{Site: s.cfg.Site, Ops: ops})
		cancel()
		if err == nil {
			s.link.sent.Add(int64(len(ops) + merged))
			return
		}
		if ctx.Err() != nil || try == telemetryTries || errors.Is(err, ports.ErrInvalid) {
			break
		}
		s.sleep(ctx, wait)
		wait *= 2
	}
	s.link.failed.Add(int64(len(ops) + merged))
	if ctx.Err() == nil {
		s.log.Warn("telemetry: central did not take a batch; it is dropped and reconciliation heals it",
			"rows", len(ops), "tries", telemetryTries, "err", err)
	}
}

// freshest reads each row of batch once from the node's copy. A row it
// cannot read (purged since, or the read failed) is left out and counted
// in unread, once per queued change; reconciliation heals what a failed
// read leaves out.
func (s *Site) freshest(ctx context.Context, batch []queuedRow) (rows []ports.Operation, unread int) {
	if s.ops == nil {
		return nil, len(batch)
	}
	changes := make(map[string]int, len(batch))
	order := make([]string, 0, len(batch))
	for _, q := range batch {
		if changes[q.id] == 0 {
			order = append(order, q.id)
		}
		changes[q.id]++
	}
	rows = make([]ports.Operation, 0, len(order))
	for _, id := range order {
		op, err := s.ops.Get(ctx, id)
		if err != nil {
			unread += changes[id]
			if !errors.Is(err, ports.ErrNotFound) && ctx.Err() == nil {
				s.log.Warn("telemetry: a changed row could not be read; reconciliation reports it", "id", id, "err", err)
			}
			continue
		}
		rows = append(rows, op)
	}
	return rows, unread
}
