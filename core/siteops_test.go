package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/membuffer"
	"github.com/siteline/outbox/ports"
)

// scriptedGateway is a ports.OpGateway whose targets and answers a test
// writes: answer says the result of the n-th attempt (from 1) of an
// operation; it may block (it gets the attempt's context).
type scriptedGateway struct {
	policies map[string]ports.OpPolicy // by target name
	answer   func(ctx context.Context, op ports.Operation, n int) ports.OpResult

	mu       sync.Mutex
	attempts map[string][]time.Time // by id: when each attempt began
	running  int
	maxRun   int
}

func newScriptedGateway(answer func(ctx context.Context, op ports.Operation, n int) ports.OpResult) *scriptedGateway {
	return &scriptedGateway{
		policies: map[string]ports.OpPolicy{
			"erp":   {MaxRetries: 3, Interval: 10 * time.Second},
			"plant": {MaxRetries: 3, Interval: 10 * time.Second},
		},
		answer:   answer,
		attempts: map[string][]time.Time{},
	}
}

func (g *scriptedGateway) Check(op ports.Operation) error {
	if _, ok := g.policies[op.Target]; !ok {
		return fmt.Errorf("no system or connection is named %q: %w", op.Target, ports.ErrInvalid)
	}
	if op.Kind == ports.OpCall && op.Method != "post" {
		return fmt.Errorf("system %s has no method %q: %w", op.Target, op.Method, ports.ErrInvalid)
	}
	return nil
}

func (g *scriptedGateway) Policy(_ ports.OpKind, target string) (ports.OpPolicy, error) {
	p, ok := g.policies[target]
	if !ok {
		return ports.OpPolicy{}, fmt.Errorf("no target %q: %w", target, ports.ErrInvalid)
	}
	return p, nil
}

func (g *scriptedGateway) Attempt(ctx context.Context, op ports.Operation) ports.OpResult {
	g.mu.Lock()
	g.attempts[op.ID] = append(g.attempts[op.ID], time.Now())
	n := len(g.attempts[op.ID])
	g.running++
	g.maxRun = max(g.maxRun, g.running)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running--
		g.mu.Unlock()
	}()
	return g.answer(ctx, op, n)
}

// tries returns when each attempt of id began.
func (g *scriptedGateway) tries(id string) []time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]time.Time(nil), g.attempts[id]...)
}

func (g *scriptedGateway) total() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, a := range g.attempts {
		n += len(a)
	}
	return n
}

var (
	okResult      = ports.OpResult{Outcome: ports.OutcomeSuccess, Answer: json.RawMessage(`{"order":42}`)}
	downResult    = ports.OpResult{Outcome: ports.OutcomeTransient, Error: "HTTP 503 Service Unavailable"}
	refusedResult = ports.OpResult{Outcome: ports.OutcomePermanent, Error: "HTTP 422: unknown part number"}
	always        = func(r ports.OpResult) func(context.Context, ports.Operation, int) ports.OpResult {
		return func(context.Context, ports.Operation, int) ports.OpResult { return r }
	}
)

type opsEnv struct {
	site *Site
	ops  *membuffer.Ops
	gw   *scriptedGateway
}

func newOpsEnv(t *testing.T, cfg SiteConfig, gw *scriptedGateway) *opsEnv {
	t.Helper()
	cfg.Site = "plant-1"
	ops := membuffer.NewOps()
	s, err := NewSite(cfg, SiteDeps{Buffer: membuffer.New("a"), Central: newFlakyCentral(t, cfg.Site), Ops: ops, Gateway: gw})
	if err != nil {
		t.Fatal(err)
	}
	return &opsEnv{site: s, ops: ops, gw: gw}
}

