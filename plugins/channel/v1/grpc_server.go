package channel

import (
	"context"
	"fmt"
	"runtime/debug"
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
// timeout, and streams each result as soon as it is known. It returns when
// every delivery has ended, even if the client went away meanwhile (their
// contexts end with the call's).
func (s *grpcServer) Deliver(req *pb.DeliverRequest, stream pb.Channel_DeliverServer) error {
	ctx := stream.Context()
	deliveries := req.GetDeliveries()
	results := make(chan *pb.DeliverResult, len(deliveries))
	var wg sync.WaitGroup
	for i, d := range deliveries {
		wg.Go(func() {
			dctx := ctx
			if t := d.GetTimeoutMicros(); t > 0 {
				var cancel context.CancelFunc
				dctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Microsecond)
				defer cancel()
			}
			res := deliverSafely(dctx, s.impl, requestFromPB(d))
			results <- &pb.DeliverResult{Index: int32(i), Result: resultToPB(res)}
		})
	}
	var sendErr error
	for range deliveries {
		r := <-results
		if sendErr == nil {
			sendErr = stream.Send(r)
		}
	}
	wg.Wait()
	return sendErr
}

// deliverSafely calls the channel and turns a panic into a Transient result,
// so one bad delivery never takes the plugin process down. The panic value
// and stack go to the plugin's log, not into the result: they may hold
// anything, secrets included.
func deliverSafely(ctx context.Context, ch Channel, req Request) (res Result) {
	defer func() {
		if r := recover(); r != nil {
			Logger().Error("channel panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			res = Result{Outcome: Transient, Error: "channel panicked (see the plugin's log)"}
		}
	}()
	return ch.Deliver(ctx, req)
}
