package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/siteline/outbox/adapters/membuffer"
	"github.com/siteline/outbox/adapters/siteapi/internal/sitetest"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

// noCentral is a central that is never reached: these tests send nothing.
type noCentral struct{}

func (noCentral) Submit(context.Context, ports.SubmitRequest) (ports.SubmitResult, error) {
	return ports.SubmitResult{}, errors.New("no central in this test")
}

func (noCentral) Status(context.Context, ports.StatusRequest) (map[string]ports.Status, error) {
	return nil, errors.New("no central in this test")
}

func (noCentral) ReportOperations(context.Context, ports.OpReport) error {
	return errors.New("no central in this test")
}

func (noCentral) Sync(context.Context, ports.SyncRequest) (ports.SyncAnswer, error) {
	return ports.SyncAnswer{}, errors.New("no central in this test")
}

// lossyStore is the site's store of operations, in memory, that can lose
// the answer of its next commit: the commit applies, and Put reports
// ErrUnavailable, as a Raft commit whose answer timed out.
type lossyStore struct {
	*membuffer.Ops
	loseNext atomic.Bool
}

func (s *lossyStore) Put(ctx context.Context, changes []ports.OpChange) ([]bool, error) {
	applied, err := s.Ops.Put(ctx, changes)
	if err == nil && s.loseNext.CompareAndSwap(true, false) {
		return nil, fmt.Errorf("commit timed out, its outcome unknown: %w", ports.ErrUnavailable)
	}
	return applied, err
}

// opsPair starts a leader and a follower whose core.Sites share one store
// (the replicated copy) and one script of gateways.
func opsPair(t *testing.T) (leader, follower *sitetest.Node, store *lossyStore, script *sitetest.Script) {
	t.Helper()
	store, script = &lossyStore{Ops: membuffer.NewOps()}, &sitetest.Script{}
	leader, follower = sitetest.StartPair(t, sitetest.Options{Ops: func(name string) ports.Operations {
		site, err := core.NewSite(core.SiteConfig{Site: "plant-1"}, core.SiteDeps{
			Buffer: membuffer.New(name), Central: noCentral{}, Ops: store, Gateway: script.Gateway(name)})
		if err != nil {
			t.Fatal(err)
		}
		return site
	}})
	return leader, follower, store, script
}

// TestCallAndWriteThroughAnyNode: calls and writes made through a client
// whose first node is dead and whose second is the follower are delivered
// by the leader, with the target's answer and the client's provenance;
// the follower never attempts.
func TestCallAndWriteThroughAnyNode(t *testing.T) {
	_, follower, _, script := opsPair(t)
	c := dial(t, []string{sitetest.DeadAddr(t), follower.Addr},
		WithProvenance(Provenance{Instance: "line-3", Script: "oven-watch", ExecutionID: "run-7"}))
	r, err := c.Call(deadline(t), sitetest.System, sitetest.MethodOK, map[string]any{"part": "A-7", "qty": 3})
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	if !r.Delivered() || string(r.Answer) != string(sitetest.AnswerOK) || r.ID != r.Operation.ID {
		t.Fatalf("Call = %+v, want Delivered with %s", r, sitetest.AnswerOK)
	}
	if r.Operation.SourceScript != "oven-watch" || r.Operation.ExecutionID != "run-7" {
		t.Fatalf("provenance lost: %+v", r.Operation)
	}
	w, err := c.Write(deadline(t), sitetest.Connection, "INSERT INTO counts (line, n, ok) VALUES ($1, $2, $3)", "line-3", 7, true)
	if err != nil || !w.Delivered() || string(w.Answer) != string(sitetest.AnswerRows) {
		t.Fatalf("Write = %+v, %v", w, err)
	}
	if n := script.Attempts("follower"); n != 0 {
		t.Fatalf("the follower attempted %d times", n)
	}
	if n := script.Attempts("leader"); n != 2 {
		t.Fatalf("the leader attempted %d times, want 2", n)
	}
}

// TestCallKeepsItsIDAcrossALostAnswer: the site commits a call's outcome
// but its answer is lost; the client tries again with the same id, and the
// second try answers the stored row without a second attempt.
func TestCallKeepsItsIDAcrossALostAnswer(t *testing.T) {
	leader, follower, store, script := opsPair(t)
	c := dial(t, []string{leader.Addr, follower.Addr})
	store.loseNext.Store(true)
	r, err := c.Call(deadline(t), sitetest.System, sitetest.MethodOK, nil)
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	if store.loseNext.Load() {
		t.Fatal("no answer was lost: the test proves nothing")
	}
	if r.Operation.Status != ports.OpDelivered {
		t.Fatalf("Call = %+v, want the stored Delivered row", r)
	}
	if n := script.AttemptsOf(r.ID); n != 1 {
		t.Fatalf("the call was attempted %d times, want 1", n)
	}
	p, err := store.List(context.Background(), ports.OpFilter{}, ports.PageRequest{Limit: 10})
	if err != nil || len(p.Items) != 1 || p.Items[0].ID != r.ID {
		t.Fatalf("stored %+v, %v; want the one operation %s", p.Items, err, r.ID)
	}
}

