package channel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/siteline/outbox/plugins/channel/v1/internal/pb"
	"github.com/siteline/outbox/ports/waittest"
)

// countingServer counts the Deliver calls (batches) reaching the plugin side.
type countingServer struct {
	*grpcServer
	calls, items atomic.Int64
}

func (s *countingServer) Deliver(req *pb.DeliverRequest, stream pb.Channel_DeliverServer) error {
	s.calls.Add(1)
	s.items.Add(int64(len(req.GetDeliveries())))
	return s.grpcServer.Deliver(req, stream)
}

// serve runs impl behind a real gRPC server over an in-memory connection and
// returns a Client of it.
func serve(t *testing.T, impl Channel) (*Client, *countingServer, *grpc.Server) {
	t.Helper()
	ln := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(4 * batchBytes))
	cs := &countingServer{grpcServer: &grpcServer{impl: impl}}
	pb.RegisterChannelServer(srv, cs)
	go func() { _ = srv.Serve(ln) }()
	conn, err := grpc.NewClient("passthrough:///plugin",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(conn, nil)
	t.Cleanup(func() {
		srv.Stop()
		_ = conn.Close()
		_ = c.Close()
	})
	return c, cs, srv
}

// gated answers Success with the notification id as the resolved target,
// once the gate is open; with "wait for the deadline" as subject it waits
// for its context (or for slow to close) instead. It records the ids it was
// asked to deliver.
type gated struct {
	gate chan struct{}
	slow chan struct{}
	mu   *sync.Mutex
	seen map[string]bool
}

func newGated() gated {
	return gated{gate: make(chan struct{}), slow: make(chan struct{}), mu: new(sync.Mutex), seen: map[string]bool{}}
}

func (g gated) Deliver(ctx context.Context, req Request) Result {
	g.mu.Lock()
	g.seen[req.Notification.ID] = true
	g.mu.Unlock()
	if req.Notification.Subject == "wait for the deadline" {
		select {
		case <-ctx.Done():
			return Retry(ctx.Err())
		case <-g.slow:
			return Retry(errors.New("released"))
		}
	}
	select {
	case <-g.gate:
	case <-ctx.Done():
		return Retry(ctx.Err())
	}
	return Delivered(req.Notification.ID)
}

func deliverN(t *testing.T, c *Client, n int) []Result {
	t.Helper()
	results := make([]Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			results[i] = c.Deliver(ctx, Request{Notification: Notification{ID: string(rune('a'+i%26)) + strings.Repeat("x", i)}})
		})
	}
	wg.Wait()
	return results
}

// Concurrent deliveries share calls, and each caller gets its own result.
func TestClientBatchesConcurrentDeliveries(t *testing.T) {
	g := newGated()
	c, cs, _ := serve(t, g)
	// The first deliveries take the sender slots and wait at the gate; the
	// rest queue behind them. Open the gate once every one has queued.
	// The senders hold on to their calls until the gate opens, however
	// slowly the deliveries arrive: the count of calls is then the senders'
	// first calls plus the batches of what queued.
	c.hold = time.Minute
	const n = 400
	done := make(chan []Result)
	go func() { done <- deliverN(t, c, n) }()
	waittest.For(t, 30*time.Second, fmt.Sprintf("all %d deliveries queued or at the gate", n), func() (bool, string) {
		c.mu.Lock()
		queued := len(c.queue)
		c.mu.Unlock()
		return queued+int(cs.items.Load()) >= n, fmt.Sprintf("%d queued, %d at the gate", queued, cs.items.Load())
	})
	close(g.gate)
	results := <-done
	for i, r := range results {
		want := string(rune('a'+i%26)) + strings.Repeat("x", i)
		if r.Outcome != Success || len(r.ResolvedTargets) != 1 || r.ResolvedTargets[0] != want {
			t.Fatalf("delivery %d got %+v: another caller's result", i, r)
		}
	}
	// One call per delivery would be 400; maxSenders first calls and the
	// queue in batches of up to maxBatch make at most 6.
	if calls := cs.calls.Load(); calls > maxSenders+(n+maxBatch-1)/maxBatch {
		t.Fatalf("%d deliveries took %d calls: not batched", n, calls)
	}
}

// Each delivery of a batch has its own deadline: one that runs out does not
// hold the others back, and ends Transient.
func TestClientPerDeliveryDeadline(t *testing.T) {
	g := newGated()
	close(g.gate)
	c, _, _ := serve(t, g)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	r := c.Deliver(ctx, Request{Notification: Notification{ID: "a", Subject: "wait for the deadline"}})
	if r.Outcome != Transient {
		t.Fatalf("a delivery past its deadline: %+v", r)
	}
	if r := c.Deliver(t.Context(), Request{Notification: Notification{ID: "b"}}); r.Outcome != Success {
		t.Fatalf("next delivery: %+v", r)
	}
}

