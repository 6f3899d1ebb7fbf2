package sitelink

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/metadata"

	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/plugins/channel/v1/plugintest"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/centraltest"
)

// waitLimit bounds every wait of these tests: generous, for busy machines.
const waitLimit = 30 * time.Second

// Tokens of the test sites. The tests check that none reaches a log line or
// an error text.
const (
	tokenA = "tok-A-5f2c8e1b9d4a7c3e"
	tokenB = "tok-B-0a9b8c7d6e5f4a3b"
)

// testSites are central's sites in these tests: A and B hold tokens, C
// authenticates by certificate only.
var testSites = []Site{{ID: "site-a", Token: tokenA}, {ID: "site-b", Token: tokenB}, {ID: "site-c"}}

// tokenSites are the sites of a plaintext server, which verifies no
// certificates: A and B.
var tokenSites = testSites[:2]

// newCore returns a core.Service on an empty memory store.
func newCore(t testing.TB) (*core.Service, *memstore.Store) {
	t.Helper()
	store := memstore.New()
	dir, err := memdir.New(centraltest.Lists, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := core.New(core.Config{}, core.Deps{Store: store, Audit: store, Directory: dir,
		Channels: ports.ChannelMap{}, SiteCalls: store})
	if err != nil {
		t.Fatal(err)
	}
	return svc, store
}

// logBuffer collects a logger's lines; safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// startServer serves cfg on a fresh loopback port until the test ends and
// returns the server and its address.
func startServer(t testing.TB, cfg ServerConfig) (*Server, string) {
	t.Helper()
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv, lis.Addr().String()
}

// submitted is the answer of a Submit made in the background.
type submitted struct {
	res ports.SubmitResult
	err error
}

// submitInBackground submits sub through c in a goroutine of its own; the
// answer comes on the channel (buffered: the goroutine never blocks).
func submitInBackground(t *testing.T, c *Client, sub ports.Submission) <-chan submitted {
	answers := make(chan submitted, 1)
	go func() {
		res, err := c.Submit(ctx(t), ports.SubmitRequest{Notifications: []ports.Submission{sub}})
		answers <- submitted{res, err}
	}()
	return answers
}

func dial(t testing.TB, cfg ClientConfig) *Client {
	t.Helper()
	c, err := Dial(cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// spy is a ports.Central that counts the calls that reach it.
type spy struct {
	ports.Central
	submits, statuses, reports, syncs atomic.Int64
}

func (s *spy) ReportOperations(ctx context.Context, req ports.OpReport) error {
	s.reports.Add(1)
	return s.Central.ReportOperations(ctx, req)
}

func (s *spy) Sync(ctx context.Context, req ports.SyncRequest) (ports.SyncAnswer, error) {
	s.syncs.Add(1)
	return s.Central.Sync(ctx, req)
}

func (s *spy) Submit(ctx context.Context, req ports.SubmitRequest) (ports.SubmitResult, error) {
	s.submits.Add(1)
	return s.Central.Submit(ctx, req)
}

func (s *spy) Status(ctx context.Context, req ports.StatusRequest) (map[string]ports.Status, error) {
	s.statuses.Add(1)
	return s.Central.Status(ctx, req)
}

// ctx returns a context that ends with the test or after waitLimit.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return c
}

// TestContractTLSClientCert runs the Central contract through the link over
// TLS, the site authenticated by its client certificate.
func TestContractTLSClientCert(t *testing.T) {
	ca := newCA(t, "outbox test CA")
	serverTLS := ca.serverTLS(t)
	siteCert := ca.clientCert(t, "site-c")
	centraltest.Exercise(t, func(t *testing.T) centraltest.Target {
		svc, store := newCore(t)
		_, addr := startServer(t, ServerConfig{Central: svc, Sites: testSites, TLS: serverTLS})
		c := dial(t, ClientConfig{Addr: addr, TLS: ca.clientTLS(siteCert)})
		return centraltest.Target{Central: c, Site: "site-c", Stored: centraltest.FromStore(store), Trusted: svc}
	})
}

// TestContractPlaintextToken runs the Central contract through the link in
// plaintext on loopback, the site authenticated by its token.
func TestContractPlaintextToken(t *testing.T) {
	centraltest.Exercise(t, func(t *testing.T) centraltest.Target {
		svc, store := newCore(t)
		_, addr := startServer(t, ServerConfig{Central: svc, Sites: tokenSites})
		c := dial(t, ClientConfig{Addr: addr, Token: tokenB})
		return centraltest.Target{Central: c, Site: "site-b", Stored: centraltest.FromStore(store), Trusted: svc}
	})
}

// TestSitesContractThroughLink runs the contract of a site's cached
// operations (ReportOperations, Sync) through the link over TLS, against
// the real core and its mirror in memory.
func TestSitesContractThroughLink(t *testing.T) {
	ca := newCA(t, "outbox test CA")
	serverTLS := ca.serverTLS(t)
	siteCert := ca.clientCert(t, "site-c")
	centraltest.ExerciseSites(t, func(t *testing.T) centraltest.SitesTarget {
		svc, store := newCore(t)
		_, addr := startServer(t, ServerConfig{Central: svc, Sites: testSites, TLS: serverTLS})
		c := dial(t, ClientConfig{Addr: addr, TLS: ca.clientTLS(siteCert)})
		return centraltest.SitesTarget{Central: c, Site: "site-c", Mirror: store}
	})
}

// TestAuthentication checks who gets in: every refused caller gets
// ErrUnauthenticated (or, when the TLS handshake itself fails,
// ErrUnavailable), the Central is never called, nothing is stored, and the
// server logs one line naming the peer, never a token.
func TestAuthentication(t *testing.T) {
	ca := newCA(t, "outbox test CA")
	rogue := newCA(t, "rogue CA")
	serverTLS := ca.serverTLS(t)
	certA, certB, certC := ca.clientCert(t, "site-a"), ca.clientCert(t, "site-b"), ca.clientCert(t, "site-c")
	certUnknown := ca.clientCert(t, "site-x")
	rogueA := rogue.clientCert(t, "site-a")

	cases := []struct {
		name      string
		plaintext bool
		client    func(addr string) ClientConfig
		// header, when set, is sent as the authorization metadata by hand.
		header string
		// site is who gets in; "" means refused.
		site string
		// handshake means the TLS handshake fails: the call never reaches
		// the interceptor, so no refusal is logged.
		handshake bool
	}{
		{name: "PlaintextNoCredentials", plaintext: true,
			client: func(a string) ClientConfig { return ClientConfig{Addr: a} }},
		{name: "TLSNoCredentials",
			client: func(a string) ClientConfig { return ClientConfig{Addr: a, TLS: ca.clientTLS()} }},
		{name: "PlaintextWrongToken", plaintext: true,
			client: func(a string) ClientConfig { return ClientConfig{Addr: a, Token: "tok-A-wrong-guess"} }},
		{name: "TLSWrongToken",
			client: func(a string) ClientConfig {
				return ClientConfig{Addr: a, Token: "tok-A-wrong-guess", TLS: ca.clientTLS()}
			}},
		{name: "NotBearer", plaintext: true, header: "Basic " + tokenA,
			client: func(a string) ClientConfig { return ClientConfig{Addr: a} }},
		{name: "CertificateFromUnknownCA", handshake: true,
			client: func(a string) ClientConfig {
				// Sent whatever CAs central asks for, so that central has
				// to verify it (and refuse it in the handshake).
				cfg := ca.clientTLS()
				cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &rogueA, nil }
				return ClientConfig{Addr: a, Token: tokenA, TLS: cfg}
			}},
		{name: "CertificateOfUnknownSite",
			client: func(a string) ClientConfig { return ClientConfig{Addr: a, TLS: ca.clientTLS(certUnknown)} }},
		{name: "CertificateOfUnknownSiteWithValidToken",
			client: func(a string) ClientConfig {
				return ClientConfig{Addr: a, Token: tokenA, TLS: ca.clientTLS(certUnknown)}
			}},
		{name: "TokenOfAWithCertificateOfB",
			client: func(a string) ClientConfig { return ClientConfig{Addr: a, Token: tokenA, TLS: ca.clientTLS(certB)} }},
		{name: "ValidCertificateWithWrongToken",
			client: func(a string) ClientConfig {
				return ClientConfig{Addr: a, Token: "tok-A-wrong-guess", TLS: ca.clientTLS(certA)}
			}},

		{name: "PlaintextToken", plaintext: true, site: "site-a",
			client: func(a string) ClientConfig { return ClientConfig{Addr: a, Token: tokenA} }},
		{name: "TLSTokenOnly", site: "site-b",
			client: func(a string) ClientConfig { return ClientConfig{Addr: a, Token: tokenB, TLS: ca.clientTLS()} }},
		{name: "CertificateOnly", site: "site-c",
			client: func(a string) ClientConfig { return ClientConfig{Addr: a, TLS: ca.clientTLS(certC)} }},
		{name: "CertificateAndTokenOfOneSite", site: "site-a",
			client: func(a string) ClientConfig { return ClientConfig{Addr: a, Token: tokenA, TLS: ca.clientTLS(certA)} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc, store := newCore(t)
			central := &spy{Central: svc}
			var logs logBuffer
			cfg := ServerConfig{Central: central, Sites: tokenSites, Logger: logs.logger(),
				Refusals: guard.NewRefusals("site_link", logs.logger(), time.Hour)}
			if !tc.plaintext {
				cfg.Sites, cfg.TLS = testSites, serverTLS
			}
			srv, addr := startServer(t, cfg)
			c := dial(t, tc.client(addr))
			callCtx := ctx(t)
			if tc.header != "" {
				callCtx = metadata.AppendToOutgoingContext(callCtx, "authorization", tc.header)
			}

			sub := centraltest.NewSubmission(cmpOr(tc.site, "site-a"))
			res, err := c.Submit(callCtx, ports.SubmitRequest{Notifications: []ports.Submission{sub}})
			_, stErr := c.Status(callCtx, ports.StatusRequest{IDs: []string{sub.ID}})
			_, stored := centraltest.FromStore(store)(t, sub.ID)

			if tc.site != "" {
				if err != nil || stErr != nil {
					t.Fatalf("Submit: %v; Status: %v; want %s let in", err, stErr, tc.site)
				}
				if len(res.Accepted) != 1 || !stored {
					t.Fatalf("Submit as %s: %+v, stored %v; want the row accepted and stored", tc.site, res, stored)
				}
				return
			}
			for call, err := range map[string]error{"Submit": err, "Status": stErr} {
				switch {
				case errors.Is(err, ports.ErrUnauthenticated):
				case tc.handshake && errors.Is(err, ports.ErrUnavailable):
				default:
					t.Errorf("%s: err = %v, want one wrapping ports.ErrUnauthenticated", call, err)
				}
				if err != nil {
					for _, secret := range []string{tokenA, tokenB, "tok-A-wrong-guess"} {
						if strings.Contains(err.Error(), secret) {
							t.Errorf("%s: the error text holds a token: %v", call, err)
						}
					}
				}
			}
			if n, m := central.submits.Load(), central.statuses.Load(); n != 0 || m != 0 {
				t.Errorf("the Central was called (%d submits, %d statuses) for a refused caller", n, m)
			}
			if stored {
				t.Errorf("row %s is stored for a refused caller", sub.ID)
			}
			log := logs.String()
			for _, secret := range []string{tokenA, tokenB, "tok-A-wrong-guess"} {
				if strings.Contains(log, secret) {
					t.Errorf("the server log holds a token:\n%s", log)
				}
			}
			if !tc.handshake {
				// Both refusals are counted; one line per caller and
				// interval is logged.
				if got := refusalCount(srv); got != 2 {
					t.Errorf("the server counted %d refusals for 2 refused calls", got)
				}
				if got := strings.Count(log, "site_link: refused"); got != 1 {
					t.Errorf("the server logged %d refusal lines for 2 refused calls from one caller, want 1; log:\n%s", got, log)
				}
				if !strings.Contains(log, "caller=127.0.0.1 ") {
					t.Errorf("the refusal log does not name the caller's address:\n%s", log)
				}
			}
		})
	}
}

// refusalCount is every refusal srv counted, whatever the reason.
func refusalCount(srv *Server) int {
	n := 0
	for _, r := range []string{reasonNoCredentials, reasonBadHeader, reasonUnknownToken, reasonUnknownCert,
		reasonDisagree, reasonOverQuota, reasonTooManyCalls, "too many connections"} {
		n += srv.Refusals().Count(r)
	}
	return n
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestForgedSourceSite: site A submitting rows stamped with site B's id gets
// those rows rejected and stored nowhere, whatever Site its request names.
func TestForgedSourceSite(t *testing.T) {
	svc, store := newCore(t)
	_, addr := startServer(t, ServerConfig{Central: svc, Sites: tokenSites})
	c := dial(t, ClientConfig{Addr: addr, Token: tokenA})

	own := centraltest.NewSubmission("site-a")
	forged1, forged2 := centraltest.NewSubmission("site-b"), centraltest.NewSubmission("site-b")
	// The request's Site is the client's claim; it must not be believed.
	res, err := c.Submit(ctx(t), ports.SubmitRequest{Site: "site-b",
		Notifications: []ports.Submission{forged1, own, forged2}})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if len(res.Accepted) != 1 || res.Accepted[0] != own.ID {
		t.Errorf("Accepted = %v, want only %s", res.Accepted, own.ID)
	}
	rejected := map[string]string{}
	for _, r := range res.Rejected {
		rejected[r.ID] = r.Reason
	}
	stored := centraltest.FromStore(store)
	for _, f := range []ports.Submission{forged1, forged2} {
		if r, ok := rejected[f.ID]; !ok || !strings.Contains(r, `"site-b"`) {
			t.Errorf("forged row %s: rejection %q (rejected %v); want a reason naming site-b", f.ID, r, ok)
		}
		if _, ok := stored(t, f.ID); ok {
			t.Errorf("forged row %s is stored", f.ID)
		}
	}
	if n, ok := stored(t, own.ID); !ok || n.SourceSite != "site-a" {
		t.Errorf("own row: stored %v with SourceSite %q; want it stored from site-a", ok, n.SourceSite)
	}
}

// scripted is a ports.Central that fails every call with err.
type scripted struct{ err error }

func (s scripted) Submit(context.Context, ports.SubmitRequest) (ports.SubmitResult, error) {
	return ports.SubmitResult{}, s.err
}

func (s scripted) Status(context.Context, ports.StatusRequest) (map[string]ports.Status, error) {
	return nil, s.err
}

func (s scripted) ReportOperations(context.Context, ports.OpReport) error { return s.err }

func (s scripted) Sync(context.Context, ports.SyncRequest) (ports.SyncAnswer, error) {
	return ports.SyncAnswer{}, s.err
}

// TestErrorMapping checks the mapping of the port's errors to gRPC codes and
// back, and that a failure of central's store crosses the link with no detail.
func TestErrorMapping(t *testing.T) {
	const internal = "sqlstore: insert: dial tcp 10.9.8.7:5432: password authentication failed for user outbox"
	cases := []struct {
		name   string
		err    error
		want   error
		detail string // a text the client's error must hold; "" for none
		logged string // a text central's log must hold; "" for none
	}{
		{"Invalid", fmt.Errorf("batch of 2000 notifications exceeds the limit of 1000: %w", ports.ErrInvalid),
			ports.ErrInvalid, "batch of 2000 notifications exceeds the limit of 1000", ""},
		{"Unauthenticated", fmt.Errorf("central says: %w", ports.ErrUnauthenticated), ports.ErrUnauthenticated,
			"central says", ""},
		{"StoreDown", fmt.Errorf("ingest 1 notifications: %w", errors.New(internal)), ports.ErrUnavailable,
			"", "password authentication failed"},
		{"NotFoundIsNotTheCallersFault", fmt.Errorf("status: %w", ports.ErrNotFound), ports.ErrUnavailable,
			"", "status: not found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			_, addr := startServer(t, ServerConfig{Central: scripted{tc.err}, Sites: tokenSites, Logger: logs.logger()})
			c := dial(t, ClientConfig{Addr: addr, Token: tokenA})
			_, subErr := c.Submit(ctx(t), ports.SubmitRequest{Notifications: []ports.Submission{centraltest.NewSubmission("site-a")}})
			_, stErr := c.Status(ctx(t), ports.StatusRequest{IDs: []string{uuid.NewString()}})
			repErr := c.ReportOperations(ctx(t), ports.OpReport{Ops: []ports.Operation{newOperation()}})
			_, syncErr := c.Sync(ctx(t), ports.SyncRequest{Health: ports.SiteHealth{Node: "n1"}})
			for call, err := range map[string]error{"submit 1 notifications": subErr, "status of 1 ids": stErr,
				"report 1 operations": repErr, "sync with 0 answers": syncErr} {
				if !errors.Is(err, tc.want) {
					t.Errorf("%s: err = %v, want one wrapping %v", call, err, tc.want)
					continue
				}
				if prefix, suffix := "central "+addr+": "+call+": ", ": "+tc.want.Error(); !strings.HasPrefix(err.Error(), prefix) || !strings.HasSuffix(err.Error(), suffix) {
					t.Errorf("%s: err = %q, want it to start with %q and end with %q", call, err, prefix, suffix)
				}
				if tc.detail != "" && !strings.Contains(err.Error(), tc.detail) {
					t.Errorf("%s: err = %q, want it to hold %q", call, err, tc.detail)
				}
				for _, leak := range []string{"10.9.8.7", "password", "sqlstore", "not found"} {
					if strings.Contains(err.Error(), leak) {
						t.Errorf("%s: the client's error %q reveals %q of central's internal error", call, err, leak)
					}
				}
			}
			if tc.logged != "" && !strings.Contains(logs.String(), tc.logged) {
				t.Errorf("central did not log the real error (%q):\n%s", tc.logged, logs.String())
			}
		})
	}
}

// TestUnreachable: a central that does not answer is ErrUnavailable, wrapped
// with the address and the call.
func TestUnreachable(t *testing.T) {
	addr := plugintest.RefusedAddr(t) // nothing listens there
	c := dial(t, ClientConfig{Addr: addr, Token: tokenA})
	_, err := c.Submit(ctx(t), ports.SubmitRequest{Notifications: []ports.Submission{centraltest.NewSubmission("site-a")}})
	if !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("Submit to a closed port: err = %v, want one wrapping ports.ErrUnavailable", err)
	}
	if prefix, suffix := "central "+addr+": submit 1 notifications: ", ": unavailable"; !strings.HasPrefix(err.Error(), prefix) || !strings.HasSuffix(err.Error(), suffix) {
		t.Errorf("err = %q, want it to start with %q and end with %q", err, prefix, suffix)
	}
}