// TestFailedIsAnError: a call the target refuses for good is an error to
// the script, wrapping ErrFailed, with its Failed tracking row.
func TestFailedIsAnError(t *testing.T) {
	_, follower, _, script := opsPair(t)
	c := dial(t, []string{follower.Addr})
	r, err := c.Call(deadline(t), sitetest.System, sitetest.MethodRefuse, json.RawMessage(`{"part":"Z-0"}`))
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("Call = %v, want ErrFailed", err)
	}
	var oe *OperationError
	if !errors.As(err, &oe) || oe.Operation.Status != ports.OpFailed || !strings.Contains(oe.Operation.LastError, "400") {
		t.Fatalf("error %v carries no Failed row with the target's error", err)
	}
	if r.ID != oe.Operation.ID || !strings.Contains(err.Error(), "erp.refuse") {
		t.Fatalf("Result %+v, error %q", r, err)
	}
	if n := script.AttemptsOf(r.ID); n != 1 {
		t.Fatalf("a permanent failure was attempted %d times", n)
	}
}

// TestTrackingAndOperatorActions: a write to a target down with no retries
// parks; Tracking and Operations find it at the follower; Retry and
// Discard act on parked operations and name what else went wrong.
func TestTrackingAndOperatorActions(t *testing.T) {
	_, follower, _, script := opsPair(t)
	c := dial(t, []string{follower.Addr})
	var ids []string
	for range 2 {
		r, err := c.Write(deadline(t), sitetest.ConnectionDown, "DELETE FROM queue WHERE id = $1", 9)
		if err != nil || r.Operation.Status != ports.OpParked {
			t.Fatalf("Write to a target down: %+v, %v; want Parked", r, err)
		}
		ids = append(ids, r.ID)
	}
	unknown := "0190a5a4-8c3e-7cc4-9b2a-6c1f2d3e4f50"
	m, err := c.Tracking(deadline(t), ids[0], ids[1], unknown)
	if err != nil || len(m) != 2 || m[ids[0]].Status != ports.OpParked || m[ids[0]].Target != sitetest.ConnectionDown {
		t.Fatalf("Tracking = %+v, %v", m, err)
	}
	p, err := c.Operations(deadline(t), ports.OpFilter{Kind: ports.OpWrite, Statuses: []ports.OpStatus{ports.OpParked}}, ports.PageRequest{})
	if err != nil || len(p.Items) != 2 || p.Items[0].ID != ids[1] {
		t.Fatalf("Operations = %+v, %v; want both, newest first", p, err)
	}
	if op, err := c.Retry(deadline(t), ids[0]); err != nil || op.Status != ports.OpRetrying {
		t.Fatalf("Retry = %+v, %v", op, err)
	}
	if op, err := c.Discard(deadline(t), ids[1]); err != nil || op.Status != ports.OpDiscarded {
		t.Fatalf("Discard = %+v, %v", op, err)
	}
	if _, err := c.Discard(deadline(t), ids[0]); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("Discard of a Retrying operation = %v, want ErrConflict", err)
	}
	if _, err := c.Retry(deadline(t), unknown); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Retry of an unknown id = %v, want ErrNotFound", err)
	}
	if n := script.Attempts("follower"); n != 0 {
		t.Fatalf("the follower attempted %d times", n)
	}
}

// TestCallBadInput: bad input is refused at once, before anything is
// attempted: without a deadline or with params that cannot be encoded in
// the client, an unknown method at the site.
func TestCallBadInput(t *testing.T) {
	leader, _, _, script := opsPair(t)
	c := dial(t, []string{leader.Addr})
	if _, err := c.Call(context.Background(), sitetest.System, sitetest.MethodOK, nil); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Call without a deadline = %v, want ErrInvalid", err)
	}
	if _, err := c.Write(context.Background(), sitetest.Connection, "SELECT 1"); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Write without a deadline = %v, want ErrInvalid", err)
	}
	if _, err := c.Call(deadline(t), sitetest.System, sitetest.MethodOK, make(chan int)); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Call with params that are no JSON = %v, want ErrInvalid", err)
	}
	_, err := c.Call(deadline(t), sitetest.System, "cancel", nil)
	if !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), `no method "cancel"`) {
		t.Fatalf("Call of an unknown method = %v, want ErrInvalid with the reason", err)
	}
	if _, err := c.Write(deadline(t), sitetest.Connection, "INSERT INTO t VALUES ($1)", []int{1}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Write with an array argument = %v, want ErrInvalid", err)
	}
	if n := script.AllAttempts(); n != 0 {
		t.Fatalf("bad input was attempted %d times", n)
	}
	if n := leader.Server.Refusals().Count("malformed request"); n != 0 {
		t.Fatalf("%d malformed requests", n)
	}
}
