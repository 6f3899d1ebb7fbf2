package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/siteline/outbox/adapters/membuffer"
	"github.com/siteline/outbox/ports"
)

// linkCentral is central as the site's link sees it, for the site's tests:
// it keeps a mirror by the version rule, answers a leader's Sync with the
// commands and feed requests a test queues (or after the wait), and runs
// the reconciliation cursor rule. Submit and Status are not used.
type linkCentral struct {
	mu      sync.Mutex
	mirror  map[string]ports.Operation
	reports []ports.OpReport
	syncs   []ports.SyncRequest
	// commands are given to every leader Sync until answered; answers
	// are every answer received.
	commands []ports.SiteCommand
	answers  []ports.CommandAnswer
	// cursor is the reconciliation cursor; wantFeed asks the leader for
	// the page after it.
	cursor   ports.SiteCursor
	wantFeed bool
	poke     chan struct{}
	// failReports fails that many more ReportOperations calls (negative:
	// all of them).
	failReports atomic.Int64
	reportCalls atomic.Int64
	// failAnswers fails that many more Syncs that carry answers; noWait
	// answers a leader at once.
	failAnswers atomic.Int64
	noWait      atomic.Bool
}

func newLinkCentral() *linkCentral {
	return &linkCentral{mirror: map[string]ports.Operation{}, poke: make(chan struct{}, 1)}
}

func (c *linkCentral) Submit(context.Context, ports.SubmitRequest) (ports.SubmitResult, error) {
	return ports.SubmitResult{}, fmt.Errorf("not in this test: %w", ports.ErrUnavailable)
}

func (c *linkCentral) Status(context.Context, ports.StatusRequest) (map[string]ports.Status, error) {
	return nil, fmt.Errorf("not in this test: %w", ports.ErrUnavailable)
}

