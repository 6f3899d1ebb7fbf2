package channel

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/siteline/outbox/plugins/channel/v1/internal/pb"
)

// grpcServer serves a Channel over gRPC in the plugin process.
type grpcServer struct {
	pb.UnimplementedChannelServer
	impl Channel
}

func (s *grpcServer) Describe(ctx context.Context, _ *pb.DescribeRequest) (*pb.DescribeResponse, error) {
	d, ok := s.impl.(Describer)
	if !ok {
		return &pb.DescribeResponse{}, nil
	}
	desc, err := d.Describe(ctx)
	if err != nil {
		return nil, fmt.Errorf("describe: %w", err)
	}
	return descriptionToPB(desc), nil
}

// Deliver runs every delivery of the batch at once, each under its own
// timeout, and answers when all are done.
func (s *grpcServer) Deliver(ctx context.Context, req *pb.DeliverRequest) (*pb.DeliverResponse, error) {
	results := make([]*pb.Result, len(req.GetDeliveries()))
	var wg sync.WaitGroup
	for i, d := range req.GetDeliveries() {
		wg.Go(func() {
			dctx := ctx
			if t := d.GetTimeoutMicros(); t > 0 {
				var cancel context.CancelFunc
				dctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Microsecond)
				defer cancel()
			}
			results[i] = resultToPB(deliverSafely(dctx, s.impl, requestFromPB(d)))
		})
	}
	wg.Wait()
	return &pb.DeliverResponse{Results: results}, nil
}

// deliverSafely calls the channel and turns a panic into a Transient result,
// so one bad delivery never takes the plugin process down.
func deliverSafely(ctx context.Context, ch Channel, req Request) (res Result) {
	defer func() {
		if r := recover(); r != nil {
			res = Result{Outcome: Transient, Error: fmt.Sprintf("channel panicked: %v", r)}
		}
	}()
	return ch.Deliver(ctx, req)
}
