package sitelink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/sitelink/internal/pb"
	"github.com/siteline/outbox/ports"
)

// maxClientRecvMsgBytes bounds one answer from central. Answers are small
// (ids and short reasons); the bound only keeps a broken peer from filling
// memory.
const maxClientRecvMsgBytes = 64 << 20

// ClientConfig configures a Client.
type ClientConfig struct {
	// Addr is central's site-link address, host:port; required.
	Addr string
	// Token is this site's bearer token in clear (cmd resolves env: and file:
	// references before); empty when the site authenticates by its client
	// certificate only.
	Token string
	// TLS is the client's TLS configuration: RootCAs verify central and
	// Certificates hold the site's client certificate (CN = the site id).
	// nil means plaintext, and then a Token is sent only to a loopback
	// address.
	TLS *tls.Config
	// Logger defaults to one that discards.
	Logger *slog.Logger
}

// Client is a site's side of the link: a ports.Central whose calls go to
// central over gRPC. It is safe for concurrent use.
type Client struct {
	addr string
	conn *grpc.ClientConn
	rpc  pb.CentralClient
}

var _ ports.Central = (*Client)(nil)

// Dial returns a Client of the central at cfg.Addr. It connects lazily: the
// first call opens the connection, and a lost connection is reopened by the
// next call. Dial refuses to send a token in clear to an address that is not
// a loopback one.
func Dial(cfg ClientConfig) (*Client, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil || host == "" {
		return nil, fmt.Errorf("sitelink: central address %q is not host:port", cfg.Addr)
	}
	for _, r := range cfg.Token {
		if r < 0x21 || r > 0x7e {
			return nil, errors.New("sitelink: the token holds a character other than visible ASCII, which cannot travel in a header")
		}
	}
	var creds credentials.TransportCredentials
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS.Clone())
	} else {
		if cfg.Token != "" && !guard.LoopbackHost(host) {
			return nil, fmt.Errorf("sitelink: refusing to send the site token in clear to %s: configure TLS, or use a loopback address", cfg.Addr)
		}
		cfg.Logger.Warn("site link to central without TLS: use this on loopback only", "addr", cfg.Addr)
		creds = insecure.NewCredentials()
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxClientRecvMsgBytes)),
		// Pings find a dead connection (a rebooted central, a dropped NAT
		// entry) within a minute instead of at TCP's retransmission timeout.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 20 * time.Second,
			PermitWithoutStream: true}),
	}
	if cfg.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{header: "Bearer " + cfg.Token, secure: cfg.TLS != nil}))
	}
	conn, err := grpc.NewClient(cfg.Addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("sitelink: central %s: %w", cfg.Addr, err)
	}
	return &Client{addr: cfg.Addr, conn: conn, rpc: pb.NewCentralClient(conn)}, nil
}

// Close closes the connection. Calls in progress fail with ErrUnavailable.
func (c *Client) Close() error {
	if err := c.conn.Close(); err != nil {
		return fmt.Errorf("sitelink: close connection to central %s: %w", c.addr, err)
	}
	return nil
}

// Submit implements ports.Central. req.Site is not sent: central takes the
// site from the credentials.
func (c *Client) Submit(ctx context.Context, req ports.SubmitRequest) (ports.SubmitResult, error) {
	resp, err := c.rpc.Submit(ctx, submitRequestToPB(req))
	if err != nil {
		return ports.SubmitResult{}, c.callError(ctx, fmt.Sprintf("submit %d notifications", len(req.Notifications)), err)
	}
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
	resp, err := c.rpc.Status(ctx, req)
	if err != nil {
		return nil, c.callError(ctx, op, err)
	}
	out := make(map[string]ports.Status, len(ids))
	for _, s := range resp.GetStatuses() {
		out[string(s.GetId())] = ports.Status(s.GetStatus())
	}
	for _, id := range ids {
		if _, ok := out[id]; !ok {
			return nil, fmt.Errorf("central %s: %s: %w: the answer lacks id %q", c.addr, op, ports.ErrUnavailable, clip(id))
		}
	}
	return out, nil
}

// callError maps a failed call's gRPC status back to the port's errors.
func (c *Client) callError(ctx context.Context, op string, err error) error {
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
		return fmt.Errorf("central %s: %s: %w: %w", c.addr, op, ports.ErrUnavailable, ctxErr)
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
			return fmt.Errorf("central %s: %s: %w", c.addr, op,
				&ports.RetryLaterError{After: after, Reason: strings.TrimPrefix(msg, "resource exhausted: ")})
		}
		// The request is over central's MaxRecvMsgBytes: repeating it as it
		// is can never succeed.
		sentinel = ports.ErrInvalid
		msg = "the request is over central's message size limit; send smaller batches (" + msg + ")"
	case codes.Unauthenticated, codes.PermissionDenied:
		sentinel = ports.ErrUnauthenticated
	}
	return fmt.Errorf("central %s: %s: %w", c.addr, op, &remoteError{sentinel: sentinel, msg: msg})
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
	if strings.HasPrefix(e.msg, e.sentinel.Error()) {
		return e.msg
	}
	return e.sentinel.Error() + ": " + e.msg
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
