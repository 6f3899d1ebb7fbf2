package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/guard/guardtest"
	"github.com/siteline/outbox/adapters/membuffer"
	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// errBlip is what a store reports while its database restarts.
var errBlip = fmt.Errorf("read tcp 127.0.0.1:41234->127.0.0.1:5432: %w", io.ErrUnexpectedEOF)

// faultStore is a memstore whose writes fail on demand, like a store whose
// database blips. Each counter is the number of calls still to fault:
//   - failX: the call fails without changing anything;
//   - lostX: the call does its work, then reports an error (the database
//     committed, the answer was lost).
type faultStore struct {
	*memstore.Store

	mu                                  sync.Mutex
	failRecord, lostRecord, failRelease int
	failAppend, lostAppend              int
	failInsert, lostInsert              int
	failStatuses, lostClaim             int
	// failRecordWhile, when set, makes a Record fail when it returns true.
	failRecordWhile func() bool
	// failGetWhile, when set, makes a Get fail when it returns true.
	failGetWhile func() bool
	calls        map[string]int
}

func newFaultStore() *faultStore {
	return &faultStore{Store: memstore.New(), calls: make(map[string]int)}
}

// fault counts a call of op and reports whether it is to fail (fail) or to
// work and then fail (lost), taking one off the matching counter.
func (f *faultStore) fault(op string, fail, lost *int) (failNow, lostNow bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[op]++
	switch {
	case fail != nil && *fail > 0:
		*fail--
		return true, false
	case lost != nil && *lost > 0:
		*lost--
		return false, true
	}
	return false, false
}

func (f *faultStore) called(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *faultStore) Record(ctx context.Context, owner string, updates []ports.Update) ([]string, error) {
	failNow, lostNow := f.fault("Record", &f.failRecord, &f.lostRecord)
	f.mu.Lock()
	while := f.failRecordWhile
	f.mu.Unlock()
	if failNow || (while != nil && while()) {
		return nil, fmt.Errorf("record: %w", errBlip)
	}
	lost, err := f.Store.Record(ctx, owner, updates)
	if lostNow && err == nil {
		return nil, fmt.Errorf("record: commit: %w", errBlip)
	}
	return lost, err
}

func (f *faultStore) Get(ctx context.Context, id string) (ports.Notification, error) {
	f.fault("Get", nil, nil)
	f.mu.Lock()
	while := f.failGetWhile
	f.mu.Unlock()
	if while != nil && while() {
		return ports.Notification{}, fmt.Errorf("get: %w", errBlip)
	}
	return f.Store.Get(ctx, id)
}

func (f *faultStore) Claim(ctx context.Context, req ports.ClaimRequest) ([]ports.Notification, error) {
	_, lostNow := f.fault("Claim", nil, &f.lostClaim)
	rows, err := f.Store.Claim(ctx, req)
	if lostNow && err == nil {
		return nil, fmt.Errorf("claim: commit: %w", errBlip)
	}
	return rows, err
}

func (f *faultStore) Release(ctx context.Context, owner string, ids []string) error {
	if failNow, _ := f.fault("Release", &f.failRelease, nil); failNow {
		return fmt.Errorf("release: %w", errBlip)
	}
	return f.Store.Release(ctx, owner, ids)
}

func (f *faultStore) Append(ctx context.Context, recs []ports.AuditRecord) error {
	failNow, lostNow := f.fault("Append", &f.failAppend, &f.lostAppend)
	if failNow {
		return fmt.Errorf("append: %w", errBlip)
	}
	err := f.Store.Append(ctx, recs)
	if lostNow && err == nil {
		return fmt.Errorf("append: commit: %w", errBlip)
	}
	return err
}

func (f *faultStore) Insert(ctx context.Context, ns []ports.Notification) ([]string, error) {
	failNow, lostNow := f.fault("Insert", &f.failInsert, &f.lostInsert)
	if failNow {
		return nil, fmt.Errorf("insert: %w", errBlip)
	}
	ids, err := f.Store.Insert(ctx, ns)
	if lostNow && err == nil {
		return nil, fmt.Errorf("insert: commit: %w", errBlip)
	}
	return ids, err
}

