// Package notify is the Go client scripts use to send notifications through
// their site, to make cached calls to external systems and cached database
// writes, and to ask about them:
//
//	c, err := notify.Dial("site-a:7101,site-b:7101",
//		notify.WithToken(token),
//		notify.WithProvenance(notify.Provenance{Instance: "line-3", Script: "oven-watch"}))
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//
//	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
//	defer cancel()
//	id, err := c.To("ops").Send(ctx, "Oven 3 too hot", "Temperature 412 °C at 10:42.")
//	...
//	st, err := c.Status(ctx, id) // ports.StatusForwarding, then central's status
//
// # Cached calls and writes
//
// Call and Write hand the site an operation that it delivers itself: a
// call to a method of an external system, a write to a database
// connection, both defined in the site's configuration. The site's leader
// attempts it at once: delivered, the Result carries the target's answer;
// the target unreachable, the site buffers it (Result.Operation is
// Pending) and retries it at the target's interval, and the script goes
// on; refused for good, the error wraps ErrFailed and carries the Failed
// tracking row:
//
//	r, err := c.Call(ctx, "erp", "order", map[string]any{"part": "A-7", "qty": 3})
//	if errors.Is(err, notify.ErrFailed) {
//		... // the ERP said no; r.Operation.LastError says why
//	}
//	w, err := c.Write(ctx, "plant", "INSERT INTO counts (line, n) VALUES ($1, $2)", "line-3", 7)
//	rows, err := c.Tracking(ctx, r.ID, w.ID) // answered by any node, central or not
//
// Tracking and Operations read the tracking table; Retry and Discard act on
// an operation parked after its retries ran out. Call and Write make the
// tracked id (UUIDv7) before the first try and keep it, as Send does: a
// repeat finds the operation and answers its row, without a second
// attempt. Each try is bounded by the attempt timeout, and the leader ends
// its attempt of the target a little before the try's deadline, to commit:
// a target slower than that is buffered and retried, not waited for.
//
// # Any node will do
//
// Give the client every node of the site. Any node accepts every call: a
// follower passes a Send, a Status, a cached call or write and an
// operator's Retry or Discard to the leader (package siteapi), so the
// client never needs to know which node leads. A follower names the leader
// in its answer, and the client calls the leader first from then on, when
// the name is one of the addresses it was given (give the nodes as they
// name each other), once it holds a ready connection to it, and until a
// try there fails; otherwise it starts with the node that answered last.
// A leader the client cannot reach thus costs no call.
//
// # One id, however many tries
//
// Send generates the notification's id itself (a time-ordered UUID, version
// 7) before the first try and sends the same id on every retry. When an
// answer is lost — the node died after committing, the try timed out — the
// retry finds the id already buffered and the site keeps the notification
// once.
//
// # Retries
//
// Send, Call and Write need a context with a deadline; without one they fail
// at once and send nothing. Within that deadline, every call tries the nodes
// in turn, each try bounded by its own timeout (5 s, or WithAttemptTimeout;
// less when less time is left) so that a dead node does not take the whole
// deadline.
// A try that fails because the node is unreachable, has no leader, or timed
// out moves on to the next node; after each round of every node the client
// waits a little (20 ms, doubling up to 1 s, with jitter). When the deadline
// passes, the error wraps ports.ErrUnavailable and the context's error.
// A refusal is returned at once, without a retry: invalid input (and a
// request over the site's size limit) wraps ports.ErrInvalid with the site's
// text (which names the field and why), missing or wrong credentials wrap
// ports.ErrUnauthenticated, an unknown operation ports.ErrNotFound, an
// operator's action on an operation that is not parked ports.ErrConflict.
//
// # The site's rate limit
//
// A site limits the calls of each caller (its certificate's name, or else
// its address). A call over the limit is refused with the wait after which
// one will pass; the client waits that long (plus a little jitter) and tries
// the same node again, so a burst of Sends is spread out rather than failed.
// When the wait is longer than what is left of the deadline, the call fails
// at once with an error wrapping ports.ErrUnavailable that says the limit.
//
// # Credentials
//
// WithToken sends the site API token; WithTLS connects over TLS, and the
// client certificate in its configuration (Certificates or
// GetClientCertificate), if any, authenticates the client when the site
// trusts its CA.
//
// Errors name the call and the node's address; they never hold the token.
package notify

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/siteline/outbox/adapters/siteapi/internal/pb"
	"github.com/siteline/outbox/ports"
)

