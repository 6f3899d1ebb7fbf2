package siteapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/siteapi/internal/pb"
	"github.com/siteline/outbox/adapters/support/errtext"
	"github.com/siteline/outbox/ports"
)

const (
	// ForwardedKey is the metadata key that marks a request a follower
	// forwarded to the leader; its value is "1".
	ForwardedKey = "x-outbox-forwarded"
	// CallerKey is the metadata key in which a follower names the caller of
	// a request it forwards (its key: "cert:CN" or "ip:ADDR", an IPv6
	// address by its /64). The leader believes it only from a member node.
	CallerKey = "x-outbox-caller"

	// forwardedStatusTimeout bounds a forwarded Status whose caller gave no
	// deadline, and an operator's Retry or Discard without one.
	forwardedStatusTimeout = 30 * time.Second
	// stopGrace is how long Stop lets calls in flight finish.
	stopGrace = 5 * time.Second
	// maxKeyBytes bounds a caller key: a certificate's CN or a forwarded key.
	maxKeyBytes = 128
)

// The defaults of Limits.
const (
	// DefaultRate and DefaultBurst are the calls a second one caller may
	// make on average, and at once.
	DefaultRate  = 50
	DefaultBurst = 200
	// DefaultConnsPerAddress and DefaultConnsTotal bound the connections
	// open at once from one client address, and in all.
	DefaultConnsPerAddress = 64
	DefaultConnsTotal      = 1024
	// DefaultMaxStreams bounds the calls one connection runs at once. It is
	// above guard's default: a script's client, and a follower passing its
	// callers' Sends to the leader, carry many calls on one connection, and
	// a Send waits a few milliseconds for its Raft commit (64 callers on one
	// connection sent half as much under 32). A caller's rate and burst
	// bound what it can start.
	DefaultMaxStreams = 256
	// DefaultMaxRequestBytes bounds one request: RequestBytes of the core's
	// default limits (a 255-byte subject, a 64 KiB body).
	DefaultMaxRequestBytes = max(255+64<<10, minRequestBytes) + requestRoom

	// requestRoom is what a Send carries besides its subject and body (the
	// list, the id and four provenance fields of at most 200 bytes each) and
	// the protobuf framing, with room to spare; minRequestBytes leaves room
	// for a Status of the core's 1000 ids.
	requestRoom     = 16 << 10
	minRequestBytes = 64 << 10
)

// RequestBytes returns the request size that fits a Send of a subject of
// maxSubject bytes and a body of maxBody bytes, and a Status of 1000 ids.
func RequestBytes(maxSubject, maxBody int) int {
	return max(maxSubject+maxBody, minRequestBytes) + requestRoom
}

// OpRequestBytes returns the request size that fits, besides what
// RequestBytes fits, a cached call or write whose payload (a call's params,
// a write's SQL and args together) is maxOpPayload bytes: the core's
// SiteConfig.MaxOpPayloadBytes. DefaultMaxRequestBytes fits the default
// 64 KiB.
func OpRequestBytes(maxSubject, maxBody, maxOpPayload int) int {
	return max(RequestBytes(maxSubject, maxBody), maxOpPayload+requestRoom)
}

// Limits bounds what callers can make a Server spend. Zero fields take the
// defaults.
type Limits struct {
	// Rate is how many calls a second one caller may make on average, and
	// Burst how many at once (defaults DefaultRate and DefaultBurst). A
	// negative Rate means no limit.
	Rate  float64
	Burst int
	// Conns bounds the connections (defaults DefaultConnsPerAddress and
	// DefaultConnsTotal).
	Conns guard.ConnLimits
	// GRPC bounds each connection and request: handshake, idle time, pings
	// (guard's defaults), concurrent streams (DefaultMaxStreams) and the
	// request size (DefaultMaxRequestBytes).
	GRPC guard.GRPCLimits
}