func (f *faultStore) Statuses(ctx context.Context, site string, ids []string) (map[string]ports.Status, error) {
	if failNow, _ := f.fault("Statuses", &f.failStatuses, nil); failNow {
		return nil, fmt.Errorf("statuses: %w", errBlip)
	}
	return f.Store.Statuses(ctx, site, ids)
}

// countingChannel counts deliveries per notification id; it may move a
// clock on each delivery, and may answer NotAttempted.
type countingChannel struct {
	clock    *stepClock
	advance  time.Duration
	roomless bool

	mu  sync.Mutex
	per map[string]int
}

func (c *countingChannel) Deliver(_ context.Context, d ports.Delivery) ports.Result {
	if c.roomless {
		return ports.Result{Outcome: ports.OutcomeTransient, Error: "rate limit", NotAttempted: true}
	}
	c.mu.Lock()
	if c.per == nil {
		c.per = make(map[string]int)
	}
	c.per[d.Notification.ID]++
	c.mu.Unlock()
	if c.clock != nil {
		c.clock.advance(c.advance)
	}
	return ports.Result{Outcome: ports.OutcomeSuccess}
}

// tally returns how many ids were delivered once, how many more than once,
// and how many deliveries there were in all.
func (c *countingChannel) tally() (once, dup, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.per {
		total += n
		if n == 1 {
			once++
		} else {
			dup++
		}
	}
	return once, dup, total
}

// blipEnv is a Service over a faultStore, with a counting channel, a hand
// moved clock and a log the test reads.
type blipEnv struct {
	t     *testing.T
	svc   *Service
	store *faultStore
	ch    *countingChannel
	clock *stepClock
	log   *guardtest.LogBuffer
}

func newBlipEnv(t *testing.T, cfg Config) *blipEnv {
	t.Helper()
	e := &blipEnv{t: t, store: newFaultStore(), clock: &stepClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		log: &guardtest.LogBuffer{}}
	e.ch = &countingChannel{}
	var err error
	e.svc, err = New(cfg, Deps{Store: e.store, Audit: e.store, Directory: okDirectory{}, Clock: e.clock,
		Channels: ports.ChannelMap{"email": e.ch},
		Logger:   slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// submit ingests n notifications and returns their ids.
func (e *blipEnv) submit(n int) []string {
	e.t.Helper()
	subs := make([]ports.Submission, n)
	for i := range subs {
		subs[i] = ports.Submission{ID: uuid.NewString(), List: "ops", SourceSite: "site-a", Subject: "s"}
	}
	res, err := e.svc.Submit(context.Background(), ports.SubmitRequest{Site: "site-a", Notifications: subs})
	if err != nil || len(res.Accepted) != n {
		e.t.Fatalf("submit: %d of %d accepted, %+v, %v", len(res.Accepted), n, res.Rejected, err)
	}
	return res.Accepted
}

// dispatchAll dispatches until a claim comes back empty.
func (e *blipEnv) dispatchAll() {
	e.t.Helper()
	for range 100 {
		n, err := e.svc.DispatchOnce(context.Background())
		if err != nil {
			e.t.Fatalf("dispatch: %v", err)
		}
		if n == 0 {
			return
		}
	}
	e.t.Fatal("dispatch does not end")
}

// afterTheLease moves the clock past every lease and dispatches again: rows
// whose outcome was not recorded are claimed and delivered again now.
func (e *blipEnv) afterTheLease() {
	e.t.Helper()
	e.clock.advance(e.svc.Config().ClaimLease + time.Second)
	e.dispatchAll()
}

// lines counts the log lines at level that contain text.
func (e *blipEnv) lines(level, text string) int {
	n := 0
	for _, l := range e.log.Lines() {
		if strings.Contains(l, "level="+level) && strings.Contains(l, text) {
			n++
		}
	}
	return n
}

// delivered checks that every id is Delivered, unleased, delivered once at
// the channel, with its history the one Attempted record, status Delivered.
func (e *blipEnv) delivered(ids []string) {
	e.t.Helper()
	ctx := context.Background()
	once, dup, total := e.ch.tally()
	lost := 0
	for _, id := range ids {
		n, err := e.store.Get(ctx, id)
		if err != nil {
			e.t.Fatal(err)
		}
		if n.Status != ports.StatusDelivered || n.ClaimedBy != "" {
			lost++
			e.t.Errorf("%s is %s, claimed by %q; want Delivered, unclaimed", id, n.Status, n.ClaimedBy)
		}
		hist, err := e.store.History(ctx, id)
		if err != nil {
			e.t.Fatal(err)
		}
		var kinds []string
		for _, h := range hist {
			kinds = append(kinds, string(h.Kind)+"/"+string(h.Status))
		}
		// One record: the attempt that delivered the row (see
		// attemptRecords), written once whatever the blips.
		if got := strings.Join(kinds, ","); got != "Attempted/Delivered" {
			e.t.Errorf("%s: history %s, want Attempted/Delivered", id, got)
		}
	}
	e.t.Logf("sent %d, delivered %d (once %d), lost %d, duplicates %d (deliveries %d), Record calls %d",
		len(ids), once+dup, once, lost, dup, total, e.store.called("Record"))
	if once != len(ids) || dup != 0 {
		e.t.Errorf("%d delivered once and %d more than once of %d; want each exactly once", once, dup, len(ids))
	}
}

// TestRecordIsRetriedThroughABlip: outcomes whose first writes fail are
// written when the store comes back within the lease, so that nothing is
// delivered again when the lease runs out.
func TestRecordIsRetriedThroughABlip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBlipEnv(t, Config{DispatchBatchSize: 100})
		ids := e.submit(50)
		e.store.failRecord = 3
		e.dispatchAll()
		e.afterTheLease()
		e.delivered(ids)
		if got := e.store.called("Record"); got != 4 {
			t.Errorf("%d Record calls, want 4 (3 failed, then the one that worked)", got)
		}
		for try := 1; try <= 3; try++ {
			if n := e.lines("WARN", fmt.Sprintf("try=%d ", try)); n != 1 {
				t.Errorf("%d WARN lines of try %d, want 1:\n%s", n, try, e.log)
			}
		}
		if n := e.lines("ERROR", ""); n != 0 {
			t.Errorf("%d ERROR lines, want none:\n%s", n, e.log)
		}
	})
}