// blocking is a ports.Central whose Submit announces itself on entered and
// then waits for release (nil: for the end of its context).
type blocking struct {
	entered chan struct{}
	release chan struct{}
}

func (b *blocking) Submit(ctx context.Context, req ports.SubmitRequest) (ports.SubmitResult, error) {
	b.entered <- struct{}{}
	if b.release == nil {
		<-ctx.Done()
		return ports.SubmitResult{}, fmt.Errorf("submit: %w", ctx.Err())
	}
	<-b.release
	ids := make([]string, len(req.Notifications))
	for i, n := range req.Notifications {
		ids[i] = n.ID
	}
	return ports.SubmitResult{Accepted: ids}, nil
}

func (b *blocking) Status(context.Context, ports.StatusRequest) (map[string]ports.Status, error) {
	return map[string]ports.Status{}, nil
}

func (b *blocking) ReportOperations(context.Context, ports.OpReport) error { return nil }

func (b *blocking) Sync(context.Context, ports.SyncRequest) (ports.SyncAnswer, error) {
	return ports.SyncAnswer{}, nil
}

// TestCallerGivesUp: a call whose deadline passes is ErrUnavailable and
// still says why (context.DeadlineExceeded).
func TestCallerGivesUp(t *testing.T) {
	b := &blocking{entered: make(chan struct{}, 1)}
	_, addr := startServer(t, ServerConfig{Central: b, Sites: tokenSites})
	c := dial(t, ClientConfig{Addr: addr, Token: tokenA})
	callCtx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Submit(callCtx, ports.SubmitRequest{Notifications: []ports.Submission{centraltest.NewSubmission("site-a")}})
	if !errors.Is(err, ports.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want one wrapping ports.ErrUnavailable and context.DeadlineExceeded", err)
	}
}