// run runs loop until the test ends.
func run(t *testing.T, loop func(context.Context)) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { loop(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return func() { cancel(); wg.Wait() }
}

func (e *opsEnv) call(t *testing.T, id string) ports.OpOutcome {
	t.Helper()
	out, err := e.site.CachedCall(sendCtx(t), ports.CallRequest{ID: id, System: "erp", Method: "post",
		Params:   json.RawMessage(`{"part":"P-7","qty":3}`),
		OpSource: ports.OpSource{SourceInstance: "line-2", SourceScript: "orders.py", ExecutionID: "x1"}})
	if err != nil {
		t.Fatalf("CachedCall: %v", err)
	}
	return out
}

func (e *opsEnv) get(t *testing.T, id string) ports.Operation {
	t.Helper()
	op, err := e.ops.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return op
}

func newUUID(t *testing.T) string {
	t.Helper()
	u, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return u.String()
}

func TestCachedCallImmediateOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now().UTC()
		e := newOpsEnv(t, SiteConfig{}, newScriptedGateway(func(_ context.Context, op ports.Operation, _ int) ports.OpResult {
			switch {
			case strings.Contains(string(op.Payload.Params), "ok"):
				return okResult
			case strings.Contains(string(op.Payload.Params), "slow"):
				return ports.OpResult{Outcome: ports.OutcomeTransient, Error: "HTTP 429", RetryAfter: 45 * time.Second}
			case strings.Contains(string(op.Payload.Params), "down"):
				return downResult
			}
			return refusedResult
		}))
		call := func(params string) ports.OpOutcome {
			t.Helper()
			out, err := e.site.CachedCall(sendCtx(t), ports.CallRequest{System: "erp", Method: "post",
				Params: json.RawMessage(params), OpSource: ports.OpSource{SourceScript: "orders.py"}})
			if err != nil {
				t.Fatalf("CachedCall(%s): %v", params, err)
			}
			if u, err := uuid.Parse(out.Operation.ID); err != nil || u.Version() != 7 {
				t.Errorf("id %q is not a UUIDv7", out.Operation.ID)
			}
			if stored := e.get(t, out.Operation.ID); fmt.Sprint(stored) != fmt.Sprint(out.Operation) {
				t.Errorf("answered %+v\nbut stored %+v", out.Operation, stored)
			}
			return out
		}

		ok := call(`{"ok":1}`)
		if op := ok.Operation; op.Status != ports.OpDelivered || !op.TerminalAt.Equal(t0) || op.Payload.Params != nil ||
			op.Version != 1 || op.Kind != ports.OpCall || op.Summary() != "erp.post" || op.SourceScript != "orders.py" {
			t.Errorf("success: %+v", op)
		}
		if string(ok.Answer) != `{"order":42}` {
			t.Errorf("success: answer %s", ok.Answer)
		}

		down := call(`{"down":1}`)
		if op := down.Operation; op.Status != ports.OpPending || op.RetryCount != 0 || op.LastError != downResult.Error ||
			!op.NextAttemptAt.Equal(t0.Add(10*time.Second)) || string(op.Payload.Params) != `{"down":1}` || !op.TerminalAt.IsZero() {
			t.Errorf("transient: %+v", op)
		}
		if down.Answer != nil {
			t.Errorf("transient: answer %s", down.Answer)
		}
		if op := call(`{"slow":1}`).Operation; op.Status != ports.OpPending || !op.NextAttemptAt.Equal(t0.Add(45*time.Second)) {
			t.Errorf("transient with Retry-After 45 s, over the 10 s interval: %+v", op)
		}

		failed := call(`{"bad":1}`)
		if op := failed.Operation; op.Status != ports.OpFailed || op.LastError != refusedResult.Error ||
			!op.TerminalAt.Equal(t0) || op.Payload.Params != nil {
			t.Errorf("permanent: %+v", op)
		}
	})
}

func TestCachedWriteImmediateOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newOpsEnv(t, SiteConfig{}, newScriptedGateway(always(downResult)))
		out, err := e.site.CachedWrite(sendCtx(t), ports.WriteRequest{Connection: "plant",
			SQL: "INSERT INTO counts (line, n) VALUES ($1, $2)", Args: json.RawMessage(`["line-2", 7]`)})
		if err != nil {
			t.Fatal(err)
		}
		op := e.get(t, out.Operation.ID)
		if op.Kind != ports.OpWrite || op.Status != ports.OpPending || op.Summary() != "plant" ||
			op.Payload.SQL != "INSERT INTO counts (line, n) VALUES ($1, $2)" || string(op.Payload.Args) != `["line-2", 7]` {
			t.Errorf("stored %+v", op)
		}
	})
}

