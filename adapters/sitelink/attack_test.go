package sitelink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/membuffer"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/centraltest"
	"github.com/siteline/outbox/ports/waittest"
)

// These tests play the attacker against a real server on loopback.

// rawCodec sends and receives raw bytes, so that a test can put any bytes
// on the wire as a request message.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: %T is not *[]byte", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: %T is not *[]byte", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" } // the server decodes it as protobuf

// rawConn is a plaintext connection to addr that sends raw bytes.
func rawConn(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(nil), grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// invokeRaw calls method with payload as the request's bytes.
func invokeRaw(ctx context.Context, conn *grpc.ClientConn, method string, payload []byte) error {
	var reply []byte
	return conn.Invoke(ctx, method, &payload, &reply)
}

// TestGarbageWithoutCredentialsIsUnauthenticated: bytes that are no
// protobuf at all, sent without credentials, are refused as unauthenticated
// (they are never read), for every method, known or not; the Central is
// never called.
func TestGarbageWithoutCredentialsIsUnauthenticated(t *testing.T) {
	svc, _ := newCore(t)
	central := &spy{Central: svc}
	srv, addr := startServer(t, ServerConfig{Central: central, Sites: tokenSites})
	conn := rawConn(t, addr)
	garbage := []byte("\xff\xff\xff\xff\x0fnot a protobuf message at all \x00\x01")
	methods := []string{"/outbox.link.v1.Central/Submit", "/outbox.link.v1.Central/Status",
		"/outbox.link.v1.Central/ReportOperations", "/outbox.link.v1.Central/Sync", "/outbox.link.v1.Central/Nope"}
	for _, method := range methods {
		for _, md := range []metadata.MD{nil, metadata.Pairs("authorization", "Bearer tok-A-wrong-guess")} {
			callCtx := metadata.NewOutgoingContext(ctx(t), md)
			err := invokeRaw(callCtx, conn, method, garbage)
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s with garbage and %v: %v, want Unauthenticated", method, md, err)
			}
			if err != nil && strings.Contains(err.Error(), "unmarshal") {
				t.Errorf("%s: the server read the message of an unauthenticated caller: %v", method, err)
			}
		}
	}
	if n := central.submits.Load() + central.statuses.Load() + central.reports.Load() + central.syncs.Load(); n != 0 {
		t.Errorf("the Central was called %d times", n)
	}
	if got, want := refusalCount(srv), 2*len(methods); got != want {
		t.Errorf("%d refusals counted, want %d", got, want)
	}
}

// TestRefusalFloodLogsBoundedLines: a client hammering the link without
// credentials writes one log line per interval, while every refusal is
// counted in the metric.
func TestRefusalFloodLogsBoundedLines(t *testing.T) {
	const calls = 2000
	var logs logBuffer
	svc, _ := newCore(t)
	// An interval no test run outlasts: exactly one line is due.
	srv, addr := startServer(t, ServerConfig{Central: svc, Sites: tokenSites, Logger: logs.logger(),
		Refusals: guard.NewRefusals("site_link", logs.logger(), time.Hour)})
	conn := rawConn(t, addr)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for range calls / 8 {
				_ = invokeRaw(ctx(t), conn, "/outbox.link.v1.Central/Submit", []byte{byte(w)})
			}
		})
	}
	wg.Wait()
	if got := srv.Refusals().Count(reasonNoCredentials); got != calls {
		t.Errorf("counted %d refusals, want %d", got, calls)
	}
	if n := strings.Count(logs.String(), "site_link: refused"); n != 1 {
		t.Errorf("%d refusal lines for %d refused calls from one caller within the interval, want 1:\n%s", n, calls, logs.String())
	}
}

// TestQuotaRefusesOneSiteAndServesAnother: a site past its ingest quota is
// refused with ResourceExhausted and a retry delay, which the client turns
// into a ports.RetryLaterError (ErrUnavailable, so the forwarder keeps the
// batch and retries); nothing of the refused batch is stored; another site
// is served meanwhile; once the bucket is empty, even the bytes of the next
// call are not read.
func TestQuotaRefusesOneSiteAndServesAnother(t *testing.T) {
	svc, store := newCore(t)
	central := &spy{Central: svc}
	// One row in the bucket, refilled once in 100 s: no test machine is
	// slow enough to see it refill.
	srv, addr := startServer(t, ServerConfig{Central: central, Sites: tokenSites, Limits: Limits{Quota: Quota{RowsPerSecond: 0.01}}})
	a := dial(t, ClientConfig{Addr: addr, Token: tokenA})
	b := dial(t, ClientConfig{Addr: addr, Token: tokenB})
	stored := centraltest.FromStore(store)

	first := centraltest.NewSubmission("site-a")
	if res, err := a.Submit(ctx(t), ports.SubmitRequest{Notifications: []ports.Submission{first}}); err != nil || len(res.Accepted) != 1 {
		t.Fatalf("site-a's first Submit: %+v, %v; want it accepted", res, err)
	}
	over := []ports.Submission{centraltest.NewSubmission("site-a"), centraltest.NewSubmission("site-a")}
	_, err := a.Submit(ctx(t), ports.SubmitRequest{Notifications: over})
	after, ok := ports.RetryAfter(err)
	if !ok || !errors.Is(err, ports.ErrUnavailable) || after < 10*time.Second {
		t.Fatalf("site-a over its quota: err = %v (retry after %v, %v); want a RetryLaterError asking to wait", err, after, ok)
	}
	if !strings.Contains(err.Error(), "quota") {
		t.Errorf("err = %q, want it to say quota", err)
	}
	for _, s := range over {
		if _, ok := stored(t, s.ID); ok {
			t.Errorf("row %s of a refused batch is stored", s.ID)
		}
	}

	other := []ports.Submission{centraltest.NewSubmission("site-b"), centraltest.NewSubmission("site-b")}
	if res, err := b.Submit(ctx(t), ports.SubmitRequest{Notifications: other}); err != nil || len(res.Accepted) != 2 {
		t.Fatalf("site-b while site-a is over its quota: %+v, %v; want it served", res, err)
	}

	// The bucket is empty now: the next call of site-a is refused on its
	// headers, so its garbage is never decoded.
	submits := central.submits.Load()
	callCtx := metadata.AppendToOutgoingContext(ctx(t), "authorization", "Bearer "+tokenA)
	err = invokeRaw(callCtx, rawConn(t, addr), "/outbox.link.v1.Central/Submit", []byte("\xff\xff garbage"))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("garbage from site-a with an empty bucket: %v, want ResourceExhausted before decoding", err)
	}
	if central.submits.Load() != submits {
		t.Errorf("the Central was called for a site over its quota")
	}
	if got := srv.Refusals().Count(reasonOverQuota); got != 2 {
		t.Errorf("%d over-quota refusals counted, want 2", got)
	}
}