// TestMessageOverLimit: a request over MaxRecvMsgBytes is refused as a whole
// (ErrInvalid: repeating it cannot help), never reaches the Central, and the
// server goes on serving.
func TestMessageOverLimit(t *testing.T) {
	svc, store := newCore(t)
	central := &spy{Central: svc}
	_, addr := startServer(t, ServerConfig{Central: central, Sites: tokenSites, Limits: Limits{GRPC: guard.GRPCLimits{MaxRecvMsgBytes: 64 << 10}}})
	c := dial(t, ClientConfig{Addr: addr, Token: tokenA})

	big := []ports.Submission{centraltest.NewSubmission("site-a"), centraltest.NewSubmission("site-a")}
	for i := range big {
		big[i].Body = strings.Repeat("b", 40<<10)
	}
	_, err := c.Submit(ctx(t), ports.SubmitRequest{Notifications: big})
	if !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Submit of %d KiB to a 64 KiB limit: err = %v, want one wrapping ports.ErrInvalid", 80, err)
	}
	if !strings.Contains(err.Error(), "message size limit") {
		t.Errorf("err = %q, want it to name the message size limit", err)
	}
	if n := central.submits.Load(); n != 0 {
		t.Errorf("the Central was called %d times for an oversize message", n)
	}
	for _, s := range big {
		if _, ok := centraltest.FromStore(store)(t, s.ID); ok {
			t.Errorf("row %s of an oversize message is stored", s.ID)
		}
	}

	small := centraltest.NewSubmission("site-a")
	res, err := c.Submit(ctx(t), ports.SubmitRequest{Notifications: []ports.Submission{small}})
	if err != nil || len(res.Accepted) != 1 {
		t.Fatalf("Submit after the oversize one: %+v, %v; want it accepted", res, err)
	}
}

