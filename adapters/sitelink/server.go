package sitelink

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/sitelink/internal/pb"
	"github.com/siteline/outbox/ports"
)

// Defaults of Limits.
const (
	// DefaultMaxRecvMsgBytes bounds one request: a forwarder's batch holds
	// at most 4 MiB of subjects, bodies and type data (core.SiteConfig's
	// ForwardBatchBytes), plus ids and provenance of at most a few hundred
	// bytes a row.
	DefaultMaxRecvMsgBytes = 6 << 20
	// DefaultMaxCallsPerSite bounds one site's calls in progress at once: a
	// site's forwarder makes one Submit at a time, its leader one
	// ReportOperations at a time, each of its nodes one Sync (a long poll)
	// and a few Status calls.
	DefaultMaxCallsPerSite = 16
	// DefaultCallTimeout bounds one call at the server: past it the call's
	// context ends (a Sync waits well below it).
	DefaultCallTimeout = time.Minute
	// DefaultConnsPerAddress and DefaultConnsTotal bound the connections
	// open at once from one client address and in all. A site node keeps
	// one connection; 32 lets a dozen sites share one NAT address.
	DefaultConnsPerAddress = 32
	DefaultConnsTotal      = 1024
	// DefaultQuotaRowsPerSecond and DefaultQuotaBytesPerSecond are a site's
	// ingest quota (see Quota).
	DefaultQuotaRowsPerSecond  = 20000
	DefaultQuotaBytesPerSecond = 32 << 20
)

// quotaBurst is how many seconds of its quota a site may spend at once.
const quotaBurst = 2

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

// Quota is the ingest quota of each site: a token bucket of rows and one of
// bytes, each refilled at its rate and holding two seconds of it. A Submit
// costs its notifications and its message's bytes, a Status its ids and its
// message's bytes; a request larger than a bucket costs the whole bucket.
// Past the quota a call is refused with ResourceExhausted and a retry delay,
// before anything of it is stored (and, when the bucket is already empty,
// before its message is read).
type Quota struct {
	// RowsPerSecond is the notifications (and status ids) a site may send
	// per second on average; 0 means DefaultQuotaRowsPerSecond.
	RowsPerSecond float64
	// BytesPerSecond is the request bytes a site may send per second on
	// average; 0 means DefaultQuotaBytesPerSecond.
	BytesPerSecond float64
}

// Limits bound what the link's callers may make a Server spend. Zero
// fields take the defaults (WithDefaults).
type Limits struct {
	// GRPC bounds each connection and request: the message size (default
	// DefaultMaxRecvMsgBytes), streams, handshake, idle and ping times
	// (guard's defaults).
	GRPC guard.GRPCLimits
	// Conns bounds the connections open at once per client address and in
	// all (defaults DefaultConnsPerAddress and DefaultConnsTotal).
	Conns guard.ConnLimits
	// Quota is each site's ingest quota.
	Quota Quota
	// MaxCallsPerSite bounds one site's calls in progress at once; a call
	// past it is refused with ResourceExhausted before its message is read.
	// Default DefaultMaxCallsPerSite.
	MaxCallsPerSite int
	// MaxSyncsPerSite bounds one site's Syncs in progress at once: the
	// long polls, which count among its MaxCallsPerSite too but may hold
	// at most this many of them, so that a site's Submits always find a
	// slot. It must be below MaxCallsPerSite; default half of it (a site
	// of up to eight nodes, each holding one Sync).
	MaxSyncsPerSite int
	// CallTimeout bounds one call at the server (default
	// DefaultCallTimeout, at least minCallTimeout); a Sync's wait ends
	// syncAnswerMargin before it.
	CallTimeout time.Duration
}

// minCallTimeout is the least CallTimeout Validate accepts: a Sync must
// be able to wait a little.
const minCallTimeout = 5 * time.Second