func (c *linkCentral) ReportOperations(_ context.Context, req ports.OpReport) error {
	c.reportCalls.Add(1)
	if n := c.failReports.Add(-1); n >= 0 || n < -1_000_000 {
		return fmt.Errorf("connection refused: %w", ports.ErrUnavailable)
	}
	c.failReports.Store(0)
	if len(req.Ops) > ports.MaxSiteCallReport {
		return fmt.Errorf("%d rows: %w", len(req.Ops), ports.ErrInvalid)
	}
	for _, op := range req.Ops {
		if err := ports.ValidateSiteCallReport(op); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reports = append(c.reports, req)
	for _, op := range req.Ops {
		if old, ok := c.mirror[op.ID]; !ok || op.Version > old.Version {
			c.mirror[op.ID] = op
		}
	}
	if f := req.Feed; f != nil {
		if f.Epoch == c.cursor.Epoch && f.From == c.cursor.After || f.Epoch != c.cursor.Epoch && f.From == "" {
			c.cursor = ports.SiteCursor{Epoch: f.Epoch, After: f.Next}
		}
		c.wantFeed = !f.Last
		c.signal()
	}
	return nil
}

func (c *linkCentral) signal() {
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

func (c *linkCentral) Sync(ctx context.Context, req ports.SyncRequest) (ports.SyncAnswer, error) {
	if len(req.Answers) > 0 && c.failAnswers.Add(-1) >= 0 {
		return ports.SyncAnswer{}, fmt.Errorf("connection reset: %w", ports.ErrUnavailable)
	}
	c.mu.Lock()
	c.syncs = append(c.syncs, req)
	if req.Leads {
		c.answers = append(c.answers, req.Answers...)
		for _, a := range req.Answers {
			c.commands = slices.DeleteFunc(c.commands, func(cmd ports.SiteCommand) bool { return cmd.ID == a.ID })
		}
	}
	c.mu.Unlock()
	t := time.NewTimer(req.Wait)
	defer t.Stop()
	for {
		c.mu.Lock()
		var ans ports.SyncAnswer
		ans.Commands = slices.Clone(c.commands)
		if c.wantFeed {
			cur := c.cursor
			ans.Feed = &cur
		}
		c.mu.Unlock()
		if len(ans.Commands) > 0 || ans.Feed != nil || !req.Leads || c.noWait.Load() {
			return ans, nil
		}
		select {
		case <-ctx.Done():
			return ports.SyncAnswer{}, ctx.Err()
		case <-t.C:
			return ports.SyncAnswer{}, nil
		case <-c.poke:
		}
	}
}

// ask queues commands and, with feed, a request for the feed after the
// cursor.
func (c *linkCentral) ask(feed bool, cmds ...ports.SiteCommand) {
	c.mu.Lock()
	c.commands = append(c.commands, cmds...)
	c.wantFeed = c.wantFeed || feed
	c.mu.Unlock()
	c.signal()
}

// reported returns the reports of id, in order, as "Status/Version".
func (c *linkCentral) reported(id string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.reports {
		for _, op := range r.Ops {
			if op.ID == id {
				out = append(out, fmt.Sprintf("%s/%d", op.Status, op.Version))
			}
		}
	}
	return out
}

// feedPages returns the feed pages central received.
func (c *linkCentral) feedPages() []ports.OpReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []ports.OpReport
	for _, r := range c.reports {
		if r.Feed != nil {
			out = append(out, r)
		}
	}
	return out
}

type syncEnv struct {
	site    *Site
	ops     *membuffer.Ops
	gw      *scriptedGateway
	central *linkCentral
	leads   atomic.Bool
}

// newSyncEnv builds a site whose "erp" target fails its first four
// attempts of each operation and then delivers (MaxRetries 3, every 10 s),
// and whose "plant" target is always down and parks at once (MaxRetries
// 0). The node leads.
func newSyncEnv(t *testing.T, cfg SiteConfig) *syncEnv {
	t.Helper()
	cfg.Site = "plant-1"
	gw := newScriptedGateway(func(_ context.Context, op ports.Operation, n int) ports.OpResult {
		if op.Target == "erp" && n > 4 {
			return okResult
		}
		return downResult
	})
	gw.policies["plant"] = ports.OpPolicy{MaxRetries: 0, Interval: 10 * time.Second}
	e := &syncEnv{ops: membuffer.NewOps(), gw: gw, central: newLinkCentral()}
	s, err := NewSite(cfg, SiteDeps{Buffer: membuffer.New("a"), Central: e.central, Ops: e.ops, Gateway: gw})
	if err != nil {
		t.Fatal(err)
	}
	e.site = s
	e.leads.Store(true)
	return e
}

func (e *syncEnv) sync(t *testing.T) {
	run(t, func(ctx context.Context) { e.site.Sync(ctx, e.leads.Load) })
}

func (e *syncEnv) call(t *testing.T, system string) ports.Operation {
	t.Helper()
	out, err := e.site.CachedCall(sendCtx(t), ports.CallRequest{System: system, Method: "post",
		Params: []byte(`{"part":"P-7"}`), OpSource: ports.OpSource{SourceScript: "orders.py"}})
	if err != nil {
		t.Fatalf("CachedCall: %v", err)
	}
	return out.Operation
}

// converged fails the test unless central's mirror holds exactly the
// site's rows, at the same versions, without payloads.
func (e *syncEnv) converged(t *testing.T) {
	t.Helper()
	page, err := e.ops.Changes(context.Background(), "", 100000)
	if err != nil {
		t.Fatal(err)
	}
	e.central.mu.Lock()
	defer e.central.mu.Unlock()
	if len(e.central.mirror) != len(page.Items) {
		t.Errorf("central mirrors %d rows, the site holds %d", len(e.central.mirror), len(page.Items))
	}
	for _, op := range page.Items {
		m, ok := e.central.mirror[op.ID]
		op.Payload = ports.OpPayload{}
		if !ok || fmt.Sprintf("%+v", m) != fmt.Sprintf("%+v", op) {
			t.Errorf("row %s: central has %+v, the site %+v", op.ID, m, op)
		}
	}
}

func (e *syncEnv) stats() string {
	s := e.site.LinkStats()
	return fmt.Sprintf("queued %d pending %d dropped %d sent %d failed %d", s.TelemetryQueued, s.TelemetryPending,
		s.TelemetryDropped, s.TelemetrySent, s.TelemetryFailed)
}

// TestTelemetryReportsEveryTransition: each committed change of a tracking
// row reaches central with its new version and without its payload: the
// first attempt, each redelivery, and an operator's Retry and Discard.
func TestTelemetryReportsEveryTransition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newSyncEnv(t, SiteConfig{})
		e.sync(t)
		run(t, e.site.Redeliver)
		a := e.call(t, "erp")
		b := e.call(t, "plant")
		time.Sleep(time.Second)
		synctest.Wait()
		if got := e.central.reported(a.ID); fmt.Sprint(got) != "[Pending/1]" {
			t.Errorf("after the first attempt, central got %v", got)
		}
		time.Sleep(time.Minute) // retries at 10, 20 and 30 s: parked
		synctest.Wait()
		if got := e.central.reported(a.ID); fmt.Sprint(got) != "[Pending/1 Retrying/2 Retrying/3 Parked/4]" {
			t.Errorf("after redelivery, central got %v", got)
		}
		if _, err := e.site.RetryOperation(sendCtx(t), a.ID); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		// The Retry (version 5) and the delivery (6) came within the
		// sender's linger: the row goes once, as it is now.
		if got := e.central.reported(a.ID); fmt.Sprint(got) != "[Pending/1 Retrying/2 Retrying/3 Parked/4 Delivered/6]" {
			t.Errorf("after the operator's Retry, central got %v", got)
		}
		if _, err := e.site.DiscardOperation(sendCtx(t), b.ID); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := e.central.reported(b.ID); fmt.Sprint(got) != "[Parked/1 Discarded/2]" {
			t.Errorf("after the operator's Discard, central got %v", got)
		}
		e.converged(t)
		for _, r := range e.central.reports {
			if r.Site != "plant-1" || r.Feed != nil {
				t.Errorf("a telemetry report: site %q, feed %+v", r.Site, r.Feed)
			}
		}
		if st := e.site.LinkStats(); st.TelemetryQueued != 8 || st.TelemetrySent != 8 || st.TelemetryPending != 0 ||
			st.TelemetryDropped != 0 || st.TelemetryFailed != 0 {
			t.Errorf("link stats: %s", e.stats())
		}
	})
}