// A failed call (the plugin process gone) is Transient for every delivery in
// it, never Success, and is reported to onCallError.
func TestClientCallFailureIsTransient(t *testing.T) {
	g := newGated()
	c, cs, srv := serve(t, g)
	var reported atomic.Int64
	c.onCallError = func(error) { reported.Add(1) }
	done := make(chan []Result)
	go func() { done <- deliverN(t, c, 8) }()
	waittest.For(t, 30*time.Second, "a call in flight", waittest.Holds(func() bool { return cs.calls.Load() > 0 }))
	srv.Stop() // closes the connections with the calls in flight
	for i, r := range <-done {
		if r.Outcome != Transient || !strings.Contains(r.Error, "outcome unknown") {
			t.Fatalf("delivery %d of a failed call: %+v", i, r)
		}
	}
	if reported.Load() == 0 {
		t.Fatal("onCallError was not told")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if r := c.Deliver(t.Context(), Request{}); r.Outcome != Transient || !strings.Contains(r.Error, ErrClosed.Error()) {
		t.Fatalf("delivery through a closed client: %+v", r)
	}
}

func TestDescriptionValidate(t *testing.T) {
	d := Description{Name: "email", Settings: []Setting{
		{Name: "host", Required: true},
		{Name: "tls", Allowed: []string{"none", "starttls"}},
		{Name: "password", Secret: true},
	}}
	if err := d.Validate(map[string]string{"host": "h", "tls": "none", "password": "x"}); err != nil {
		t.Fatalf("valid settings: %v", err)
	}
	err := d.Validate(map[string]string{"host": " ", "tls": "ssl", "colour": "hunter2"})
	if !errors.Is(err, ErrInvalidSettings) {
		t.Fatalf("want ErrInvalidSettings, got %v", err)
	}
	for _, want := range []string{`"host" is required`, `"tls" must be one of none, starttls`, `unknown setting "colour"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "ssl") {
		t.Errorf("a value is repeated: %v", err)
	}
	if err := (Description{Name: "any"}).Validate(map[string]string{"x": "y"}); err != nil {
		t.Errorf("an empty schema refused settings: %v", err)
	}
}

// Validate checks each value against its setting's Kind, without
// repeating the value; blank values, secrets (references) and kinds this
// version does not know pass.
func TestDescriptionValidateKinds(t *testing.T) {
	d := Description{Name: "email", Settings: []Setting{
		{Name: "port", Kind: KindNumber},
		{Name: "verbose", Kind: KindBool},
		{Name: "timeout", Kind: KindDuration},
		{Name: "scopes", Kind: KindList},
		{Name: "token", Kind: KindNumber, Secret: true},
		{Name: "future", Kind: "colour"},
	}}
	good := map[string]string{"port": "587", "verbose": "true", "timeout": "1m30s", "scopes": "a, b",
		"token": "env:TOKEN", "future": "#fff"}
	if err := d.Validate(good); err != nil {
		t.Fatalf("valid settings: %v", err)
	}
	if err := d.Validate(map[string]string{"port": " ", "verbose": ""}); err != nil {
		t.Fatalf("blank values: %v", err)
	}
	err := d.Validate(map[string]string{"port": "five87", "verbose": "yes", "timeout": "10 seconds"})
	if !errors.Is(err, ErrInvalidSettings) {
		t.Fatalf("want ErrInvalidSettings, got %v", err)
	}
	for _, want := range []string{`"port" must be a number`, `"verbose" must be true or false`, `"timeout" must be a duration`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	for _, v := range []string{"five87", "yes", "10 seconds"} {
		if strings.Contains(err.Error(), v) {
			t.Errorf("the value %q is repeated: %v", v, err)
		}
	}
}

// The wire form carries every field both ways.
func TestConvertRoundTrip(t *testing.T) {
	created := time.Date(2026, 3, 2, 8, 0, 0, 123456000, time.UTC)
	req := Request{
		Notification: Notification{ID: "id", List: "ops", Subject: "s", Body: "b", TypeData: []byte(`{"k":1}`),
			Priority: 3, SourceSite: "site-a", CreatedAt: created, Attempt: 2},
		Targets: []string{"a", "b"}, Settings: map[string]string{"k": "v"},
	}
	got := requestFromPB(requestToPB(req, time.Second))
	if got.Notification.ID != "id" || got.Notification.List != "ops" ||
		got.Notification.Subject != "s" || got.Notification.Body != "b" || string(got.Notification.TypeData) != `{"k":1}` ||
		got.Notification.Priority != 3 || got.Notification.SourceSite != "site-a" || !got.Notification.CreatedAt.Equal(created) ||
		got.Notification.Attempt != 2 || strings.Join(got.Targets, ",") != "a,b" || got.Settings["k"] != "v" {
		t.Fatalf("request round trip: %+v", got)
	}
	res := Result{Outcome: Permanent, ResolvedTargets: []string{"x"}, Error: "e", RetryAfter: 1500 * time.Millisecond}
	if r := resultFromPB(resultToPB(res), 2); r.Outcome != Permanent || r.ResolvedTargets[0] != "x" || r.Error != "e" || r.RetryAfter != res.RetryAfter {
		t.Fatalf("result round trip: %+v", r)
	}
	desc := Description{Name: "n", Version: "v", Settings: []Setting{{Name: "s", Description: "d", Required: true, Secret: true, Default: "x", Allowed: []string{"x"}, Kind: KindList}}}
	if d := descriptionFromPB(descriptionToPB(desc)); d.Name != "n" || d.Version != "v" || len(d.Settings) != 1 ||
		d.Settings[0].Name != "s" || !d.Settings[0].Required || !d.Settings[0].Secret || d.Settings[0].Default != "x" || d.Settings[0].Allowed[0] != "x" ||
		d.Settings[0].Kind != KindList {
		t.Fatalf("description round trip: %+v", d)
	}
}

// A slow delivery does not hold back the result of a fast one in the same
// batch: results stream back one by one.
func TestClientSlowDeliveryDoesNotHoldBatch(t *testing.T) {
	g := newGated()
	close(g.gate)
	c, cs, _ := serve(t, g)
	// Occupy every sender with a slow delivery, so that the next two queue
	// and go out together.
	slowCtx, cancelSlow := context.WithTimeout(t.Context(), time.Minute)
	defer cancelSlow()
	var wg sync.WaitGroup
	for range maxSenders + 1 {
		wg.Go(func() {
			c.Deliver(slowCtx, Request{Notification: Notification{ID: "slow", Subject: "wait for the deadline"}})
		})
	}
	defer wg.Wait()
	// The client waits for the plugin's answer to a delivery that left,
	// even once its caller gave up: the slow ones end when released.
	defer close(g.slow)
	waittest.For(t, 30*time.Second, "every sender busy", func() (bool, string) {
		return cs.items.Load() >= maxSenders, fmt.Sprintf("%d of %d senders busy", cs.items.Load(), maxSenders)
	})
	r := c.Deliver(t.Context(), Request{Notification: Notification{ID: "fast"}})
	if r.Outcome != Success {
		t.Fatalf("a fast delivery batched with a slow one: %+v", r)
	}
}

// blockingRPC is a ChannelClient whose Deliver calls wait until released,
// then fail; it records the ids it was given.
type blockingRPC struct {
	pb.ChannelClient
	release chan struct{}
	mu      sync.Mutex
	seen    map[string]bool
	calls   int
}

func (b *blockingRPC) Deliver(ctx context.Context, req *pb.DeliverRequest, _ ...grpc.CallOption) (pb.Channel_DeliverClient, error) {
	b.mu.Lock()
	b.calls++
	for _, d := range req.GetDeliveries() {
		b.seen[d.GetNotification().GetId()] = true
	}
	b.mu.Unlock()
	<-b.release
	return nil, errors.New("released")
}

// A delivery whose caller gives up while it still waits for a sender is
// never sent, and says so.
func TestClientAbandonedDeliveryIsNeverSent(t *testing.T) {
	rpc := &blockingRPC{release: make(chan struct{}), seen: map[string]bool{}}
	c := &Client{rpc: rpc, hold: holdSender}
	// One blocker at a time, so that each takes a sender of its own.
	var wg sync.WaitGroup
	for i := range maxSenders {
		wg.Go(func() { c.Deliver(t.Context(), Request{Notification: Notification{ID: "blocker"}}) })
		waittest.For(t, 30*time.Second, fmt.Sprintf("blocker %d in its call", i+1), func() (bool, string) {
			rpc.mu.Lock()
			n := rpc.calls
			rpc.mu.Unlock()
			return n == i+1, fmt.Sprintf("%d calls", n)
		})
	}
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan bool)
	go func() {
		res, sent := c.Send(ctx, Request{Notification: Notification{ID: "abandoned"}})
		got <- sent && res.Outcome == Transient
	}()
	waittest.For(t, 30*time.Second, "the delivery queued", func() (bool, string) {
		c.mu.Lock()
		n := len(c.queue)
		c.mu.Unlock()
		return n == 1, fmt.Sprintf("%d queued", n)
	})
	cancel()
	if sent := <-got; sent {
		t.Fatal("an abandoned queued delivery reports it may have been sent")
	}
	close(rpc.release)
	wg.Wait()
	_ = c.Close()
	rpc.mu.Lock()
	defer rpc.mu.Unlock()
	if rpc.seen["abandoned"] {
		t.Fatal("the abandoned delivery was sent")
	}
}

// Batches stay under the size a gRPC message may have, however large the
// deliveries.
func TestClientLargeDeliveriesSplitIntoBatches(t *testing.T) {
	g := newGated()
	close(g.gate)
	c, _, _ := serve(t, g)
	body := strings.Repeat("x", 128<<10)
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			r := c.Deliver(t.Context(), Request{Notification: Notification{ID: string(rune('a' + i%26)), Body: body}})
			if r.Outcome != Success {
				t.Errorf("delivery %d: %+v", i, r)
			}
		})
	}
	wg.Wait()
}