// MaxRecvMsgBytesLimit is the largest GRPC.MaxRecvMsgBytes Validate
// accepts: a request is held in memory whole while it is decoded.
const MaxRecvMsgBytesLimit = 256 << 20

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	if l.GRPC.MaxRecvMsgBytes == 0 {
		l.GRPC.MaxRecvMsgBytes = DefaultMaxRecvMsgBytes
	}
	l.GRPC = l.GRPC.WithDefaults()
	if l.Conns.PerAddress == 0 {
		l.Conns.PerAddress = DefaultConnsPerAddress
	}
	if l.Conns.Total == 0 {
		l.Conns.Total = DefaultConnsTotal
	}
	if l.Quota.RowsPerSecond == 0 {
		l.Quota.RowsPerSecond = DefaultQuotaRowsPerSecond
	}
	if l.Quota.BytesPerSecond == 0 {
		l.Quota.BytesPerSecond = DefaultQuotaBytesPerSecond
	}
	if l.MaxCallsPerSite == 0 {
		l.MaxCallsPerSite = DefaultMaxCallsPerSite
	}
	if l.MaxSyncsPerSite == 0 {
		l.MaxSyncsPerSite = max(l.MaxCallsPerSite/2, 1)
	}
	if l.CallTimeout == 0 {
		l.CallTimeout = DefaultCallTimeout
	}
	return l
}

// Validate returns one *ports.FieldError per broken rule, joined, each on
// the Go path of its field ("Conns.Total"). It checks l as given, where a
// zero is no default but a value: call it on l.WithDefaults() to check what
// will run.
func (l Limits) Validate() error {
	var fe ports.FieldErrors
	fe.Nest("GRPC", l.GRPC.Validate())
	if l.GRPC.MaxRecvMsgBytes > MaxRecvMsgBytesLimit {
		fe.Add("GRPC.MaxRecvMsgBytes", "must be at most %d (256 MiB), got %d", MaxRecvMsgBytesLimit, l.GRPC.MaxRecvMsgBytes)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"Conns.PerAddress", l.Conns.PerAddress}, {"Conns.Total", l.Conns.Total}, {"MaxCallsPerSite", l.MaxCallsPerSite},
		{"MaxSyncsPerSite", l.MaxSyncsPerSite}} {
		if f.v <= 0 {
			fe.Add(f.name, "must be positive, got %d (leave it out for the default)", f.v)
		}
	}
	if l.MaxSyncsPerSite > 0 && l.MaxCallsPerSite > 0 && l.MaxSyncsPerSite >= l.MaxCallsPerSite {
		fe.Add("MaxSyncsPerSite", "must be below MaxCallsPerSite (%d), so that a site's long polls leave it a slot for its other calls, got %d",
			l.MaxCallsPerSite, l.MaxSyncsPerSite)
	}
	if l.CallTimeout < minCallTimeout {
		fe.Add("CallTimeout", "must be at least %s, got %s (leave it out for the default)", minCallTimeout, l.CallTimeout)
	}
	if l.Conns.PerAddress > 0 && l.Conns.Total > 0 {
		fe.Nest("Conns", l.Conns.Validate())
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"Quota.RowsPerSecond", l.Quota.RowsPerSecond}, {"Quota.BytesPerSecond", l.Quota.BytesPerSecond}} {
		if !(f.v > 0) || math.IsInf(f.v, 0) {
			fe.Add(f.name, "must be a positive number, got %v (leave it out for the default)", f.v)
		}
	}
	return fe.Err()
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
	// Limits bound what one caller may make the server spend: message
	// size, streams, handshake, idle and ping times, connections, calls in
	// progress and each site's quota.
	Limits Limits
	// Refusals logs and counts the refused calls and connections; nil makes
	// one (entrance "site_link") that logs to Logger once a minute per
	// caller. Register it (Server.Refusals) on a Prometheus registry for the
	// metric outbox_refusals_total.
	Refusals *guard.Refusals
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
	if err := c.Limits.WithDefaults().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("sitelink: %w", ports.PrefixFields("Limits", err)))
	}
	return errors.Join(errs...)
}