// TestAnAmbiguousRecordKeepsTheHistory: a Record that committed but whose
// answer was lost makes the next try report the rows lost (their lease is
// gone). They are recorded after all: no delivery repeats, and their
// audit records are written.
func TestAnAmbiguousRecordKeepsTheHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBlipEnv(t, Config{DispatchBatchSize: 100})
		ids := e.submit(20)
		e.store.lostRecord = 1
		e.dispatchAll()
		e.afterTheLease()
		e.delivered(ids)
		if n := e.lines("WARN", "lease lost"); n != 0 {
			t.Errorf("the rows the lost answer had recorded were reported as taken by another node:\n%s", e.log)
		}
		if n := e.lines("INFO", "recorded these rows after all"); n != 1 {
			t.Errorf("%d lines say the earlier try had recorded the rows, want 1:\n%s", n, e.log)
		}
	})
}

// TestAnotherOwnersRowStaysLost: a row another node took over while this one
// retried is still lost: its audit records are not written, and the log
// says so.
func TestAnotherOwnersRowStaysLost(t *testing.T) {
	e := newBlipEnv(t, Config{DispatchBatchSize: 10})
	ids := e.submit(1)
	other, err := New(Config{}, Deps{Store: e.store.Store, Audit: e.store.Store, Directory: okDirectory{}, Clock: e.clock,
		Channels: ports.ChannelMap{"email": &countingChannel{}}})
	if err != nil {
		t.Fatal(err)
	}
	// The first Record fails; meanwhile the lease runs out and the other
	// node claims, delivers and records the row.
	var once sync.Once
	e.store.failRecordWhile = func() (fail bool) {
		once.Do(func() {
			fail = true
			e.clock.advance(e.svc.Config().ClaimLease - time.Second) // still a second of lease for the retries
			e.clock.advance(2 * time.Second)
			if n, err := other.DispatchOnce(context.Background()); n != 1 || err != nil {
				t.Errorf("the other node dispatched %d rows, %v", n, err)
			}
			e.clock.advance(-2 * time.Second)
		})
		return fail
	}
	e.dispatchAll()
	hist, err := e.store.History(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 1 {
		t.Errorf("history of %d records, want the other node's one only: %+v", len(hist), hist)
	}
	if n := e.lines("WARN", "lease lost"); n != 1 {
		t.Errorf("%d lines say the lease was lost, want 1:\n%s", n, e.log)
	}
}

// TestRecordOutlastsTheBatchLease: deliveries that used up all but 400 ms
// of the batch's lease, then a database away for longer than that: the
// outcomes are still written when it is back (within ClaimLease of the
// failure), and nothing is delivered again.
func TestRecordOutlastsTheBatchLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBlipEnv(t, Config{DispatchBatchSize: 10, DeliveryTimeout: time.Minute, ClaimLease: 2 * time.Minute})
		// Each delivery takes all but 400 ms of the lease (by the test's
		// clock): 400 ms of the bubble's clock are left before the lease runs out.
		e.ch.clock, e.ch.advance = e.clock, 2*time.Minute-400*time.Millisecond
		ids := e.submit(1)
		back := time.Now().Add(1500 * time.Millisecond) // the database is away for 1.5 s
		e.store.mu.Lock()
		e.store.failRecordWhile = func() bool { return time.Now().Before(back) }
		e.store.mu.Unlock()
		if _, err := e.svc.DispatchOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if tries := e.store.called("Record"); tries < 2 {
			t.Errorf("%d Record calls, want retries past the batch's lease", tries)
		}
		e.ch.advance = 0
		e.afterTheLease()
		e.delivered(ids)
	})
}