// TestCachedCallRepeatedIDAttemptsOnce: a call repeated with its id (the
// caller lost the answer) answers the stored state and attempts nothing,
// whatever that state is; the id of one operation cannot name another.
func TestCachedCallRepeatedIDAttemptsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, res := range []ports.OpResult{okResult, downResult, refusedResult} {
			e := newOpsEnv(t, SiteConfig{}, newScriptedGateway(always(res)))
			id := newUUID(t)
			first := e.call(t, id)
			again := e.call(t, strings.ToUpper(id))
			if n := e.gw.total(); n != 1 {
				t.Errorf("%s: %d attempts for one id, want 1", res.Outcome, n)
			}
			if again.Operation.ID != id || again.Operation.Status != first.Operation.Status ||
				again.Operation.Version != first.Operation.Version {
				t.Errorf("%s: repeat answered %+v, want %+v", res.Outcome, again.Operation, first.Operation)
			}
			_, err := e.site.CachedWrite(sendCtx(t), ports.WriteRequest{ID: id, Connection: "plant", SQL: "DELETE FROM t"})
			if !errors.Is(err, ports.ErrConflict) {
				t.Errorf("%s: a write with the id of a call = %v, want ErrConflict", res.Outcome, err)
			}
		}
	})
}

// TestCachedCallConcurrentSameIDAttemptsOnce: calls with one id arriving
// together on a node (a client's retry while its first call is still
// being attempted) make one attempt, and all answer its outcome.
func TestCachedCallConcurrentSameIDAttemptsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		e := newOpsEnv(t, SiteConfig{}, newScriptedGateway(func(ctx context.Context, _ ports.Operation, _ int) ports.OpResult {
			<-release
			return downResult
		}))
		id := newUUID(t)
		outs := make([]ports.OpOutcome, 8)
		var wg sync.WaitGroup
		for i := range outs {
			wg.Go(func() { outs[i] = e.call(t, id) })
		}
		synctest.Wait() // one in the gateway, seven waiting for it
		close(release)
		wg.Wait()
		if n := e.gw.total(); n != 1 {
			t.Fatalf("%d attempts for 8 concurrent calls with one id, want 1", n)
		}
		for i, out := range outs {
			if out.Operation.ID != id || out.Operation.Status != ports.OpPending || out.Operation.Version != 1 {
				t.Errorf("call %d answered %+v", i, out.Operation)
			}
		}
	})
}

// TestRedeliverRetriesAtTheIntervalThenParks: a buffered call is retried at
// its system's fixed interval (the loop, idle, woken by the call), waits
// longer when the system asks with Retry-After, and parks once its retries
// reach MaxRetries.
func TestRedeliverRetriesAtTheIntervalThenParks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newOpsEnv(t, SiteConfig{}, newScriptedGateway(func(_ context.Context, _ ports.Operation, n int) ports.OpResult {
			if n == 2 {
				return ports.OpResult{Outcome: ports.OutcomeTransient, Error: "HTTP 503", RetryAfter: 25 * time.Second}
			}
			return downResult
		}))
		run(t, e.site.Redeliver)
		synctest.Wait() // the loop is idle
		t0 := time.Now()
		id := e.call(t, "").Operation.ID

		time.Sleep(time.Hour)
		synctest.Wait()
		var got []time.Duration
		for _, at := range e.gw.tries(id) {
			got = append(got, at.Sub(t0))
		}
		// The call at 0; retry 1 at +10 s asks for 25 s; retry 2 at +35 s,
		// retry 3 at +45 s: the third retry of MaxRetries 3 parks it.
		if want := []time.Duration{0, 10 * time.Second, 35 * time.Second, 45 * time.Second}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("attempts at %v, want %v", got, want)
		}
		op := e.get(t, id)
		if op.Status != ports.OpParked || op.RetryCount != 3 || op.LastError != downResult.Error ||
			!op.NextAttemptAt.IsZero() || string(op.Payload.Params) == "" || !op.TerminalAt.IsZero() || op.Version != 4 {
			t.Errorf("after the retries: %+v", op)
		}
	})
}

