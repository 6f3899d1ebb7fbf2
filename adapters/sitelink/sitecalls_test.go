package sitelink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/siteline/outbox/adapters/sitelink/internal/pb"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/centraltest"
)

// These tests exercise ReportOperations and Sync over a real server on
// loopback. The ports.Central behind it is mirror, a small double that
// records what reaches it and answers Syncs as it is told: core.Service's
// own ReportOperations and Sync are tested in package core.

// mirror is a ports.Central that records the reports and Syncs that reach
// it. A Sync answers next when it is set, else it waits req.Wait (or for
// the end of its context) and answers empty, as core.Service does; each Sync announces itself on entered
// when that is set.
type mirror struct {
	ports.Central // Submit and Status: nil, unused here

	mu      sync.Mutex
	reports []ports.OpReport
	syncs   []ports.SyncRequest
	next    *ports.SyncAnswer
	entered chan struct{}
	// hold makes a Sync wait for its context, whatever its wait.
	hold bool
}

func (m *mirror) ReportOperations(_ context.Context, req ports.OpReport) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reports = append(m.reports, req)
	return nil
}

func (m *mirror) Sync(ctx context.Context, req ports.SyncRequest) (ports.SyncAnswer, error) {
	m.mu.Lock()
	m.syncs = append(m.syncs, req)
	next, hold, entered := m.next, m.hold, m.entered
	m.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
	}
	if next != nil {
		return *next, nil
	}
	wait := req.Wait
	if hold {
		wait = time.Hour
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return ports.SyncAnswer{}, nil
	case <-ctx.Done():
		return ports.SyncAnswer{}, nil // as core.Service: the caller left
	}
}

func (m *mirror) reported() []ports.OpReport {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]ports.OpReport(nil), m.reports...)
}

func (m *mirror) synced() []ports.SyncRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]ports.SyncRequest(nil), m.syncs...)
}

// newOperation is a tracking row with every field set, as a site reports
// it (with a payload, which must not travel).
func newOperation() ports.Operation {
	at := time.Date(2026, 11, 24, 9, 0, 0, 123456000, time.UTC)
	return ports.Operation{
		ID: uuid.Must(uuid.NewV7()).String(), Kind: ports.OpCall, Target: "erp", Method: "postOrder",
		Status: ports.OpParked, RetryCount: 7, LastError: "HTTP 503 from erp",
		NextAttemptAt:  at.Add(time.Minute),
		SourceInstance: "line-3", SourceScript: "orders", ExecutionID: "exec-1", ParentExecutionID: "exec-0",
		CreatedAt: at, UpdatedAt: at.Add(time.Second),
		Payload: ports.OpPayload{Params: []byte(`{"secret":"payload"}`)},
		Version: 9,
	}
}

// TestReportOperationsThroughLink: every field of a row and of the feed
// page reaches the Central as sent, in the name of the authenticated site
// whatever the request says, and the payload never leaves the site.
func TestReportOperationsThroughLink(t *testing.T) {
	m := &mirror{}
	_, addr := startServer(t, ServerConfig{Central: m, Sites: tokenSites})
	c := dial(t, ClientConfig{Addr: addr, Token: tokenA})
	op := newOperation()
	done := op
	done.ID, done.Status, done.TerminalAt, done.Payload = uuid.Must(uuid.NewV7()).String(), ports.OpDelivered, op.UpdatedAt, ports.OpPayload{}
	page := &ports.FeedPage{Epoch: "e1", From: "", Next: "42", Last: true}
	if err := c.ReportOperations(ctx(t), ports.OpReport{Site: "site-b", Ops: []ports.Operation{op, done}, Feed: page}); err != nil {
		t.Fatalf("ReportOperations: %v", err)
	}
	if err := c.ReportOperations(ctx(t), ports.OpReport{Ops: []ports.Operation{done}}); err != nil {
		t.Fatalf("ReportOperations without a feed page: %v", err)
	}
	got := m.reported()
	if len(got) != 2 {
		t.Fatalf("%d reports reached the Central, want 2", len(got))
	}
	op.Payload = ports.OpPayload{}
	want := ports.OpReport{Site: "site-a", Ops: []ports.Operation{op, done}, Feed: page}
	if !reflect.DeepEqual(got[0], want) {
		t.Errorf("the Central got\n%+v\nwant\n%+v", got[0], want)
	}
	if got[1].Site != "site-a" || got[1].Feed != nil || len(got[1].Ops) != 1 {
		t.Errorf("the second report reached the Central as %+v", got[1])
	}
}

