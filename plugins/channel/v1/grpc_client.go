package channel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/siteline/outbox/plugins/channel/v1/internal/pb"
)

// ErrNotDescribed is returned by Client.Describe when the plugin's channel does
// not implement Describer.
var ErrNotDescribed = errors.New("channel does not describe itself")

// ErrClosed is the error of a delivery made through a closed Client.
var ErrClosed = errors.New("channel client closed")

// Batching across the process boundary: a gRPC call costs about 0.1 ms of
// CPU here, more than a no-op delivery, so the client sends deliveries in
// batches. A delivery that finds a sender slot free goes out at once (a batch
// of one: no added latency when idle); under load, deliveries queue while
// maxSenders calls are in flight and each sender takes up to maxBatch of them
// on its next call.
const (
	maxSenders = 4
	maxBatch   = 256
	// noDeadline bounds a call whose deliveries all came without a deadline,
	// so that a plugin that never answers cannot hold a sender forever.
	noDeadline = 5 * time.Minute
	// deadlineGrace is added to a batch's latest delivery deadline for the
	// call itself: the plugin applies each delivery's timeout and answers.
	deadlineGrace = 5 * time.Second
)

// Client is central's side of a channel plugin: a Channel and Describer
// whose calls go over gRPC. It is safe for concurrent use; concurrent
// deliveries share gRPC calls (see the batching above).
type Client struct {
	rpc         pb.ChannelClient
	onCallError func(error)

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
	req      Request
	deadline time.Time // zero: none
	res      Result
	done     chan struct{}
}

// NewClient returns a Client over conn. onCallError, when not nil, is told of
// every failed call (the plugin process may have died).
func NewClient(conn grpc.ClientConnInterface, onCallError func(error)) *Client {
	return &Client{rpc: pb.NewChannelClient(conn), onCallError: onCallError}
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
// waits for its result or the end of ctx. A failed call (the plugin died, say)
// is a Transient result: the delivery may or may not have happened, and only
// a retry can tell.
func (c *Client) Deliver(ctx context.Context, req Request) Result {
	if err := ctx.Err(); err != nil {
		return Retry(fmt.Errorf("delivery not started: %w", err))
	}
	cl := &call{req: req, done: make(chan struct{})}
	cl.deadline, _ = ctx.Deadline()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return Retry(ErrClosed)
	}
	c.queue = append(c.queue, cl)
	if c.senders < maxSenders {
		c.senders++
		c.wg.Go(c.send)
	}
	c.mu.Unlock()
	select {
	case <-cl.done:
		return cl.res
	case <-ctx.Done():
		return Retry(fmt.Errorf("delivery interrupted, its outcome is unknown: %w", ctx.Err()))
	}
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
		c.mu.Lock()
		n := min(len(c.queue), maxBatch)
		if n == 0 {
			c.senders--
			c.mu.Unlock()
			return
		}
		batch := make([]*call, n)
		copy(batch, c.queue)
		rest := copy(c.queue, c.queue[n:])
		clear(c.queue[rest:])
		c.queue = c.queue[:rest]
		c.mu.Unlock()
		c.flush(batch)
	}
}

// flush makes one call for batch and hands every call its result.
func (c *Client) flush(batch []*call) {
	now := time.Now()
	req := &pb.DeliverRequest{Deliveries: make([]*pb.Delivery, len(batch))}
	var last time.Time
	for i, cl := range batch {
		var timeout time.Duration
		if !cl.deadline.IsZero() {
			timeout = max(cl.deadline.Sub(now), time.Microsecond)
			last = latest(last, cl.deadline)
		} else {
			last = latest(last, now.Add(noDeadline))
		}
		req.Deliveries[i] = requestToPB(cl.req, timeout)
	}
	ctx, cancel := context.WithDeadline(context.Background(), last.Add(deadlineGrace))
	defer cancel()
	resp, err := c.rpc.Deliver(ctx, req)
	if err == nil && len(resp.GetResults()) != len(batch) {
		err = fmt.Errorf("plugin answered %d results for %d deliveries", len(resp.GetResults()), len(batch))
	}
	if err != nil {
		c.failed(err)
		res := Retry(fmt.Errorf("channel plugin call failed, outcome unknown: %s", status.Convert(err).Message()))
		for _, cl := range batch {
			cl.res = res
			close(cl.done)
		}
		return
	}
	for i, cl := range batch {
		cl.res = resultFromPB(resp.GetResults()[i])
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
