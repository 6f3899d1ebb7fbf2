// Package siteapi serves the site API — Send, Status and Health over gRPC —
// on every node of a site, in front of the driving port ports.Site. Scripts
// call it through the client in package notify.
//
// # Any node answers (S6)
//
// Only the Raft leader can commit a Send, and only its buffer is certain to
// hold the latest state, so Send and Status are served by the leader. A
// follower accepts them too and passes them on to the leader's site API (the
// address ServerConfig.Leader reports), with the caller's remaining deadline,
// the token, and the metadata x-outbox-forwarded: 1. A request is forwarded at
// most once: a forwarded request that reaches a node that does not lead (its
// sender's view of the leader was stale, or two nodes each think the other
// leads) is answered Unavailable, and so is a request to a follower that
// knows no leader. The caller retries; the notify client does so on its own.
// Health is always answered by the node called: it is that node's health.
//
// # Deadlines and idempotence
//
// A Send must carry a gRPC deadline; one without is refused with
// InvalidArgument before anything is buffered. The deadline bounds the whole
// path, forwarding included. A Send that timed out may still have been
// committed: the caller repeats it with the same id (SendRequest.id), and the
// site buffers it once.
//
// # Errors
//
// Errors are mapped to gRPC codes here, once: ports.ErrInvalid →
// InvalidArgument (with the error's text, which names the field and why),
// ports.ErrUnavailable → Unavailable, ports.ErrUnauthenticated →
// Unauthenticated, an ended context → DeadlineExceeded or Canceled, anything
// else → Internal with a generic text (the real error goes to the log). A
// forwarded call's error comes back from the leader already mapped and is
// passed on unchanged.
package siteapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/siteline/outbox/adapters/siteapi/internal/pb"
	"github.com/siteline/outbox/ports"
)

const (
	// MaxRequestBytes bounds the size of one request the server accepts.
	// A notification's body is at most 64 KiB by default; 1 MiB also leaves
	// room for a Status of some twenty thousand ids.
	MaxRequestBytes = 1 << 20

	// ForwardedKey is the metadata key that marks a request a follower
	// forwarded to the leader; its value is "1".
	ForwardedKey = "x-outbox-forwarded"

	// forwardedStatusTimeout bounds a forwarded Status whose caller gave no
	// deadline.
	forwardedStatusTimeout = 30 * time.Second
	// stopGrace is how long Stop lets calls in flight finish.
	stopGrace = 5 * time.Second
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Site is the node's driving port; required.
	Site ports.Site
	// Leader reports whether this node leads its group and, if not, the
	// site API address of the leader it knows ("" when there is none). It is
	// called on every Send and Status. Nil means this node serves every call
	// itself (a single node).
	Leader func() (self bool, leaderAddr string)
	// Token, when set, is required of every caller as the metadata
	// "authorization: Bearer <token>", and sent along with forwarded calls.
	Token string
	// TLS, when set, is the server's TLS configuration.
	TLS *tls.Config
	// PeerTLS, when set, is the client TLS configuration for forwarding to
	// the leader's site API; nil forwards in plaintext.
	PeerTLS *tls.Config
	// Logger receives the server's log; nil discards it.
	Logger *slog.Logger
}

// Server is the site API of one node. Create it with NewServer, run it with
// Serve, stop it with Stop.
type Server struct {
	site      ports.Site
	leader    func() (bool, string)
	bearer    string   // "Bearer <token>", "" when no token is required
	bearerSum [32]byte // SHA-256 of bearer, compared in constant time
	peerCreds credentials.TransportCredentials
	log       *slog.Logger
	grpc      *grpc.Server

	mu      sync.Mutex
	peers   map[string]*grpc.ClientConn // by leader address
	stopped bool
}

// NewServer returns a Server for cfg.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Site == nil {
		return nil, errors.New("site API: ServerConfig.Site is required")
	}
	s := &Server{
		site:      cfg.Site,
		leader:    cfg.Leader,
		peerCreds: insecure.NewCredentials(),
		log:       cfg.Logger,
		peers:     make(map[string]*grpc.ClientConn),
	}
	if s.leader == nil {
		s.leader = func() (bool, string) { return true, "" }
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Token != "" {
		s.bearer = "Bearer " + cfg.Token
		s.bearerSum = sha256.Sum256([]byte(s.bearer))
	}
	if cfg.PeerTLS != nil {
		s.peerCreds = credentials.NewTLS(cfg.PeerTLS.Clone())
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.ChainUnaryInterceptor(s.authenticate),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS.Clone())))
	}
	s.grpc = grpc.NewServer(opts...)
	pb.RegisterSiteServer(s.grpc, &service{s: s})
	return s, nil
}

// Serve accepts connections on lis until Stop; it returns nil after Stop.
func (s *Server) Serve(lis net.Listener) error {
	if err := s.grpc.Serve(lis); err != nil {
		return fmt.Errorf("site API: serve on %s: %w", lis.Addr(), err)
	}
	return nil
}

// Stop stops accepting calls, lets the calls in flight finish for a few
// seconds, cancels those still running, and closes the connections to the
// leaders. Serve returns.
func (s *Server) Stop() {
	s.mu.Lock()
	s.stopped = true
	peers := s.peers
	s.peers = nil
	s.mu.Unlock()

	done := make(chan struct{})
	go func() {
		defer close(done)
		s.grpc.GracefulStop()
	}()
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.grpc.Stop()
		<-done
	}
	for addr, conn := range peers {
		if err := conn.Close(); err != nil {
			s.log.Debug("site API: close connection to leader", "addr", addr, "err", err)
		}
	}
}

