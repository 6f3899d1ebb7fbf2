package core

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
)

// brokenDirectory fails every lookup once down, like a directory whose
// database is down; until then it knows every list as an email list.
type brokenDirectory struct {
	calls atomic.Int64
	down  atomic.Bool
}

func (d *brokenDirectory) List(ctx context.Context, name string) (ports.List, error) {
	if !d.down.Load() {
		return okDirectory{}.List(ctx, name)
	}
	d.calls.Add(1)
	return ports.List{}, errors.New("directory database unreachable")
}

func (d *brokenDirectory) ChannelSettings(context.Context, string) (ports.ChannelSettings, error) {
	return ports.ChannelSettings{}, errors.New("directory database unreachable")
}

// TestSweepStopsWhenTheDirectoryFails: rows that cannot be prepared go back
// untouched, and the sweep ends instead of claiming them again at once (which
// would spin on the database for as long as the directory is down).
func TestSweepStopsWhenTheDirectoryFails(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	dir := &brokenDirectory{}
	svc, err := New(Config{DispatchBatchSize: 1}, Deps{Store: store, Audit: store, Directory: dir,
		Channels: ports.ChannelMap{}})
	if err != nil {
		t.Fatal(err)
	}
	// More rows than the sweep pipeline holds leased at once (8 batches of
	// 1): without the stop, some row is always free to claim again.
	var ids []string
	for range 20 {
		res, err := svc.Submit(ctx, ports.SubmitRequest{Notifications: []ports.Submission{{
			ID: uuid.NewString(), List: "ops", Type: "email", SourceSite: "site-a", Subject: "s"}}})
		if err != nil || len(res.Accepted) != 1 {
			t.Fatalf("submit: %+v, %v", res, err)
		}
		ids = append(ids, res.Accepted[0])
	}
	dir.down.Store(true)

	done := make(chan struct{})
	go func() {
		defer close(done)
		svc.sweep(ctx)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("the sweep did not end: it went on claiming released rows (%d directory calls)", dir.calls.Load())
	}
	for _, id := range ids {
		n, err := store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if n.Status != ports.StatusPending || n.RetryCount != 0 || n.ClaimedBy != "" {
			t.Errorf("row %s changed: %s, %d retries, claimed by %q", id, n.Status, n.RetryCount, n.ClaimedBy)
		}
	}
	if _, err := svc.DispatchOnce(ctx); err == nil || !strings.Contains(err.Error(), "the directory failed") {
		t.Errorf("DispatchOnce with a failing directory: %v", err)
	}
}

// stepClock is a manual clock.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// slowChannel succeeds, taking d of the clock's time per delivery.
type slowChannel struct {
	clock *stepClock
	d     time.Duration
	calls atomic.Int64
}

func (c *slowChannel) Deliver(_ context.Context, d ports.Delivery) ports.Result {
	c.calls.Add(1)
	c.clock.advance(c.d)
	return ports.Result{Outcome: ports.OutcomeSuccess}
}