// TestSyncThroughLink: a node's health, its answers and its wait reach the
// Central in the name of the authenticated site (another site named in the
// request, or in the health, is ignored), and central's commands and feed
// request come back whole.
func TestSyncThroughLink(t *testing.T) {
	at := time.Date(2026, 11, 24, 9, 30, 0, 0, time.UTC)
	cmd := ports.SiteCommand{ID: uuid.Must(uuid.NewV7()).String(), Site: "site-a", OperationID: uuid.Must(uuid.NewV7()).String(),
		Action: ports.SiteRetry, Actor: "alice", RequestedAt: at, State: ports.CommandRequested}
	answer := ports.SyncAnswer{Commands: []ports.SiteCommand{cmd}, Feed: &ports.SiteCursor{Epoch: "e1", After: "17"}}
	m := &mirror{next: &answer}
	_, addr := startServer(t, ServerConfig{Central: m, Sites: tokenSites})
	c := dial(t, ClientConfig{Addr: addr, Token: tokenA})
	health := ports.SiteHealth{Site: "site-b", Node: "n2", Backlog: 5, OldestEnqueuedAt: at,
		Replica:            ports.ReplicaState{Node: "n2", Role: ports.Role("Leader"), Term: 4, Leader: "n2"},
		LastCentralContact: at.Add(time.Second), LastCentralError: "refused",
		Operations: []ports.OpKindStats{{Kind: ports.OpCall, Backlog: 3, Parked: 2, OldestBufferedAt: at, Terminal: 11},
			{Kind: ports.OpWrite, Terminal: 1}}}
	answers := []ports.CommandAnswer{{ID: "c1", State: ports.CommandApplied}, {ID: "c2", State: ports.CommandRefused, Result: "not parked"}}
	got, err := c.Sync(ctx(t), ports.SyncRequest{Site: "site-b", Health: health, Leads: true, Answers: answers, Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if !reflect.DeepEqual(got, answer) {
		t.Errorf("Sync answered\n%+v\nwant\n%+v", got, answer)
	}
	reqs := m.synced()
	if len(reqs) != 1 {
		t.Fatalf("%d Syncs reached the Central, want 1", len(reqs))
	}
	health.Site = "site-a"
	want := ports.SyncRequest{Site: "site-a", Health: health, Leads: true, Answers: answers, Wait: 5 * time.Second}
	if !reflect.DeepEqual(reqs[0], want) {
		t.Errorf("the Central got\n%+v\nwant\n%+v", reqs[0], want)
	}
}

// TestSyncWaitBounded: the wait a site asks for is capped at
// ports.MaxSyncWait, below the server's call timeout and below the
// caller's own deadline, so that the long poll answers before either ends
// it; a negative wait is none.
func TestSyncWaitBounded(t *testing.T) {
	const margin = syncAnswerMargin
	cases := []struct {
		name     string
		limits   Limits
		deadline time.Duration // 0: the context has none (the client sets one)
		asked    time.Duration
		atMost   time.Duration
		atLeast  time.Duration
	}{
		{"CappedAtMaxSyncWait", Limits{}, 0, time.Hour, ports.MaxSyncWait, ports.MaxSyncWait - time.Second},
		{"BelowCallTimeout", Limits{CallTimeout: minCallTimeout}, 0, time.Hour, minCallTimeout - margin, time.Second},
		{"BelowCallerDeadline", Limits{}, 4 * time.Second, time.Hour, 4*time.Second - margin, 0},
		{"Negative", Limits{}, 0, -time.Second, 0, 0},
		{"AsAsked", Limits{}, 0, 1500 * time.Millisecond, 1500 * time.Millisecond, 1500 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The double answers at once: only the wait it was given counts.
			m := &mirror{next: &ports.SyncAnswer{}}
			_, addr := startServer(t, ServerConfig{Central: m, Sites: tokenSites, Limits: tc.limits})
			c := dial(t, ClientConfig{Addr: addr, Token: tokenA})
			callCtx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				callCtx, cancel = context.WithTimeout(callCtx, tc.deadline)
				defer cancel()
			}
			if _, err := c.Sync(callCtx, ports.SyncRequest{Health: ports.SiteHealth{Node: "n1"}, Wait: tc.asked}); err != nil {
				t.Fatalf("Sync: %v", err)
			}
			got := m.synced()[0].Wait
			if got > tc.atMost || got < tc.atLeast {
				t.Errorf("the Central was asked to wait %s, want between %s and %s", got, tc.atLeast, tc.atMost)
			}
		})
	}
}

// opsConn is a plaintext gRPC client of the link authenticated as site-a,
// for requests the Client would never send.
func opsConn(t *testing.T, addr string) (pb.CentralClient, context.Context) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pb.NewCentralClient(conn), metadata.AppendToOutgoingContext(ctx(t), "authorization", "Bearer "+tokenA)
}