// TestStopHard: Stop ends, within its bound, a call that would never end by
// itself; the caller sees ErrUnavailable.
func TestStopHard(t *testing.T) {
	b := &blocking{entered: make(chan struct{}, 1)}
	srv, addr := startServer(t, ServerConfig{Central: b, Sites: tokenSites})
	srv.grace = 100 * time.Millisecond
	c := dial(t, ClientConfig{Addr: addr, Token: tokenA})
	errc := make(chan error, 1)
	go func() {
		_, err := c.Submit(ctx(t), ports.SubmitRequest{Notifications: []ports.Submission{centraltest.NewSubmission("site-a")}})
		errc <- err
	}()
	waitFor(t, b.entered, "the call to reach the Central")
	stopped := make(chan struct{})
	go func() {
		srv.Stop()
		close(stopped)
	}()
	waitFor(t, stopped, "Stop to return")
	select {
	case err := <-errc:
		if !errors.Is(err, ports.ErrUnavailable) {
			t.Errorf("the cut call: err = %v, want one wrapping ports.ErrUnavailable", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("the call did not end after Stop")
	}
}

// TestStopGraceful: Stop refuses new connections at once but lets a call in
// progress finish and answer.
func TestStopGraceful(t *testing.T) {
	b := &blocking{entered: make(chan struct{}, 1), release: make(chan struct{})}
	srv, addr := startServer(t, ServerConfig{Central: b, Sites: tokenSites})
	srv.grace = waitLimit
	c := dial(t, ClientConfig{Addr: addr, Token: tokenA})
	sub := centraltest.NewSubmission("site-a")
	answers := submitInBackground(t, c, sub)
	waitFor(t, b.entered, "the call to reach the Central")
	stopped := make(chan struct{})
	go func() {
		srv.Stop()
		close(stopped)
	}()
	// The listener closes first: wait until a new connection is refused.
	deadline := time.Now().Add(waitLimit)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break
		}
		_ = conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("the server still accepts connections after Stop began")
		}
		select {
		case <-stopped:
			t.Fatal("Stop returned while a call was still running")
		case <-time.After(10 * time.Millisecond):
		}
	}
	close(b.release)
	select {
	case a := <-answers:
		if a.err != nil || len(a.res.Accepted) != 1 || a.res.Accepted[0] != sub.ID {
			t.Errorf("the call in progress during Stop: %+v, %v; want it answered", a.res, a.err)
		}
	case <-time.After(waitLimit):
		t.Fatal("the call in progress never answered")
	}
	waitFor(t, stopped, "Stop to return")
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestPlaintextWarning: a server without TLS says so in its log, once.
func TestPlaintextWarning(t *testing.T) {
	var logs logBuffer
	svc, _ := newCore(t)
	_, addr := startServer(t, ServerConfig{Central: svc, Sites: tokenSites, Logger: logs.logger()})
	c := dial(t, ClientConfig{Addr: addr, Token: tokenA})
	if _, err := c.Status(ctx(t), ports.StatusRequest{IDs: []string{uuid.NewString()}}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "without TLS"); n != 1 {
		t.Errorf("the plaintext warning appears %d times, want once:\n%s", n, logs.String())
	}
}