// WithDefaults returns l with every zero field set to its default; a
// negative one is kept (a negative Rate means no limit), for Validate to
// judge.
func (l Limits) WithDefaults() Limits {
	if l.Rate == 0 {
		l.Rate = DefaultRate
	}
	if l.Burst == 0 {
		l.Burst = DefaultBurst
	}
	if l.Conns.PerAddress == 0 {
		l.Conns.PerAddress = DefaultConnsPerAddress
	}
	if l.Conns.Total == 0 {
		l.Conns.Total = DefaultConnsTotal
	}
	if l.GRPC.MaxRecvMsgBytes == 0 {
		l.GRPC.MaxRecvMsgBytes = DefaultMaxRequestBytes
	}
	if l.GRPC.MaxConcurrentStreams == 0 {
		l.GRPC.MaxConcurrentStreams = DefaultMaxStreams
	}
	l.GRPC = l.GRPC.WithDefaults()
	return l
}

// Validate returns one *ports.FieldError per broken rule, joined, each on
// the Go path of its field ("Conns.Total"). It checks l as given, where a
// zero is no default but a value: call it on l.WithDefaults() to check what
// will run.
func (l Limits) Validate() error {
	var fe ports.FieldErrors
	if l.Rate == 0 || math.IsNaN(l.Rate) {
		fe.Add("Rate", "must be positive, got %g (leave it out for the default; a negative rate means no limit)", l.Rate)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"Burst", l.Burst}, {"Conns.PerAddress", l.Conns.PerAddress}, {"Conns.Total", l.Conns.Total}} {
		if f.v <= 0 {
			fe.Add(f.name, "must be positive, got %d (leave it out for the default)", f.v)
		}
	}
	if l.Conns.PerAddress > 0 && l.Conns.Total > 0 {
		fe.Nest("Conns", l.Conns.Validate())
	}
	fe.Nest("GRPC", l.GRPC.Validate())
	return fe.Err()
}

// ServerConfig configures a Server.
type ServerConfig struct {
	// Site is the node's driving port; required.
	Site ports.Site
	// Ops is the node's cached operations (core.Site implements it). Nil,
	// the RPCs of cached operations answer Unimplemented.
	Ops ports.Operations
	// Leader reports whether this node leads its group and, if not, the
	// site API address of the leader it knows ("" when there is none). It is
	// called on every call served at the leader (Send, Status, CachedCall,
	// CachedWrite, RetryOperation, DiscardOperation). Nil means this node
	// serves every call itself (a single node).
	Leader func() (self bool, leaderAddr string)
	// Token, when set, authenticates a caller that presents it as the
	// metadata "authorization: Bearer <token>"; it is sent along with
	// forwarded calls.
	Token string
	// TLS, when set, is the server's TLS configuration (its certificate).
	// NewServer sets its ClientAuth and ClientCAs from ClientCAs and
	// MemberCAs.
	TLS *tls.Config
	// ClientCAs, when set, are the authorities of scripts' client
	// certificates: a caller presenting a certificate one of them verifies
	// is authenticated and known by its subject CN. Needs TLS.
	ClientCAs []*x509.Certificate
	// Members are the ids of the group's nodes, and MemberCAs the
	// authorities of their certificates (the Raft CA). A caller whose
	// certificate a MemberCA verifies and which names a member (as CN or DNS
	// name) is a node of the group: see the package documentation. Needs
	// TLS.
	Members   []string
	MemberCAs []*x509.Certificate
	// PeerTLS, when set, is the client TLS configuration for forwarding to
	// the leader's site API: its certificate is this node's member
	// certificate (one MemberCAs verify, naming this node), which it
	// presents when it forwards and, as a server, to a member that forwards
	// to it. Its root CAs and server name are not used: a follower forwards
	// only to a leader whose certificate MemberCAs verify and which names a
	// member, so PeerTLS needs MemberCAs and Members. Nil forwards in
	// plaintext, and only to a leader address on loopback.
	PeerTLS *tls.Config
	// Limits bounds what callers can make the server spend.
	Limits Limits
	// Refusals counts and logs refused calls and connections; nil makes
	// one, "site_api", logging to Logger.
	Refusals *guard.Refusals
	// Logger receives the server's log; nil discards it.
	Logger *slog.Logger
}