// TestNoDeliveryStartsThatCouldOutliveItsLease: rows whose lease would run
// out during a delivery are released untouched instead of delivered, so no
// other node can take over a row this one is still delivering.
func TestNoDeliveryStartsThatCouldOutliveItsLease(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	clock := &stepClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ch := &slowChannel{clock: clock, d: 90 * time.Second}
	dir := okDirectory{}
	svc, err := New(Config{DispatchBatchSize: 2, DispatchConcurrency: 1, DeliveryTimeout: time.Minute, ClaimLease: 2 * time.Minute},
		Deps{Store: store, Audit: store, Directory: dir, Clock: clock, Channels: ports.ChannelMap{"email": ch}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := svc.Submit(ctx, ports.SubmitRequest{Notifications: []ports.Submission{{
			ID: uuid.NewString(), List: "ops", SourceSite: "site-a", Subject: "s"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := svc.DispatchOnce(ctx); err != nil || n != 2 {
		t.Fatalf("dispatch: %d, %v", n, err)
	}
	if got := ch.calls.Load(); got != 1 {
		t.Fatalf("%d deliveries; want 1: the second started 90 s into a 2 min lease with a 1 min timeout", got)
	}
	page, err := store.Query(ctx, ports.Filter{Statuses: []ports.Status{ports.StatusPending}}, ports.PageRequest{Limit: 10})
	if err != nil || len(page.Items) != 1 || page.Items[0].ClaimedBy != "" || page.Items[0].RetryCount != 0 {
		t.Fatalf("the skipped row should be Pending, unleased and unattempted: %+v, %v", page.Items, err)
	}
}

// okDirectory knows every list: a list named "NAME:TYPE" is of type TYPE,
// any other an email list.
type okDirectory struct{}

func (okDirectory) List(_ context.Context, name string) (ports.List, error) {
	typ := "email"
	if _, t, ok := strings.Cut(name, ":"); ok {
		typ = t
	}
	return ports.List{Name: name, Type: typ, Targets: []string{"ops@example.com"}}, nil
}

func (okDirectory) ChannelSettings(context.Context, string) (ports.ChannelSettings, error) {
	return ports.ChannelSettings{}, ports.ErrNotFound
}

// roomless answers every delivery NotAttempted, like a channel whose rate
// limit has no room before the deadline.
type roomless struct{ calls atomic.Int64 }

func (r *roomless) Deliver(context.Context, ports.Delivery) ports.Result {
	r.calls.Add(1)
	return ports.Result{Outcome: ports.OutcomeTransient, Error: "rate limit", NotAttempted: true, RetryAfter: 3 * time.Second}
}

// TestNotAttemptedLeavesTheRowUntouched: a delivery the channel did not
// attempt counts no retry and writes no audit record; the row goes back
// Pending and unclaimed, and the sweep stops and comes back after RetryAfter.
func TestNotAttemptedLeavesTheRowUntouched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := memstore.New()
		ch := &roomless{}
		svc, err := New(Config{}, Deps{Store: store, Audit: store, Channels: ports.ChannelMap{"email": ch},
			Directory: okDirectory{}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := svc.Submit(ctx, ports.SubmitRequest{Notifications: []ports.Submission{{
			ID: uuid.NewString(), List: "ops", SourceSite: "site-a", Subject: "s"}}})
		if err != nil || len(res.Accepted) != 1 {
			t.Fatalf("submit: %+v, %v", res, err)
		}
		id := res.Accepted[0]
		before := time.Now()
		next := svc.sweep(ctx)
		if ch.calls.Load() != 1 {
			t.Fatalf("%d deliveries, want 1 (the sweep must stop, not claim the row again)", ch.calls.Load())
		}
		if next.Before(before.Add(3*time.Second)) || next.After(time.Now().Add(3*time.Second)) {
			t.Errorf("next sweep at %v, want about 3 s from now", next)
		}
		n, err := store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if n.Status != ports.StatusPending || n.RetryCount != 0 || n.ClaimedBy != "" || !n.LastAttemptAt.IsZero() {
			t.Errorf("row after a delivery not attempted: %+v", n)
		}
		h, err := store.History(ctx, id)
		if err != nil || len(h) != 0 {
			t.Errorf("audit records %+v, %v; want none", h, err)
		}
	})
}

// orderChannel records the order in which deliveries start, by priority.
type orderChannel struct {
	mu      sync.Mutex
	started []int
}

func (c *orderChannel) Deliver(_ context.Context, d ports.Delivery) ports.Result {
	c.mu.Lock()
	c.started = append(c.started, d.Notification.Priority)
	c.mu.Unlock()
	time.Sleep(time.Millisecond) // in the bubble: until every other goroutine waits (for a slot, say)
	return ports.Result{Outcome: ports.OutcomeSuccess}
}

// TestBatchesGoOutInClaimOrder: the batches of a sweep's pipeline take
// delivery slots one after the other, in the order they were claimed
// (priority order), instead of all advancing together. Interleaved, every
// batch would finish late and together, and a crash would find that many
// more rows delivered and not yet recorded, each of which is then
// delivered again.
func TestBatchesGoOutInClaimOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := memstore.New()
		ch := &orderChannel{}
		svc, err := New(Config{DispatchBatchSize: 10, DispatchConcurrency: 2}, Deps{Store: store, Audit: store,
			Directory: okDirectory{}, Channels: ports.ChannelMap{"email": ch}})
		if err != nil {
			t.Fatal(err)
		}
		const n = 60 // six batches: the pipeline holds them all at once
		submitByPriority(ctx, t, svc, n)
		svc.sweep(ctx)
		if len(ch.started) != n {
			t.Fatalf("%d deliveries, want %d", len(ch.started), n)
		}
		requireBatchOrder(t, ch.started, n)
	})
}

// TestAttemptRecords: an attempt that delivers the row with no error to
// tell is one Attempted record whose status is Delivered; a delivery after
// failures (the row's last error rides on the Delivered record) and a
// parking keep their terminal record, and an attempt that leaves the row
// due is its record alone.
func TestAttemptRecords(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	row := ports.Notification{ID: "n1", SourceSite: "site-a", Type: "email", Status: ports.StatusPending}
	attempt := func(o ports.Outcome, s ports.Status, errText string) ports.AuditRecord {
		return ports.AuditRecord{NotificationID: row.ID, SourceSite: row.SourceSite, Type: row.Type, At: at,
			Kind: ports.AuditAttempted, Actor: ports.ActorSystem, Outcome: o, Status: s, Duration: time.Millisecond, Error: errText}
	}
	for _, c := range []struct {
		name    string
		attempt ports.AuditRecord
		u       ports.Update
		want    []ports.AuditKind
	}{
		{"first delivery", attempt(ports.OutcomeSuccess, ports.StatusDelivered, ""),
			ports.Update{Status: ports.StatusDelivered, DeliveredAt: at, UpdatedAt: at}, []ports.AuditKind{ports.AuditAttempted}},
		{"delivery after a failure", attempt(ports.OutcomeSuccess, ports.StatusDelivered, ""),
			ports.Update{Status: ports.StatusDelivered, DeliveredAt: at, UpdatedAt: at, LastError: "451 later"},
			[]ports.AuditKind{ports.AuditAttempted, ports.AuditDelivered}},
		{"parked", attempt(ports.OutcomePermanent, ports.StatusParked, "550 no"),
			ports.Update{Status: ports.StatusParked, UpdatedAt: at, LastError: "550 no"},
			[]ports.AuditKind{ports.AuditAttempted, ports.AuditParked}},
		{"retrying", attempt(ports.OutcomeTransient, ports.StatusRetrying, "451 later"),
			ports.Update{Status: ports.StatusRetrying, UpdatedAt: at, LastError: "451 later"}, []ports.AuditKind{ports.AuditAttempted}},
	} {
		t.Run(c.name, func(t *testing.T) {
			recs := attemptRecords(row, c.attempt, c.u)
			var got []ports.AuditKind
			for _, r := range recs {
				got = append(got, r.Kind)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("kinds %v, want %v", got, c.want)
			}
			if !reflect.DeepEqual(recs[0], c.attempt) {
				t.Errorf("attempt record %+v, want %+v", recs[0], c.attempt)
			}
			if last := recs[len(recs)-1]; last.Status != c.u.Status || !last.At.Equal(at) {
				t.Errorf("last record %+v: want status %s at %v", last, c.u.Status, at)
			}
		})
	}
}

// overlapStore holds the sweep's second claim until its third has returned
// (so the third takes the rows that come first), and the fourth until the
// second has returned, and counts the claims in the store at once.
type overlapStore struct {
	*memstore.Store
	mu                  sync.Mutex
	calls, inside, most int
	second, third       chan struct{} // closed when that claim returned
}

func (s *overlapStore) Claim(ctx context.Context, req ports.ClaimRequest) ([]ports.Notification, error) {
	s.mu.Lock()
	s.calls++
	call := s.calls
	s.inside++
	s.most = max(s.most, s.inside)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inside--
		s.mu.Unlock()
	}()
	hold := map[int]chan struct{}{2: s.third, 4: s.second}[call]
	if hold != nil {
		select {
		case <-hold:
		case <-time.After(time.Minute): // the bubble's clock: only once nothing else can run
		}
	}
	rows, err := s.Store.Claim(ctx, req)
	switch call {
	case 2:
		close(s.second)
	case 3:
		close(s.third)
	}
	return rows, err
}

// TestClaimsOverlap: once a claim came back full, the sweep's next claims
// run two at a time, every row is delivered once, and the batches still go
// out in priority order though the later of two claims may take the rows
// that come first (see TestClaimPoolKeepsClaimOrder).
func TestClaimsOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := &overlapStore{Store: memstore.New(), second: make(chan struct{}), third: make(chan struct{})}
		ch := &orderChannel{}
		svc, err := New(Config{DispatchBatchSize: 10, DispatchConcurrency: 2}, Deps{Store: store, Audit: store.Store,
			Directory: okDirectory{}, Channels: ports.ChannelMap{"email": ch}})
		if err != nil {
			t.Fatal(err)
		}
		const n = 60
		subs := submitByPriority(ctx, t, svc, n)
		svc.sweep(ctx)
		if store.most != 2 {
			t.Errorf("at most %d claims at once, want 2", store.most)
		}
		if len(ch.started) != n {
			t.Fatalf("%d deliveries, want %d", len(ch.started), n)
		}
		requireBatchOrder(t, ch.started, n)
		for _, sub := range subs {
			if row, err := store.Get(ctx, sub.ID); err != nil || row.Status != ports.StatusDelivered {
				t.Errorf("%s: %s, %v; want Delivered", sub.ID, row.Status, err)
			}
		}
	})
}