// TestRecordGivesUpAfterTheClaimLease: a database that stays away for
// longer than ClaimLease makes the dispatcher give up recording, with one
// ERROR line, and the row is delivered again once its lease ran out (the
// accepted at-least-once cost).
func TestRecordGivesUpAfterTheClaimLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBlipEnv(t, Config{DispatchBatchSize: 10, DeliveryTimeout: 100 * time.Millisecond, ClaimLease: 800 * time.Millisecond})
		ids := e.submit(1)
		e.store.mu.Lock()
		e.store.failRecordWhile = func() bool { return true }
		e.store.mu.Unlock()
		start := time.Now()
		if _, err := e.svc.DispatchOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if took > 30*time.Second {
			t.Errorf("recording took %s, far past the 800 ms claim lease", took)
		}
		tries := e.store.called("Record")
		if tries < 2 {
			t.Errorf("%d Record calls, want some retries", tries)
		}
		if n := e.lines("ERROR", "record outcomes failed; giving up"); n != 1 {
			t.Errorf("%d ERROR lines of giving up, want 1:\n%s", n, e.log)
		}
		e.store.mu.Lock()
		e.store.failRecordWhile = nil
		e.store.mu.Unlock()
		e.afterTheLease()
		once, dup, total := e.ch.tally()
		t.Logf("sent 1, Record tries %d in %s, then deliveries %d (once %d, more than once %d)", tries, took.Round(time.Millisecond), total, once, dup)
		if total != 2 || dup != 1 {
			t.Errorf("%d deliveries, want 2: the row is delivered again once its lease ran out", total)
		}
		if n, err := e.store.Get(context.Background(), ids[0]); err != nil || n.Status != ports.StatusDelivered {
			t.Errorf("row: %+v, %v", n, err)
		}
	})
}

// TestTheReadBackGivesUpWithTheLease: after a Record whose answer was lost,
// the rows the next try reports lost are read back; a store that fails
// those reads stops the read-back when the batch's lease runs out, as it
// stops the Record's own retries, instead of holding the batch (and the
// node's sweep, which waits for it) for as long as the reads fail.
func TestTheReadBackGivesUpWithTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBlipEnv(t, Config{DispatchBatchSize: 10, DeliveryTimeout: time.Minute, ClaimLease: 2 * time.Minute})
		e.ch.clock, e.ch.advance = e.clock, 2*time.Minute-400*time.Millisecond
		ids := e.submit(1)
		var down atomic.Bool
		down.Store(true)
		e.store.mu.Lock()
		e.store.lostRecord = 1
		e.store.failGetWhile = down.Load
		e.store.mu.Unlock()
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			_, err := e.svc.DispatchOnce(context.Background())
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(15 * time.Second):
			down.Store(false) // let the batch end
			<-done
			t.Fatalf("the batch was still reading back its rows %s after the 400 ms of lease left (%d Get calls)",
				time.Since(start).Round(time.Millisecond), e.store.called("Get"))
		}
		t.Logf("read-back ended after %s, %d Get calls", time.Since(start).Round(time.Millisecond), e.store.called("Get"))
		if n, err := e.store.Store.Get(context.Background(), ids[0]); err != nil || n.Status != ports.StatusDelivered {
			t.Errorf("row: %+v, %v", n, err)
		}
	})
}

