package core

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/siteline/outbox/ports"
)

// errNoTargets is why a site without Ops and Gateway refuses a cached call
// or write: as far as it knows, the target named is not defined.
var errNoTargets = fmt.Errorf("this site defines no external systems or database connections: %w", ports.ErrInvalid)

// commitReserve is the share of a caller's time left for the commit after
// the first attempt: the attempt ends at the caller's deadline less
// min(maxCommitReserve, a quarter of the time left), so that a target slower
// than the caller's patience is recorded as a transient failure (and
// buffered) rather than lost with the caller's deadline.
const maxCommitReserve = 2 * time.Second

// opPollCap bounds the wait of an idle redelivery loop: it looks at the
// store at least this often, whatever it believes is due next.
const opPollCap = time.Minute

// farFuture is a NextAttemptAt later than any the loop sets: Due(farFuture,
// 1) returns the buffered operation due first.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// CachedCall implements ports.Operations: it validates the call, attempts
// it at once and commits the outcome, in that order.
//
// The attempt comes before the commit so that a call costs one Raft commit
// (its outcome), not two (a row before the attempt, its outcome after): the
// immediate-success path, the common one, stays as fast as the target.
// The cost: when the node dies, or loses its leadership, between the
// attempt and the commit, nothing records that the attempt was made, the
// caller gets no answer (or ErrUnavailable) and calls again with the same
// id, and the call is attempted again. That repeat is the at-least-once
// delivery the site promises: calls carry the id as their Idempotency-Key,
// and writes in exactly-once mode record it in their own transaction, so a
// target that honours them does the work once.
//
// ctx must carry a deadline. The attempt ends before it, leaving time for
// the commit; a target that has not answered by then counts as a transient
// failure. Calls with the same id on one node attempt once: a second one
// waits for the first to commit, then answers the stored state.
func (s *Site) CachedCall(ctx context.Context, req ports.CallRequest) (ports.OpOutcome, error) {
	if s.ops == nil {
		return ports.OpOutcome{}, fmt.Errorf("cached call to %.64q: %w", req.System, errNoTargets)
	}
	var errs fieldErrors
	errs.text("system", req.System, maxNameBytes, true)
	errs.text("method", req.Method, maxNameBytes, true)
	params := req.Params
	if len(bytes.TrimSpace(params)) == 0 {
		params = json.RawMessage("{}")
	}
	switch {
	case len(params) > s.cfg.MaxOpPayloadBytes:
		errs.add(fmt.Errorf("params are %d bytes, over the limit of %d", len(params), s.cfg.MaxOpPayloadBytes))
	case !utf8.Valid(params):
		errs.add(errors.New("params are not valid UTF-8"))
	case !json.Valid(params) || bytes.TrimSpace(params)[0] != '{':
		errs.add(errors.New("params are not a JSON object"))
	}
	op := ports.Operation{Kind: ports.OpCall, Target: req.System, Method: req.Method,
		Payload: ports.OpPayload{Params: params}}
	return s.cached(ctx, req.ID, op, req.OpSource, errs)
}

// CachedWrite implements ports.Operations as CachedCall does, for a write
// to a database connection.
func (s *Site) CachedWrite(ctx context.Context, req ports.WriteRequest) (ports.OpOutcome, error) {
	if s.ops == nil {
		return ports.OpOutcome{}, fmt.Errorf("cached write to %.64q: %w", req.Connection, errNoTargets)
	}
	var errs fieldErrors
	errs.text("connection", req.Connection, maxNameBytes, true)
	args := req.Args
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("[]")
	}
	errs.text("sql", req.SQL, s.cfg.MaxOpPayloadBytes, true)
	switch {
	case len(req.SQL)+len(args) > s.cfg.MaxOpPayloadBytes:
		errs.add(fmt.Errorf("sql and args are %d bytes, over the limit of %d", len(req.SQL)+len(args), s.cfg.MaxOpPayloadBytes))
	case !utf8.Valid(args):
		errs.add(errors.New("args are not valid UTF-8"))
	default:
		if err := scalarArray(args); err != nil {
			errs.add(err)
		}
	}
	op := ports.Operation{Kind: ports.OpWrite, Target: req.Connection,
		Payload: ports.OpPayload{SQL: req.SQL, Args: args}}
	return s.cached(ctx, req.ID, op, req.OpSource, errs)
}