// TestReportOverLimitRefused: a report of more rows than
// ports.MaxSiteCallReport, or over the message limit, is refused whole
// (InvalidArgument; the client's ErrInvalid) before the Central sees it,
// and the server goes on serving.
func TestReportOverLimitRefused(t *testing.T) {
	m := &mirror{}
	_, addr := startServer(t, ServerConfig{Central: m, Sites: tokenSites,
		Limits: Limits{Quota: Quota{RowsPerSecond: 1e6, BytesPerSecond: 1e9}}})
	rpc, callCtx := opsConn(t, addr)
	many := opReportToPB(ports.OpReport{Ops: make([]ports.Operation, ports.MaxSiteCallReport+1)})
	_, err := rpc.ReportOperations(callCtx, many)
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("a report of %d rows: %v, want InvalidArgument", ports.MaxSiteCallReport+1, err)
	}
	c := dial(t, ClientConfig{Addr: addr, Token: tokenA})
	err = c.ReportOperations(ctx(t), ports.OpReport{Ops: make([]ports.Operation, ports.MaxSiteCallReport+1)})
	if !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("a report of %d rows through the Client: %v, want ErrInvalid saying why", ports.MaxSiteCallReport+1, err)
	}
	big := newOperation()
	big.LastError = strings.Repeat("x", DefaultMaxRecvMsgBytes)
	err = c.ReportOperations(ctx(t), ports.OpReport{Ops: []ports.Operation{big}})
	if !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("a report over the message limit: %v, want ErrInvalid", err)
	}
	if n := len(m.reported()); n != 0 {
		t.Fatalf("%d refused reports reached the Central", n)
	}
	if err := c.ReportOperations(ctx(t), ports.OpReport{Ops: []ports.Operation{newOperation()}}); err != nil {
		t.Fatalf("a good report after the refused ones: %v", err)
	}
}

// TestMalformedReportAndSync: an authenticated site sending bytes that are
// no protobuf gets an error and the Central is never called; a field the
// messages do not have (a site id, say) is ignored.
func TestMalformedReportAndSync(t *testing.T) {
	m := &mirror{next: &ports.SyncAnswer{}}
	_, addr := startServer(t, ServerConfig{Central: m, Sites: tokenSites})
	conn := rawConn(t, addr)
	callCtx := metadata.AppendToOutgoingContext(ctx(t), "authorization", "Bearer "+tokenA)
	garbage := []byte("\xff\xff\xff\xff\x0fnot a protobuf message \x00\x01")
	for _, method := range []string{"/outbox.link.v1.Central/ReportOperations", "/outbox.link.v1.Central/Sync"} {
		if err := invokeRaw(callCtx, conn, method, garbage); err == nil || status.Code(err) == codes.OK {
			t.Errorf("%s with garbage: %v, want an error", method, err)
		}
	}
	if n, k := len(m.reported()), len(m.synced()); n+k != 0 {
		t.Fatalf("the Central was called for garbage (%d reports, %d syncs)", n, k)
	}
	// A well-formed report with an extra field 99 naming site-b.
	msg, err := proto.Marshal(opReportToPB(ports.OpReport{Ops: []ports.Operation{newOperation()}}))
	if err != nil {
		t.Fatal(err)
	}
	msg = protowire.AppendTag(msg, 99, protowire.BytesType)
	msg = protowire.AppendBytes(msg, []byte("site-b"))
	if err := invokeRaw(callCtx, conn, "/outbox.link.v1.Central/ReportOperations", msg); err != nil {
		t.Fatalf("a report with an unknown field: %v", err)
	}
	if got := m.reported(); len(got) != 1 || got[0].Site != "site-a" {
		t.Fatalf("the report reached the Central as %+v, want it from site-a", got)
	}
}

// TestSyncsPerSiteBounded: one site holding many long polls gets at most
// MaxSyncsPerSite of them; the one past it is refused and told to retry,
// while the same site's Submit and another site's Sync still go through.
func TestSyncsPerSiteBounded(t *testing.T) {
	entered := make(chan struct{}, 16)
	released := make(chan struct{})
	close(released)
	m := &mirror{hold: true, entered: entered, Central: &blocking{entered: make(chan struct{}, 16), release: released}}
	srv, addr := startServer(t, ServerConfig{Central: m, Sites: tokenSites, Limits: Limits{MaxCallsPerSite: 4}})
	a := dial(t, ClientConfig{Addr: addr, Token: tokenA})
	b := dial(t, ClientConfig{Addr: addr, Token: tokenB})
	holdCtx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	for i := range 2 { // MaxSyncsPerSite defaults to half of MaxCallsPerSite
		go func() {
			_, err := a.Sync(holdCtx, ports.SyncRequest{Health: ports.SiteHealth{Node: fmt.Sprint("n", i)}, Wait: time.Minute})
			errs <- err
		}()
	}
	waitFor(t, entered, "the first long poll to reach the Central")
	waitFor(t, entered, "the second long poll to reach the Central")
	_, err := a.Sync(ctx(t), ports.SyncRequest{Health: ports.SiteHealth{Node: "n3"}, Wait: time.Minute})
	if after, ok := ports.RetryAfter(err); !ok || after != syncRetryWait {
		t.Errorf("a third Sync of site-a: %v, want a RetryLaterError after %s", err, syncRetryWait)
	}
	if got := srv.Refusals().Count(reasonTooManySyncs); got != 1 {
		t.Errorf("%d refusals for too many syncs, want 1", got)
	}
	if _, err := a.Submit(ctx(t), ports.SubmitRequest{Notifications: []ports.Submission{centraltest.NewSubmission("site-a")}}); err != nil {
		t.Errorf("site-a's Submit while it holds its long polls: %v", err)
	}
	m.mu.Lock()
	m.hold = false
	m.mu.Unlock()
	if _, err := b.Sync(ctx(t), ports.SyncRequest{Health: ports.SiteHealth{Node: "n1"}, Wait: 10 * time.Millisecond}); err != nil {
		t.Errorf("site-b's Sync while site-a holds its long polls: %v", err)
	}
	waitFor(t, entered, "site-b's Sync to reach the Central")
	cancel()
	for range 2 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("a long poll ended by its caller: %v, want context.Canceled", err)
		}
	}
}

