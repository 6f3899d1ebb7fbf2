package acceptance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

func TestParksWithoutAnAttempt(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, core.Config{})

		expiring := submission("ops")
		expiring.ExpiresAt = t0.Add(90 * time.Second)
		expired := e.submit(expiring)[0]
		e.ch.Script(expired, FailTransient)
		noChannel := e.send("hooks")
		unknown := e.send("no-such-list")

		e.dispatch()
		e.status(expired, ports.StatusRetrying)
		if d := e.status(noChannel, ports.StatusParked); d.LastError != "no delivery adapter for type webhook" {
			t.Errorf("no channel: LastError %q", d.LastError)
		}
		if d := e.status(unknown, ports.StatusParked); d.LastError != `unknown list "no-such-list"` {
			t.Errorf("unknown list: LastError %q", d.LastError)
		}
		e.clock.Advance(2 * time.Minute) // past ExpiresAt and NextAttemptAt
		e.dispatch()
		d := e.status(expired, ports.StatusParked)
		if d.LastError != "expired" || d.RetryCount != 1 {
			t.Errorf("expired: LastError %q, RetryCount %d", d.LastError, d.RetryCount)
		}
		if n := e.ch.Attempts(expired); n != 1 {
			t.Errorf("an expired row was attempted: %d attempts, want 1", n)
		}
		for _, id := range []string{noChannel, unknown} {
			if n := e.ch.Attempts(id); n != 0 {
				t.Errorf("%s was attempted %d times", id, n)
			}
		}
	})
}

func TestPurgeKeepsNonTerminalRows(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		e := newEnv(t, b, core.Config{})
		delivered, parked, discarded, retrying := e.send("ops"), e.send("ops"), e.send("ops"), e.send("ops")
		e.ch.Script(parked, FailPermanent)
		e.ch.Script(discarded, FailPermanent)
		e.ch.Script(retrying, FailTransient)
		e.dispatch()
		pending := e.send("ops")
		if _, err := e.svc.Discard(ctx, ports.Action{Actor: "alice", IDs: []string{discarded}}); err != nil {
			t.Fatal(err)
		}

		e.clock.Advance(364 * 24 * time.Hour)
		if n, err := e.svc.Purge(ctx); err != nil || n != 0 {
			t.Fatalf("purge inside the retention deleted %d rows (%v)", n, err)
		}
		e.clock.Advance(2 * 24 * time.Hour)
		n, err := e.svc.Purge(ctx)
		if err != nil || n != 3 {
			t.Fatalf("purge deleted %d rows (%v), want the 3 terminal ones", n, err)
		}
		for _, id := range []string{delivered, parked, discarded} {
			if _, err := e.svc.Notification(ctx, id); !strings.Contains(err.Error(), "not found") {
				t.Errorf("terminal row %s survived the purge: %v", id, err)
			}
		}
		e.status(pending, ports.StatusPending)
		e.status(retrying, ports.StatusRetrying)
		if h := e.get(pending).History; len(h) == 0 {
			t.Error("the history of a kept row was purged")
		}
	})
}

func TestDeliveryTimeoutIsTransient(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, core.Config{DeliveryTimeout: 50 * time.Millisecond})
		id := e.send("ops")
		e.ch.Script(id, Hang)
		e.dispatch()
		d := e.status(id, ports.StatusRetrying)
		if !strings.Contains(d.LastError, "deadline exceeded") || d.RetryCount != 1 {
			t.Fatalf("hung delivery: LastError %q, RetryCount %d", d.LastError, d.RetryCount)
		}
	})
}

// TestOneBadRowNeverStopsTheBatch: a panicking channel call fails only its
// own row.
func TestOneBadRowNeverStopsTheBatch(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, core.Config{})
		bad := e.send("ops")
		good := []string{e.send("ops"), e.send("ops")}
		e.channels = ports.ChannelMap{"email": &panicChannel{ScriptedChannel: e.ch, bad: bad}}
		e.svc = e.service(e.store, core.Config{})
		e.dispatch()
		if d := e.status(bad, ports.StatusRetrying); !strings.Contains(d.LastError, "channel panicked") {
			t.Errorf("bad row: LastError %q", d.LastError)
		}
		for _, id := range good {
			e.status(id, ports.StatusDelivered)
		}
	})
}

type panicChannel struct {
	*ScriptedChannel
	bad string
}

func (c *panicChannel) Deliver(ctx context.Context, d ports.Delivery) ports.Result {
	if d.Notification.ID == c.bad {
		panic("boom")
	}
	return c.ScriptedChannel.Deliver(ctx, d)
}

// TestIngestWakesTheDispatcher: with a one-hour poll, notifications are
// delivered at once because ingest wakes the dispatcher. The first one may be
// caught by the sweep Run makes at start; the second can only be delivered
// by a wake-up.
func TestIngestWakesTheDispatcher(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, core.Config{DispatchInterval: time.Hour})
		e.ch.Attempted = make(chan string, 16)
		e.run(e.svc)
		for range 2 {
			id := e.send("ops")
			await(t, e.ch.Attempted, id)
		}
	})
}