// TestTelemetryOverflowDropsTheOldest: with no sender running, the calls
// still return; the queue keeps the newest TelemetryQueue rows and counts
// the dropped ones, and the sender sends what it kept.
func TestTelemetryOverflowDropsTheOldest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newSyncEnv(t, SiteConfig{TelemetryQueue: 3})
		var ids []string
		for range 5 {
			ids = append(ids, e.call(t, "plant").ID)
		}
		if st := e.site.LinkStats(); st.TelemetryQueued != 5 || st.TelemetryDropped != 2 || st.TelemetryPending != 3 {
			t.Errorf("before the sender runs: %s", e.stats())
		}
		e.sync(t)
		time.Sleep(time.Second)
		synctest.Wait()
		for i, id := range ids {
			want := "[Parked/1]"
			if i < 2 {
				want = "[]"
			}
			if got := e.central.reported(id); fmt.Sprint(got) != want {
				t.Errorf("call %d: central got %v, want %s", i, got, want)
			}
		}
		if st := e.site.LinkStats(); st.TelemetrySent != 3 || st.TelemetryPending != 0 || st.TelemetryDropped != 2 {
			t.Errorf("after sending: %s", e.stats())
		}
	})
}

// TestTelemetrySendsRowsAsStoredWhenSent: the queue holds changes, not
// rows; the sender reads each row as the node holds it when it sends. A
// row discarded and purged before the sender ran is not sent, and its two
// queued changes count as failed (central's own purge removes its copy).
func TestTelemetrySendsRowsAsStoredWhenSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newSyncEnv(t, SiteConfig{})
		kept, gone := e.call(t, "plant"), e.call(t, "plant")
		for _, id := range []string{gone.ID, kept.ID} {
			if _, err := e.site.DiscardOperation(sendCtx(t), id); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
		}
		purgeAt := e.get(t, gone.ID).TerminalAt.Add(time.Nanosecond)
		if n, err := e.ops.Purge(sendCtx(t), purgeAt, 10); err != nil || n != 1 {
			t.Fatalf("purge: %d, %v", n, err)
		}
		if _, err := e.ops.Get(sendCtx(t), gone.ID); !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("the purged row: %v", err)
		}
		e.sync(t)
		time.Sleep(time.Second)
		synctest.Wait()
		if got := e.central.reported(kept.ID); fmt.Sprint(got) != "[Discarded/2]" {
			t.Errorf("the kept row: central got %v", got)
		}
		if got := e.central.reported(gone.ID); len(got) != 0 {
			t.Errorf("the purged row: central got %v", got)
		}
		if st := e.site.LinkStats(); st.TelemetryQueued != 4 || st.TelemetrySent != 2 || st.TelemetryFailed != 2 ||
			st.TelemetryPending != 0 {
			t.Errorf("link stats: %s", e.stats())
		}
	})
}

