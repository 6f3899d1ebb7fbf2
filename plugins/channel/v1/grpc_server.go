package channel

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siteline/outbox/plugins/channel/v1/internal/pb"
)

// grpcServer serves a Channel over gRPC in the plugin process.
type grpcServer struct {
	pb.UnimplementedChannelServer
	impl Channel
	// gate, when set, lets the process stop taking deliveries and wait for
	// those in flight (Serve's answer to SIGTERM).
	gate *gate
}

// refusedCode is the status of a Deliver call the plugin refused as a whole
// before starting any of its deliveries: it is stopping. gRPC itself never
// uses FailedPrecondition, so the client can tell that none of the call's
// deliveries happened (a call broken in transit ends Unavailable instead).
const refusedCode = codes.FailedPrecondition

// gate counts the Deliver calls in flight and, once closed, refuses new ones.
type gate struct {
	mu     sync.Mutex
	closed bool
	last   time.Time // when the last call ended; zero: none did
	// until is the latest end of an admitted call's deliveries, by their
	// own timeouts.
	until    time.Time
	inflight sync.WaitGroup
}

// enter admits a call whose deliveries all end by until (zero: some have no
// timeout of their own), unless the gate is closed.
func (g *gate) enter(until time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	if until.After(g.until) {
		g.until = until
	}
	g.inflight.Add(1)
	return true
}

// drainMargin is how long past the latest deadline of the deliveries in
// flight a drain waits, for their results to be sent.
const drainMargin = 2 * time.Second

// drainFor is how long a drain started at now waits for the calls in
// flight: until the latest of their deliveries' deadlines, plus a margin,
// however long central's delivery timeout is, and at least fallback (which
// is all a delivery without a deadline of its own gets).
func (g *gate) drainFor(now time.Time, fallback time.Duration) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.until.IsZero() {
		return fallback
	}
	return max(g.until.Sub(now)+drainMargin, fallback)
}

func (g *gate) leave() {
	g.mu.Lock()
	g.last = time.Now()
	g.mu.Unlock()
	g.inflight.Done()
}

// lastEnd returns when the last call ended (zero if none did).
func (g *gate) lastEnd() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last
}

// close refuses every call from now on.
func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// drain closes the gate and waits for the calls in flight to end: until
// their deliveries' deadlines have passed (see drainFor), and at least
// timeout. It reports whether they all ended.
func (g *gate) drain(timeout time.Duration) bool {
	g.close()
	timeout = g.drainFor(time.Now(), timeout)
	done := make(chan struct{})
	// Ends when the calls do; each delivery runs under its own timeout.
	go func() {
		g.inflight.Wait()
		close(done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// deliveriesEnd is when every delivery of req has ended by its own timeout,
// counted from now; zero when one has none.
func deliveriesEnd(req *pb.DeliverRequest, now time.Time) time.Time {
	var longest time.Duration
	for _, d := range req.GetDeliveries() {
		t := time.Duration(d.GetTimeoutMicros()) * time.Microsecond
		if t <= 0 {
			return time.Time{}
		}
		longest = max(longest, t)
	}
	if longest == 0 {
		return time.Time{}
	}
	return now.Add(longest)
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
// contexts end with the call's). Once the process is stopping (see gate), it
// refuses a call whole, before starting any of its deliveries.
func (s *grpcServer) Deliver(req *pb.DeliverRequest, stream pb.Channel_DeliverServer) error {
	if s.gate != nil {
		if !s.gate.enter(deliveriesEnd(req, time.Now())) {
			return status.Error(refusedCode, "channel plugin is stopping: no delivery of this call was started")
		}
		defer s.gate.leave()
	}
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
