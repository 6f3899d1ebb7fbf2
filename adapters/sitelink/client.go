package sitelink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/sitelink/internal/pb"
	"github.com/siteline/outbox/ports"
)

// maxClientRecvMsgBytes bounds one answer from central. Answers are small
// (ids and short reasons); the bound only keeps a broken peer from filling
// memory.
const maxClientRecvMsgBytes = 64 << 20

// How the client finds a dead central. A new connection that has not
// finished its TCP, TLS and HTTP/2 handshakes within connectTimeout is
// given up; pick_first tries the next address after 250 ms already
// (grpc's Happy Eyeballs), so a central that does not answer delays the
// move by that much only. An address that failed is tried again after a
// backoff growing from one second to maxReconnectDelay, so a central that
// comes back is found within that bound. On an established connection
// that falls silent (a central that lost power, a dropped NAT entry),
// keepalive pings after pingInterval without a byte read and closes the
// connection when no answer comes within pingTimeout: the next call then
// goes to the next central. pingInterval must stay above the servers'
// least client ping interval (guard.DefaultMinClientPingInterval, 10 s),
// or they close the connection for pinging too often.
const (
	connectTimeout    = 10 * time.Second
	maxReconnectDelay = 10 * time.Second
	pingInterval      = 15 * time.Second
	pingTimeout       = 10 * time.Second
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Addr is central's site-link address, host:port. Alone (without
	// Addrs), a host name that resolves to several addresses gives several
	// centrals: the client connects to one of them and moves to another
	// when it fails, as with Addrs.
	Addr string
	// Addrs are the site-link addresses of several central nodes (sharing
	// one database), host:port each. Addr, when also set, comes first.
	// The client sends every call to one central, the first in this order
	// that it can connect to, and stays on it until that connection fails;
	// then the next calls go to the next central that answers. Each host
	// is resolved when it is dialled, and a name with several addresses is
	// tried address by address. At least one of Addr and Addrs is
	// required.
	Addrs []string
	// Token is this site's bearer token in clear (cmd resolves env: and file:
	// references before); empty when the site authenticates by its client
	// certificate only.
	Token string
	// TLS is the client's TLS configuration: RootCAs verify central and
	// Certificates hold the site's client certificate (CN = the site id).
	// Each central's certificate is verified against the host of its own
	// address, unless TLS.ServerName names the one name all must hold.
	// nil means plaintext, and then a Token is sent only to loopback
	// addresses.
	TLS *tls.Config
	// Logger defaults to one that discards.
	Logger *slog.Logger

	// keepalive overrides the pings' interval and timeout (tests).
	keepalive keepalive.ClientParameters
}

// Client is a site's side of the link: a ports.Central whose calls go to
// central over gRPC. It is safe for concurrent use.
type Client struct {
	// addrs are the configured addresses; target names them in errors
	// when a call reached no central.
	addrs  []string
	target string
	conn   *grpc.ClientConn
	rpc    pb.CentralClient
	log    *slog.Logger

	mu      sync.Mutex
	current string // the central the last answered call came from
}

var _ ports.Central = (*Client)(nil)

// resolverScheme is the scheme of the per-client resolver that hands grpc
// the configured addresses when there are several.
const resolverScheme = "outbox-central"

// serviceConfig makes the policy explicit: pick_first sends every call to
// one connected address and moves on only when that connection fails. And
// a call that fails UNAVAILABLE — its central died under it, or refused the
// connection — is sent again by grpc, up to twice, after 100 ms and then
// up to 400 ms, to whichever central answers then: every call is
// idempotent (Submit is insert-if-not-exists on the id, Status reads, a
// report keeps each row's newest version, a Sync records the health again
// and its answers to finished commands are ignored), so a batch or a long
// poll cut in flight reaches the next central at once instead of after the
// caller's retry interval. Other codes (a refused credential, a quota,
// an invalid batch) are never repeated here.
const serviceConfig = `{
	"loadBalancingConfig": [{"pick_first": {}}],
	"methodConfig": [{
		"name": [{"service": "outbox.link.v1.Central"}],
		"retryPolicy": {
			"maxAttempts": 3,
			"initialBackoff": "0.1s",
			"maxBackoff": "0.4s",
			"backoffMultiplier": 2,
			"retryableStatusCodes": ["UNAVAILABLE"]
		}
	}]
}`