// TestRedeliverDeliversAndFails: a buffered call the system takes later is
// Delivered; one it refuses for good during redelivery is Failed.
func TestRedeliverDeliversAndFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newOpsEnv(t, SiteConfig{}, newScriptedGateway(func(_ context.Context, op ports.Operation, n int) ports.OpResult {
			switch {
			case n == 1:
				return downResult
			case strings.Contains(string(op.Payload.Params), "bad"):
				return refusedResult
			}
			return okResult
		}))
		good := e.call(t, "").Operation.ID
		bad, err := e.site.CachedCall(sendCtx(t), ports.CallRequest{System: "erp", Method: "post", Params: json.RawMessage(`{"bad":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		run(t, e.site.Redeliver)
		time.Sleep(11 * time.Second)
		synctest.Wait()
		if op := e.get(t, good); op.Status != ports.OpDelivered || op.RetryCount != 0 || op.TerminalAt.IsZero() || op.Payload.Params != nil {
			t.Errorf("delivered on its first retry: %+v", op)
		}
		if op := e.get(t, bad.Operation.ID); op.Status != ports.OpFailed || op.LastError != refusedResult.Error || op.Payload.Params != nil {
			t.Errorf("refused on its first retry: %+v", op)
		}
	})
}

// TestRedeliverBoundsConcurrency: with 40 operations due, no more than
// OpConcurrency attempts run at once, and all are made.
func TestRedeliverBoundsConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newOpsEnv(t, SiteConfig{OpConcurrency: 4, OpBatch: 7}, newScriptedGateway(func(_ context.Context, _ ports.Operation, n int) ports.OpResult {
			if n == 1 {
				return downResult
			}
			time.Sleep(time.Second) // a slow system
			return okResult
		}))
		for range 40 {
			e.call(t, "")
		}
		run(t, e.site.Redeliver)
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := e.gw.total(); n != 80 {
			t.Errorf("%d attempts, want 80", n)
		}
		if e.gw.maxRun != 4 {
			t.Errorf("at most %d attempts ran at once, want 4", e.gw.maxRun)
		}
	})
}

// TestRetryAndDiscardOperation: an operator retries a parked call (due at
// once, its count reset, delivered by the loop) and discards another;
// acting on an operation that is not parked is a conflict naming its
// status.
func TestRetryAndDiscardOperation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newOpsEnv(t, SiteConfig{}, newScriptedGateway(func(_ context.Context, _ ports.Operation, n int) ports.OpResult {
			if n == 1 {
				return downResult
			}
			return okResult
		}))
		e.gw.policies["erp"] = ports.OpPolicy{MaxRetries: 0, Interval: 10 * time.Second} // parks at once
		first, second := e.call(t, "").Operation, e.call(t, "").Operation
		if first.Status != ports.OpParked {
			t.Fatalf("a transient failure with MaxRetries 0: %+v", first)
		}
		run(t, e.site.Redeliver)
		synctest.Wait()

		time.Sleep(time.Minute) // parked: never attempted again
		ctx := sendCtx(t)
		op, err := e.site.RetryOperation(ctx, first.ID)
		if err != nil || op.Status != ports.OpRetrying || op.RetryCount != 0 || !op.NextAttemptAt.Equal(time.Now().UTC()) {
			t.Fatalf("RetryOperation = %+v, %v", op, err)
		}
		synctest.Wait() // the loop, woken, delivers it at once
		if got := e.get(t, first.ID); got.Status != ports.OpDelivered || len(e.gw.tries(first.ID)) != 2 {
			t.Errorf("after Retry: %+v, %d attempts", got, len(e.gw.tries(first.ID)))
		}
		if _, err := e.site.RetryOperation(ctx, first.ID); !errors.Is(err, ports.ErrConflict) || !strings.Contains(err.Error(), "Delivered") {
			t.Errorf("Retry of a Delivered operation = %v", err)
		}

		op, err = e.site.DiscardOperation(ctx, second.ID)
		if err != nil || op.Status != ports.OpDiscarded || !op.TerminalAt.Equal(time.Now().UTC()) {
			t.Fatalf("DiscardOperation = %+v, %v", op, err)
		}
		if got := e.get(t, second.ID); got.Status != ports.OpDiscarded || got.Payload.Params != nil || got.Version != op.Version {
			t.Errorf("stored after Discard: %+v", got)
		}
		if len(e.gw.tries(second.ID)) != 1 {
			t.Errorf("a discarded operation was attempted %d times", len(e.gw.tries(second.ID)))
		}
		if _, err := e.site.DiscardOperation(ctx, second.ID); !errors.Is(err, ports.ErrConflict) || !strings.Contains(err.Error(), "Discarded") {
			t.Errorf("Discard of a Discarded operation = %v", err)
		}
		if _, err := e.site.DiscardOperation(ctx, newUUID(t)); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("Discard of an unknown id = %v", err)
		}
		if _, err := e.site.RetryOperation(ctx, "op-1"); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("Retry of a malformed id = %v", err)
		}
	})
}

// TestCachedCallCommitRefused: a node that cannot commit (no quorum, not
// the leader) answers ErrUnavailable and stores nothing; the client's
// repeat with the same id is attempted again (the at-least-once repeat)
// and recorded.
func TestCachedCallCommitRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newOpsEnv(t, SiteConfig{}, newScriptedGateway(always(okResult)))
		id := newUUID(t)
		e.ops.SetAvailable(false)
		_, err := e.site.CachedCall(sendCtx(t), ports.CallRequest{ID: id, System: "erp", Method: "post"})
		if !errors.Is(err, ports.ErrUnavailable) {
			t.Fatalf("CachedCall on a node that cannot commit = %v, want ErrUnavailable", err)
		}
		if _, err := e.ops.Get(context.Background(), id); !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("the refused call left a row: %v", err)
		}
		e.ops.SetAvailable(true)
		if out := e.call(t, id); out.Operation.Status != ports.OpDelivered {
			t.Errorf("the repeat: %+v", out.Operation)
		}
		if n := len(e.gw.tries(id)); n != 2 {
			t.Errorf("%d attempts, want 2: the repeat of a call whose outcome was not recorded is attempted again", n)
		}
	})
}

// TestRedeliverCommitRefusedRetriesLater: a redelivery whose outcome cannot
// be committed leaves the row due; it is attempted again once the store
// takes writes, and recorded.
func TestRedeliverCommitRefusedRetriesLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newOpsEnv(t, SiteConfig{RetryInterval: 5 * time.Second}, newScriptedGateway(func(_ context.Context, _ ports.Operation, n int) ports.OpResult {
			if n == 1 {
				return downResult
			}
			return okResult
		}))
		id := e.call(t, "").Operation.ID
		e.ops.SetAvailable(false)
		run(t, e.site.Redeliver)
		time.Sleep(12 * time.Second) // due at 10 s: attempted, the commit refused
		synctest.Wait()
		if op := e.get(t, id); op.Status != ports.OpPending || op.Version != 1 {
			t.Fatalf("after a refused commit: %+v", op)
		}
		attempts := len(e.gw.tries(id))
		if attempts < 2 {
			t.Fatalf("%d attempts by 12 s, want the retry at 10 s", attempts)
		}
		e.ops.SetAvailable(true)
		time.Sleep(time.Minute)
		synctest.Wait()
		if op := e.get(t, id); op.Status != ports.OpDelivered {
			t.Errorf("once the store takes writes: %+v", op)
		}
	})
}

// TestRedeliverShutdownMidAttemptLeavesTheRowDue: the loop stopped while an
// attempt is under way (leadership lost, shutdown) counts nothing: the row
// stays as it was, due, for the next leader.
func TestRedeliverShutdownMidAttemptLeavesTheRowDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newOpsEnv(t, SiteConfig{}, newScriptedGateway(func(ctx context.Context, _ ports.Operation, n int) ports.OpResult {
			if n == 1 {
				return downResult
			}
			<-ctx.Done() // the system hangs
			return ports.OpResult{Outcome: ports.OutcomeTransient, Error: ctx.Err().Error()}
		}))
		id := e.call(t, "").Operation.ID
		before := e.get(t, id)
		stop := run(t, e.site.Redeliver)
		time.Sleep(15 * time.Second)
		synctest.Wait()
		if n := len(e.gw.tries(id)); n != 2 {
			t.Fatalf("%d attempts, want the retry under way", n)
		}
		stop()
		after := e.get(t, id)
		if fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("the row changed:\n%+v\nwas\n%+v", after, before)
		}
		due, err := e.ops.Due(context.Background(), time.Now(), 10)
		if err != nil || len(due) != 1 || due[0].ID != id {
			t.Errorf("Due = %v, %v; want the row due", due, err)
		}
	})
}

// TestPurgeOperationsAfterRetention: terminal rows go once OpRetention has
// passed since they became terminal; buffered rows stay.
func TestPurgeOperationsAfterRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newOpsEnv(t, SiteConfig{OpRetention: 48 * time.Hour, OpPurgeInterval: time.Hour, OpBatch: 2},
			newScriptedGateway(func(_ context.Context, op ports.Operation, _ int) ports.OpResult {
				if strings.Contains(string(op.Payload.Params), "down") {
					return downResult
				}
				return okResult
			}))
		e.gw.policies["erp"] = ports.OpPolicy{MaxRetries: 0} // the buffered one parks: never redelivered
		var done []string
		for range 5 {
			done = append(done, e.call(t, "").Operation.ID)
		}
		parked, err := e.site.CachedCall(sendCtx(t), ports.CallRequest{System: "erp", Method: "post", Params: json.RawMessage(`{"down":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		run(t, e.site.PurgeOperations)
		time.Sleep(47 * time.Hour)
		synctest.Wait()
		for _, id := range done {
			if op := e.get(t, id); op.Status != ports.OpDelivered {
				t.Fatalf("before the retention: %+v", op)
			}
		}
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		for _, id := range done {
			if _, err := e.ops.Get(context.Background(), id); !errors.Is(err, ports.ErrNotFound) {
				t.Errorf("%s after the retention: %v", id, err)
			}
		}
		if op := e.get(t, parked.Operation.ID); op.Status != ports.OpParked {
			t.Errorf("the parked row: %+v", op)
		}
	})
}

// TestCachedOpsRefuseBadInput: bad input is refused with ErrInvalid before
// anything is attempted or stored.
func TestCachedOpsRefuseBadInput(t *testing.T) {
	e := newOpsEnv(t, SiteConfig{MaxOpPayloadBytes: 64}, newScriptedGateway(always(okResult)))
	ctx := sendCtx(t)
	long := `{"a":"` + strings.Repeat("x", 64) + `"}`
	for _, c := range []struct {
		name string
		ctx  context.Context
		req  any
		want string
	}{
		{"unknown system", ctx, ports.CallRequest{System: "mes", Method: "post"}, `no system or connection is named "mes"`},
		{"unknown method", ctx, ports.CallRequest{System: "erp", Method: "delete"}, `no method "delete"`},
		{"no system", ctx, ports.CallRequest{Method: "post"}, "system is empty"},
		{"oversize params", ctx, ports.CallRequest{System: "erp", Method: "post", Params: json.RawMessage(long)}, "over the limit of 64"},
		{"invalid UTF-8", ctx, ports.CallRequest{System: "erp", Method: "post", Params: json.RawMessage("{\"a\":\"\xff\"}")}, "not valid UTF-8"},
		{"params not an object", ctx, ports.CallRequest{System: "erp", Method: "post", Params: json.RawMessage(`[1]`)}, "not a JSON object"},
		{"provenance", ctx, ports.CallRequest{System: "erp", Method: "post", OpSource: ports.OpSource{SourceScript: "a\x00b"}}, "NUL"},
		{"malformed id", ctx, ports.CallRequest{ID: "42", System: "erp", Method: "post"}, "not a UUID"},
		{"no deadline", context.Background(), ports.CallRequest{System: "erp", Method: "post"}, "deadline"},
		{"unknown connection", ctx, ports.WriteRequest{Connection: "historian", SQL: "SELECT 1"}, `named "historian"`},
		{"no SQL", ctx, ports.WriteRequest{Connection: "plant"}, "sql is empty"},
		{"oversize write", ctx, ports.WriteRequest{Connection: "plant", SQL: "INSERT INTO t VALUES ($1)", Args: json.RawMessage(`["` + strings.Repeat("x", 40) + `"]`)}, "over the limit of 64"},
		{"nested args", ctx, ports.WriteRequest{Connection: "plant", SQL: "INSERT", Args: json.RawMessage(`[{"a":1}]`)}, "args[0] is not a string"},
		{"args not an array", ctx, ports.WriteRequest{Connection: "plant", SQL: "INSERT", Args: json.RawMessage(`{"a":1}`)}, "not a JSON array"},
		{"args null", ctx, ports.WriteRequest{Connection: "plant", SQL: "INSERT", Args: json.RawMessage(`null`)}, "not a JSON array"},
		{"invalid UTF-8 SQL", ctx, ports.WriteRequest{Connection: "plant", SQL: "INSERT \xff"}, "not valid UTF-8"},
	} {
		var err error
		switch r := c.req.(type) {
		case ports.CallRequest:
			_, err = e.site.CachedCall(c.ctx, r)
		case ports.WriteRequest:
			_, err = e.site.CachedWrite(c.ctx, r)
		}
		if !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want ErrInvalid saying %q", c.name, err, c.want)
		}
	}
	if n := e.gw.total(); n != 0 {
		t.Errorf("%d attempts of bad input", n)
	}
	if page, err := e.ops.List(ctx, ports.OpFilter{}, ports.PageRequest{Limit: 10}); err != nil || len(page.Items) != 0 {
		t.Errorf("stored after bad input: %v, %v", page.Items, err)
	}
}