// scalarArray checks that args is a JSON array of strings, numbers,
// booleans and nulls.
func scalarArray(args json.RawMessage) error {
	var vs []json.RawMessage
	if err := json.Unmarshal(args, &vs); err != nil || bytes.TrimSpace(args)[0] != '[' {
		return errors.New("args are not a JSON array")
	}
	for i, v := range vs {
		if c := v[0]; c == '{' || c == '[' {
			return fmt.Errorf("args[%d] is not a string, number, boolean or null", i)
		}
	}
	return nil
}

// cached is what CachedCall and CachedWrite share, from the checks common
// to both to the commit of the first attempt's outcome.
func (s *Site) cached(ctx context.Context, reqID string, op ports.Operation, src ports.OpSource,
	errs fieldErrors) (ports.OpOutcome, error) {
	what := "cached call"
	if op.Kind == ports.OpWrite {
		what = "cached write"
	}
	if _, ok := ctx.Deadline(); !ok {
		return ports.OpOutcome{}, fmt.Errorf("a %s needs a context with a deadline: %w", what, ports.ErrInvalid)
	}
	id, err := newID(reqID, "operation")
	if err != nil {
		return ports.OpOutcome{}, err
	}
	errs.provenance(src.SourceInstance, src.SourceScript, src.ExecutionID, src.ParentExecutionID)
	if err := errs.err(); err != nil {
		return ports.OpOutcome{}, fmt.Errorf("%s %s: %s: %w", what, id, err, ports.ErrInvalid)
	}
	op.ID = id
	op.SourceInstance, op.SourceScript = src.SourceInstance, src.SourceScript
	op.ExecutionID, op.ParentExecutionID = src.ExecutionID, src.ParentExecutionID
	if err := s.gateway.Check(op); err != nil {
		if !errors.Is(err, ports.ErrInvalid) {
			err = fmt.Errorf("%v: %w", err, ports.ErrInvalid)
		}
		return ports.OpOutcome{}, fmt.Errorf("%s %s to %s: %w", what, id, op.Summary(), err)
	}
	for {
		stored, found, err := s.storedOp(ctx, op)
		if err != nil || found {
			return ports.OpOutcome{Operation: stored}, err
		}
		done, mine := s.claim(id)
		if !mine {
			// The same id is being attempted on this node: wait for that
			// attempt's commit, then answer what it stored.
			select {
			case <-done:
				continue
			case <-ctx.Done():
				return ports.OpOutcome{}, fmt.Errorf("%s %s: wait for the same id's attempt: %w", what, id, ctx.Err())
			}
		}
		out, err := s.firstAttempt(ctx, op)
		s.release(id, done)
		if err != nil {
			return ports.OpOutcome{}, fmt.Errorf("%s %s to %s: %w", what, id, op.Summary(), err)
		}
		return out, nil
	}
}

// storedOp looks op's id up in the store: found, it returns the stored row,
// or ErrConflict when the id names another operation.
func (s *Site) storedOp(ctx context.Context, op ports.Operation) (ports.Operation, bool, error) {
	stored, err := s.ops.Get(ctx, op.ID)
	switch {
	case errors.Is(err, ports.ErrNotFound):
		return ports.Operation{}, false, nil
	case err != nil:
		return ports.Operation{}, false, fmt.Errorf("look up operation %s: %w", op.ID, err)
	case stored.Kind != op.Kind || stored.Target != op.Target || stored.Method != op.Method:
		return ports.Operation{}, false, fmt.Errorf("operation %s is already a %s to %s, not a %s to %s: %w",
			op.ID, stored.Kind, stored.Summary(), op.Kind, op.Summary(), ports.ErrConflict)
	}
	return stored, true, nil
}

// claim marks id as being attempted on this node. It returns the channel
// closed when the attempt is over and whether the caller holds the claim
// (false: another call holds it, and the caller waits on the channel).
func (s *Site) claim(id string) (chan struct{}, bool) {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if ch, ok := s.inflight[id]; ok {
		return ch, false
	}
	ch := make(chan struct{})
	s.inflight[id] = ch
	return ch, true
}

// release ends the claim that claim gave.
func (s *Site) release(id string, ch chan struct{}) {
	s.opMu.Lock()
	delete(s.inflight, id)
	s.opMu.Unlock()
	close(ch)
}