// Server serves the site link: it authenticates each call before reading
// its message, bounds what each caller may spend, and passes the call to its
// ports.Central.
type Server struct {
	central   ports.Central
	sites     map[string]bool
	tokens    []siteToken
	log       *slog.Logger
	grpc      *grpc.Server
	plaintext bool
	warnOnce  sync.Once
	refusals  *guard.Refusals
	conns     guard.ConnLimits
	quota     *quota
	calls     *callSlots
	syncs     *callSlots
	// callTimeout bounds each call (Limits.CallTimeout).
	callTimeout time.Duration
	// stopping ends when Stop begins: the Syncs waiting then end at once
	// (Unavailable), so that their sites move to another central.
	stopping    context.Context
	stopWaiting context.CancelFunc
	// stopped is set by Stop: a Serve that finds the server stopped
	// returns nil.
	stopped atomic.Bool
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
	cfg.Limits = cfg.Limits.WithDefaults()
	if cfg.Refusals == nil {
		cfg.Refusals = guard.NewRefusals("site_link", cfg.Logger, 0)
	}
	s := &Server{
		central:   cfg.Central,
		sites:     make(map[string]bool, len(cfg.Sites)),
		log:       cfg.Logger,
		plaintext: cfg.TLS == nil,
		refusals:  cfg.Refusals,
		conns:     cfg.Limits.Conns,
		quota:     newQuota(cfg.Limits.Quota, cfg.Limits.GRPC.MaxRecvMsgBytes),
		calls:     &callSlots{max: cfg.Limits.MaxCallsPerSite, busy: make(map[string]int)},
		syncs:     &callSlots{max: cfg.Limits.MaxSyncsPerSite, busy: make(map[string]int)},
		grace:     stopGrace,

		callTimeout: cfg.Limits.CallTimeout,
	}
	s.stopping, s.stopWaiting = context.WithCancel(context.Background())
	for _, site := range cfg.Sites {
		s.sites[site.ID] = true
		if site.Token != "" {
			s.tokens = append(s.tokens, siteToken{digest: sha256.Sum256([]byte(site.Token)), site: site.ID})
		}
	}
	var creds credentials.TransportCredentials
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
		creds = credentials.NewTLS(tc)
	}
	opts := append(cfg.Limits.GRPC.ServerOptions(creds, cfg.Refusals),
		// Who calls, and whether it may call now, is decided on the
		// headers, before any message is read.
		grpc.InTapHandle(s.tap),
		grpc.UnaryInterceptor(s.intercept),
	)
	s.grpc = grpc.NewServer(opts...)
	pb.RegisterCentralServer(s.grpc, &service{s: s})
	return s, nil
}

// Refusals returns the refusal log and counter of the link, a
// prometheus.Collector of outbox_refusals_total{entrance="site_link"}.
func (s *Server) Refusals() *guard.Refusals { return s.refusals }

// Serve accepts connections on lis until Stop, closing at once those past
// the connection limits. It returns nil after Stop, and the error that ended
// it otherwise.
func (s *Server) Serve(lis net.Listener) error {
	addr := lis.Addr().String()
	if s.plaintext {
		s.warnOnce.Do(func() {
			s.log.Warn("site link serving without TLS: tokens and notifications travel in clear; use this on loopback only",
				"addr", addr)
		})
	}
	s.log.Info("site link serving", "addr", addr, "tls", !s.plaintext, "sites", len(s.sites),
		"conns_per_address", s.conns.PerAddress, "conns_total", s.conns.Total,
		"quota_rows_per_second", int64(s.quota.rowRate), "quota_bytes_per_second", int64(s.quota.byteRate))
	if err := s.grpc.Serve(guard.LimitListener(lis, s.conns, s.refusals)); err != nil {
		if s.stopped.Load() && errors.Is(err, grpc.ErrServerStopped) {
			// Stop came first (a shutdown right after the start).
			return nil
		}
		return fmt.Errorf("site link: serve %s: %w", addr, err)
	}
	return nil
}