// maxRetryBufferBytes is how much of a call grpc keeps to send it again
// (see serviceConfig): a whole batch of the largest size a site forwards,
// with room for its encoding. A larger call is not repeated by grpc; the
// forwarder sends it again.
const maxRetryBufferBytes = 16 << 20

// Dial returns a Client of the centrals at cfg.Addr and cfg.Addrs. It
// connects lazily: the first call opens a connection, and a lost
// connection is reopened by the next call, to the first address that
// answers. Dial refuses to send a token in clear to an address that is not
// a loopback one.
func Dial(cfg ClientConfig) (*Client, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	addrs := slices.Clone(cfg.Addrs)
	if cfg.Addr != "" {
		addrs = append([]string{cfg.Addr}, cfg.Addrs...)
	}
	if len(addrs) == 0 {
		return nil, errors.New("sitelink: no central address")
	}
	seen := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || port == "" {
			return nil, fmt.Errorf("sitelink: central address %q is not host:port", a)
		}
		if seen[a] {
			return nil, fmt.Errorf("sitelink: central address %s is listed twice", a)
		}
		seen[a] = true
		if cfg.TLS == nil && cfg.Token != "" && !guard.LoopbackHost(host) {
			return nil, fmt.Errorf("sitelink: refusing to send the site token in clear to %s: configure TLS, or use a loopback address", a)
		}
	}
	for _, r := range cfg.Token {
		if r < 0x21 || r > 0x7e {
			return nil, errors.New("sitelink: the token holds a character other than visible ASCII, which cannot travel in a header")
		}
	}
	target := strings.Join(addrs, ",")
	var creds credentials.TransportCredentials
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS.Clone())
	} else {
		cfg.Logger.Warn("site link to central without TLS: use this on loopback only", "addr", target)
		creds = insecure.NewCredentials()
	}
	ka := cfg.keepalive
	if ka.Time == 0 {
		ka = keepalive.ClientParameters{Time: pingInterval, Timeout: pingTimeout}
	}
	ka.PermitWithoutStream = true
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxClientRecvMsgBytes),
			grpc.MaxRetryRPCBufferSize(maxRetryBufferBytes)),
		grpc.WithKeepaliveParams(ka),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: time.Second, Multiplier: 1.6, Jitter: 0.2, MaxDelay: maxReconnectDelay},
			MinConnectTimeout: connectTimeout,
		}),
		// The policy is this client's, never a service config from DNS.
		grpc.WithDisableServiceConfig(),
		grpc.WithDefaultServiceConfig(serviceConfig),
	}
	if cfg.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{header: "Bearer " + cfg.Token, secure: cfg.TLS != nil}))
	}
	dialTarget := addrs[0]
	if len(addrs) > 1 {
		// Several centrals: a resolver of this client alone hands grpc
		// every address, each with its own name for TLS verification and
		// the :authority header (unless TLS.ServerName names the one name
		// all hold), and pick_first keeps to one at a time.
		eps := make([]resolver.Endpoint, len(addrs))
		for i, a := range addrs {
			ra := resolver.Address{Addr: a}
			if cfg.TLS == nil || cfg.TLS.ServerName == "" {
				ra.ServerName = a
			}
			eps[i] = resolver.Endpoint{Addresses: []resolver.Address{ra}}
		}
		r := manual.NewBuilderWithScheme(resolverScheme)
		r.InitialState(resolver.State{Endpoints: eps})
		opts = append(opts, grpc.WithResolvers(r))
		dialTarget = resolverScheme + ":///centrals"
	}
	// One address goes to grpc's default resolver, DNS: a name with
	// several addresses gives pick_first all of them.
	conn, err := grpc.NewClient(dialTarget, opts...)
	if err != nil {
		return nil, fmt.Errorf("sitelink: central %s: %w", target, err)
	}
	return &Client{addrs: addrs, target: target, conn: conn, rpc: pb.NewCentralClient(conn), log: cfg.Logger}, nil
}