// TestSiteWithoutTargets: a site whose configuration defines no external
// system and no database connection refuses cached calls as naming an
// unknown target and knows no operations.
func TestSiteWithoutTargets(t *testing.T) {
	e := newSiteEnv(t, SiteConfig{})
	ctx := sendCtx(t)
	if _, err := e.site.CachedCall(ctx, ports.CallRequest{System: "erp", Method: "post"}); !errors.Is(err, ports.ErrInvalid) ||
		!strings.Contains(err.Error(), "defines no external systems") {
		t.Errorf("CachedCall = %v", err)
	}
	if _, err := e.site.CachedWrite(ctx, ports.WriteRequest{Connection: "plant", SQL: "SELECT 1"}); !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("CachedWrite = %v", err)
	}
	if got, err := e.site.Tracking(ctx, []string{newUUID(t)}); err != nil || len(got) != 0 {
		t.Errorf("Tracking = %v, %v", got, err)
	}
	if _, err := e.site.RetryOperation(ctx, newUUID(t)); !errors.Is(err, ports.ErrNotFound) {
		t.Errorf("RetryOperation = %v", err)
	}
	if _, err := NewSite(SiteConfig{Site: "s"}, SiteDeps{Buffer: e.buf, Central: e.central, Ops: membuffer.NewOps()}); err == nil ||
		!strings.Contains(err.Error(), "go together") {
		t.Errorf("NewSite with Ops and no Gateway = %v", err)
	}
}