// Stop stops accepting connections and lets the calls in progress finish for
// up to 10 seconds; then it ends those still running (their contexts are
// cancelled) and closes every connection. It returns when the server has
// stopped.
func (s *Server) Stop() {
	s.stopped.Store(true)
	s.stopWaiting()
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

// The reasons of refusals: fixed texts, the values of the metric's label.
const (
	reasonNoCredentials = "no credentials"
	reasonBadHeader     = "malformed authorization"
	reasonUnknownToken  = "unknown token"
	reasonUnknownCert   = "unknown certificate"
	reasonDisagree      = "certificate and token disagree"
	reasonOverQuota     = "over quota"
	reasonTooManyCalls  = "too many calls"
	reasonTooManySyncs  = "too many syncs"
)

// methodSync is the full name of the Sync call, the link's long poll.
const methodSync = "/outbox.link.v1.Central/Sync"

// syncRetryWait is the wait a Sync refused for the site's Syncs in
// progress asks for.
const syncRetryWait = 5 * time.Second

// tap runs on a new call's headers, before its message is read: it refuses
// a caller that does not prove it is a known site (Unauthenticated), a site
// whose quota is spent, and a site with too many calls in progress
// (ResourceExhausted with a retry delay). The site's call slot is given back
// when the call ends.
func (s *Server) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	p, _ := peer.FromContext(ctx)
	site, err := s.identify(p, info.Header, info.FullMethodName)
	if err != nil {
		return nil, err
	}
	if wait := s.quota.emptyFor(site); wait > 0 {
		s.refusals.Refuse("site:"+site, reasonOverQuota, "site", site, "method", info.FullMethodName)
		return nil, retryLater(wait, "resource exhausted: site "+site+" is over its ingest quota")
	}
	if !s.calls.acquire(site) {
		s.refusals.Refuse("site:"+site, reasonTooManyCalls, "site", site, "method", info.FullMethodName)
		return nil, retryLater(time.Second, fmt.Sprintf("resource exhausted: site %s has %d calls in progress already", site, s.calls.max))
	}
	if info.FullMethodName == methodSync {
		if !s.syncs.acquire(site) {
			s.calls.release(site)
			s.refusals.Refuse("site:"+site, reasonTooManySyncs, "site", site, "method", info.FullMethodName)
			return nil, retryLater(syncRetryWait, fmt.Sprintf("resource exhausted: site %s has %d syncs in progress already", site, s.syncs.max))
		}
		context.AfterFunc(ctx, func() { s.syncs.release(site) })
	}
	ctx = context.WithValue(ctx, siteKey{}, site)
	// The call's context ends when the call does, however it ends.
	context.AfterFunc(ctx, func() { s.calls.release(site) })
	return ctx, nil
}

// intercept is the second lock, behind tap: it authenticates the call again
// (it must name the site tap found), then charges the decoded request to the
// site's quota and refuses it, storing nothing, when the quota is spent.
func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	p, _ := peer.FromContext(ctx)
	md, _ := metadata.FromIncomingContext(ctx)
	site, err := s.identify(p, md, info.FullMethod)
	if err != nil {
		return nil, err
	}
	if tapped, _ := ctx.Value(siteKey{}).(string); tapped != site {
		s.refusals.Refuse(callerOf(p), reasonDisagree, "method", info.FullMethod)
		return nil, status.Error(codes.Unauthenticated, "unauthenticated: the call's identity changed")
	}
	var rows int
	switch r := req.(type) {
	case *pb.SubmitRequest:
		rows = len(r.GetNotifications())
	case *pb.StatusRequest:
		rows = len(r.GetIds())
	case *pb.ReportOperationsRequest:
		rows = len(r.GetOps())
	case *pb.SyncRequest:
		rows = 1 + len(r.GetAnswers())
	}
	size := 0
	if m, ok := req.(proto.Message); ok {
		size = proto.Size(m)
	}
	if wait := s.quota.take(site, rows, size); wait > 0 {
		s.refusals.Refuse("site:"+site, reasonOverQuota, "site", site, "method", info.FullMethod,
			"rows", rows, "bytes", size)
		return nil, retryLater(wait, fmt.Sprintf("resource exhausted: site %s is over its ingest quota (%d rows, %d bytes asked)", site, rows, size))
	}
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	return handler(ctx, req)
}