// Addrs returns the configured central addresses, in their order.
func (c *Client) Addrs() []string { return slices.Clone(c.addrs) }

// Current returns the address of the central that answered the last call,
// "" before any did. It is the address connected to: an IP address and
// port when the configured one is a host name.
func (c *Client) Current() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current
}

// answered notes the central that answered a call, and logs when it is
// another than before: the client moved to another central.
func (c *Client) answered(p *peer.Peer) {
	if p.Addr == nil {
		return
	}
	addr := p.Addr.String()
	c.mu.Lock()
	prev := c.current
	c.current = addr
	c.mu.Unlock()
	switch {
	case prev == addr:
	case prev == "":
		c.log.Info("site link: connected to central", "central", addr)
	default:
		c.log.Info("site link: moved to another central", "central", addr, "previous", prev)
	}
}

// name returns the central a failed call names: the address it reached
// (with the configured address when there is one and it was a host name),
// else every configured address.
func (c *Client) name(p *peer.Peer) string {
	if p.Addr == nil {
		return c.target
	}
	addr := p.Addr.String()
	if len(c.addrs) == 1 && c.addrs[0] != addr {
		return c.addrs[0] + " (" + addr + ")"
	}
	return addr
}

// Close closes the connection. Calls in progress fail with ErrUnavailable.
func (c *Client) Close() error {
	if err := c.conn.Close(); err != nil {
		return fmt.Errorf("sitelink: close connection to central %s: %w", c.target, err)
	}
	return nil
}

// Submit implements ports.Central. req.Site is not sent: central takes the
// site from the credentials.
func (c *Client) Submit(ctx context.Context, req ports.SubmitRequest) (ports.SubmitResult, error) {
	var p peer.Peer
	resp, err := c.rpc.Submit(ctx, submitRequestToPB(req), grpc.Peer(&p))
	if err != nil {
		return ports.SubmitResult{}, c.callError(ctx, c.name(&p), fmt.Sprintf("submit %d notifications", len(req.Notifications)), err)
	}
	c.answered(&p)
	return submitResultFromPB(resp), nil
}

// Status implements ports.Central. req.Site is not sent: central answers
// for the site the credentials name.
func (c *Client) Status(ctx context.Context, sreq ports.StatusRequest) (map[string]ports.Status, error) {
	ids := sreq.IDs
	req := &pb.StatusRequest{Ids: make([][]byte, len(ids))}
	for i, id := range ids {
		req.Ids[i] = []byte(id)
	}
	op := fmt.Sprintf("status of %d ids", len(ids))
	var p peer.Peer
	resp, err := c.rpc.Status(ctx, req, grpc.Peer(&p))
	if err != nil {
		return nil, c.callError(ctx, c.name(&p), op, err)
	}
	c.answered(&p)
	out := make(map[string]ports.Status, len(ids))
	for _, s := range resp.GetStatuses() {
		out[string(s.GetId())] = ports.Status(s.GetStatus())
	}
	for _, id := range ids {
		if _, ok := out[id]; !ok {
			return nil, fmt.Errorf("central %s: %s: the answer lacks id %q: %w", c.name(&p), op, clip(id), ports.ErrUnavailable)
		}
	}
	return out, nil
}

// ReportOperations implements ports.Central. req.Site is not sent: central
// takes the site from the credentials. A report cut by a central's death
// is sent again to the next (reports are idempotent).
func (c *Client) ReportOperations(ctx context.Context, req ports.OpReport) error {
	op := fmt.Sprintf("report %d operations", len(req.Ops))
	if req.Feed != nil {
		op = fmt.Sprintf("report a feed page of %d operations", len(req.Ops))
	}
	var p peer.Peer
	if _, err := c.rpc.ReportOperations(ctx, opReportToPB(req), grpc.Peer(&p)); err != nil {
		return c.callError(ctx, c.name(&p), op, err)
	}
	c.answered(&p)
	return nil
}