// Server is the site API of one node. Create it with NewServer, run it with
// Serve, stop it with Stop.
type Server struct {
	site      ports.Site
	ops       ports.Operations
	leader    func() (bool, string)
	bearer    string   // "Bearer <token>", "" when no token is required
	bearerSum [32]byte // SHA-256 of bearer, compared in constant time
	clientCAs []*x509.Certificate
	memberCAs []*x509.Certificate
	members   []string
	open      bool   // no credential is required of callers
	denied    string // the message of an unauthenticated call
	limits    Limits
	limiter   *guard.KeyedLimiter
	refusals  *guard.Refusals
	peerCreds credentials.TransportCredentials
	peerTLS   bool // forwarding runs over TLS, to members only
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
	if cfg.TLS == nil && len(cfg.ClientCAs)+len(cfg.MemberCAs) > 0 {
		return nil, errors.New("site API: ClientCAs and MemberCAs need TLS")
	}
	if cfg.PeerTLS != nil && (len(cfg.MemberCAs) == 0 || len(cfg.Members) == 0) {
		return nil, errors.New("site API: PeerTLS needs MemberCAs and Members: a follower passes its callers' tokens only to a leader whose certificate proves it a member")
	}
	limits := cfg.Limits.WithDefaults()
	if err := limits.Validate(); err != nil {
		return nil, fmt.Errorf("site API: limits: %w", err)
	}
	s := &Server{
		site:      cfg.Site,
		ops:       cfg.Ops,
		leader:    cfg.Leader,
		clientCAs: slices.Clone(cfg.ClientCAs),
		memberCAs: slices.Clone(cfg.MemberCAs),
		members:   slices.Clone(cfg.Members),
		open:      cfg.Token == "" && len(cfg.ClientCAs) == 0,
		limits:    limits,
		refusals:  cfg.Refusals,
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
	if s.refusals == nil {
		s.refusals = guard.NewRefusals("site_api", s.log, 0)
	}
	s.limiter = guard.NewKeyedLimiter(s.limits.Rate, s.limits.Burst)
	switch {
	case cfg.Token != "" && len(cfg.ClientCAs) > 0:
		s.denied = "missing or wrong token, and no client certificate the site trusts"
	case cfg.Token != "":
		s.denied = "missing or wrong token"
	default:
		s.denied = "no client certificate the site trusts"
	}
	if cfg.Token != "" {
		s.bearer = "Bearer " + cfg.Token
		s.bearerSum = sha256.Sum256([]byte(s.bearer))
	}
	if cfg.PeerTLS != nil {
		s.peerCreds, s.peerTLS = credentials.NewTLS(memberClientTLS(cfg.PeerTLS, s.memberCAs, s.members)), true
	}
	var creds credentials.TransportCredentials
	if cfg.TLS != nil {
		t := cfg.TLS.Clone()
		t.MinVersion = max(t.MinVersion, tls.VersionTLS12)
		t.ClientAuth, t.ClientCAs = tls.NoClientCert, nil
		if cas := slices.Concat(s.clientCAs, s.memberCAs); len(cas) > 0 {
			// Verified when given, never required at the handshake: a
			// script with a token has none, and a caller without either is
			// refused in tap, where it is counted and logged.
			t.ClientAuth, t.ClientCAs = tls.VerifyClientCertIfGiven, x509.NewCertPool()
			for _, c := range cas {
				t.ClientCAs.AddCert(c)
			}
		}
		if cfg.PeerTLS != nil && len(cfg.PeerTLS.Certificates) > 0 {
			presentMemberCert(t, cfg.PeerTLS.Certificates)
		}
		creds = credentials.NewTLS(t)
	}
	// The options count failed handshakes and bound header blocks.
	opts := append(s.limits.GRPC.ServerOptions(creds, s.refusals), grpc.InTapHandle(s.tap))
	s.grpc = grpc.NewServer(opts...)
	desc := pb.Site_ServiceDesc
	desc.Methods = slices.Clone(desc.Methods)
	for i := range desc.Methods {
		desc.Methods[i].Handler = s.countDecodeErrors(desc.Methods[i].Handler)
	}
	s.grpc.RegisterService(&desc, &service{s: s})
	return s, nil
}

// Refusals returns the server's refusal log and counter.
func (s *Server) Refusals() *guard.Refusals { return s.refusals }

// Serve accepts connections on lis until Stop; it returns nil after Stop.
// Connections past the limits are closed at once.
func (s *Server) Serve(lis net.Listener) error {
	if err := s.grpc.Serve(guard.LimitListener(lis, s.limits.Conns, s.refusals)); err != nil {
		s.mu.Lock()
		stopped := s.stopped
		s.mu.Unlock()
		if stopped && errors.Is(err, grpc.ErrServerStopped) {
			// Stop came first (a shutdown right after the start): the
			// server did what was asked, as when Stop ends a Serve.
			return nil
		}
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

// caller is who makes a call, as tap found out.
type caller struct {
	// key names the caller for the limits and the log: "node:ID",
	// "cert:CN", or "ip:ADDR" (guard.CallerKey: an IPv6 address by its
	// /64, so that rotating addresses within it gains no new bucket).
	key string
	// member is the id of the group's node that makes the call, "" for a
	// caller outside the group.
	member string
	// cert reports a client certificate one of ClientCAs verified.
	cert bool
}

// callerCtxKey is the context key of the caller tap found.
type callerCtxKey struct{}

// callerOf returns the caller tap stored in ctx.
func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerCtxKey{}).(caller)
	return c
}

// tap authenticates and limits a call on its headers, before its message is
// read. Its errors are gRPC status errors.
func (s *Server) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	c := s.identify(ctx)
	method := methodName(info.FullMethodName)
	if c.member != "" && len(info.Header.Get(ForwardedKey)) > 0 {
		// A node of the group passes on a call it authenticated and
		// limited: it is limited here under the caller it names.
		if k := info.Header.Get(CallerKey); len(k) == 1 && validKey(k[0]) {
			c.key = k[0]
		}
	}
	if !s.open && c.member == "" && !c.cert && !s.tokenOK(info.Header) {
		s.refusals.Refuse(c.key, "unauthenticated", "method", method)
		return nil, status.Error(codes.Unauthenticated, s.denied)
	}
	if !s.limiter.Allow(c.key) {
		wait := s.limiter.RetryAfter(c.key, 1)
		s.refusals.Refuse(c.key, "rate limited", "method", method)
		return nil, status.Error(codes.ResourceExhausted, pb.RateLimited(s.limits.Rate, s.limits.Burst, wait))
	}
	return context.WithValue(ctx, callerCtxKey{}, c), nil
}