// identify finds the calling site from its verified client certificate and
// its bearer token. When they do not name one known site it counts and logs
// the refusal (never a token) and returns an Unauthenticated status.
func (s *Server) identify(p *peer.Peer, md metadata.MD, method string) (string, error) {
	var certCN string
	var hasCert bool
	if p != nil {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			// Only a verified chain counts: Validate refuses configurations
			// that accept unverified certificates, and this is the second lock.
			if chains := ti.State.VerifiedChains; len(chains) > 0 && len(chains[0]) > 0 {
				certCN, hasCert = chains[0][0].Subject.CommonName, true
			}
		}
	}
	refuse := func(reason, text string, attrs ...any) (string, error) {
		s.refusals.Refuse(callerOf(p), reason, append([]any{"method", clip(method)}, attrs...)...)
		return "", status.Error(codes.Unauthenticated, "unauthenticated: "+text)
	}
	tokenSite, hasToken, err := s.tokenSite(md)
	if err != nil {
		return refuse(reasonBadHeader, err.Error())
	}
	switch {
	case !hasCert && !hasToken:
		return refuse(reasonNoCredentials, "no verified client certificate and no bearer token")
	case hasCert && !s.sites[certCN]:
		return refuse(reasonUnknownCert, "the client certificate names no known site", "cert_cn", clip(certCN))
	case hasToken && tokenSite == "":
		if hasCert {
			return refuse(reasonUnknownToken, "the bearer token matches no site", "cert_cn", clip(certCN))
		}
		return refuse(reasonUnknownToken, "the bearer token matches no site")
	case hasCert && hasToken && certCN != tokenSite:
		return refuse(reasonDisagree, "the client certificate and the bearer token name different sites",
			"cert_cn", clip(certCN), "token_site", tokenSite)
	case hasCert:
		return certCN, nil
	default:
		return tokenSite, nil
	}
}

// callerOf is the caller key of refusals: the peer's address without its
// port, an IPv6 address by its /64 (guard.CallerKey).
func callerOf(p *peer.Peer) string {
	if p == nil {
		return "(unknown)"
	}
	return guard.CallerKey(p.Addr)
}

// tokenSite returns the site whose token md carries ("" when none matches),
// and whether it carries one. Every site's digest is compared, in constant
// time, whatever matched before.
func (s *Server) tokenSite(md metadata.MD) (site string, present bool, err error) {
	vals := md.Get("authorization")
	switch len(vals) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", true, errors.New("more than one authorization header")
	}
	tok, ok := bearerToken(vals[0])
	if !ok {
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

// bearerToken returns the token of an "authorization" header value of the
// form "Bearer <token>" (the scheme in any case, spaces around the token
// ignored), and whether it is one.
func bearerToken(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(header, " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", false
	}
	return tok, true
}

// retryLater is a ResourceExhausted status that asks the caller to repeat
// the call after wait (google.rpc.RetryInfo), which the Client reads back as
// a *ports.RetryLaterError.
func retryLater(wait time.Duration, msg string) error {
	st := status.New(codes.ResourceExhausted, msg)
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); err == nil {
		st = d
	}
	return st.Err()
}

// quota holds every site's two token buckets.
type quota struct {
	rowRate, byteRate   float64
	rowBurst, byteBurst int
	rows, bytes         *guard.KeyedLimiter
}