// firstAttempt attempts op, not yet stored, and commits its outcome as a
// new row.
func (s *Site) firstAttempt(ctx context.Context, op ports.Operation) (ports.OpOutcome, error) {
	pol, err := s.gateway.Policy(op.Kind, op.Target)
	if err != nil {
		return ports.OpOutcome{}, fmt.Errorf("retry policy: %w", err)
	}
	op.CreatedAt = s.clock.Now().UTC()
	actx, cancel := context.WithDeadline(ctx, attemptDeadline(ctx))
	res := s.gateway.Attempt(actx, op)
	cancel()
	if err := ctx.Err(); err != nil {
		// The caller is gone: no commit could succeed, and the caller,
		// which got no id, repeats the call or gives it up.
		return ports.OpOutcome{}, fmt.Errorf("attempt cut short: %w", err)
	}
	now := s.clock.Now().UTC()
	op.UpdatedAt = now
	var answer json.RawMessage
	switch res.Outcome {
	case ports.OutcomeSuccess:
		op.Status, op.TerminalAt, answer = ports.OpDelivered, now, res.Answer
	case ports.OutcomePermanent:
		op.Status, op.TerminalAt, op.LastError = ports.OpFailed, now, failure(res)
	default:
		op.LastError = failure(res)
		if pol.MaxRetries <= 0 {
			// No retries allowed: it parks at once, for an operator.
			op.Status = ports.OpParked
		} else {
			op.Status, op.NextAttemptAt = ports.OpPending, now.Add(s.retryWait(pol, res))
		}
	}
	if op.Status.Terminal() {
		op.Payload = ports.OpPayload{}
	}
	applied, err := s.ops.Put(ctx, []ports.OpChange{{From: "", Op: op}})
	if err != nil {
		return ports.OpOutcome{}, fmt.Errorf("commit the %s outcome: %w", res.Outcome, err)
	}
	if !applied[0] {
		// Stored meanwhile, by another node this one handed the call to
		// before, or by this node's previous leadership: answer that.
		stored, found, err := s.storedOp(ctx, op)
		if err != nil || !found {
			return ports.OpOutcome{}, cmp.Or(err, fmt.Errorf("the commit did not apply and the row is absent: %w", ports.ErrUnavailable))
		}
		return ports.OpOutcome{Operation: stored}, nil
	}
	if op.Status.Buffered() {
		s.wakeOps()
	}
	op.Version = 1 // committed as a new row
	s.emit(op)
	return ports.OpOutcome{Operation: op, Answer: answer}, nil
}

// attemptDeadline is when the first attempt must end: the caller's
// deadline less the time kept for the commit.
func attemptDeadline(ctx context.Context) time.Time {
	dl, _ := ctx.Deadline()
	left := time.Until(dl)
	return dl.Add(-min(maxCommitReserve, left/4))
}

// retryWait is how long after a transient failure the next attempt waits:
// the target's fixed interval, or longer when the target asked for it.
func (s *Site) retryWait(pol ports.OpPolicy, res ports.OpResult) time.Duration {
	wait := pol.Interval
	if wait <= 0 {
		wait = s.cfg.RetryInterval
	}
	return max(wait, res.RetryAfter)
}

// failure is the LastError of a failed attempt.
func failure(res ports.OpResult) string {
	msg := strings.ToValidUTF8(res.Error, "\uFFFD")
	if msg == "" {
		msg = fmt.Sprintf("%s failure", strings.ToLower(string(res.Outcome)))
	}
	return truncate(msg, maxErrorBytes)
}

// maxErrorBytes caps the LastError a row keeps.
const maxErrorBytes = 1024

// wakeOps asks the redelivery loop to look at the store now. It never
// blocks.
func (s *Site) wakeOps() {
	select {
	case s.opWake <- struct{}{}:
	default:
	}
}

// Tracking implements ports.Operations: it reads the node's own copy of the
// tracking table, so any node answers it, leader or not, with central out
// of reach. The map is keyed by the ids as given.
func (s *Site) Tracking(ctx context.Context, ids []string) (map[string]ports.Operation, error) {
	canon, err := s.canonIDs(ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]ports.Operation, len(ids))
	if s.ops == nil {
		return out, nil
	}
	for i, id := range canon {
		op, err := s.ops.Get(ctx, id)
		if errors.Is(err, ports.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("tracking of operation %s: %w", id, err)
		}
		out[ids[i]] = op
	}
	return out, nil
}