// TestAnUnfixableRecordIsNotRetried: an error no retry can fix (invalid
// input) is reported at once.
func TestAnUnfixableRecordIsNotRetried(t *testing.T) {
	e := newBlipEnv(t, Config{})
	svc := e.svc
	lost, ok := svc.record(context.Background(), svc.Owner(), time.Now().Add(time.Minute),
		[]ports.Update{{ID: uuid.NewString(), Status: "Bogus"}})
	if ok || lost != nil {
		t.Errorf("record of an invalid status: %v, %v; want a failure", lost, ok)
	}
	if got := e.store.called("Record"); got != 1 {
		t.Errorf("%d Record calls, want 1", got)
	}
	if n := e.lines("ERROR", "record outcomes failed"); n != 1 {
		t.Errorf("%d ERROR lines, want 1:\n%s", n, e.log)
	}
}

// TestReleaseAndAuditAreRetried: a Release and an audit Append that fail
// are tried again; an Append whose answer was lost is not written twice;
// the dispatcher appends nothing on its own (its records go with Record).
func TestReleaseAndAuditAreRetried(t *testing.T) {
	t.Run("release", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newBlipEnv(t, Config{})
			e.ch.roomless = true
			ids := e.submit(3)
			e.store.failRelease = 2
			if _, err := e.svc.DispatchOnce(context.Background()); err == nil {
				t.Fatal("dispatch through a channel without room reported no untouched rows")
			}
			for _, id := range ids {
				if n, err := e.store.Get(context.Background(), id); err != nil || n.ClaimedBy != "" {
					t.Errorf("%s is still leased (%q, %v): the release was not tried again", id, n.ClaimedBy, err)
				}
			}
			if got := e.store.called("Release"); got != 3 {
				t.Errorf("%d Release calls, want 3", got)
			}
		})
	})
	// An operator's records are appended on their own, after the move.
	// Rows parked at ingest (no subject, no body) are discarded.
	discard := func(e *blipEnv) []string {
		subs := make([]ports.Submission, 10)
		for i := range subs {
			subs[i] = ports.Submission{ID: uuid.NewString(), List: "ops", SourceSite: "site-a"}
		}
		res, err := e.svc.Submit(context.Background(), ports.SubmitRequest{Site: "site-a", Notifications: subs})
		if err != nil || len(res.Accepted) != len(subs) {
			t.Fatalf("submit: %d accepted, %v", len(res.Accepted), err)
		}
		got, err := e.svc.Discard(context.Background(), ports.Action{Actor: "op", IDs: res.Accepted})
		if err != nil || len(got.Moved) != len(subs) {
			t.Fatalf("discard: %d moved, %v", len(got.Moved), err)
		}
		return res.Accepted
	}
	discardedOnce := func(e *blipEnv, ids []string) {
		for _, id := range ids {
			h, err := e.store.History(context.Background(), id)
			if err != nil || len(h) != 1 || h[0].Kind != ports.AuditDiscarded {
				t.Errorf("%s: history %+v, %v; want one Discarded record", id, h, err)
			}
		}
	}
	t.Run("audit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newBlipEnv(t, Config{})
			e.store.failAppend = 2
			discardedOnce(e, discard(e))
			if got := e.store.called("Append"); got != 3 {
				t.Errorf("%d Append calls, want 3", got)
			}
		})
	})
	t.Run("ambiguous audit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newBlipEnv(t, Config{})
			e.store.lostAppend = 1
			discardedOnce(e, discard(e))
			if got := e.store.called("Append"); got != 1 {
				t.Errorf("%d Append calls, want 1: the records were found written", got)
			}
		})
	})
	// The dispatcher's records go with its Record, all or nothing: an
	// Append that would fail changes nothing.
	t.Run("dispatch records with the outcome", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newBlipEnv(t, Config{})
			ids := e.submit(10)
			e.store.failAppend = 100
			e.dispatchAll()
			e.delivered(ids)
			if got := e.store.called("Append"); got != 0 {
				t.Errorf("%d Append calls by the dispatcher, want 0", got)
			}
		})
	})
}