// TestShutdownCancelsInFlightDeliveries: stopping Run cancels a hanging
// delivery; the attempt does not count and the row is released at once for
// any node to claim.
func TestShutdownCancelsInFlightDeliveries(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, core.Config{DispatchInterval: time.Hour})
		e.ch.Hanging = make(chan string, 1)
		stop := e.run(e.svc)
		s := submission("ops")
		e.ch.Script(s.ID, Hang)
		id := e.submit(s)[0]
		if got := <-e.ch.Hanging; got != id {
			t.Fatalf("hanging %s, want %s", got, id)
		}
		stop()
		d := e.status(id, ports.StatusPending)
		if d.RetryCount != 0 || d.LastError != "" || d.ClaimedBy != "" || !d.ClaimedUntil.IsZero() {
			t.Fatalf("after shutdown: RetryCount %d, LastError %q, lease %q until %v",
				d.RetryCount, d.LastError, d.ClaimedBy, d.ClaimedUntil)
		}
		for _, r := range d.History {
			if r.Kind == ports.AuditAttempted {
				t.Fatalf("a cancelled attempt was recorded: %+v", r)
			}
		}
		if e.dispatch() != 1 {
			t.Fatal("the released row could not be claimed again at once")
		}
		e.status(id, ports.StatusDelivered)
	})
}

// TestLeaseExpiryHandsRowsOver: a node that claimed rows and died leaves
// them leased; when the lease expires another node claims and delivers them.
func TestLeaseExpiryHandsRowsOver(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		e := newEnv(t, b, core.Config{})
		id := e.send("ops")
		dead, err := e.store.Notifications().Claim(ctx, ports.ClaimRequest{Owner: "dead-node", Now: e.clock.Now(), Lease: time.Minute, Limit: 10})
		if err != nil || len(dead) != 1 {
			t.Fatalf("claim by the node that dies: %v, %v", dead, err)
		}
		if e.dispatch() != 0 {
			t.Fatal("a leased row was claimed by another node")
		}
		e.clock.Advance(time.Minute)
		if e.dispatch() != 1 {
			t.Fatal("the expired lease was not taken over")
		}
		e.status(id, ports.StatusDelivered)
		lost, err := e.store.Notifications().Record(ctx, "dead-node", []ports.Update{{ID: id, Status: ports.StatusParked, UpdatedAt: e.clock.Now()}})
		if err != nil || len(lost) != 1 {
			t.Fatalf("the dead node's late record was applied: lost %v, %v", lost, err)
		}
		e.status(id, ports.StatusDelivered)
	})
}

// TestTwoDispatchersDeliverEachExactlyOnce: two central nodes on one
// database share 10,000 notifications; each is delivered exactly once.
func TestTwoDispatchersDeliverEachExactlyOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		const total = 10000
		e := newEnv(t, b, core.Config{DispatchInterval: 50 * time.Millisecond})
		e.clock = nil // real time: the two nodes' leases and polls must really run
		cfg := core.Config{DispatchInterval: 50 * time.Millisecond}
		e.svc = e.service(e.store, cfg)
		other := e.service(open(t, e.cfg), cfg)
		e.ch.Attempted = make(chan string, total)

		ids := make([]string, 0, total)
		for len(ids) < total {
			batch := make([]ports.Submission, 500)
			for i := range batch {
				batch[i] = submission("ops")
			}
			ids = append(ids, e.submit(batch...)...)
		}
		stopOne, stopOther := e.run(e.svc), e.run(other)
		seen := 0
		timeout := time.After(3 * time.Minute)
		for seen < total {
			select {
			case <-e.ch.Attempted:
				seen++
			case <-timeout:
				t.Fatalf("only %d of %d delivered within 3 minutes", seen, total)
			}
		}
		stopOne() // waits for the last outcomes to be recorded
		stopOther()
		succ := e.ch.Successes()
		for _, id := range ids {
			if succ[id] != 1 {
				t.Errorf("notification %s delivered %d times", id, succ[id])
			}
		}
		if len(succ) != total {
			t.Errorf("%d distinct notifications delivered, want %d", len(succ), total)
		}
		n, err := e.svc.Count(context.Background(), ports.Query{Filter: ports.Filter{Statuses: []ports.Status{ports.StatusDelivered}}})
		if err != nil || n != total {
			t.Errorf("%d rows Delivered (%v), want %d", n, err, total)
		}
	})
}