// TestTrackingAndListOperations: Tracking answers from the store, keyed by
// the ids as given, leaving unknown ids out; both bound what they accept.
func TestTrackingAndListOperations(t *testing.T) {
	e := newOpsEnv(t, SiteConfig{MaxStatusIDs: 3}, newScriptedGateway(always(downResult)))
	ctx := sendCtx(t)
	id := e.call(t, "").Operation.ID
	upper, unknown := strings.ToUpper(id), newUUID(t)
	got, err := e.site.Tracking(ctx, []string{upper, unknown})
	if err != nil || len(got) != 1 || got[upper].ID != id || got[upper].Status != ports.OpPending {
		t.Errorf("Tracking = %+v, %v", got, err)
	}
	if _, err := e.site.Tracking(ctx, []string{id, id, id, id}); !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("Tracking of 4 ids over a limit of 3 = %v", err)
	}
	if _, err := e.site.Tracking(ctx, []string{"x"}); !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("Tracking of a malformed id = %v", err)
	}
	page, err := e.site.ListOperations(ctx, ports.OpFilter{Kind: ports.OpCall, Statuses: []ports.OpStatus{ports.OpPending}}, ports.PageRequest{})
	if err != nil || len(page.Items) != 1 || page.Items[0].ID != id {
		t.Errorf("ListOperations = %+v, %v", page, err)
	}
	for _, c := range []struct {
		f    ports.OpFilter
		page ports.PageRequest
	}{
		{ports.OpFilter{Kind: "Email"}, ports.PageRequest{}},
		{ports.OpFilter{Statuses: []ports.OpStatus{"Done"}}, ports.PageRequest{}},
		{ports.OpFilter{}, ports.PageRequest{Limit: MaxPageSize + 1}},
	} {
		if _, err := e.site.ListOperations(ctx, c.f, c.page); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("ListOperations(%+v, %+v) = %v, want ErrInvalid", c.f, c.page, err)
		}
	}
}