// TestTelemetryRetriesABatchThenDropsIt: a batch central does not take is
// sent again after 1, 2 and 4 s; a batch still refused then is dropped and
// counted, and a call never waits for any of it.
func TestTelemetryRetriesABatchThenDropsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newSyncEnv(t, SiteConfig{})
		e.sync(t)
		e.central.failReports.Store(2)
		a := e.call(t, "plant")
		synctest.Wait()
		time.Sleep(2 * time.Second) // two failures (at 10 ms and 1 s), the third try at 3 s
		synctest.Wait()
		if got := e.central.reported(a.ID); len(got) != 0 {
			t.Errorf("at 2 s central got %v", got)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := e.central.reported(a.ID); fmt.Sprint(got) != "[Parked/1]" || e.central.reportCalls.Load() != 3 {
			t.Errorf("at 4 s central got %v after %d calls", got, e.central.reportCalls.Load())
		}

		e.central.failReports.Store(-1 << 40) // down for good
		start := time.Now()
		e.call(t, "plant")
		if time.Since(start) != 0 {
			t.Errorf("the call waited %s", time.Since(start))
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := e.central.reportCalls.Load(); got != 3+telemetryTries {
			t.Errorf("%d calls of ReportOperations, want %d", got, 3+telemetryTries)
		}
		if st := e.site.LinkStats(); st.TelemetrySent != 1 || st.TelemetryFailed != 1 || st.TelemetryPending != 0 {
			t.Errorf("after central stayed down: %s", e.stats())
		}
	})
}