// newQuota builds the buckets of q; the byte bucket holds at least one
// message of maxMsg bytes.
func newQuota(q Quota, maxMsg int) *quota {
	burst := func(rate float64) int { return int(min(max(rate*quotaBurst, 1), math.MaxInt32)) }
	qu := &quota{rowRate: q.RowsPerSecond, byteRate: q.BytesPerSecond,
		rowBurst: burst(q.RowsPerSecond), byteBurst: burst(q.BytesPerSecond)}
	qu.rows = guard.NewKeyedLimiter(qu.rowRate, qu.rowBurst)
	qu.bytes = guard.NewKeyedLimiter(qu.byteRate, qu.byteBurst)
	return qu
}

// minRetryWait is the least wait a refusal asks for, so that a caller never
// comes back at once.
const minRetryWait = 10 * time.Millisecond

// emptyFor returns how long site must wait before either of its buckets
// holds a token again; 0 when both do.
func (q *quota) emptyFor(site string) time.Duration {
	w := max(q.rows.RetryAfter(site, 1), q.bytes.RetryAfter(site, 1))
	if w > 0 {
		return max(w, minRetryWait)
	}
	return 0
}

// take spends rows and size bytes of site's quota and returns 0, or spends
// nothing and returns how long to wait before the request fits. A request
// larger than a bucket costs the whole bucket.
func (q *quota) take(site string, rows, size int) time.Duration {
	rows, size = min(rows, q.rowBurst), min(size, q.byteBurst)
	if w := max(q.rows.RetryAfter(site, rows), q.bytes.RetryAfter(site, size)); w > 0 {
		return max(w, minRetryWait)
	}
	// Two calls of one site may race between the check and the spending;
	// the loser waits, and the rows it spent are a small overdraft.
	if !q.rows.AllowN(site, rows) || !q.bytes.AllowN(site, size) {
		return max(q.rows.RetryAfter(site, rows), q.bytes.RetryAfter(site, size), minRetryWait)
	}
	return 0
}

// callSlots counts each site's calls in progress.
type callSlots struct {
	max  int
	mu   sync.Mutex
	busy map[string]int // only known sites: the map stays bounded
}

func (c *callSlots) acquire(site string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy[site] >= c.max {
		return false
	}
	c.busy[site]++
	return true
}

func (c *callSlots) release(site string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy[site]--; c.busy[site] <= 0 {
		delete(c.busy, site)
	}
}

// toStatus maps an error of the Central to a gRPC status, once, at the edge.
// A failure that is not the caller's is logged here and crosses the link only
// as a generic text.
func (s *Server) toStatus(ctx context.Context, err error, op string, attrs ...any) error {
	var later *ports.RetryLaterError
	switch {
	case errors.Is(err, ports.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ports.ErrUnauthenticated):
		return status.Error(codes.Unauthenticated, err.Error())
	case errors.As(err, &later):
		return retryLater(max(later.After, minRetryWait), "resource exhausted: "+later.Reason)
	case ctx.Err() != nil:
		s.log.Debug("site link: "+op+" abandoned by the caller", append(attrs, "err", err)...)
		return status.FromContextError(ctx.Err()).Err()
	default:
		s.log.Error("site link: "+op+" failed", append(attrs, "err", err)...)
		return status.Error(codes.Unavailable, "central cannot serve the request now; the cause is in central's log")
	}
}

// clip shortens a caller-chosen text for a log line, keeping it valid UTF-8.
func clip(v string) string {
	const limit = 64
	if len(v) <= limit {
		return strings.ToValidUTF8(v, "\uFFFD")
	}
	return strings.ToValidUTF8(v[:limit], "\uFFFD") + "…"
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
	if site == "" { // unreachable behind tap and intercept; never serve as a trusted caller
		return nil, status.Error(codes.Unauthenticated, "unauthenticated: no site")
	}
	subs := submitRequestFromPB(req)
	res, err := h.s.central.Submit(ctx, ports.SubmitRequest{Site: site, Notifications: subs})
	if err != nil {
		return nil, h.s.toStatus(ctx, err, "submit", "site", site, "notifications", len(subs))
	}
	return submitResultToPB(res), nil
}