// TestStopEndsWaitingSyncs: Stop does not wait out the long polls: a Sync
// waiting at central ends at once with ErrUnavailable (the site then syncs
// with another central), however long the grace period.
func TestStopEndsWaitingSyncs(t *testing.T) {
	entered := make(chan struct{}, 1)
	m := &mirror{hold: true, entered: entered}
	srv, err := NewServer(ServerConfig{Central: m, Sites: tokenSites})
	if err != nil {
		t.Fatal(err)
	}
	srv.grace = time.Hour
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	c := dial(t, ClientConfig{Addr: l.Addr().String(), Token: tokenA})
	answered := make(chan error, 1)
	go func() {
		_, err := c.Sync(ctx(t), ports.SyncRequest{Health: ports.SiteHealth{Node: "n1"}, Leads: true, Wait: time.Minute})
		answered <- err
	}()
	waitFor(t, entered, "the long poll to reach the Central")
	stopped := make(chan struct{})
	go func() { srv.Stop(); close(stopped) }()
	select {
	case err := <-answered:
		if !errors.Is(err, ports.ErrUnavailable) {
			t.Errorf("a Sync waiting when central stops: %v, want ErrUnavailable", err)
		}
	case <-time.After(waitLimit):
		t.Fatalf("the Sync waiting at a stopping central did not end within %s", waitLimit)
	}
	waitFor(t, stopped, "Stop to return")
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// TestFailoverCutsSyncInFlight: a long poll waiting at a central that dies
// is sent again at once, by the client, to the next central, which
// answers it: the site's node never sees the failure.
func TestFailoverCutsSyncInFlight(t *testing.T) {
	entered := make(chan struct{}, 1)
	first := startCentral(t, "127.0.0.1", ServerConfig{Central: &mirror{hold: true, entered: entered}, Sites: tokenSites})
	cmd := ports.SiteCommand{ID: "c1", Site: "site-a", OperationID: "op1", Action: ports.SiteDiscard, Actor: "bob",
		RequestedAt: time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC), State: ports.CommandRequested}
	next := &mirror{next: &ports.SyncAnswer{Commands: []ports.SiteCommand{cmd}}}
	second := startCentral(t, "127.0.0.1", ServerConfig{Central: next, Sites: tokenSites})
	c := dial(t, ClientConfig{Addrs: []string{first.addr, second.addr}, Token: tokenA})
	type synced struct {
		ans ports.SyncAnswer
		err error
	}
	answers := make(chan synced, 1)
	go func() {
		ans, err := c.Sync(ctx(t), ports.SyncRequest{Health: ports.SiteHealth{Node: "n1"}, Leads: true, Wait: time.Minute,
			Answers: []ports.CommandAnswer{{ID: "c0", State: ports.CommandApplied}}})
		answers <- synced{ans, err}
	}()
	waitFor(t, entered, "the long poll to reach the first central")
	killed := time.Now()
	first.lis.kill()
	select {
	case a := <-answers:
		if a.err != nil || len(a.ans.Commands) != 1 || a.ans.Commands[0] != cmd {
			t.Fatalf("the cut Sync: %+v, %v; want the second central's command", a.ans, a.err)
		}
		t.Logf("the Sync cut by the first central's death was answered by the second %s after the kill",
			time.Since(killed).Round(time.Millisecond))
	case <-time.After(failoverLimit):
		t.Fatalf("the Sync waiting at the killed central did not end within %s", failoverLimit)
	}
	if got := next.synced(); len(got) != 1 || len(got[0].Answers) != 1 || got[0].Site != "site-a" {
		t.Errorf("the second central got %+v, want the repeated Sync with its answer", got)
	}
}