// TestReconciliationSendsTheFeedInPages: central asks the leader for its
// feed after its cursor; the leader sends pages of 500 that continue one
// another until the last, and central's mirror converges to the site's
// table with no telemetry at all. A cursor of another feed epoch, or with
// no epoch, is read from the start.
func TestReconciliationSendsTheFeedInPages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newSyncEnv(t, SiteConfig{})
		now := time.Now().UTC()
		var changes []ports.OpChange
		for i := range 1200 {
			changes = append(changes, ports.OpChange{Op: ports.Operation{ID: fmt.Sprintf("0193a000-0000-7000-8000-%012d", i),
				Kind: ports.OpCall, Target: "erp", Method: "post", Status: ports.OpParked, CreatedAt: now, UpdatedAt: now,
				Payload: ports.OpPayload{Params: []byte(`{}`)}}})
		}
		if _, err := e.ops.Put(context.Background(), changes); err != nil {
			t.Fatal(err)
		}
		e.central.ask(true)
		e.sync(t)
		synctest.Wait()
		pages := e.central.feedPages()
		var got []string
		prev := ""
		for _, p := range pages {
			got = append(got, fmt.Sprintf("%d/%v", len(p.Ops), p.Feed.Last))
			if p.Feed.From != prev || p.Feed.Epoch == "" {
				t.Errorf("a page from %q in epoch %q, want from %q", p.Feed.From, p.Feed.Epoch, prev)
			}
			prev = p.Feed.Next
		}
		if fmt.Sprint(got) != "[500/false 500/false 200/true]" {
			t.Errorf("pages %v", got)
		}
		e.converged(t)
		epoch := e.central.cursor.Epoch

		// Another feed's cursor (a site rebuilt from nothing): from the start.
		mid := pages[0].Feed.Next
		for _, cur := range []ports.SiteCursor{{Epoch: "another-feed", After: mid}, {After: mid}} {
			e.central.mu.Lock()
			e.central.cursor, e.central.reports = cur, nil
			e.central.mu.Unlock()
			e.central.ask(true)
			synctest.Wait()
			pages = e.central.feedPages()
			if len(pages) != 3 || pages[0].Feed.From != "" || pages[0].Feed.Epoch != epoch || len(pages[0].Ops) != 500 {
				t.Errorf("cursor %+v: %d pages, the first from %q in %q", cur, len(pages), pages[0].Feed.From, pages[0].Feed.Epoch)
			}
		}
		// The same epoch: after the cursor.
		e.central.mu.Lock()
		e.central.cursor, e.central.reports = ports.SiteCursor{Epoch: epoch, After: mid}, nil
		e.central.mu.Unlock()
		e.central.ask(true)
		synctest.Wait()
		if pages = e.central.feedPages(); len(pages) != 2 || pages[0].Feed.From != mid || !pages[1].Feed.Last {
			t.Errorf("after the cursor: %d pages", len(pages))
		}
		for _, p := range pages {
			for _, op := range p.Ops {
				if op.Payload.Params != nil {
					t.Fatalf("a feed row carries its payload: %+v", op)
				}
			}
		}
		if n := e.site.LinkStats().FeedPages; n != 11 {
			t.Errorf("%d feed pages counted, want 11", n)
		}
	})
}

// TestReconciliationHealsLostTelemetry: telemetry lost while central was
// down is healed by the next feed request.
func TestReconciliationHealsLostTelemetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newSyncEnv(t, SiteConfig{})
		e.sync(t)
		run(t, e.site.Redeliver)
		e.central.failReports.Store(-1 << 40)
		a, b := e.call(t, "erp"), e.call(t, "plant")
		time.Sleep(time.Hour) // a parked after its third retry
		synctest.Wait()
		if _, err := e.site.RetryOperation(sendCtx(t), a.ID); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour) // a delivered
		synctest.Wait()
		if st := e.site.LinkStats(); st.TelemetryFailed == 0 || st.TelemetrySent != 0 {
			t.Fatalf("central down: %s", e.stats())
		}
		e.central.failReports.Store(0)
		e.central.ask(true)
		synctest.Wait()
		e.converged(t)
		e.central.mu.Lock()
		defer e.central.mu.Unlock()
		if got := e.central.mirror[a.ID].Status; got != ports.OpDelivered {
			t.Errorf("a is %s at central", got)
		}
		if got := e.central.mirror[b.ID].Status; got != ports.OpParked {
			t.Errorf("b is %s at central", got)
		}
	})
}

