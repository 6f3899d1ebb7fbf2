package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"google.golang.org/grpc"

	"github.com/siteline/outbox/adapters/siteapi/internal/pb"
	"github.com/siteline/outbox/ports"
)

// ErrFailed is wrapped by the error of a cached call or write that its
// target refused for good (an HTTP 4xx, a constraint violation): the site
// recorded it as ports.OpFailed and will not try it again. The error is an
// *OperationError holding the tracking row.
var ErrFailed = errors.New("the target refused the operation for good")

// OperationError is the error of a cached call or write that failed for
// good. It wraps ErrFailed.
type OperationError struct {
	// Operation is the tracking row, ports.OpFailed, the target's error in
	// its LastError.
	Operation ports.Operation
}

func (e *OperationError) Error() string {
	op := e.Operation
	return fmt.Sprintf("notify: %s %s to %s failed: %s", op.Kind, op.ID, op.Summary(), op.LastError)
}

func (e *OperationError) Unwrap() error { return ErrFailed }

// Result is the answer to a cached call or write.
type Result struct {
	// ID is the tracked operation id, to ask Tracking about later.
	ID string
	// Operation is the tracking row as the site recorded it: Delivered when
	// the target took it at once, Pending (buffered, to be retried) when
	// the target could not be reached, or whatever a repeat of the same id
	// found.
	Operation ports.Operation
	// Answer is the target's answer when it was delivered at once (a call's
	// response body, a write's rows affected); nil otherwise.
	Answer json.RawMessage
}

// Delivered reports whether the target took the operation.
func (r Result) Delivered() bool { return r.Operation.Status == ports.OpDelivered }

// Call makes a cached call to method of the external system the site
// defines: the site attempts it at once and answers the target's answer,
// or buffers it when the target cannot be reached and retries it at the
// system's interval (Result.Operation is then Pending). params is encoded
// with encoding/json into a JSON object (pass a json.RawMessage for text
// already encoded; nil is {}).
//
// ctx must carry a deadline: without one Call fails at once with an error
// wrapping ports.ErrInvalid and sends nothing. Call makes the tracked id
// (a UUIDv7) before the first try and keeps it on every retry, at every
// node, until the deadline: a call whose answer was lost is found by its id
// and answered, not made again. A call the target refused for good returns
// the Result and an *OperationError wrapping ErrFailed. Invalid input (an
// unknown system or method, params that do not fit) wraps ports.ErrInvalid
// with the site's reason, and nothing is buffered.
func (c *Client) Call(ctx context.Context, system, method string, params any) (Result, error) {
	id, err := newOpID(ctx, "Call")
	if err != nil {
		return Result{}, err
	}
	return c.CallWithID(ctx, id, system, method, params)
}

// CallWithID is Call with a tracked id the caller made (a UUID), for a
// caller that records the id before calling and may call again after a
// crash: the site keeps one operation per id.
func (c *Client) CallWithID(ctx context.Context, id, system, method string, params any) (Result, error) {
	if _, ok := ctx.Deadline(); !ok {
		return Result{}, needsDeadline("Call")
	}
	var raw json.RawMessage
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return Result{}, fmt.Errorf("notify: Call %s.%.64s: encode params: %w: %w", system, method, err, ports.ErrInvalid)
		}
		raw = b
	}
	req := pb.CallRequestToPB(ports.CallRequest{ID: id, System: system, Method: method, Params: raw, OpSource: c.source()})
	return c.cached(ctx, "Call", func(ctx context.Context, rpc pb.SiteClient, opts ...grpc.CallOption) (*pb.OperationOutcome, error) {
		return rpc.CachedCall(ctx, req, opts...)
	})
}

// Write makes a cached write of sql with args, bound in order with the
// driver's placeholders, to the database connection the site defines. It
// behaves as Call does. args are strings, numbers, booleans and nils,
// encoded with encoding/json into a JSON array; values are never spliced
// into the text.
func (c *Client) Write(ctx context.Context, connection, sql string, args ...any) (Result, error) {
	id, err := newOpID(ctx, "Write")
	if err != nil {
		return Result{}, err
	}
	return c.WriteWithID(ctx, id, connection, sql, args...)
}

// WriteWithID is Write with a tracked id the caller made, as CallWithID.
func (c *Client) WriteWithID(ctx context.Context, id, connection, sql string, args ...any) (Result, error) {
	if _, ok := ctx.Deadline(); !ok {
		return Result{}, needsDeadline("Write")
	}
	if args == nil {
		args = []any{}
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return Result{}, fmt.Errorf("notify: Write to %.64s: encode args: %w: %w", connection, err, ports.ErrInvalid)
	}
	req := pb.WriteRequestToPB(ports.WriteRequest{ID: id, Connection: connection, SQL: sql, Args: raw, OpSource: c.source()})
	return c.cached(ctx, "Write", func(ctx context.Context, rpc pb.SiteClient, opts ...grpc.CallOption) (*pb.OperationOutcome, error) {
		return rpc.CachedWrite(ctx, req, opts...)
	})
}

