package siteapi

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siteline/outbox/adapters/siteapi/internal/pb"
	"github.com/siteline/outbox/ports"
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

// needDeadline refuses an RPC without Ops or without a deadline.
func (h *service) needDeadline(ctx context.Context, method string) error {
	if err := h.needOps(method); err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		return status.Errorf(codes.InvalidArgument, "%s needs a deadline", method)
	}
	return nil
}

// atLeader serves an RPC that changes the site: with local here on the
// leader, or with forward at the leader.
func atLeader[R any](ctx context.Context, s *Server, method string,
	forward func(context.Context, pb.SiteClient) (R, error), local func(context.Context) (R, error)) (R, error) {
	var zero R
	client, out, addr, err := s.route(ctx)
	if err != nil {
		return zero, err
	}
	if client != nil {
		resp, err := forward(out, client)
		if err != nil {
			return zero, s.forwardError(method, addr, err)
		}
		return resp, nil
	}
	resp, err := local(ctx)
	if err != nil {
		return zero, s.toStatus(method, err)
	}
	return resp, nil
}

// CachedCall serves a cached call here on the leader, or passes it to the
// leader.
func (h *service) CachedCall(ctx context.Context, req *pb.CachedCallRequest) (*pb.OperationOutcome, error) {
	if err := h.needDeadline(ctx, "CachedCall"); err != nil {
		return nil, err
	}
	return atLeader(ctx, h.s, "CachedCall",
		func(ctx context.Context, c pb.SiteClient) (*pb.OperationOutcome, error) {
			return c.CachedCall(ctx, req)
		},
		func(ctx context.Context) (*pb.OperationOutcome, error) {
			o, err := h.s.ops.CachedCall(ctx, pb.CallRequestFromPB(req))
			return pb.OutcomeToPB(o), err
		})
}

// CachedWrite serves a cached write here on the leader, or passes it to
// the leader.
func (h *service) CachedWrite(ctx context.Context, req *pb.CachedWriteRequest) (*pb.OperationOutcome, error) {
	if err := h.needDeadline(ctx, "CachedWrite"); err != nil {
		return nil, err
	}
	return atLeader(ctx, h.s, "CachedWrite",
		func(ctx context.Context, c pb.SiteClient) (*pb.OperationOutcome, error) {
			return c.CachedWrite(ctx, req)
		},
		func(ctx context.Context) (*pb.OperationOutcome, error) {
			o, err := h.s.ops.CachedWrite(ctx, pb.WriteRequestFromPB(req))
			return pb.OutcomeToPB(o), err
		})
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
	return h.operatorAction(ctx, "RetryOperation", req, pb.SiteClient.RetryOperation, ports.Operations.RetryOperation)
}

// DiscardOperation serves an operator's Discard here on the leader, or
// passes it to the leader.
func (h *service) DiscardOperation(ctx context.Context, req *pb.OperationRequest) (*pb.Operation, error) {
	return h.operatorAction(ctx, "DiscardOperation", req, pb.SiteClient.DiscardOperation, ports.Operations.DiscardOperation)
}

// operatorAction is what RetryOperation and DiscardOperation share. A call
// without a deadline gets forwardedStatusTimeout.
func (h *service) operatorAction(ctx context.Context, method string, req *pb.OperationRequest,
	rpc func(pb.SiteClient, context.Context, *pb.OperationRequest, ...grpc.CallOption) (*pb.Operation, error),
	act func(ports.Operations, context.Context, string) (ports.Operation, error)) (*pb.Operation, error) {
	if err := h.needOps(method); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, forwardedStatusTimeout)
		defer cancel()
	}
	return atLeader(ctx, h.s, method,
		func(ctx context.Context, c pb.SiteClient) (*pb.Operation, error) { return rpc(c, ctx, req) },
		func(ctx context.Context) (*pb.Operation, error) {
			op, err := act(h.s.ops, ctx, req.GetId())
			return pb.OperationToPB(op), err
		})
}