// authenticate refuses calls without the configured token.
func (s *Server) authenticate(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s.bearer != "" {
		md, _ := metadata.FromIncomingContext(ctx)
		vals := md.Get("authorization")
		ok := len(vals) == 1
		if ok {
			sum := sha256.Sum256([]byte(vals[0]))
			ok = subtle.ConstantTimeCompare(sum[:], s.bearerSum[:]) == 1
		}
		if !ok {
			s.log.Warn("site API: call refused: missing or wrong token", "method", info.FullMethod, "peer", peerAddr(ctx))
			return nil, status.Error(codes.Unauthenticated, "missing or wrong token")
		}
	}
	return handler(ctx, req)
}

// route decides where a Send or Status is served: here (client nil), or at
// the leader through client with the returned outgoing context. Its errors
// are gRPC status errors.
func (s *Server) route(ctx context.Context) (client pb.SiteClient, out context.Context, addr string, err error) {
	self, addr := s.leader()
	if self {
		return nil, ctx, "", nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(ForwardedKey)) > 0 {
		return nil, nil, "", status.Error(codes.Unavailable, "a forwarded request reached a node that does not lead (stale view of the leader); try again")
	}
	if addr == "" {
		return nil, nil, "", status.Error(codes.Unavailable, "no leader")
	}
	conn, err := s.peer(addr)
	if err != nil {
		return nil, nil, "", err
	}
	fwd := metadata.Pairs(ForwardedKey, "1")
	if s.bearer != "" {
		fwd.Set("authorization", s.bearer)
	} else if a := md.Get("authorization"); len(a) > 0 {
		fwd.Set("authorization", a...)
	}
	return pb.NewSiteClient(conn), metadata.NewOutgoingContext(ctx, fwd), addr, nil
}

// peer returns the cached connection to the leader at addr.
func (s *Server) peer(addr string) (*grpc.ClientConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, status.Error(codes.Unavailable, "site API stopping")
	}
	if c, ok := s.peers[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(s.peerCreds),
		grpc.WithConnectParams(pb.ConnectParams),
	)
	if err != nil {
		s.log.Error("site API: connect to leader", "addr", addr, "err", err)
		return nil, status.Errorf(codes.Unavailable, "cannot connect to the leader at %s", addr)
	}
	s.peers[addr] = c
	return c, nil
}

// forwardError returns the error of a call forwarded to the leader at addr.
// The leader's status passes unchanged, except that a failure to reach it
// names it.
func (s *Server) forwardError(method, addr string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		s.log.Error("site API: forward to leader", "method", method, "addr", addr, "err", err)
		return status.Errorf(codes.Unavailable, "forwarding to the leader at %s failed", addr)
	}
	if st.Code() == codes.Unavailable {
		return status.Errorf(codes.Unavailable, "forwarding to the leader at %s: %s", addr, st.Message())
	}
	return err
}

// toStatus maps an error of ports.Site to a gRPC status error.
func (s *Server) toStatus(method string, err error) error {
	switch {
	case errors.Is(err, ports.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ports.ErrUnauthenticated):
		return status.Error(codes.Unauthenticated, err.Error())
	case errors.Is(err, ports.ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "canceled")
	}
	s.log.Error("site API: call failed", "method", method, "err", err)
	return status.Error(codes.Internal, "internal error (see the site node's log)")
}

// peerAddr is the remote address of the caller of ctx, for the log.
func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// service implements the gRPC service on a Server.
type service struct {
	pb.UnimplementedSiteServer
	s *Server
}

var _ pb.SiteServer = (*service)(nil)

// Send serves a Send here on the leader, or forwards it to the leader.
func (h *service) Send(ctx context.Context, req *pb.SendRequest) (*pb.SendResponse, error) {
	if _, ok := ctx.Deadline(); !ok {
		return nil, status.Error(codes.InvalidArgument, "Send needs a deadline")
	}
	client, out, addr, err := h.s.route(ctx)
	if err != nil {
		return nil, err
	}
	if client != nil {
		resp, err := client.Send(out, req)
		if err != nil {
			return nil, h.s.forwardError("Send", addr, err)
		}
		return resp, nil
	}
	id, err := h.s.site.Send(ctx, pb.SendRequestFromPB(req))
	if err != nil {
		return nil, h.s.toStatus("Send", err)
	}
	return &pb.SendResponse{Id: id}, nil
}

// Status serves a Status here on the leader, or forwards it to the leader.
func (h *service) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	client, out, addr, err := h.s.route(ctx)
	if err != nil {
		return nil, err
	}
	if client != nil {
		if _, ok := out.Deadline(); !ok {
			var cancel context.CancelFunc
			out, cancel = context.WithTimeout(out, forwardedStatusTimeout)
			defer cancel()
		}
		resp, err := client.Status(out, req)
		if err != nil {
			return nil, h.s.forwardError("Status", addr, err)
		}
		return resp, nil
	}
	m, err := h.s.site.Status(ctx, req.GetIds())
	if err != nil {
		return nil, h.s.toStatus("Status", err)
	}
	return pb.StatusesToPB(m), nil
}

// Health answers this node's own health.
func (h *service) Health(ctx context.Context, _ *pb.HealthRequest) (*pb.HealthResponse, error) {
	health, err := h.s.site.Health(ctx)
	if err != nil {
		return nil, h.s.toStatus("Health", err)
	}
	return pb.HealthToPB(health), nil
}