// TestSyncAppliesCommandsIdempotently: the leader applies the operators'
// commands central returns and answers each in its next Sync: Applied for
// a Parked row and for one already as asked, Refused for the others; a
// command that comes again is answered the same without being applied
// again.
func TestSyncAppliesCommandsIdempotently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newSyncEnv(t, SiteConfig{})
		run(t, e.site.Redeliver)
		parked := e.call(t, "plant")    // retried: fails again and parks again
		toDiscard := e.call(t, "plant") // discarded
		discarded := e.call(t, "plant")
		if _, err := e.site.DiscardOperation(sendCtx(t), discarded.ID); err != nil {
			t.Fatal(err)
		}
		pending := e.call(t, "erp") // Pending
		unknown := newUUID(t)
		cmd := func(id string, action ports.SiteCommandAction, op string) ports.SiteCommand {
			return ports.SiteCommand{ID: id, Site: "plant-1", OperationID: op, Action: action, Actor: "ana",
				RequestedAt: time.Now(), State: ports.CommandRequested}
		}
		cmds := []ports.SiteCommand{
			cmd("c1", ports.SiteRetry, parked.ID),
			cmd("c2", ports.SiteDiscard, toDiscard.ID),
			cmd("c3", ports.SiteRetry, pending.ID),
			cmd("c4", ports.SiteDiscard, discarded.ID),
			cmd("c5", ports.SiteRetry, discarded.ID),
			cmd("c6", ports.SiteDiscard, pending.ID),
			cmd("c7", ports.SiteRetry, unknown),
			cmd("c8", ports.SiteRetry, "op-1"),
			cmd("c9", "Reboot", parked.ID),
		}
		e.central.ask(false, cmds...)
		e.sync(t)
		synctest.Wait()
		answers := func() map[string]string {
			e.central.mu.Lock()
			defer e.central.mu.Unlock()
			m := map[string]string{}
			for _, a := range e.central.answers {
				m[a.ID] += string(a.State) + ";"
			}
			return m
		}
		want := map[string]string{"c1": "Applied;", "c2": "Applied;", "c3": "Applied;", "c4": "Applied;",
			"c5": "Refused;", "c6": "Refused;", "c7": "Refused;", "c8": "Refused;", "c9": "Refused;"}
		if got := answers(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("answers %v, want %v", got, want)
		}
		e.central.mu.Lock()
		for _, a := range e.central.answers {
			if a.State == ports.CommandRefused && a.Result == "" {
				t.Errorf("command %s refused with no reason", a.ID)
			}
		}
		e.central.mu.Unlock()
		if got := e.gw.tries(parked.ID); len(got) != 2 {
			t.Errorf("the retried call was attempted %d times, want 2", len(got))
		}
		p := e.get(t, parked.ID)
		if p.Status != ports.OpParked || p.Version != 3 {
			t.Errorf("retried: %+v", p)
		}
		if got := e.get(t, toDiscard.ID).Status; got != ports.OpDiscarded {
			t.Errorf("discarded: %s", got)
		}
		// Telemetry carried what the commands did (the row parked and was
		// discarded within the sender's linger: it went once, as it is).
		time.Sleep(time.Second)
		synctest.Wait()
		if got := e.central.reported(toDiscard.ID); fmt.Sprint(got) != "[Discarded/2]" {
			t.Errorf("central got %v of the discarded row", got)
		}

		// Central sends c1 and c2 again (an answer lost): answered the
		// same, not applied again.
		e.central.ask(false, cmds[0], cmds[1])
		synctest.Wait()
		want["c1"], want["c2"] = "Applied;Applied;", "Applied;Applied;"
		if got := answers(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("answers %v, want %v", got, want)
		}
		if got := e.gw.tries(parked.ID); len(got) != 2 || e.get(t, parked.ID).Version != 3 {
			t.Errorf("a command that came again was applied again: %d attempts, %+v", len(got), e.get(t, parked.ID))
		}
		if st := e.site.LinkStats(); st.CommandsApplied != 4 || st.CommandsRefused != 5 {
			t.Errorf("commands applied %d, refused %d", st.CommandsApplied, st.CommandsRefused)
		}
	})
}

func (e *syncEnv) get(t *testing.T, id string) ports.Operation {
	t.Helper()
	op, err := e.ops.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return op
}