// ListOperations implements ports.Operations. A page limit of 0 means
// DefaultPageSize; it may not exceed MaxPageSize.
func (s *Site) ListOperations(ctx context.Context, f ports.OpFilter, page ports.PageRequest) (ports.OpPage, error) {
	var errs fieldErrors
	if f.Kind != "" && f.Kind != ports.OpCall && f.Kind != ports.OpWrite {
		errs.add(fmt.Errorf("kind %.64q is neither %s nor %s", f.Kind, ports.OpCall, ports.OpWrite))
	}
	for _, st := range f.Statuses {
		if !st.Valid() {
			errs.add(fmt.Errorf("status %.64q is not one of %v", st, ports.OpStatuses))
			break
		}
	}
	errs.text("target", f.Target, maxNameBytes, false)
	if !f.CreatedFrom.IsZero() && !f.CreatedTo.IsZero() && !f.CreatedFrom.Before(f.CreatedTo) {
		errs.add(errors.New("created-from is not before created-to"))
	}
	switch {
	case page.Limit == 0:
		page.Limit = DefaultPageSize
	case page.Limit < 0 || page.Limit > MaxPageSize:
		errs.add(fmt.Errorf("page size %d is outside 1..%d", page.Limit, MaxPageSize))
	}
	if len(page.After) > 512 {
		errs.add(errors.New("the cursor is too long"))
	}
	if err := errs.err(); err != nil {
		return ports.OpPage{}, fmt.Errorf("list operations: %s: %w", err, ports.ErrInvalid)
	}
	if s.ops == nil {
		return ports.OpPage{}, nil
	}
	p, err := s.ops.List(ctx, f, page)
	if err != nil {
		return ports.OpPage{}, fmt.Errorf("list operations: %w", err)
	}
	return p, nil
}

// RetryOperation implements ports.Operations: a Parked operation goes back
// to Retrying, due at once, its retry count reset, and the redelivery loop
// is woken.
func (s *Site) RetryOperation(ctx context.Context, id string) (ports.Operation, error) {
	op, err := s.operatorAction(ctx, id, "retry", func(op *ports.Operation, now time.Time) {
		op.Status, op.RetryCount, op.NextAttemptAt = ports.OpRetrying, 0, now
	})
	if err == nil {
		s.wakeOps()
	}
	return op, err
}

// DiscardOperation implements ports.Operations: a Parked operation becomes
// Discarded, and its message is dropped.
func (s *Site) DiscardOperation(ctx context.Context, id string) (ports.Operation, error) {
	return s.operatorAction(ctx, id, "discard", func(op *ports.Operation, now time.Time) {
		op.Status, op.TerminalAt, op.NextAttemptAt = ports.OpDiscarded, now, time.Time{}
		op.Payload = ports.OpPayload{}
	})
}

// operatorAction applies change to a Parked operation: ErrNotFound for an
// unknown id, ErrConflict for one that is not Parked (or stopped being
// Parked meanwhile).
func (s *Site) operatorAction(ctx context.Context, id, verb string, change func(*ports.Operation, time.Time)) (ports.Operation, error) {
	c, err := parseID(id)
	if err != nil {
		return ports.Operation{}, err
	}
	if s.ops == nil {
		return ports.Operation{}, fmt.Errorf("%s operation %s: %w", verb, c, ports.ErrNotFound)
	}
	op, err := s.ops.Get(ctx, c)
	if err != nil {
		return ports.Operation{}, fmt.Errorf("%s operation %s: %w", verb, c, err)
	}
	if op.Status != ports.OpParked {
		return ports.Operation{}, fmt.Errorf("%s operation %s: it is %s, and only a Parked operation can be acted on: %w",
			verb, c, op.Status, ports.ErrConflict)
	}
	now := s.clock.Now().UTC()
	next := op
	next.UpdatedAt = now
	change(&next, now)
	applied, err := s.ops.Put(ctx, []ports.OpChange{{From: ports.OpParked, Op: next}})
	if err != nil {
		return ports.Operation{}, fmt.Errorf("%s operation %s: %w", verb, c, err)
	}
	if !applied[0] {
		return ports.Operation{}, fmt.Errorf("%s operation %s: it stopped being Parked meanwhile: %w", verb, c, ports.ErrConflict)
	}
	next.Version = op.Version + 1
	s.emit(next)
	return next, nil
}