// TestPollIsTheFallback: rows another node ingested wake nobody here; the
// interval poll still delivers them.
func TestPollIsTheFallback(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, core.Config{})
		e.clock = nil
		e.ch.Attempted = make(chan string, 4)
		e.svc = e.service(e.store, core.Config{DispatchInterval: 20 * time.Millisecond})
		e.run(e.svc)
		ingestedElsewhere := e.service(e.store, core.Config{})
		res, err := ingestedElsewhere.Submit(context.Background(), ports.SubmitRequest{Notifications: []ports.Submission{submission("ops")}})
		if err != nil {
			t.Fatal(err)
		}
		await(t, e.ch.Attempted, res.Accepted[0])
	})
}

// TestScheduledRetryRunsWithoutAPoll: with a one-hour poll, a retry due in
// 50 ms runs because the dispatcher arms a timer for the retries it schedules.
func TestScheduledRetryRunsWithoutAPoll(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, core.Config{})
		e.clock = nil
		e.settings = []ports.ChannelSettings{{Type: "email",
			Retry: ports.RetrySettings{MaxRetries: 5, Interval: 50 * time.Millisecond}}}
		e.ch.Attempted = make(chan string, 4)
		e.svc = e.service(e.store, core.Config{DispatchInterval: time.Hour})
		s := submission("ops")
		e.ch.Script(s.ID, FailTransient)
		e.run(e.svc)
		e.submit(s)
		await(t, e.ch.Attempted, s.ID) // the transient failure
		await(t, e.ch.Attempted, s.ID) // the retry, 50 ms later
		if n := e.ch.Attempts(s.ID); n != 2 {
			t.Fatalf("%d attempts, want 2", n)
		}
	})
}

// TestSweepDeliversTheWholeBacklog: with a one-hour poll and nothing to
// wake it, the sweep a dispatcher makes at start delivers a whole backlog of
// Pending and due Retrying rows, its claims overlapping: a claim that came
// back short while another of the node's claims was in the database (and
// held rows it would not take) does not end the sweep. Each round starts a
// fresh dispatcher over a fresh backlog, so only its start sweep can
// deliver it.
func TestSweepDeliversTheWholeBacklog(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		e := newEnv(t, b, core.Config{})
		// The seeder ingests and sets rows up; it never runs, and the
		// dispatchers below are woken by nobody.
		seeder := e.service(e.store, core.Config{})
		store := e.store.Notifications()
		const pending, retrying, rounds = 1050, 70, 6
		total := 0
		for round := range rounds {
			var ids []string
			for len(ids) < pending+retrying {
				batch := make([]ports.Submission, 0, 280)
				for range cap(batch) {
					s := submission("ops")
					if len(ids)+len(batch) < retrying {
						s.Priority = 0
					} else {
						s.Priority = 5 // before the retries in claim order
					}
					batch = append(batch, s)
				}
				res, err := seeder.Submit(ctx, ports.SubmitRequest{Notifications: batch})
				if err != nil || len(res.Accepted) != len(batch) {
					t.Fatalf("submit: %v, accepted %d", err, len(res.Accepted))
				}
				ids = append(ids, res.Accepted...)
			}
			// Turn the first rows (priority 0) into retries that are due.
			retry := make(map[string]bool, retrying)
			for _, id := range ids[:retrying] {
				retry[id] = true
			}
			rows, err := store.Claim(ctx, ports.ClaimRequest{Owner: "seeder", Now: e.clock.Now(), Lease: time.Minute, Limit: 100000})
			if err != nil {
				t.Fatal(err)
			}
			var (
				updates []ports.Update
				back    []string
			)
			for _, r := range rows {
				if retry[r.ID] {
					updates = append(updates, ports.Update{ID: r.ID, Status: ports.StatusRetrying, RetryCount: 1, LastError: "try again", ResolvedTargets: r.ResolvedTargets, Targets: r.Targets,
						LastAttemptAt: e.clock.Now().Add(-2 * time.Minute), NextAttemptAt: e.clock.Now().Add(-time.Minute), UpdatedAt: e.clock.Now()})
				} else {
					back = append(back, r.ID)
				}
			}
			if len(updates) != retrying {
				t.Fatalf("round %d: %d retries set up, want %d", round, len(updates), retrying)
			}
			if lost, err := store.Record(ctx, "seeder", updates); err != nil || len(lost) > 0 {
				t.Fatalf("record the retries: lost %v, %v", lost, err)
			}
			if err := store.Release(ctx, "seeder", back); err != nil {
				t.Fatal(err)
			}
			total += len(rows)

			svc := e.service(e.store, core.Config{DispatchInterval: time.Hour})
			stop := e.run(svc)
			waittest.For(t, 2*time.Minute, fmt.Sprintf("round %d: the start sweep delivers all %d rows of the backlog", round, total),
				func() (bool, string) {
					n := len(e.ch.Successes())
					return n == total, fmt.Sprintf("%d delivered", n)
				})
			stop()
		}
		for id, n := range e.ch.Successes() {
			if n != 1 {
				t.Errorf("notification %s delivered %d times", id, n)
			}
		}
	})
}