// identify returns who calls on ctx's connection: a member node, a script
// with a certificate, or an address.
func (s *Server) identify(ctx context.Context) caller {
	var c caller
	p, ok := peer.FromContext(ctx)
	if !ok {
		return c
	}
	c.key = "ip:" + guard.CallerKey(p.Addr)
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return c
	}
	cn := ""
	for _, chain := range ti.State.VerifiedChains {
		if len(chain) == 0 {
			continue
		}
		leaf, root := chain[0], chain[len(chain)-1]
		if c.member == "" && slices.ContainsFunc(s.memberCAs, root.Equal) {
			c.member = s.memberName(leaf)
		}
		if slices.ContainsFunc(s.clientCAs, root.Equal) {
			c.cert, cn = true, leaf.Subject.CommonName
		}
	}
	switch {
	case c.member != "":
		c.key = "node:" + c.member
	case c.cert && cn != "":
		c.key = "cert:" + clipKey(cn)
	}
	return c
}

// memberName returns the member a certificate names (its CN or one of its
// DNS names), "" if none.
func (s *Server) memberName(cert *x509.Certificate) string {
	for _, m := range s.members {
		if cert.Subject.CommonName == m || slices.Contains(cert.DNSNames, m) {
			return m
		}
	}
	return ""
}

// tokenOK reports whether the headers carry the token.
func (s *Server) tokenOK(md metadata.MD) bool {
	if s.bearer == "" {
		return false
	}
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return false
	}
	sum := sha256.Sum256([]byte(vals[0]))
	return subtle.ConstantTimeCompare(sum[:], s.bearerSum[:]) == 1
}