// TestDial checks Dial's refusals, in particular a token in clear to an
// address off this machine.
func TestDial(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:7443", "[::1]:7443", "localhost:7443"} {
		c, err := Dial(ClientConfig{Addr: addr, Token: tokenA})
		if err != nil {
			t.Errorf("Dial(%s) with a token in plaintext: %v; want it allowed on loopback", addr, err)
			continue
		}
		_ = c.Close()
	}
	refused := []struct {
		cfg  ClientConfig
		hint string
	}{
		{ClientConfig{Addr: "10.1.2.3:7443", Token: tokenA}, "in clear"},
		{ClientConfig{Addr: "central.example.com:7443", Token: tokenA}, "in clear"},
		{ClientConfig{Addr: "central.example.com"}, "host:port"},
		{ClientConfig{Addr: ":7443"}, "host:port"},
		{ClientConfig{Addr: "127.0.0.1:7443", Token: "two words " + tokenA}, "visible ASCII"},
	}
	for _, r := range refused {
		c, err := Dial(r.cfg)
		if err == nil {
			_ = c.Close()
			t.Errorf("Dial(%s) = nil error, want a refusal about %q", r.cfg.Addr, r.hint)
			continue
		}
		if !strings.Contains(err.Error(), r.hint) {
			t.Errorf("Dial(%s) = %q, want it to mention %q", r.cfg.Addr, err, r.hint)
		}
		if strings.Contains(err.Error(), tokenA) {
			t.Errorf("Dial(%s): the error holds the token: %q", r.cfg.Addr, err)
		}
	}
	// A token over TLS may go anywhere.
	ca := newCA(t, "outbox test CA")
	c, err := Dial(ClientConfig{Addr: "central.example.com:7443", Token: tokenA, TLS: ca.clientTLS()})
	if err != nil {
		t.Fatalf("Dial over TLS: %v", err)
	}
	_ = c.Close()
}