// syncSlack is how long past its wait the client gives a Sync whose
// context has no deadline, before it ends the call as unanswered.
const syncSlack = 30 * time.Second

// Sync implements ports.Central. req.Site and req.Health.Site are not
// sent: central takes the site from the credentials. A Sync whose context
// has no deadline gets one, its wait (at most ports.MaxSyncWait) plus
// syncSlack. A Sync cut by a central's death is sent again to the next
// central (a repeated Sync is harmless: central records the health again
// and the commands come again until answered).
func (c *Client) Sync(ctx context.Context, req ports.SyncRequest) (ports.SyncAnswer, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, min(max(req.Wait, 0), ports.MaxSyncWait)+syncSlack)
		defer cancel()
	}
	var p peer.Peer
	resp, err := c.rpc.Sync(ctx, syncRequestToPB(req), grpc.Peer(&p))
	if err != nil {
		return ports.SyncAnswer{}, c.callError(ctx, c.name(&p), fmt.Sprintf("sync with %d answers", len(req.Answers)), err)
	}
	c.answered(&p)
	return syncAnswerFromPB(resp), nil
}

// callError maps a failed call's gRPC status back to the port's errors,
// naming the central (name) and the call (op).
func (c *Client) callError(ctx context.Context, name, op string, err error) error {
	st := status.Convert(err)
	// The caller's own deadline or cancellation: say so, so that it can tell
	// it gave up from central failing. (The answer DEADLINE_EXCEEDED may
	// arrive just before ctx's own timer fires.)
	ctxErr := ctx.Err()
	switch {
	case ctxErr == nil && st.Code() == codes.DeadlineExceeded:
		ctxErr = context.DeadlineExceeded
	case ctxErr == nil && st.Code() == codes.Canceled:
		ctxErr = context.Canceled
	}
	if ctxErr != nil {
		return fmt.Errorf("central %s: %s: %w: %w", name, op, ports.ErrUnavailable, ctxErr)
	}
	msg := st.Message()
	sentinel := ports.ErrUnavailable
	switch st.Code() {
	case codes.InvalidArgument:
		sentinel = ports.ErrInvalid
	case codes.ResourceExhausted:
		if after, ok := retryDelay(st); ok {
			// Central refused the call for now (the site's ingest quota,
			// its calls in progress) and says when to come back.
			return fmt.Errorf("central %s: %s: %w", name, op,
				&ports.RetryLaterError{After: after, Reason: strings.TrimPrefix(msg, "resource exhausted: ")})
		}
		// The request is over central's MaxRecvMsgBytes: repeating it as it
		// is can never succeed.
		sentinel = ports.ErrInvalid
		msg = "the request is over central's message size limit; send smaller batches (" + msg + ")"
	case codes.Unauthenticated, codes.PermissionDenied:
		sentinel = ports.ErrUnauthenticated
	}
	return fmt.Errorf("central %s: %s: %w", name, op, &remoteError{sentinel: sentinel, msg: msg})
}

// maxRetryDelay bounds the wait a RetryInfo from central may ask for.
const maxRetryDelay = time.Hour

// retryDelay returns the delay of the google.rpc.RetryInfo in st's details,
// bounded to an hour, and whether st holds one.
func retryDelay(st *status.Status) (time.Duration, bool) {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			rd := ri.GetRetryDelay()
			if rd.CheckValid() != nil {
				return 0, true
			}
			return min(max(rd.AsDuration(), 0), maxRetryDelay), true
		}
	}
	return 0, false
}

// remoteError is an error central (or the transport) reported, as the port's
// sentinel with the reported text.
type remoteError struct {
	sentinel error
	msg      string
}

func (e *remoteError) Error() string {
	if strings.HasSuffix(e.msg, e.sentinel.Error()) {
		return e.msg
	}
	return e.msg + ": " + e.sentinel.Error()
}

func (e *remoteError) Unwrap() error { return e.sentinel }

// bearer sends a site's token with every call.
type bearer struct {
	header string
	secure bool
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": b.header}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: false
// only for the plaintext loopback link that Dial allows.
func (b bearer) RequireTransportSecurity() bool { return b.secure }