// TestCallsPerSiteBounded: a site's calls in progress are bounded; the one
// past the bound is refused on its headers and told to retry, and the slots
// come back when the calls end.
func TestCallsPerSiteBounded(t *testing.T) {
	b := &blocking{entered: make(chan struct{}, 1024), release: make(chan struct{})}
	_, addr := startServer(t, ServerConfig{Central: b, Sites: tokenSites, Limits: Limits{MaxCallsPerSite: 2}})
	c := dial(t, ClientConfig{Addr: addr, Token: tokenA})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := c.Submit(ctx(t), ports.SubmitRequest{Notifications: []ports.Submission{centraltest.NewSubmission("site-a")}})
			errs <- err
		}()
	}
	waitFor(t, b.entered, "the first call to reach the Central")
	waitFor(t, b.entered, "the second call to reach the Central")
	_, err := c.Submit(ctx(t), ports.SubmitRequest{Notifications: []ports.Submission{centraltest.NewSubmission("site-a")}})
	if _, ok := ports.RetryAfter(err); !ok {
		t.Errorf("a third call while two are in progress: %v, want a RetryLaterError", err)
	}
	close(b.release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("a call in progress: %v", err)
		}
	}
	// Slots are given back as the calls end (on the server's side, just
	// after the answer): a call goes through again soon.
	waittest.For(t, waitLimit, "a call to go through after the others ended", func() (bool, string) {
		_, err := c.Submit(ctx(t), ports.SubmitRequest{Notifications: []ports.Submission{centraltest.NewSubmission("site-a")}})
		if _, ok := ports.RetryAfter(err); err != nil && !ok {
			t.Fatalf("a call after the others ended: %v", err)
		}
		return err == nil, fmt.Sprint(err)
	})
}

// TestSilentConnectionsClosed: a connection that never completes the
// handshake is closed after HandshakeTimeout, and connections past the
// per-address bound are closed at once and counted.
func TestSilentConnectionsClosed(t *testing.T) {
	svc, _ := newCore(t)
	srv, addr := startServer(t, ServerConfig{Central: svc, Sites: tokenSites,
		Limits: Limits{GRPC: guard.GRPCLimits{HandshakeTimeout: time.Second}, Conns: guard.ConnLimits{PerAddress: 3}}})
	var conns []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		// The HTTP/2 client preface, and nothing after it.
		if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		start := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(waitLimit))
		_, err := io.Copy(io.Discard, c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("connection %d still open after %s", i, waitLimit)
		}
		t.Logf("connection %d closed after %s", i, time.Since(start).Round(time.Millisecond))
	}
	if got := srv.Refusals().Count("too many connections"); got != 2 {
		t.Errorf("%d connections refused, want 2 (5 from one address, 3 allowed)", got)
	}
}

// TestForwarderOverQuotaCatchesUp: a real site forwarder (core.Site) over
// the real link to a central whose quota it exceeds: every notification
// arrives, the refusals are counted at central, and the site's log holds no
// error nor warning about them, only an info line.
func TestForwarderOverQuotaCatchesUp(t *testing.T) {
	// Two batches fill the bucket (two seconds' worth); the third waits a
	// second for it to refill.
	const rows = 1500
	svc, store := newCore(t)
	srv, addr := startServer(t, ServerConfig{Central: svc, Sites: tokenSites, Limits: Limits{Quota: Quota{RowsPerSecond: 500}}})
	c := dial(t, ClientConfig{Addr: addr, Token: tokenA})
	var logs logBuffer
	buf := membuffer.New("a")
	site, err := core.NewSite(core.SiteConfig{Site: "site-a", ForwardBatch: 500, RetryInterval: time.Hour},
		core.SiteDeps{Buffer: buf, Central: c, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, rows)
	for range rows {
		id, err := site.Send(ctx(t), ports.SendRequest{List: "ops", Subject: "s"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	fctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { site.Forward(fctx) })
	defer func() { cancel(); wg.Wait() }()

	waittest.For(t, waitLimit, "an empty buffer", func() (bool, string) {
		st, err := buf.Stats(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		return st.Count == 0, fmt.Sprintf("%d notifications still buffered; site log:\n%s", st.Count, logs.String())
	})
	for _, id := range ids {
		if _, ok := centraltest.FromStore(store)(t, id); !ok {
			t.Fatalf("%s never reached central", id)
		}
	}
	if srv.Refusals().Count(reasonOverQuota) == 0 {
		t.Errorf("no over-quota refusal: the test did not exceed the quota")
	}
	log := logs.String()
	if strings.Contains(log, "level=ERROR") || strings.Contains(log, "level=WARN") {
		t.Errorf("the site logged the quota refusals as failures:\n%s", log)
	}
}