// TestSyncFollowerSendsHealthOnly: a follower reports its health every
// SiteReportInterval without waiting, and neither answers nor applies
// commands nor sends its feed; once it leads it long-polls with its
// health at once, not at its next report.
func TestSyncFollowerSendsHealthOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newSyncEnv(t, SiteConfig{})
		e.leads.Store(false)
		p := e.call(t, "plant")
		e.central.ask(true, ports.SiteCommand{ID: "c1", Site: "plant-1", OperationID: p.ID, Action: ports.SiteDiscard,
			Actor: "ana", RequestedAt: time.Now()})
		e.sync(t)
		synctest.Wait()
		time.Sleep(time.Minute - time.Millisecond)
		synctest.Wait()
		e.central.mu.Lock()
		syncs := slices.Clone(e.central.syncs)
		e.central.mu.Unlock()
		if len(syncs) != 4 {
			t.Errorf("%d Syncs in a minute, want 4 (every %s)", len(syncs), ports.SiteReportInterval)
		}
		for _, s := range syncs {
			if s.Leads || s.Wait != 0 || len(s.Answers) != 0 || s.Health.Site != "plant-1" || s.Health.Node != "a" ||
				len(s.Health.Operations) == 0 {
				t.Errorf("a follower's Sync: %+v", s)
			}
		}
		if got := e.get(t, p.ID).Status; got != ports.OpParked {
			t.Errorf("a follower applied a command: %s", got)
		}
		if n := len(e.central.feedPages()); n != 0 {
			t.Errorf("a follower sent %d feed pages", n)
		}

		// It becomes the leader between two reports: within leadCheck,
		// not at its next report, it long-polls, applies and answers.
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := e.get(t, p.ID).Status; got != ports.OpParked {
			t.Fatalf("a follower applied a command: %s", got)
		}
		e.leads.Store(true)
		time.Sleep(leadCheck)
		synctest.Wait()
		if got := e.get(t, p.ID).Status; got != ports.OpDiscarded {
			t.Errorf("the new leader did not apply the command: %s", got)
		}
		e.central.mu.Lock()
		last := e.central.syncs[len(e.central.syncs)-1]
		e.central.mu.Unlock()
		if !last.Leads || last.Wait != ports.SiteReportInterval || len(e.central.answers) != 1 {
			t.Errorf("the leader's Sync: %+v, answers %v", last, e.central.answers)
		}
	})
}

// BenchmarkTelemetryEmit measures what telemetry adds to a committed
// change: queuing the row (the sender is not running; the queue overflows
// and drops, as with central out of reach).
func BenchmarkTelemetryEmit(b *testing.B) {
	s, err := NewSite(SiteConfig{Site: "plant-1"}, SiteDeps{Buffer: membuffer.New("a"), Central: newLinkCentral()})
	if err != nil {
		b.Fatal(err)
	}
	op := ports.Operation{ID: "0193a000-0000-7000-8000-000000000001", Kind: ports.OpCall, Target: "erp", Method: "post",
		Status: ports.OpPending, Version: 1, CreatedAt: time.Now(), UpdatedAt: time.Now()}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.emit(op)
		}
	})
}

// TestSyncKeepsAnswersUntilCentralHasThem: answers whose Sync failed go in
// the next one, after RetryInterval; and a central that answers a leader's
// long poll at once does not make it call more than once a second.
func TestSyncKeepsAnswersUntilCentralHasThem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newSyncEnv(t, SiteConfig{RetryInterval: 5 * time.Second})
		p := e.call(t, "plant")
		e.central.failAnswers.Store(1)
		e.central.ask(false, ports.SiteCommand{ID: "c1", Site: "plant-1", OperationID: p.ID, Action: ports.SiteDiscard,
			Actor: "ana", RequestedAt: time.Now()})
		e.sync(t)
		synctest.Wait()
		e.central.mu.Lock()
		n := len(e.central.answers)
		e.central.mu.Unlock()
		if n != 0 || e.site.LinkStats().SyncFailures != 1 {
			t.Fatalf("%d answers, %d failures", n, e.site.LinkStats().SyncFailures)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		e.central.mu.Lock()
		got := fmt.Sprint(e.central.answers)
		e.central.mu.Unlock()
		if got != "[{c1 Applied }]" {
			t.Errorf("answers after the retry: %s", got)
		}

		e.central.noWait.Store(true)
		e.central.signal() // ends the long poll under way
		synctest.Wait()
		before := e.site.LinkStats().Syncs
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := e.site.LinkStats().Syncs - before; n < 59 || n > 61 {
			t.Errorf("%d Syncs in a minute against a central that does not wait, want 60", n)
		}
	})
}