const (
	// DefaultAttemptTimeout bounds one try at one node.
	DefaultAttemptTimeout = 5 * time.Second
	// DefaultTimeout bounds Status, Statuses and Health when their context
	// has no deadline.
	DefaultTimeout = 30 * time.Second

	minBackoff = 20 * time.Millisecond
	maxBackoff = time.Second
)

// ErrClosed is the error of a call on a closed Client.
var ErrClosed = errors.New("notify: client closed")

// Provenance says who sends: it travels with every notification the Client
// sends. The site adds its own id and the enqueue time.
type Provenance struct {
	// Instance is the instance (machine, process) the script runs on.
	Instance string
	// Script names the script.
	Script string
	// ExecutionID identifies this run of the script, and ParentExecutionID
	// the run that started it, if any.
	ExecutionID       string
	ParentExecutionID string
}

// Option configures a Client.
type Option func(*options)

type options struct {
	token   string
	tls     *tls.Config
	prov    Provenance
	attempt time.Duration
}

// WithToken sends token as "authorization: Bearer <token>" on every call.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithTLS connects to the nodes over TLS with cfg; without it the client
// connects in plaintext. A client certificate in cfg is presented to the
// nodes, which take it as the client's credential when they trust its CA.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithProvenance stamps every notification the client sends with p.
func WithProvenance(p Provenance) Option { return func(o *options) { o.prov = p } }

// WithAttemptTimeout bounds one try at one node (DefaultAttemptTimeout when
// d is not positive).
func WithAttemptTimeout(d time.Duration) Option { return func(o *options) { o.attempt = d } }

// Client sends notifications through the nodes of one site. It is safe for
// concurrent use.
type Client struct {
	nodes   []node
	token   string
	prov    Provenance
	attempt time.Duration
	// next is the index of the node that answered last; leader is the
	// index of the node named the leader (or that answered without naming
	// another), -1 before any answer. A call starts at the leader when the
	// client holds a ready connection to it and its last try there did not
	// fail, else at next (see first).
	next   atomic.Int32
	leader atomic.Int32
	closed atomic.Bool
}

// node is one site node the client dialled.
type node struct {
	addr string
	conn *grpc.ClientConn
	rpc  pb.SiteClient
	// health is what the client saw of the node (nodeHealth); shared by
	// the copies of node, which all point to the same.
	health *atomic.Int32
}

// What the client saw of a node: a try there failed as unavailable
// (suspect), then its connection was seen not ready (suspectDown). A
// suspect node is not started at as the leader until a call there
// succeeds or its connection is seen ready again after being down (it
// restarted, the network came back).
const (
	nodeOK int32 = iota
	nodeSuspect
	nodeSuspectDown
)

// Dial returns a Client for the site nodes at addrs, a comma-separated list
// of host:port. It does not connect yet: each node is connected on first use,
// and reconnected after a failure.
func Dial(addrs string, opts ...Option) (*Client, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.attempt <= 0 {
		o.attempt = DefaultAttemptTimeout
	}
	creds := insecure.NewCredentials()
	if o.tls != nil {
		creds = credentials.NewTLS(o.tls.Clone())
	}
	c := &Client{token: o.token, prov: o.prov, attempt: o.attempt}
	c.leader.Store(-1)
	for a := range strings.SplitSeq(addrs, ",") {
		a = strings.TrimSpace(a)
		if a == "" || slices.ContainsFunc(c.nodes, func(n node) bool { return n.addr == a }) {
			continue
		}
		conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(creds), grpc.WithConnectParams(pb.ConnectParams))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("notify: dial %s: %w", a, err)
		}
		c.nodes = append(c.nodes, node{addr: a, conn: conn, rpc: pb.NewSiteClient(conn), health: new(atomic.Int32)})
	}
	if len(c.nodes) == 0 {
		return nil, fmt.Errorf("notify: dial: no site node address in %q: %w", addrs, ports.ErrInvalid)
	}
	return c, nil
}

