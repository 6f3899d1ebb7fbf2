package sitelink

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/siteline/outbox/adapters/sitelink/internal/pb"
	"github.com/siteline/outbox/ports"
)

// DefaultMaxRecvMsgBytes is the default of ServerConfig.MaxRecvMsgBytes.
const DefaultMaxRecvMsgBytes = 16 << 20

// stopGrace bounds how long Stop lets running calls finish.
const stopGrace = 10 * time.Second

// Site is one site central knows.
type Site struct {
	// ID is the site id: the SourceSite of its notifications, and the
	// Subject CommonName of its client certificate.
	ID string
	// Token is the site's bearer token in clear (cmd resolves env: and file:
	// references before); empty when the site authenticates by certificate
	// only.
	Token string
}

// ServerConfig configures a Server.
type ServerConfig struct {
	// Central serves the calls; required.
	Central ports.Central
	// Sites are the known sites; a caller not among them is refused.
	Sites []Site
	// TLS is the server's TLS configuration; nil serves plaintext, for
	// loopback and development only (a warning is logged). When ClientCAs is
	// set, client certificates are verified against it and a certificate's
	// Subject CommonName names its site; ClientAuth NoClientCert then becomes
	// VerifyClientCertIfGiven, so sites with a token only can still connect.
	// Without ClientCAs no client certificate is asked for (ClientAuth
	// VerifyClientCertIfGiven becomes NoClientCert): a certificate verified
	// against the system's public roots never names a site.
	TLS *tls.Config
	// Logger defaults to one that discards.
	Logger *slog.Logger
	// MaxRecvMsgBytes bounds one request; a larger one is refused before it
	// is decoded. 0 means DefaultMaxRecvMsgBytes.
	MaxRecvMsgBytes int
}

// Validate returns one precise error per broken rule, joined. No error text
// holds a token.
func (c ServerConfig) Validate() error {
	var errs []error
	if c.Central == nil {
		errs = append(errs, errors.New("sitelink: ServerConfig.Central is nil"))
	}
	if len(c.Sites) == 0 {
		errs = append(errs, errors.New("sitelink: no sites configured: every caller would be refused"))
	}
	verifiesCerts := c.TLS != nil && c.TLS.ClientCAs != nil
	ids := make(map[string]bool, len(c.Sites))
	tokens := make(map[[sha256.Size]byte]string, len(c.Sites))
	for i, s := range c.Sites {
		switch {
		case s.ID == "":
			errs = append(errs, fmt.Errorf("sitelink: sites[%d]: the id is empty", i))
		case ids[s.ID]:
			errs = append(errs, fmt.Errorf("sitelink: sites[%d]: site %q is listed twice", i, s.ID))
		}
		ids[s.ID] = true
		if s.Token == "" {
			if !verifiesCerts {
				errs = append(errs, fmt.Errorf("sitelink: site %q has no token and the server verifies no client certificates (TLS.ClientCAs is unset): it could never authenticate", s.ID))
			}
			continue
		}
		d := sha256.Sum256([]byte(s.Token))
		if other, dup := tokens[d]; dup {
			errs = append(errs, fmt.Errorf("sitelink: sites %q and %q have the same token: each site needs its own", other, s.ID))
		}
		tokens[d] = s.ID
	}
	if c.TLS != nil {
		if len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil && c.TLS.GetConfigForClient == nil {
			errs = append(errs, errors.New("sitelink: TLS has no server certificate (Certificates, GetCertificate or GetConfigForClient)"))
		}
		switch c.TLS.ClientAuth {
		case tls.RequestClientCert, tls.RequireAnyClientCert:
			errs = append(errs, fmt.Errorf("sitelink: TLS.ClientAuth %s does not verify client certificates; use VerifyClientCertIfGiven or RequireAndVerifyClientCert with ClientCAs", c.TLS.ClientAuth))
		case tls.RequireAndVerifyClientCert:
			if c.TLS.ClientCAs == nil {
				errs = append(errs, fmt.Errorf("sitelink: TLS.ClientAuth %s needs TLS.ClientCAs to verify the sites' certificates against", c.TLS.ClientAuth))
			}
		}
	}
	if c.MaxRecvMsgBytes < 0 {
		errs = append(errs, fmt.Errorf("sitelink: MaxRecvMsgBytes must be positive, got %d", c.MaxRecvMsgBytes))
	}
	return errors.Join(errs...)
}