// cached makes a cached call or write with retries, and returns a Failed
// outcome as an *OperationError.
func (c *Client) cached(ctx context.Context, op string, call func(context.Context, pb.SiteClient, ...grpc.CallOption) (*pb.OperationOutcome, error)) (Result, error) {
	var out ports.OpOutcome
	err := c.retry(ctx, op, func(ctx context.Context, rpc pb.SiteClient, opts ...grpc.CallOption) error {
		resp, err := call(ctx, rpc, opts...)
		if err != nil {
			return err
		}
		out = pb.OutcomeFromPB(resp)
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	r := Result{ID: out.Operation.ID, Operation: out.Operation, Answer: out.Answer}
	if r.Operation.Status == ports.OpFailed {
		return r, &OperationError{Operation: r.Operation}
	}
	return r, nil
}

// source is the client's provenance as an operation's.
func (c *Client) source() ports.OpSource {
	return ports.OpSource{SourceInstance: c.prov.Instance, SourceScript: c.prov.Script,
		ExecutionID: c.prov.ExecutionID, ParentExecutionID: c.prov.ParentExecutionID}
}

// newOpID makes a tracked operation id, after checking ctx's deadline.
func newOpID(ctx context.Context, op string) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		return "", needsDeadline(op)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("notify: %s: generate id: %w", op, err)
	}
	return id.String(), nil
}

func needsDeadline(op string) error {
	return fmt.Errorf("notify: %s needs a context with a deadline; nothing was sent: %w", op, ports.ErrInvalid)
}

// Tracking returns the tracking rows of the operations ids the site knows;
// an unknown id is absent from the map. The node that answers reads its own
// replicated copy, so the site answers with its leader or central out of
// reach. It retries as Call does; a ctx without a deadline gets
// DefaultTimeout.
func (c *Client) Tracking(ctx context.Context, ids ...string) (map[string]ports.Operation, error) {
	if len(ids) == 0 {
		return map[string]ports.Operation{}, nil
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	req := &pb.TrackingRequest{Ids: ids}
	var out map[string]ports.Operation
	err := c.retry(ctx, "Tracking", func(ctx context.Context, rpc pb.SiteClient, opts ...grpc.CallOption) error {
		resp, err := rpc.Tracking(ctx, req, opts...)
		if err != nil {
			return err
		}
		out = pb.TrackingFromPB(resp)
		return nil
	})
	return out, err
}

// Operations returns one page of the operations matching f, newest first,
// from the answering node's own copy (page.Limit 0 is the site's default
// page size; page.After the previous page's Next). It retries as Tracking
// does.
func (c *Client) Operations(ctx context.Context, f ports.OpFilter, page ports.PageRequest) (ports.OpPage, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	req := pb.ListRequestToPB(f, page)
	var out ports.OpPage
	err := c.retry(ctx, "Operations", func(ctx context.Context, rpc pb.SiteClient, opts ...grpc.CallOption) error {
		resp, err := rpc.ListOperations(ctx, req, opts...)
		if err != nil {
			return err
		}
		out = pb.PageFromPB(resp)
		return nil
	})
	return out, err
}

// Retry moves a parked operation back to the retry queue, due at once, and
// returns its row. An unknown id wraps ports.ErrNotFound, an operation that
// is not parked ports.ErrConflict (so does a retry whose first try took
// effect but whose answer was lost: Tracking tells). It retries as Tracking
// does.
func (c *Client) Retry(ctx context.Context, id string) (ports.Operation, error) {
	return c.operatorAction(ctx, "Retry", id, pb.SiteClient.RetryOperation)
}

// Discard discards a parked operation and returns its row, as Retry.
func (c *Client) Discard(ctx context.Context, id string) (ports.Operation, error) {
	return c.operatorAction(ctx, "Discard", id, pb.SiteClient.DiscardOperation)
}

type actionRPC = func(pb.SiteClient, context.Context, *pb.OperationRequest, ...grpc.CallOption) (*pb.Operation, error)

func (c *Client) operatorAction(ctx context.Context, op, id string, rpc actionRPC) (ports.Operation, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	req := &pb.OperationRequest{Id: id}
	var out ports.Operation
	err := c.retry(ctx, op, func(ctx context.Context, cl pb.SiteClient, opts ...grpc.CallOption) error {
		resp, err := rpc(cl, ctx, req, opts...)
		if err != nil {
			return err
		}
		out = pb.OperationFromPB(resp)
		return nil
	})
	return out, err
}