// TestClaimPoolKeepsClaimOrder: the rows of two claims that overlapped go
// out in claim order whichever claim returned first: the batch whose turn
// comes first takes the rows that come first.
func TestClaimPoolKeepsClaimOrder(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	row := func(priority, age int) ports.Notification {
		return ports.Notification{ID: uuid.NewString(), Priority: priority, CreatedAt: at.Add(time.Duration(age) * time.Second)}
	}
	// The earlier claim (its batch's turn comes first) returned last, with
	// rows that come after some of the later claim's.
	first := []ports.Notification{row(5, 3), row(1, 1), row(1, 4)}
	later := []ports.Notification{row(9, 0), row(5, 2), row(1, 2)}
	var p claimPool
	p.add(later)
	p.add(first)
	prio := func(rows []ports.Notification) (out []string) {
		for _, r := range rows {
			out = append(out, fmt.Sprintf("%d/%d", r.Priority, r.CreatedAt.Sub(at)/time.Second))
		}
		return out
	}
	if got, want := prio(p.take(len(first))), []string{"9/0", "5/2", "5/3"}; !slices.Equal(got, want) {
		t.Errorf("the first batch takes %v, want %v", got, want)
	}
	if got, want := prio(p.take(len(later))), []string{"1/1", "1/2", "1/4"}; !slices.Equal(got, want) {
		t.Errorf("the second batch takes %v, want %v", got, want)
	}
	if rest := p.take(1); len(rest) != 0 {
		t.Errorf("the pool still holds %d rows", len(rest))
	}
}