// Server serves the site link: it authenticates each call and passes it to
// its ports.Central.
type Server struct {
	central   ports.Central
	sites     map[string]bool
	tokens    []siteToken
	log       *slog.Logger
	grpc      *grpc.Server
	plaintext bool
	warnOnce  sync.Once
	// grace bounds Stop's graceful phase (stopGrace; tests shorten it).
	grace time.Duration
}

// siteToken is the digest of one site's token.
type siteToken struct {
	digest [sha256.Size]byte
	site   string
}

// NewServer builds a Server from a valid cfg.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxRecvMsgBytes == 0 {
		cfg.MaxRecvMsgBytes = DefaultMaxRecvMsgBytes
	}
	s := &Server{
		central:   cfg.Central,
		sites:     make(map[string]bool, len(cfg.Sites)),
		log:       cfg.Logger,
		plaintext: cfg.TLS == nil,
		grace:     stopGrace,
	}
	for _, site := range cfg.Sites {
		s.sites[site.ID] = true
		if site.Token != "" {
			s.tokens = append(s.tokens, siteToken{digest: sha256.Sum256([]byte(site.Token)), site: site.ID})
		}
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxRecvMsgBytes),
		grpc.UnaryInterceptor(s.authenticate),
		// Clients ping idle connections (see Dial) to find dead ones.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if cfg.TLS != nil {
		tc := cfg.TLS.Clone()
		switch {
		case tc.ClientCAs == nil:
			tc.ClientAuth = tls.NoClientCert
		case tc.ClientAuth == tls.NoClientCert:
			tc.ClientAuth = tls.VerifyClientCertIfGiven
		}
		if tc.MinVersion < tls.VersionTLS12 {
			tc.MinVersion = tls.VersionTLS12
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	s.grpc = grpc.NewServer(opts...)
	pb.RegisterCentralServer(s.grpc, &service{s: s})
	return s, nil
}

// Serve accepts connections on lis until Stop. It returns nil after Stop, and
// the error that ended it otherwise.
func (s *Server) Serve(lis net.Listener) error {
	addr := lis.Addr().String()
	if s.plaintext {
		s.warnOnce.Do(func() {
			s.log.Warn("site link serving without TLS: tokens and notifications travel in clear; use this on loopback only",
				"addr", addr)
		})
	}
	s.log.Info("site link serving", "addr", addr, "tls", !s.plaintext, "sites", len(s.sites))
	if err := s.grpc.Serve(lis); err != nil {
		return fmt.Errorf("site link: serve %s: %w", addr, err)
	}
	return nil
}

// Stop stops accepting connections and lets the calls in progress finish for
// up to 10 seconds; then it ends those still running (their contexts are
// cancelled) and closes every connection. It returns when the server has
// stopped.
func (s *Server) Stop() {
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(s.grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.log.Warn("site link: calls still running after the grace period; stopping them", "grace", s.grace.String())
		s.grpc.Stop()
		<-done
	}
}

// siteKey is the context key of the authenticated site id.
type siteKey struct{}

// authenticate is the unary interceptor: it finds the calling site from its
// verified client certificate and its bearer token, refuses the call when
// they do not name one known site, and hands the site id to the handler.
func (s *Server) authenticate(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	var peerAddr, certCN string
	var hasCert bool
	if p, ok := peer.FromContext(ctx); ok {
		peerAddr = p.Addr.String()
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			// Only a verified chain counts: Validate refuses configurations
			// that accept unverified certificates, and this is the second lock.
			if chains := ti.State.VerifiedChains; len(chains) > 0 && len(chains[0]) > 0 {
				certCN, hasCert = chains[0][0].Subject.CommonName, true
			}
		}
	}
	refuse := func(reason string, attrs ...any) (any, error) {
		s.log.Warn("site link: authentication refused",
			append([]any{"reason", reason, "peer", peerAddr, "method", info.FullMethod}, attrs...)...)
		return nil, status.Error(codes.Unauthenticated, "unauthenticated: "+reason)
	}
	tokenSite, hasToken, err := s.tokenSite(ctx)
	if err != nil {
		return refuse(err.Error())
	}
	var site string
	switch {
	case !hasCert && !hasToken:
		return refuse("no verified client certificate and no bearer token")
	case hasCert && !s.sites[certCN]:
		return refuse("the client certificate names no known site", "cert_cn", clip(certCN))
	case hasToken && tokenSite == "":
		if hasCert {
			return refuse("the bearer token matches no site", "cert_cn", clip(certCN))
		}
		return refuse("the bearer token matches no site")
	case hasCert && hasToken && certCN != tokenSite:
		return refuse("the client certificate and the bearer token name different sites",
			"cert_cn", clip(certCN), "token_site", tokenSite)
	case hasCert:
		site = certCN
	default:
		site = tokenSite
	}
	return handler(context.WithValue(ctx, siteKey{}, site), req)
}

