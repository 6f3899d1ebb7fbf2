package channel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/siteline/outbox/plugins/channel/v1/internal/pb"
)

// ErrNotDescribed is returned by Client.Describe when the plugin's channel does
// not implement Describer.
var ErrNotDescribed = errors.New("channel does not describe itself")

// ErrClosed is the error of a delivery made through a closed Client.
var ErrClosed = errors.New("channel client closed")

// ErrStopping is what NewClient's onCallError is told when the plugin
// refused a call because its process is stopping (it got SIGTERM, see
// Serve): the deliveries of that call never started. The process exits once
// its deliveries in flight have ended and central has closed the connection
// (go-plugin's Kill), or a few seconds later on its own.
var ErrStopping = errors.New("channel plugin is stopping")

// Batching across the process boundary: a gRPC call costs about 0.1 ms of
// CPU here, more than a no-op delivery, so the client sends deliveries in
// batches, and the plugin streams each result back as soon as it has it.
// A delivery that finds a sender free goes out at once (a batch of one: no
// added latency when idle). Under load, deliveries queue while maxSenders
// calls are being made, and each sender takes what has queued, up to
// maxBatch deliveries or batchBytes, on its next call. A sender waits for
// its batch's results for at most holdSender, so that batches stay large
// when deliveries are fast, and a slow delivery does not hold a sender.
const (
	maxSenders = 4
	maxBatch   = 256
	batchBytes = 4 << 20
	holdSender = 5 * time.Millisecond
	// noDeadline bounds a call whose deliveries all came without a deadline,
	// so that a plugin that never answers cannot hold a call forever.
	noDeadline = 5 * time.Minute
	// deadlineGrace is added to a batch's latest delivery deadline for the
	// call itself: the plugin applies each delivery's timeout and answers.
	deadlineGrace = 5 * time.Second
	// transitMargin is taken off the timeout the plugin applies, for the
	// time the batch takes to reach it: a delivery must not succeed in the
	// plugin after its caller gave up.
	transitMargin = 2 * time.Millisecond
)

// Client is central's side of a channel plugin: a Channel and Describer
// whose calls go over gRPC. It is safe for concurrent use; concurrent
// deliveries share gRPC calls (see the batching above).
type Client struct {
	rpc         pb.ChannelClient
	health      grpc_health_v1.HealthClient
	onCallError func(error)
	// hold is how long a sender waits for its batch's results before it
	// takes the next batch: holdSender, longer in a test that must see
	// every delivery queue behind the first calls.
	hold time.Duration

	mu      sync.Mutex
	queue   []*call
	senders int
	closed  bool
	wg      sync.WaitGroup
}

var (
	_ Channel   = (*Client)(nil)
	_ Describer = (*Client)(nil)
)

// call is one delivery waiting for its result.
type call struct {
	wire     *pb.Delivery
	size     int
	targets  int       // how many targets the delivery has
	deadline time.Time // zero: none
	taken    bool      // a sender took it: it may reach the plugin
	refused  bool      // the plugin refused its call whole: it never started
	res      Result
	done     chan struct{}
}

// NewClient returns a Client over conn. onCallError, when not nil, is told of
// every failed call (the plugin process may have died).
func NewClient(conn grpc.ClientConnInterface, onCallError func(error)) *Client {
	return &Client{rpc: pb.NewChannelClient(conn), health: grpc_health_v1.NewHealthClient(conn), onCallError: onCallError,
		hold: holdSender}
}

// Ping asks the plugin process whether it answers, through the gRPC health
// service every go-plugin server runs (whatever version of this package the
// plugin was built with), on the connection the deliveries use. It returns
// nil when the process answered within ctx, whatever it answered, and an
// error when it did not: the call timed out, or the connection is broken.
// Slow deliveries do not slow it down: each call is its own stream.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.health.Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: plugin.GRPCServiceName})
	switch status.Code(err) {
	case codes.OK:
		return nil
	case codes.DeadlineExceeded, codes.Unavailable, codes.Canceled:
		return fmt.Errorf("ping channel plugin: %w", err)
	}
	// Another status (no health service, say) came from the process: it
	// answers.
	return nil
}

// Describe asks the plugin for its description. It returns ErrNotDescribed
// when the channel does not implement Describer.
func (c *Client) Describe(ctx context.Context) (Description, error) {
	r, err := c.rpc.Describe(ctx, &pb.DescribeRequest{})
	if err != nil {
		c.failed(err)
		return Description{}, fmt.Errorf("describe channel plugin: %w", err)
	}
	if !r.GetImplemented() {
		return Description{}, ErrNotDescribed
	}
	return descriptionFromPB(r), nil
}

// Deliver sends req to the plugin, batched with concurrent deliveries, and
// waits for its result. When ctx ends before the delivery left, it is not
// sent; once it may have reached the plugin, Deliver waits for the plugin's
// answer even after ctx ended (a shutdown), until the delivery's deadline
// and deadlineGrace: the answer says which targets were delivered. A failed
// call (the plugin died, say) is a Transient result: the delivery may or
// may not have happened, and only a retry can tell.
func (c *Client) Deliver(ctx context.Context, req Request) Result {
	res, _ := c.Send(ctx, req)
	return res
}