// requireBatchOrder fails t unless the deliveries of n rows submitted by
// submitByPriority (priorities n down to 1, batches of 10) started batch
// by batch: within a batch two deliveries run at once and may start in
// either order; across batches, every delivery of a batch starts before
// any of the next. started holds each delivery's priority, in start order.
func requireBatchOrder(t *testing.T, started []int, n int) {
	t.Helper()
	batchOf := func(priority int) int { return (n - priority) / 10 }
	for i := 1; i < len(started); i++ {
		if batchOf(started[i]) < batchOf(started[i-1]) {
			t.Fatalf("a delivery of batch %d started after one of batch %d: start order (by priority) %v",
				batchOf(started[i]), batchOf(started[i-1]), started)
		}
	}
}

// submitByPriority submits n notifications to the list ops, the first of
// the highest priority (n) down to the last (1), and returns them.
func submitByPriority(ctx context.Context, t *testing.T, svc *Service, n int) []ports.Submission {
	t.Helper()
	subs := make([]ports.Submission, n)
	for i := range subs {
		subs[i] = ports.Submission{ID: uuid.NewString(), List: "ops", SourceSite: "site-a", Priority: n - i, Subject: "s"}
	}
	if res, err := svc.Submit(ctx, ports.SubmitRequest{Notifications: subs}); err != nil || len(res.Accepted) != n {
		t.Fatalf("submit: %+v, %v", res, err)
	}
	return subs
}

// batchStore counts what the sweep asks of the store: each claim's limit,
// each Record's updates, and the most rows leased and not yet recorded.
type batchStore struct {
	*memstore.Store
	mu           sync.Mutex
	limits       []int
	records      []int
	leased, most int
}

func (s *batchStore) Claim(ctx context.Context, req ports.ClaimRequest) ([]ports.Notification, error) {
	rows, err := s.Store.Claim(ctx, req)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits = append(s.limits, req.Limit)
	s.leased += len(rows)
	s.most = max(s.most, s.leased)
	return rows, err
}

func (s *batchStore) Record(ctx context.Context, owner string, updates []ports.Update) ([]string, error) {
	lost, err := s.Store.Record(ctx, owner, updates)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = append(s.records, len(updates))
	s.leased -= len(updates)
	return lost, err
}