// TestServerConfigValidate checks one precise error per broken rule.
func TestServerConfigValidate(t *testing.T) {
	svc, _ := newCore(t)
	ca := newCA(t, "outbox test CA")
	good := ServerConfig{Central: svc, Sites: testSites, TLS: ca.serverTLS(t)}
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate of a good config: %v", err)
	}
	if err := (ServerConfig{Central: svc, Sites: []Site{{ID: "a", Token: tokenA}}}).Validate(); err != nil {
		t.Fatalf("Validate of a plaintext token config: %v", err)
	}
	bad := []struct {
		name   string
		change func(c *ServerConfig)
		hint   string
	}{
		{"NoCentral", func(c *ServerConfig) { c.Central = nil }, "Central is nil"},
		{"NoSites", func(c *ServerConfig) { c.Sites = nil }, "no sites"},
		{"EmptyID", func(c *ServerConfig) { c.Sites = []Site{{Token: tokenA}} }, "id is empty"},
		{"DuplicateID", func(c *ServerConfig) { c.Sites = []Site{{ID: "a", Token: tokenA}, {ID: "a", Token: tokenB}} }, "listed twice"},
		{"SharedToken", func(c *ServerConfig) { c.Sites = []Site{{ID: "a", Token: tokenA}, {ID: "b", Token: tokenA}} }, "same token"},
		{"NoTokenNoClientCAs", func(c *ServerConfig) { c.TLS = nil; c.Sites = []Site{{ID: "a"}} }, "never authenticate"},
		{"NoServerCertificate", func(c *ServerConfig) { c.TLS = c.TLS.Clone(); c.TLS.Certificates = nil }, "no server certificate"},
		{"UnverifiedClientCerts", func(c *ServerConfig) {
			c.TLS = c.TLS.Clone()
			c.TLS.ClientAuth = tls.RequireAnyClientCert
		}, "does not verify"},
		{"RequireWithoutCAs", func(c *ServerConfig) {
			c.TLS = c.TLS.Clone()
			c.TLS.ClientCAs = nil
			c.TLS.ClientAuth = tls.RequireAndVerifyClientCert
			c.Sites = []Site{{ID: "a", Token: tokenA}}
		}, "needs TLS.ClientCAs"},
		{"NegativeMaxRecv", func(c *ServerConfig) { c.Limits.GRPC.MaxRecvMsgBytes = -1 }, "MaxRecvMsgBytes"},
		{"NegativeQuota", func(c *ServerConfig) { c.Limits.Quota.RowsPerSecond = -1 }, "Quota.RowsPerSecond"},
		{"NegativeCalls", func(c *ServerConfig) { c.Limits.MaxCallsPerSite = -1 }, "MaxCallsPerSite"},
		{"SyncsFillEverySlot", func(c *ServerConfig) { c.Limits.MaxCallsPerSite, c.Limits.MaxSyncsPerSite = 4, 4 }, "MaxSyncsPerSite"},
		{"ShortCallTimeout", func(c *ServerConfig) { c.Limits.CallTimeout = time.Second }, "CallTimeout"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			cfg := good
			b.change(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), b.hint) {
				t.Fatalf("Validate = %v, want an error mentioning %q", err, b.hint)
			}
			if strings.Contains(err.Error(), tokenA) || strings.Contains(err.Error(), tokenB) {
				t.Errorf("the error holds a token: %v", err)
			}
			if _, err := NewServer(cfg); err == nil {
				t.Error("NewServer accepted the config Validate refuses")
			}
		})
	}
}