// Close closes the connections to the nodes. Calls made after it fail with
// ErrClosed.
func (c *Client) Close() error {
	c.closed.Store(true)
	var errs []error
	for _, n := range c.nodes {
		if err := n.conn.Close(); err != nil {
			errs = append(errs, fmt.Errorf("notify: close connection to %s: %w", n.addr, err))
		}
	}
	return errors.Join(errs...)
}

// Addrs returns the addresses of the nodes the client dialled, in the order
// given.
func (c *Client) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.addr
	}
	return out
}

// List is a notification list to send to; get one with Client.To.
type List struct {
	c    *Client
	name string
}

// To returns the notification list named name.
func (c *Client) To(name string) List { return List{c: c, name: name} }

// Send sends a notification to the list and returns its id once the site
// has committed it to its replicated buffer. ctx must carry a deadline:
// without one Send fails at once with an error wrapping ports.ErrInvalid and
// sends nothing. A subject, a body or both must be given: the site refuses
// a notification whose subject and body are both empty or blank, with an
// error wrapping ports.ErrInvalid, and sends nothing (no retry mends it).
// See the package documentation for the retries.
func (l List) Send(ctx context.Context, subject, body string) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		return "", noDeadline()
	}
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("notify: Send: generate id: %w", err)
	}
	return l.SendWithID(ctx, id.String(), subject, body)
}

// SendWithID is Send with an id the caller chose (a UUID), for a caller that
// records the id before sending and may send again after a crash: the site
// keeps one notification per id. The same rules hold: a deadline on ctx,
// and a subject, a body or both.
func (l List) SendWithID(ctx context.Context, id, subject, body string) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		return "", noDeadline()
	}
	p := l.c.prov
	req := pb.SendRequestToPB(ports.SendRequest{
		ID:                id,
		List:              l.name,
		Subject:           subject,
		Body:              body,
		SourceInstance:    p.Instance,
		SourceScript:      p.Script,
		ExecutionID:       p.ExecutionID,
		ParentExecutionID: p.ParentExecutionID,
	})
	var got string
	err := l.c.retry(ctx, "Send", func(ctx context.Context, rpc pb.SiteClient, opts ...grpc.CallOption) error {
		resp, err := rpc.Send(ctx, req, opts...)
		if err != nil {
			return err
		}
		got = resp.GetId()
		return nil
	})
	if err != nil {
		return "", err
	}
	return got, nil
}

func noDeadline() error {
	return fmt.Errorf("notify: Send needs a context with a deadline; nothing was sent: %w", ports.ErrInvalid)
}

// Status returns the status of the notification id: ports.StatusForwarding
// while the site holds it, then central's status, ports.StatusUnknown when
// neither knows it. It retries as Send does; a ctx without a deadline gets
// DefaultTimeout.
func (c *Client) Status(ctx context.Context, id string) (ports.Status, error) {
	m, err := c.Statuses(ctx, []string{id})
	if err != nil {
		return "", err
	}
	if st, ok := m[id]; ok {
		return st, nil
	}
	return ports.StatusUnknown, nil
}

