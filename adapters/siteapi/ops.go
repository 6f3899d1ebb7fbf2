package siteapi

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siteline/outbox/adapters/siteapi/internal/pb"
)

// The RPCs of cached operations. CachedCall, CachedWrite, RetryOperation
// and DiscardOperation change the site: a follower passes them to the
// leader, as it does a Send, and never serves them itself — the core
// attempts a call before it commits its outcome, so a follower that
// attempted would reach the target for nothing, its commit refused.
// Tracking and ListOperations read the node's own replicated copy, so any
// node answers them, with the leader out of reach.

// needOps refuses an RPC of cached operations on a server without Ops.
func (h *service) needOps(method string) error {
	if h.s.ops == nil {
		return status.Errorf(codes.Unimplemented, "%s: this site node serves no cached operations", method)
	}
	return nil
}

// CachedCall serves a cached call here on the leader, or passes it to the
// leader.
func (h *service) CachedCall(ctx context.Context, req *pb.CachedCallRequest) (*pb.OperationOutcome, error) {
	const method = "CachedCall"
	if err := h.needOps(method); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		return nil, status.Error(codes.InvalidArgument, "CachedCall needs a deadline")
	}
	client, out, addr, err := h.s.route(ctx)
	if err != nil {
		return nil, err
	}
	if client != nil {
		resp, err := client.CachedCall(out, req)
		if err != nil {
			return nil, h.s.forwardError(method, addr, err)
		}
		return resp, nil
	}
	o, err := h.s.ops.CachedCall(ctx, pb.CallRequestFromPB(req))
	if err != nil {
		return nil, h.s.toStatus(method, err)
	}
	return pb.OutcomeToPB(o), nil
}

// CachedWrite serves a cached write here on the leader, or passes it to
// the leader.
func (h *service) CachedWrite(ctx context.Context, req *pb.CachedWriteRequest) (*pb.OperationOutcome, error) {
	const method = "CachedWrite"
	if err := h.needOps(method); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		return nil, status.Error(codes.InvalidArgument, "CachedWrite needs a deadline")
	}
	client, out, addr, err := h.s.route(ctx)
	if err != nil {
		return nil, err
	}
	if client != nil {
		resp, err := client.CachedWrite(out, req)
		if err != nil {
			return nil, h.s.forwardError(method, addr, err)
		}
		return resp, nil
	}
	o, err := h.s.ops.CachedWrite(ctx, pb.WriteRequestFromPB(req))
	if err != nil {
		return nil, h.s.toStatus(method, err)
	}
	return pb.OutcomeToPB(o), nil
}

// Tracking answers from this node's own copy of the tracking table.
func (h *service) Tracking(ctx context.Context, req *pb.TrackingRequest) (*pb.TrackingResponse, error) {
	if err := h.needOps("Tracking"); err != nil {
		return nil, err
	}
	m, err := h.s.ops.Tracking(ctx, req.GetIds())
	if err != nil {
		return nil, h.s.toStatus("Tracking", err)
	}
	return pb.TrackingToPB(m), nil
}

// ListOperations answers from this node's own copy of the tracking table.
func (h *service) ListOperations(ctx context.Context, req *pb.ListOperationsRequest) (*pb.ListOperationsResponse, error) {
	if err := h.needOps("ListOperations"); err != nil {
		return nil, err
	}
	f, page, err := pb.ListRequestFromPB(req)
	if err != nil {
		return nil, h.s.toStatus("ListOperations", err)
	}
	p, err := h.s.ops.ListOperations(ctx, f, page)
	if err != nil {
		return nil, h.s.toStatus("ListOperations", err)
	}
	return pb.PageToPB(p), nil
}

// RetryOperation serves an operator's Retry here on the leader, or passes
// it to the leader.
func (h *service) RetryOperation(ctx context.Context, req *pb.OperationRequest) (*pb.Operation, error) {
	return h.operatorAction(ctx, "RetryOperation", req)
}

// DiscardOperation serves an operator's Discard here on the leader, or
// passes it to the leader.
func (h *service) DiscardOperation(ctx context.Context, req *pb.OperationRequest) (*pb.Operation, error) {
	return h.operatorAction(ctx, "DiscardOperation", req)
}

// operatorAction is what RetryOperation and DiscardOperation share. A call
// without a deadline gets forwardedStatusTimeout.
func (h *service) operatorAction(ctx context.Context, method string, req *pb.OperationRequest) (*pb.Operation, error) {
	if err := h.needOps(method); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, forwardedStatusTimeout)
		defer cancel()
	}
	client, out, addr, err := h.s.route(ctx)
	if err != nil {
		return nil, err
	}
	if client != nil {
		call := client.RetryOperation
		if method == "DiscardOperation" {
			call = client.DiscardOperation
		}
		resp, err := call(out, req)
		if err != nil {
			return nil, h.s.forwardError(method, addr, err)
		}
		return resp, nil
	}
	act := h.s.ops.RetryOperation
	if method == "DiscardOperation" {
		act = h.s.ops.DiscardOperation
	}
	op, err := act(ctx, req.GetId())
	if err != nil {
		return nil, h.s.toStatus(method, err)
	}
	return pb.OperationToPB(op), nil
}
