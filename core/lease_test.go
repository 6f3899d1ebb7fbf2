package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/clocktest"
	"github.com/siteline/outbox/ports/waittest"
)

// deliveriesOf returns how many times c delivered id.
func deliveriesOf(c *countingChannel, id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.per[id]
}

// deliveries returns how many deliveries c made in all.
func deliveries(c *countingChannel) int {
	_, _, total := c.tally()
	return total
}

// syncLog is a log that tests read while the service writes it.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.b.Write(p)
	}), nil))
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// submitN submits n email notifications through svc and returns their ids.
func submitN(t *testing.T, svc *Service, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		res, err := svc.Submit(t.Context(), ports.SubmitRequest{Notifications: []ports.Submission{{
			ID: uuid.NewString(), List: "ops", SourceSite: "site-a", Subject: "s"}}})
		if err != nil || len(res.Accepted) != 1 {
			t.Fatalf("submit: %+v, %v", res, err)
		}
		ids = append(ids, res.Accepted[0])
	}
	return ids
}

// runService runs svc until the test ends, and fails the test when Run
// does not return after the cancellation.
func runService(t *testing.T, svc *Service) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(time.Minute):
			t.Errorf("Run did not return after its context ended")
		}
	})
}

// allDelivered is the condition of a dispatcher that delivered and
// recorded every one of ids.
func allDelivered(store ports.Store, ids []string) func() (bool, string) {
	return func() (bool, string) {
		for _, id := range ids {
			n, err := store.Get(context.Background(), id)
			if err != nil {
				return false, err.Error()
			}
			if n.Status != ports.StatusDelivered {
				return false, fmt.Sprintf("%s is %s", id, n.Status)
			}
		}
		return true, ""
	}
}

// TestRestartReleasesTheLeasesOfEarlierRuns: a node that claimed rows and
// died without recording them comes back under the same node id; the rows
// are delivered at once, not after the lease (the clock never moves), each
// exactly once by the new run, and the leases of another node stay put.
func TestRestartReleasesTheLeasesOfEarlierRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := memstore.New()
		clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		deps := func(ch ports.Channel, log *slog.Logger) Deps {
			return Deps{Store: store, Audit: store, Directory: okDirectory{}, Clock: clock,
				Channels: ports.ChannelMap{"email": ch}, Logger: log}
		}
		cfg := Config{NodeID: "central-x", DispatchBatchSize: 3}
		dead, err := New(cfg, deps(&countingChannel{}, nil))
		if err != nil {
			t.Fatal(err)
		}
		other, err := New(Config{NodeID: "central-y", DispatchBatchSize: 2}, deps(&countingChannel{}, nil))
		if err != nil {
			t.Fatal(err)
		}
		// The dead run claims three rows and never records them; another node
		// holds two more.
		inFlight := submitN(t, dead, 3)
		rows, err := dead.claim(ctx, dead.Owner(), cfg.DispatchBatchSize)
		if err != nil || len(rows) != 3 {
			t.Fatalf("the first run claimed %d rows (%v), want 3", len(rows), err)
		}
		held := submitN(t, other, 2)
		if rows, err := other.claim(ctx, other.Owner(), 2); err != nil || len(rows) != 2 {
			t.Fatalf("the other node claimed %d rows (%v), want 2", len(rows), err)
		}

		ch := &countingChannel{}
		var log syncLog
		restarted, err := New(cfg, deps(ch, log.logger()))
		if err != nil {
			t.Fatal(err)
		}
		if restarted.Owner() == dead.Owner() {
			t.Fatalf("two runs share the owner %s", dead.Owner())
		}
		runService(t, restarted)
		waittest.For(t, time.Minute, "the dead run's rows delivered by the new run", allDelivered(store, inFlight))
		for _, id := range inFlight {
			if got := deliveriesOf(ch, id); got != 1 {
				t.Errorf("row %s delivered %d times by the new run, want 1", id, got)
			}
		}
		for _, id := range held {
			n, err := store.Get(ctx, id)
			if err != nil || n.Status != ports.StatusPending || n.ClaimedBy != other.Owner() || deliveriesOf(ch, id) != 0 {
				t.Errorf("row of the other node: %s, claimed by %q, %d deliveries (%v); want Pending, still %s's, none",
					n.Status, n.ClaimedBy, deliveriesOf(ch, id), err, other.Owner())
			}
		}
		if out := log.String(); !strings.Contains(out, `msg="released the leases of an earlier run of this node" node_id=central-x rows=3`) {
			t.Errorf("no release line with the count in the log:\n%s", out)
		}
		t.Logf("rows leased by the dead run: %d, delivered by the new run: %d (repeats %d), other node's rows left leased: %d",
			len(inFlight), deliveries(ch), deliveries(ch)-len(inFlight), len(held))
	})
}