// TestIngestIsRetriedThroughABlip: a site's batch whose Insert (or lookup
// of the ids stored already) fails a few times is acknowledged all the
// same, within the call's deadline.
func TestIngestIsRetriedThroughABlip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(*faultStore)
	}{
		{"insert fails", func(f *faultStore) { f.failInsert = 2 }},
		{"insert commits, answer lost", func(f *faultStore) { f.lostInsert = 1 }},
		{"lookup fails", func(f *faultStore) { f.lostInsert, f.failStatuses = 1, 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newBlipEnv(t, Config{})
				tc.fault(e.store)
				subs := []ports.Submission{
					{ID: uuid.NewString(), List: "ops", SourceSite: "site-a", Subject: "s"},
					{ID: uuid.NewString(), List: "ops", SourceSite: "site-a", Subject: "t"},
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				res, err := e.svc.Submit(ctx, ports.SubmitRequest{Site: "site-a", Notifications: subs})
				if err != nil || len(res.Accepted) != 2 || len(res.Rejected) != 0 {
					t.Fatalf("submit: %+v, %v; want both acknowledged", res, err)
				}
				e.dispatchAll()
				e.delivered(res.Accepted)
			})
		})
	}
	t.Run("gives up before the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newBlipEnv(t, Config{})
			e.store.failInsert = 1 << 30
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := e.svc.Submit(ctx, ports.SubmitRequest{Site: "site-a", Notifications: []ports.Submission{
				{ID: uuid.NewString(), List: "ops", SourceSite: "site-a", Subject: "s"}}})
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("submit while the store is down: %v, want the store's error", err)
			}
			if ctx.Err() != nil {
				t.Errorf("the answer came after the caller's deadline")
			}
			if e.store.called("Insert") < 2 {
				t.Errorf("%d Insert calls, want retries", e.store.called("Insert"))
			}
		})
	})
}

// TestRetryBlipBounds: retryBlip stops at an unfixable error, at until, and
// when ctx ends; and a graceContext outlives its parent by its grace only.
func TestRetryBlipBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		ctx := context.Background()
		calls := 0
		tries, err := retryBlip(ctx, log, time.Time{}, "x", "y", func(context.Context) error {
			calls++
			return fmt.Errorf("bad: %w", ports.ErrInvalid)
		})
		if tries != 1 || calls != 1 || !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("unfixable: %d tries, %d calls, %v", tries, calls, err)
		}

		start := time.Now()
		tries, err = retryBlip(ctx, log, start.Add(500*time.Millisecond), "x", "y", func(context.Context) error { return errBlip })
		if took := time.Since(start); err == nil || took > 5*time.Second || tries < 3 {
			t.Errorf("until 500 ms: %d tries in %s, %v", tries, took, err)
		}

		cctx, cancel := context.WithCancel(ctx)
		tries, err = retryBlip(cctx, log, time.Time{}, "x", "y", func(context.Context) error {
			cancel()
			return errBlip
		})
		if tries != 1 || err == nil {
			t.Errorf("cancelled: %d tries, %v", tries, err)
		}

		parent, stopParent := context.WithCancel(ctx)
		gctx, stop := graceContext(parent, 100*time.Millisecond)
		defer stop()
		stopParent()
		if gctx.Err() != nil {
			t.Error("the grace context ended with its parent")
		}
		select {
		case <-gctx.Done():
			if !errors.Is(context.Cause(gctx), errGraceOver) {
				t.Errorf("cause %v", context.Cause(gctx))
			}
		case <-time.After(30 * time.Second):
			t.Error("the grace context outlived its grace")
		}
	})
}