// TestBacklogClaimsSeveralBatches: once a claim came back full, a claim
// takes four batches' rows in one statement, but they still go out and are
// recorded batch by batch, in priority order, and the rows leased and not
// yet recorded never exceed the pipeline's eight batches.
func TestBacklogClaimsSeveralBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := &batchStore{Store: memstore.New()}
		ch := &orderChannel{}
		svc, err := New(Config{DispatchBatchSize: 10, DispatchConcurrency: 2}, Deps{Store: store, Audit: store.Store,
			Directory: okDirectory{}, Channels: ports.ChannelMap{"email": ch}})
		if err != nil {
			t.Fatal(err)
		}
		const n = 100 // the most priorities: one row each, so that requireBatchOrder can tell batches apart
		subs := submitByPriority(ctx, t, svc, n)
		svc.sweep(ctx)
		if len(ch.started) != n {
			t.Fatalf("%d deliveries, want %d", len(ch.started), n)
		}
		requireBatchOrder(t, ch.started, n)
		if store.limits[0] != 10 {
			t.Errorf("the sweep's first claim asked for %d rows, want one batch (10)", store.limits[0])
		}
		if !slices.Contains(store.limits, 40) || slices.ContainsFunc(store.limits, func(l int) bool { return l != 10 && l != 40 }) {
			t.Errorf("claims asked for %v rows, want 10 first and 40 (four batches) once one came back full", store.limits)
		}
		if len(store.limits) > 1+(n-10+39)/40+claimDepth {
			t.Errorf("%d claims for %d rows: a backlog should cost about a quarter of the claims", len(store.limits), n)
		}
		if i := slices.IndexFunc(store.records, func(k int) bool { return k > 10 }); i >= 0 {
			t.Errorf("a Record of %d updates, want batches of at most 10: %v", store.records[i], store.records)
		}
		if store.most > pipelineDepth*10 {
			t.Errorf("%d rows leased and not recorded at once, want at most %d", store.most, pipelineDepth*10)
		}
		for _, sub := range subs {
			if row, err := store.Get(ctx, sub.ID); err != nil || row.Status != ports.StatusDelivered {
				t.Errorf("%s: %s, %v; want Delivered", sub.ID, row.Status, err)
			}
		}
	})
}

// TestClaimBatches: a claim takes the rows of half the pipeline's batches,
// and no more than maxClaimRows.
func TestClaimBatches(t *testing.T) {
	for batch, want := range map[int]int{1: 4, 100: 4, 250: 4, 300: 3, 500: 2, 1000: 1, 10000: 1} {
		s := &Service{cfg: Config{DispatchBatchSize: batch}}
		if got := s.claimBatches(); got != want {
			t.Errorf("batch %d: a claim takes %d batches, want %d", batch, got, want)
		}
	}
}

// greedyStore breaks the Claim contract: it leases and returns five rows
// more than asked.
type greedyStore struct{ *batchStore }

func (s greedyStore) Claim(ctx context.Context, req ports.ClaimRequest) ([]ports.Notification, error) {
	req.Limit += 5
	return s.batchStore.Claim(ctx, req)
}

// TestAClaimOfTooManyRowsHoldsTheBounds: rows beyond a claim's limit (a
// store that broke its contract) are not delivered by batches that hold no
// slot: the sweep ends, no batch is larger than DispatchBatchSize, and what
// is delivered is delivered once.
func TestAClaimOfTooManyRowsHoldsTheBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := greedyStore{&batchStore{Store: memstore.New()}}
		ch := &orderChannel{}
		svc, err := New(Config{DispatchBatchSize: 10, DispatchConcurrency: 2}, Deps{Store: store, Audit: store.Store,
			Directory: okDirectory{}, Channels: ports.ChannelMap{"email": ch}})
		if err != nil {
			t.Fatal(err)
		}
		submitByPriority(ctx, t, svc, 100)
		svc.sweep(ctx)
		if i := slices.IndexFunc(store.records, func(k int) bool { return k > 10 }); i >= 0 {
			t.Errorf("a Record of %d updates, want batches of at most 10: %v", store.records[i], store.records)
		}
		seen := map[int]bool{}
		for _, p := range ch.started {
			if seen[p] {
				t.Errorf("the row of priority %d was delivered twice", p)
			}
			seen[p] = true
		}
	})
}