// Statuses returns the status of each of ids, as Status does.
func (c *Client) Statuses(ctx context.Context, ids []string) (map[string]ports.Status, error) {
	if len(ids) == 0 {
		return map[string]ports.Status{}, nil
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	req := &pb.StatusRequest{Ids: ids}
	var out map[string]ports.Status
	err := c.retry(ctx, "Status", func(ctx context.Context, rpc pb.SiteClient, opts ...grpc.CallOption) error {
		resp, err := rpc.Status(ctx, req, opts...)
		if err != nil {
			return err
		}
		out = pb.StatusesFromPB(resp)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Health returns the health of the node at addr, one of the addresses the
// client dialled. It makes one try, without retries: it is that node's
// health, not the site's. A ctx without a deadline gets DefaultTimeout.
func (c *Client) Health(ctx context.Context, addr string) (ports.SiteHealth, error) {
	if c.closed.Load() {
		return ports.SiteHealth{}, ErrClosed
	}
	i := slices.IndexFunc(c.nodes, func(n node) bool { return n.addr == addr })
	if i < 0 {
		return ports.SiteHealth{}, fmt.Errorf("notify: Health: %s is not one of the addresses dialled: %w", addr, ports.ErrInvalid)
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	resp, err := c.nodes[i].rpc.Health(c.outgoing(ctx), &pb.HealthRequest{})
	if err != nil {
		return ports.SiteHealth{}, callErr("Health", addr, err)
	}
	return pb.HealthFromPB(resp), nil
}

// withDefaultTimeout gives ctx DefaultTimeout when it has no deadline.
func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

// outgoing adds the token to ctx's metadata.
func (c *Client) outgoing(ctx context.Context) context.Context {
	if c.token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
}

// retry makes the call try at the nodes in turn, starting with the leader
// a node named or else the one that answered last (first), until one
// answers, the answer is a refusal, or ctx ends.
//
// A node that passes a call to the leader names the leader in its answer
// (pb.LeaderKey): the client calls that node first from then on, when it
// is one of the nodes it was given (a name it was not given is ignored),
// once it holds a ready connection to it, and while its tries there do
// not fail: a leader the client cannot reach (packets dropped) never
// becomes the first try, and one whose try failed stops being it, so the
// client stays with the node that answered. A try that failed as
// unavailable moves to the named leader once per call, then the rotation
// goes on from where it was: a wrong name costs one try, never the call.
func (c *Client) retry(ctx context.Context, op string, try func(context.Context, pb.SiteClient, ...grpc.CallOption) error) error {
	if c.closed.Load() {
		return ErrClosed
	}
	i := c.first()
	wait := minBackoff
	var last error
	followed := false // a try moved to the leader a node named
	resume := -1      // where the rotation goes on after that try
	for tried := 0; ; {
		if err := ctx.Err(); err != nil {
			return exhausted(op, err, last)
		}
		nd := c.nodes[i]
		actx, cancel := context.WithTimeout(ctx, c.attempt)
		var trailer metadata.MD
		err := try(c.outgoing(actx), nd.rpc, grpc.Trailer(&trailer))
		cancel()
		hint := c.leaderHint(trailer)
		if err == nil {
			nd.health.Store(nodeOK)
			c.prefer(hint, i)
			return nil
		}
		if c.closed.Load() {
			return ErrClosed
		}
		if ctxErr := ctx.Err(); ctxErr != nil && last != nil {
			// The deadline cut this try short: the try before says more.
			return exhausted(op, ctxErr, last)
		}
		e := callErr(op, nd.addr, err)
		var ce *callError
		if errors.As(e, &ce) && ce.retryAfter > 0 {
			// Over the caller's rate: every node counts against the same
			// bucket at the leader, so wait as told and try this node again.
			c.next.Store(int32(i))
			d := ce.retryAfter + rand.N(ce.retryAfter/10+time.Millisecond)
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
				return e
			}
			if err := pause(ctx, d); err != nil {
				return exhausted(op, err, e)
			}
			last = e
			continue
		}
		if !errors.Is(e, ports.ErrUnavailable) {
			// A refusal: the node answered, and will answer the same again.
			nd.health.Store(nodeOK)
			c.prefer(hint, i)
			return e
		}
		last = e
		nd.health.CompareAndSwap(nodeOK, nodeSuspect)
		if tried++; tried%len(c.nodes) == 0 {
			// A round of every node failed: wait a little.
			if err := pause(ctx, wait/2+rand.N(wait/2+1)); err != nil {
				return exhausted(op, err, last)
			}
			wait = min(2*wait, maxBackoff)
		}
		if hint >= 0 && hint != i && !followed {
			followed, resume, i = true, i, hint
			continue
		}
		if resume >= 0 {
			// Back from the named node: on from the node that named it.
			i, resume = resume, -1
		}
		i = (i + 1) % len(c.nodes)
	}
}

// first returns the index of the node a call tries first: the leader, when
// one was named, the client holds a ready connection to it and no try there
// failed since its last success; else the node that answered last. It asks
// gRPC to connect to a named leader it is not connected to, so that a later
// call finds the connection ready.
func (c *Client) first() int {
	next := int(c.next.Load())
	l := int(c.leader.Load())
	if l < 0 || l == next {
		return next
	}
	nd := c.nodes[l]
	st := nd.conn.GetState()
	ready := st == connectivity.Ready
	if st == connectivity.Idle {
		nd.conn.Connect()
	}
	switch h := nd.health.Load(); {
	case h == nodeSuspect && !ready:
		nd.health.CompareAndSwap(nodeSuspect, nodeSuspectDown)
		return next
	case h == nodeSuspectDown && ready:
		// Connected again since the failed try: worth trying first.
		nd.health.CompareAndSwap(nodeSuspectDown, nodeOK)
		return l
	case h == nodeOK && ready:
		return l
	}
	return next
}

// leaderHint returns the index of the node a call's trailer names as the
// leader, or -1 when it names none or a node the client was not given.
func (c *Client) leaderHint(trailer metadata.MD) int {
	addr, ok := pb.LeaderHint(trailer)
	if !ok {
		return -1
	}
	return slices.IndexFunc(c.nodes, func(n node) bool { return n.addr == addr })
}

// prefer records that node i answered, naming the leader hint (-1: it
// named none, so it is the leader itself, as far as the client knows).
func (c *Client) prefer(hint, i int) {
	c.next.Store(int32(i))
	if hint < 0 {
		hint = i
	}
	c.leader.Store(int32(hint))
	if conn := c.nodes[hint].conn; hint != i && conn.GetState() == connectivity.Idle {
		conn.Connect() // for the next call to find it ready
	}
}

// pause waits for d or the end of ctx.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// exhausted is the error of a call whose context ended before a node
// answered; last is the error of the last try (nil if none was made).
func exhausted(op string, ctxErr, last error) error {
	if last == nil {
		return fmt.Errorf("notify: %s: no site node tried before the context ended (%w): %w", op, ctxErr, ports.ErrUnavailable)
	}
	return fmt.Errorf("notify: %s: no site node answered before the context ended (%w); last error: %w", op, ctxErr, last)
}

// callError is a failed call to one node. It wraps the ports sentinel of its
// kind: ErrInvalid, ErrUnauthenticated, ErrNotFound, ErrConflict,
// ErrUnavailable (worth another try), or nothing (the node failed in some
// other way).
type callError struct {
	op, addr string
	msg      string
	kind     error
	// retryAfter, for a call over the caller's rate, is the wait the site
	// named.
	retryAfter time.Duration
}

func (e *callError) Error() string {
	return fmt.Sprintf("notify: %s at %s: %s", e.op, e.addr, e.msg)
}

func (e *callError) Unwrap() error { return e.kind }

// Refusal returns the node's own sentence when err is a node's refusal of
// a call (invalid, unauthenticated, not found, conflict), without the
// client's context (the call, the node's address): what a person reads.
// ok is false for any other error, whose text then says more.
func Refusal(err error) (reason string, ok bool) {
	var ce *callError
	if !errors.As(err, &ce) || ce.kind == nil || ce.kind == ports.ErrUnavailable || ce.msg == "" {
		return "", false
	}
	return ce.msg, true
}

// callErr classifies the error of a call of op to the node at addr.
func callErr(op, addr string, err error) error {
	st := status.Convert(err)
	e := &callError{op: op, addr: addr, msg: st.Message()}
	switch st.Code() {
	case codes.ResourceExhausted:
		if d, ok := pb.RetryAfter(st.Message()); ok {
			e.kind, e.retryAfter = ports.ErrUnavailable, d
		} else {
			e.kind = ports.ErrInvalid // a request over the size limit
		}
	case codes.InvalidArgument, codes.OutOfRange:
		e.kind = ports.ErrInvalid
	case codes.NotFound:
		e.kind = ports.ErrNotFound
	case codes.FailedPrecondition:
		e.kind = ports.ErrConflict
	case codes.Unauthenticated, codes.PermissionDenied:
		e.kind = ports.ErrUnauthenticated
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Aborted:
		e.kind = ports.ErrUnavailable
	default:
		e.msg = fmt.Sprintf("%s (%s)", e.msg, st.Code())
	}
	return e
}