// flakyRemove is a site buffer whose Remove fails while fail is positive,
// like a Raft commit that timed out.
type flakyRemove struct {
	*membuffer.Buffer
	fail, removes atomic.Int64
}

func (b *flakyRemove) Remove(ctx context.Context, ids []string) error {
	b.removes.Add(1)
	if b.fail.Add(-1) >= 0 {
		return fmt.Errorf("remove: commit timed out: %w", ports.ErrUnavailable)
	}
	return b.Buffer.Remove(ctx, ids)
}

// TestForwarderRetriesTheRemoval: a removal of acknowledged notifications
// that fails is tried again at once instead of sending the batch to central
// again.
func TestForwarderRetriesTheRemoval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		buf := &flakyRemove{Buffer: membuffer.New("a")}
		buf.fail.Store(2)
		central := newFlakyCentral(t, "plant-1")
		site, err := NewSite(SiteConfig{Site: "plant-1", RetryInterval: 5 * time.Second}, SiteDeps{Buffer: buf, Central: central})
		if err != nil {
			t.Fatal(err)
		}
		(&siteEnv{site: site}).forward(t)
		id, err := site.Send(sendCtx(t), ports.SendRequest{List: "ops", Subject: "s"})
		if err != nil {
			t.Fatal(err)
		}
		waittest.For(t, time.Minute, "an empty buffer", drained(buf))
		if !central.stored(t, id) {
			t.Fatal("the notification never reached central")
		}
		t.Logf("submits %d, removes %d", central.submits.Load(), buf.removes.Load())
		if got := central.submits.Load(); got != 1 {
			t.Errorf("%d Submits, want 1: the failed removal was not tried again before sending again", got)
		}
	})
}

// TestALostClaimAnswerIsReleased: a claim that committed but whose answer
// was lost leaves rows leased to the running node that no batch holds. The
// next sweep renews the node's owner name and releases them, so they are
// delivered at once (the clock never moves: the leases would never run
// out), each exactly once.
func TestALostClaimAnswerIsReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBlipEnv(t, Config{DispatchInterval: 20 * time.Millisecond})
		ids := e.submit(30)
		e.store.lostClaim = 1
		first := e.svc.Owner()
		runService(t, e.svc)
		waittest.For(t, time.Minute, "every notification delivered", func() (bool, string) {
			_, _, total := e.ch.tally()
			return total >= len(ids), fmt.Sprintf("%d of %d delivered", total, len(ids))
		})
		e.svc.Wake()
		waittest.For(t, time.Minute, "the leases of the lost claim released", waittest.Holds(func() bool {
			return e.lines("INFO", "released the leases of a claim") == 1
		}))
		if n := e.lines("INFO", "rows=30"); n != 1 {
			t.Errorf("%d lines releasing rows=30, want 1:\n%s", n, e.log)
		}
		if e.svc.Owner() == first {
			t.Errorf("the owner name is still %s after the lost claim", first)
		}
		waittest.For(t, time.Minute, "every row recorded", allDelivered(e.store, ids))
		e.delivered(ids)
	})
}

// signalCause is a cancellation cause as signal.NotifyContext gives one:
// it is context.Canceled for errors.Is, but not equal to it.
type signalCause string

func (c signalCause) Error() string        { return string(c) }
func (c signalCause) Is(target error) bool { return target == context.Canceled }

// TestRetryBlipStoppedBySignalIsNoError: a retry cut short because the
// process is stopping (its context cancelled by a signal, whose cause is
// not context.Canceled itself) gives up at WARN, not ERROR: a normal
// shutdown logs no error.
func TestRetryBlipStoppedBySignalIsNoError(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	ctx, cancel := context.WithCancelCause(context.Background())
	tries, err := retryBlip(ctx, log, time.Time{}, "remove", "sent again", func(context.Context) error {
		cancel(signalCause("interrupt signal received"))
		return errBlip
	})
	if tries != 1 || err == nil {
		t.Fatalf("%d tries, %v", tries, err)
	}
	if out := buf.String(); strings.Contains(out, "level=ERROR") || !strings.Contains(out, "level=WARN") {
		t.Errorf("a retry stopped by a signal logged:\n%s\nwant WARN, no ERROR", out)
	}
}