// TestNoClientCAs: a TLS server without ClientCAs authenticates by token
// only, even when its ClientAuth asks to verify certificates given: no
// certificate names a site then.
func TestNoClientCAs(t *testing.T) {
	ca := newCA(t, "outbox test CA")
	serverTLS := &tls.Config{Certificates: []tls.Certificate{ca.serverCert(t)}, ClientAuth: tls.VerifyClientCertIfGiven}
	svc, _ := newCore(t)
	_, addr := startServer(t, ServerConfig{Central: svc, Sites: tokenSites, TLS: serverTLS})

	certOnly := dial(t, ClientConfig{Addr: addr, TLS: ca.clientTLS(ca.clientCert(t, "site-a"))})
	_, err := certOnly.Submit(ctx(t), ports.SubmitRequest{Notifications: []ports.Submission{centraltest.NewSubmission("site-a")}})
	if !errors.Is(err, ports.ErrUnauthenticated) {
		t.Errorf("certificate only, no ClientCAs: err = %v, want one wrapping ports.ErrUnauthenticated", err)
	}
	withToken := dial(t, ClientConfig{Addr: addr, Token: tokenA, TLS: ca.clientTLS(ca.clientCert(t, "site-b"))})
	res, err := withToken.Submit(ctx(t), ports.SubmitRequest{Notifications: []ports.Submission{centraltest.NewSubmission("site-a")}})
	if err != nil || len(res.Accepted) != 1 {
		t.Errorf("token of site-a with an unrequested certificate: %+v, %v; want it accepted as site-a", res, err)
	}
}

// TestServeAfterStopReturnsNil: a Stop before Serve has started (a
// shutdown right after the start) ends Serve with nil, as a Stop during
// Serve does.
func TestServeAfterStopReturnsNil(t *testing.T) {
	svc, _ := newCore(t)
	srv, err := NewServer(ServerConfig{Central: svc, Sites: tokenSites})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	srv.Stop()
	if err := srv.Serve(lis); err != nil {
		t.Fatalf("Serve after Stop: %v", err)
	}
}