func TestSiteConfigValidatesOperationFields(t *testing.T) {
	c := SiteConfig{Site: "s"}.WithDefaults()
	if c.OpRetention != 7*24*time.Hour || c.OpConcurrency != DefaultOpConcurrency || c.MaxOpPayloadBytes != 64<<10 {
		t.Errorf("defaults: %+v", c)
	}
	c.OpRetention, c.OpConcurrency, c.OpPurgeInterval = -time.Hour, -1, -time.Second
	err := c.Validate()
	var fe *ports.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("Validate = %v, want FieldErrors", err)
	}
	for _, want := range []string{"OpRetention: must be positive", "OpConcurrency: must be positive", "OpPurgeInterval: must be positive"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v; want it to say %q", err, want)
		}
	}
}

// TestRedeliverLeavesARowChangedMeanwhile: when the row changed during the
// attempt (another change was committed meanwhile), the loop's outcome does not
// apply and the row keeps the change.
func TestRedeliverLeavesARowChangedMeanwhile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		e := newOpsEnv(t, SiteConfig{}, newScriptedGateway(func(_ context.Context, _ ports.Operation, n int) ports.OpResult {
			if n == 1 {
				return downResult
			}
			<-release
			return okResult
		}))
		id := e.call(t, "").Operation.ID
		run(t, e.site.Redeliver)
		time.Sleep(11 * time.Second)
		synctest.Wait() // the retry is under way
		op := e.get(t, id)
		op.Status, op.NextAttemptAt = ports.OpParked, time.Time{}
		if applied, err := e.ops.Put(context.Background(), []ports.OpChange{{From: ports.OpPending, Op: op}}); err != nil || !applied[0] {
			t.Fatal(applied, err)
		}
		close(release)
		synctest.Wait()
		if got := e.get(t, id); got.Status != ports.OpParked || got.Version != 2 {
			t.Errorf("the row changed meanwhile became %+v", got)
		}
	})
}

// TestRedeliverParksAnOperationWhoseTargetIsGone: an operation buffered for
// a system the configuration no longer defines parks without an attempt.
func TestRedeliverParksAnOperationWhoseTargetIsGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newOpsEnv(t, SiteConfig{}, newScriptedGateway(always(downResult)))
		id := e.call(t, "").Operation.ID
		delete(e.gw.policies, "erp")
		run(t, e.site.Redeliver)
		time.Sleep(time.Minute)
		synctest.Wait()
		op := e.get(t, id)
		if op.Status != ports.OpParked || !strings.Contains(op.LastError, "not attempted") || len(e.gw.tries(id)) != 1 {
			t.Errorf("%+v after %d attempts", op, len(e.gw.tries(id)))
		}
	})
}