// countDecodeErrors wraps a method handler so that a request refused while
// it is read — over the size limit, or not a message — is counted and
// logged.
func (s *Server) countDecodeErrors(h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		return h(srv, ctx, func(m any) error {
			err := dec(m)
			switch {
			case err == nil:
			case status.Code(err) == codes.ResourceExhausted:
				s.refusals.Refuse(callerOf(ctx).key, "request too large")
			default:
				s.refusals.Refuse(callerOf(ctx).key, "malformed request")
			}
			return err
		}, ic)
	}
}

// methodName is the site API method of a full method name, for the log:
// the name a caller sends is not logged as is.
func methodName(full string) string {
	switch full {
	case pb.Site_Send_FullMethodName:
		return "Send"
	case pb.Site_Status_FullMethodName:
		return "Status"
	case pb.Site_Health_FullMethodName:
		return "Health"
	case pb.Site_CachedCall_FullMethodName:
		return "CachedCall"
	case pb.Site_CachedWrite_FullMethodName:
		return "CachedWrite"
	case pb.Site_Tracking_FullMethodName:
		return "Tracking"
	case pb.Site_ListOperations_FullMethodName:
		return "ListOperations"
	case pb.Site_RetryOperation_FullMethodName:
		return "RetryOperation"
	case pb.Site_DiscardOperation_FullMethodName:
		return "DiscardOperation"
	}
	return "other"
}

// validKey reports whether k is a caller key a node could have made.
func validKey(k string) bool {
	if len(k) > maxKeyBytes+len("cert:") {
		return false
	}
	if !strings.HasPrefix(k, "ip:") && !strings.HasPrefix(k, "cert:") && !strings.HasPrefix(k, "node:") {
		return false
	}
	for i := range len(k) {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// clipKey returns s cut to maxKeyBytes, with every byte that is not
// printable ASCII replaced by '?'.
func clipKey(s string) string {
	if len(s) > maxKeyBytes {
		s = s[:maxKeyBytes]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}

// route decides where a call that changes the site is served: here (client nil), or at
// the leader through client with the returned outgoing context. Its errors
// are gRPC status errors.
func (s *Server) route(ctx context.Context) (client pb.SiteClient, out context.Context, addr string, err error) {
	self, addr := s.leader()
	if self {
		return nil, ctx, "", nil
	}
	if addr != "" {
		// Tell the caller where the leader is, so that its next call
		// skips this hop; answered or refused, the trailer goes back.
		// Outside a served call (no stream) there is no one to tell.
		_ = grpc.SetTrailer(ctx, metadata.Pairs(pb.LeaderKey, addr))
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(ForwardedKey)) > 0 {
		return nil, nil, "", status.Error(codes.Unavailable, "a forwarded request reached a node that does not lead (stale view of the leader); try again")
	}
	if addr == "" {
		return nil, nil, "", status.Error(codes.Unavailable, "no leader")
	}
	if !s.peerTLS && !guard.OnLoopback(addr) {
		// The token would cross the network in clear (the wiring refuses
		// such a configuration; this is the second lock).
		return nil, nil, "", status.Errorf(codes.Unavailable, "this node passes calls on in clear only on loopback, and the leader is at %s: call it", addr)
	}
	conn, err := s.peer(addr)
	if err != nil {
		return nil, nil, "", err
	}
	fwd := metadata.Pairs(ForwardedKey, "1", CallerKey, callerOf(ctx).key)
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

// toStatus maps an error of ports.Site or ports.Operations to a gRPC status
// error.
func (s *Server) toStatus(method string, err error) error {
	switch {
	case errors.Is(err, ports.ErrInvalid):
		return status.Error(codes.InvalidArgument, errtext.Sentence(err))
	case errors.Is(err, ports.ErrNotFound):
		return status.Error(codes.NotFound, errtext.Sentence(err))
	case errors.Is(err, ports.ErrConflict):
		return status.Error(codes.FailedPrecondition, errtext.Sentence(err))
	case errors.Is(err, ports.ErrUnauthenticated):
		return status.Error(codes.Unauthenticated, errtext.Sentence(err))
	case errors.Is(err, ports.ErrUnavailable):
		return status.Error(codes.Unavailable, errtext.Sentence(err))
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "canceled")
	}
	s.log.Error("site API: call failed", "method", method, "err", err)
	return status.Error(codes.Internal, "internal error (see the site node's log)")
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