// releaseSpy counts ReleaseNode calls and fails them with err when set.
type releaseSpy struct {
	ports.Store
	calls atomic.Int64
	err   error
}

func (s *releaseSpy) ReleaseNode(ctx context.Context, node, keep string) (int, error) {
	s.calls.Add(1)
	if s.err != nil {
		return 0, s.err
	}
	return s.Store.ReleaseNode(ctx, node, keep)
}

// TestRunReleasesOnlyANamedNodeAndSurvivesAFailure: a node without a
// configured id (a random one no restart reuses) releases nothing, and a
// failing release is a warning: the dispatcher runs all the same.
func TestRunReleasesOnlyANamedNodeAndSurvivesAFailure(t *testing.T) {
	for _, tc := range []struct {
		name      string
		node      string
		err       error
		wantCalls int64
		wantLog   string
	}{
		{name: "random node id", node: "", wantCalls: 0},
		{name: "failing release", node: "central-x", err: errors.New("database unreachable"), wantCalls: 1,
			wantLog: `level=WARN msg="cannot release the leases of an earlier run of this node; they expire on their own" node_id=central-x claim_lease=5m0s err="database unreachable"`},
		{name: "nothing to release", node: "central-x", wantCalls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memstore.New()
				store := &releaseSpy{Store: mem, err: tc.err}
				ch := &countingChannel{}
				var log syncLog
				svc, err := New(Config{NodeID: tc.node}, Deps{Store: store, Audit: mem, Directory: okDirectory{},
					Channels: ports.ChannelMap{"email": ch}, Logger: log.logger()})
				if err != nil {
					t.Fatal(err)
				}
				ids := submitN(t, svc, 2)
				runService(t, svc)
				waittest.For(t, time.Minute, "fresh rows delivered", func() (bool, string) {
					return deliveries(ch) == len(ids), fmt.Sprintf("%d of %d delivered", deliveries(ch), len(ids))
				})
				if got := store.calls.Load(); got != tc.wantCalls {
					t.Errorf("%d ReleaseNode calls, want %d", got, tc.wantCalls)
				}
				out := log.String()
				if tc.wantLog != "" && !strings.Contains(out, tc.wantLog) {
					t.Errorf("log lacks %s:\n%s", tc.wantLog, out)
				}
				if tc.err == nil && strings.Contains(out, "released the leases") {
					t.Errorf("a release line with nothing released:\n%s", out)
				}
			})
		})
	}
}

// TestNodeIDWithoutSlash: "/" separates a node id from the run in a lease
// owner, so a node id holding it could release another node's leases.
func TestNodeIDWithoutSlash(t *testing.T) {
	err := Config{NodeID: "central/1"}.WithDefaults().Validate()
	if err == nil || !strings.Contains(err.Error(), `NodeID: "central/1" holds "/"`) {
		t.Errorf("Validate of a node id with '/': %v", err)
	}
	store := memstore.New()
	svc, err := New(Config{NodeID: "central-1"}, Deps{Store: store, Audit: store, Directory: okDirectory{}, Channels: ports.ChannelMap{}})
	if err != nil {
		t.Fatal(err)
	}
	if node, run, _ := strings.Cut(svc.Owner(), "/"); node != "central-1" || run == "" || strings.Contains(run, "/") {
		t.Errorf("owner %q is not central-1/<run>", svc.Owner())
	}
}