// Status answers each requested id, in the request's order, for the
// authenticated site's own notifications only.
func (h *service) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	site, _ := ctx.Value(siteKey{}).(string)
	if site == "" {
		return nil, status.Error(codes.Unauthenticated, "unauthenticated: no site")
	}
	sreq := statusRequestFromPB(site, req)
	got, err := h.s.central.Status(ctx, sreq)
	if err != nil {
		return nil, h.s.toStatus(ctx, err, "status", "site", site, "ids", len(sreq.IDs))
	}
	return statusResponseToPB(req, got), nil
}

// ReportOperations passes the report to the Central in the name of the
// authenticated site. A report over ports.MaxSiteCallReport rows is
// refused whole, before the Central is called.
func (h *service) ReportOperations(ctx context.Context, req *pb.ReportOperationsRequest) (*pb.ReportOperationsResponse, error) {
	site, _ := ctx.Value(siteKey{}).(string)
	if site == "" {
		return nil, status.Error(codes.Unauthenticated, "unauthenticated: no site")
	}
	if n := len(req.GetOps()); n > ports.MaxSiteCallReport {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf(
			"a report of %d operations is over the limit of %d: invalid argument", n, ports.MaxSiteCallReport))
	}
	rep := opReportFromPB(site, req)
	if err := h.s.central.ReportOperations(ctx, rep); err != nil {
		return nil, h.s.toStatus(ctx, err, "report operations", "site", site, "operations", len(rep.Ops), "feed", rep.Feed != nil)
	}
	return &pb.ReportOperationsResponse{}, nil
}

// syncAnswerMargin is how long before the end of its call (the server's
// CallTimeout, the caller's deadline) a Sync stops waiting, so that it
// answers before either gives up.
const syncAnswerMargin = 2 * time.Second

// syncWait bounds the wait a Sync asks for: at most ports.MaxSyncWait,
// and syncAnswerMargin before the call's timeout and the caller's
// deadline; never negative.
func (s *Server) syncWait(ctx context.Context, asked time.Duration) time.Duration {
	w := min(asked, ports.MaxSyncWait, s.callTimeout-syncAnswerMargin)
	if dl, ok := ctx.Deadline(); ok {
		w = min(w, time.Until(dl)-syncAnswerMargin)
	}
	return max(w, 0)
}

// Sync passes a node's Sync to the Central in the name of the
// authenticated site, its wait bounded (syncWait). When the server stops,
// a Sync still waiting ends at once with Unavailable, which the client
// repeats at another central.
func (h *service) Sync(ctx context.Context, req *pb.SyncRequest) (*pb.SyncResponse, error) {
	site, _ := ctx.Value(siteKey{}).(string)
	if site == "" {
		return nil, status.Error(codes.Unauthenticated, "unauthenticated: no site")
	}
	sreq := syncRequestFromPB(site, req)
	sreq.Wait = h.s.syncWait(ctx, sreq.Wait)
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(h.s.stopping, cancel)()
	ans, err := h.s.central.Sync(callCtx, sreq)
	if ctx.Err() == nil && h.s.stopping.Err() != nil && (err != nil || len(ans.Commands) == 0 && ans.Feed == nil) {
		// Cut short by Stop (the Central may answer that empty or with
		// an error): the client repeats it at another central.
		return nil, status.Error(codes.Unavailable, "central is stopping")
	}
	if err != nil {
		return nil, h.s.toStatus(ctx, err, "sync", "site", site, "node", clip(sreq.Health.Node), "answers", len(sreq.Answers))
	}
	return syncAnswerToPB(ans), nil
}