// tokenSite returns the site whose token the call carries ("" when none
// matches), and whether it carries one. Every site's digest is compared, in
// constant time, whatever matched before.
func (s *Server) tokenSite(ctx context.Context) (site string, present bool, err error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	switch len(vals) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", true, errors.New("more than one authorization header")
	}
	scheme, tok, ok := strings.Cut(vals[0], " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", true, errors.New("the authorization header is not a bearer token")
	}
	d := sha256.Sum256([]byte(tok))
	for _, t := range s.tokens {
		if subtle.ConstantTimeCompare(d[:], t.digest[:]) == 1 {
			site = t.site
		}
	}
	return site, true, nil
}

// toStatus maps an error of the Central to a gRPC status, once, at the edge.
// A failure that is not the caller's is logged here and crosses the link only
// as a generic text.
func (s *Server) toStatus(ctx context.Context, err error, op string, attrs ...any) error {
	switch {
	case errors.Is(err, ports.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ports.ErrUnauthenticated):
		return status.Error(codes.Unauthenticated, err.Error())
	case ctx.Err() != nil:
		s.log.Debug("site link: "+op+" abandoned by the caller", append(attrs, "err", err)...)
		return status.FromContextError(ctx.Err()).Err()
	default:
		s.log.Error("site link: "+op+" failed", append(attrs, "err", err)...)
		return status.Error(codes.Unavailable, "unavailable: central cannot serve the request now; the cause is in central's log")
	}
}

// clip shortens a caller-chosen text for a log line.
func clip(v string) string {
	const limit = 64
	if len(v) <= limit {
		return v
	}
	return v[:limit] + "…"
}

// service implements the generated gRPC service on behalf of a Server.
type service struct {
	pb.UnimplementedCentralServer
	s *Server
}

// Submit passes the batch to the Central in the name of the authenticated
// site.
func (h *service) Submit(ctx context.Context, req *pb.SubmitRequest) (*pb.SubmitResponse, error) {
	site, _ := ctx.Value(siteKey{}).(string)
	if site == "" { // unreachable behind authenticate; never serve as a trusted caller
		return nil, status.Error(codes.Unauthenticated, "unauthenticated: no site")
	}
	subs := submitRequestFromPB(req)
	res, err := h.s.central.Submit(ctx, ports.SubmitRequest{Site: site, Notifications: subs})
	if err != nil {
		return nil, h.s.toStatus(ctx, err, "submit", "site", site, "notifications", len(subs))
	}
	return submitResultToPB(res), nil
}

// Status answers each requested id, in the request's order.
func (h *service) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	site, _ := ctx.Value(siteKey{}).(string)
	if site == "" {
		return nil, status.Error(codes.Unauthenticated, "unauthenticated: no site")
	}
	ids := make([]string, len(req.GetIds()))
	for i, id := range req.GetIds() {
		ids[i] = string(id)
	}
	got, err := h.s.central.Status(ctx, ids)
	if err != nil {
		return nil, h.s.toStatus(ctx, err, "status", "site", site, "ids", len(ids))
	}
	out := &pb.StatusResponse{Statuses: make([]*pb.IDStatus, len(ids))}
	for i, id := range ids {
		st, ok := got[id]
		if !ok {
			st = ports.StatusUnknown
		}
		out.Statuses[i] = &pb.IDStatus{Id: req.GetIds()[i], Status: string(st)}
	}
	return out, nil
}