// Send is Deliver that also tells whether the delivery may have reached the
// plugin. When sent is false it certainly did not (the client was closed, ctx
// ended while the delivery still waited for a sender, or the plugin refused
// it because it is stopping), and the result is Transient.
func (c *Client) Send(ctx context.Context, req Request) (res Result, sent bool) {
	if err := ctx.Err(); err != nil {
		return Retry(fmt.Errorf("delivery not started: %w", err)), false
	}
	wire := requestToPB(req, 0)
	cl := &call{wire: wire, size: proto.Size(wire), targets: len(req.Targets), done: make(chan struct{})}
	cl.deadline, _ = ctx.Deadline()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return Retry(ErrClosed), false
	}
	c.queue = append(c.queue, cl)
	if c.senders < maxSenders {
		c.senders++
		c.wg.Go(c.send)
	}
	c.mu.Unlock()
	select {
	case <-cl.done:
		return cl.res, !cl.refused
	case <-ctx.Done():
	}
	c.mu.Lock()
	if !cl.taken {
		// Still queued: take it out, so that it is never sent.
		if i := slices.Index(c.queue, cl); i >= 0 {
			c.queue = slices.Delete(c.queue, i, i+1)
		}
		c.mu.Unlock()
		return Retry(fmt.Errorf("delivery not started: %w", ctx.Err())), false
	}
	c.mu.Unlock()
	// It may have reached the plugin, which goes on under the delivery's
	// own timeout and then answers, target by target. That answer says
	// which targets were delivered; without it every target would be sent
	// the notification again. It comes before the call's own deadline
	// (the latest delivery deadline of its batch plus deadlineGrace), at
	// which the call fails and the delivery is Transient, outcome unknown.
	<-cl.done
	return cl.res, !cl.refused
}

// Close refuses new deliveries and waits for the calls in flight to end.
// Killing the plugin process first makes them end at once.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.wg.Wait()
	return nil
}

// send makes calls until the queue is empty.
func (c *Client) send() {
	for {
		batch := c.take()
		if batch == nil {
			return
		}
		c.flush(batch)
	}
}

// take removes the next batch from the queue, or returns nil and gives up
// its sender slot when the queue is empty.
func (c *Client) take() []*call {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		c.senders--
		return nil
	}
	n, size := 0, 0
	for n < len(c.queue) && n < maxBatch && (n == 0 || size+c.queue[n].size <= batchBytes) {
		size += c.queue[n].size
		c.queue[n].taken = true
		n++
	}
	batch := slices.Clone(c.queue[:n])
	rest := copy(c.queue, c.queue[n:])
	clear(c.queue[rest:])
	c.queue = c.queue[:rest]
	return batch
}

// flush makes one call for batch. Its results are handed out by a receiver
// as they stream in; flush returns once they all have, or after holdSender.
func (c *Client) flush(batch []*call) {
	now := time.Now()
	req := &pb.DeliverRequest{Deliveries: make([]*pb.Delivery, len(batch))}
	var last time.Time
	for i, cl := range batch {
		cl.wire.TimeoutMicros = 0
		if !cl.deadline.IsZero() {
			cl.wire.TimeoutMicros = max(cl.deadline.Sub(now)-transitMargin, time.Microsecond).Microseconds()
			last = latest(last, cl.deadline)
		} else {
			last = latest(last, now.Add(noDeadline))
		}
		req.Deliveries[i] = cl.wire
	}
	ctx, cancel := context.WithDeadline(context.Background(), last.Add(deadlineGrace))
	stream, err := c.rpc.Deliver(ctx, req)
	if err != nil {
		cancel()
		c.fail(batch, err)
		return
	}
	received := make(chan struct{})
	c.wg.Go(func() {
		defer close(received)
		defer cancel()
		c.receive(stream, batch)
	})
	hold := time.NewTimer(c.hold)
	defer hold.Stop()
	select {
	case <-received:
	case <-hold.C:
	}
}

// receive hands each result of the stream to its call; a call left without
// a result when the stream ends fails.
func (c *Client) receive(stream pb.Channel_DeliverClient, batch []*call) {
	answered := make([]bool, len(batch))
	left := len(batch)
	for left > 0 {
		r, err := stream.Recv()
		if err == nil {
			i := int(r.GetIndex())
			if i < 0 || i >= len(batch) || answered[i] {
				err = fmt.Errorf("plugin answered delivery %d of a batch of %d twice or out of range", i, len(batch))
			} else {
				answered[i] = true
				left--
				batch[i].res = resultFromPB(r.GetResult(), batch[i].targets)
				close(batch[i].done)
				continue
			}
		}
		if status.Code(err) == refusedCode && left == len(batch) {
			// The plugin is stopping and started none of them.
			c.refuse(batch, err)
			return
		}
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("plugin ended the call with %d of %d results missing", left, len(batch))
		}
		var rest []*call
		for i, cl := range batch {
			if !answered[i] {
				rest = append(rest, cl)
			}
		}
		c.fail(rest, err)
		return
	}
}

// fail ends calls with a Transient result for a failed call.
func (c *Client) fail(calls []*call, err error) {
	c.failed(err)
	res := Retry(fmt.Errorf("channel plugin call failed, outcome unknown: %s", status.Convert(err).Message()))
	for _, cl := range calls {
		cl.res = res
		close(cl.done)
	}
}

// refuse ends calls the plugin refused before starting them: Transient,
// and never sent.
func (c *Client) refuse(calls []*call, err error) {
	c.failed(fmt.Errorf("%s: %w", status.Convert(err).Message(), ErrStopping))
	res := Retry(fmt.Errorf("delivery not started: %s", status.Convert(err).Message()))
	for _, cl := range calls {
		cl.res, cl.refused = res, true
		close(cl.done)
	}
}

func (c *Client) failed(err error) {
	if c.onCallError != nil {
		c.onCallError(err)
	}
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
