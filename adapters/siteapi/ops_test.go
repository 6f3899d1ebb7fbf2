package siteapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/siteline/outbox/adapters/membuffer"
	"github.com/siteline/outbox/adapters/siteapi"
	"github.com/siteline/outbox/adapters/siteapi/internal/pb"
	"github.com/siteline/outbox/adapters/siteapi/internal/sitetest"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

// opsSite is the domain behind a test's site API servers: a core.Site per
// node, over one store in memory — the replicated copy every node reads —
// and the gateways of one script, which count each node's attempts.
type opsSite struct {
	store  *membuffer.Ops
	script *sitetest.Script
}

func newOpsSite() *opsSite {
	return &opsSite{store: membuffer.NewOps(), script: &sitetest.Script{}}
}

// options returns server options whose nodes serve o's cached operations.
func (o *opsSite) options(t *testing.T, opt sitetest.Options) sitetest.Options {
	opt.Ops = func(name string) ports.Operations {
		site, err := core.NewSite(core.SiteConfig{Site: "plant-1"}, core.SiteDeps{
			Buffer: membuffer.New(name), Central: centralStub{}, Ops: o.store, Gateway: o.script.Gateway(name)})
		if err != nil {
			t.Fatal(err)
		}
		return site
	}
	return opt
}

// stored returns every operation in the store.
func (o *opsSite) stored(t *testing.T) []ports.Operation {
	t.Helper()
	p, err := o.store.List(context.Background(), ports.OpFilter{}, ports.PageRequest{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return p.Items
}

func newID(t *testing.T) string {
	t.Helper()
	return uuid.Must(uuid.NewV7()).String()
}

func callReq(id, method string) *pb.CachedCallRequest {
	return &pb.CachedCallRequest{Id: id, System: sitetest.System, Method: method, Params: []byte(`{"part":"A-7"}`),
		Source: &pb.Source{SourceInstance: "line-3", SourceScript: "oven-watch", ExecutionId: "run-7"}}
}

// TestCachedCallViaFollowerIsAttemptedByTheLeaderOnly: a call made at the
// follower is passed to the leader, which attempts it once and answers the
// target's answer; the follower's gateway is never used. Both nodes answer
// Tracking from their own copy; a repeat of the id answers the stored row
// and attempts nothing.
func TestCachedCallViaFollowerIsAttemptedByTheLeaderOnly(t *testing.T) {
	o := newOpsSite()
	leader, follower := sitetest.StartPair(t, o.options(t, sitetest.Options{}))
	id := newID(t)
	resp, err := client(t, follower.Addr, nil).CachedCall(deadline(t), callReq(id, sitetest.MethodOK))
	if err != nil {
		t.Fatalf("CachedCall via follower: %v", err)
	}
	op := resp.GetOperation()
	if op.GetId() != id || op.GetStatus() != string(ports.OpDelivered) || string(resp.GetAnswer()) != string(sitetest.AnswerOK) {
		t.Fatalf("answer = %v, want %s Delivered with %s", resp, id, sitetest.AnswerOK)
	}
	if op.GetSource().GetSourceScript() != "oven-watch" || op.GetKind() != string(ports.OpCall) || op.GetMethod() != sitetest.MethodOK {
		t.Fatalf("row = %v: kind, method or provenance lost", op)
	}
	if n, m := o.script.Attempts("leader"), o.script.Attempts("follower"); n != 1 || m != 0 {
		t.Fatalf("attempts: leader %d, follower %d; want 1 and 0", n, m)
	}

	again, err := client(t, leader.Addr, nil).CachedCall(deadline(t), callReq(id, sitetest.MethodOK))
	if err != nil || again.GetOperation().GetStatus() != string(ports.OpDelivered) {
		t.Fatalf("repeat: %v, %v", again, err)
	}
	if n := o.script.AttemptsOf(id); n != 1 {
		t.Fatalf("the repeat was attempted: %d attempts", n)
	}

	unknown := newID(t)
	for _, n := range []*sitetest.Node{leader, follower} {
		tr, err := client(t, n.Addr, nil).Tracking(deadline(t), &pb.TrackingRequest{Ids: []string{id, unknown}})
		if err != nil {
			t.Fatalf("Tracking at %s: %v", n.Addr, err)
		}
		got := pb.TrackingFromPB(tr)
		if len(got) != 1 || got[id].Status != ports.OpDelivered || got[id].CreatedAt.IsZero() || got[id].Version != 1 {
			t.Fatalf("Tracking at %s = %+v, want %s Delivered alone", n.Addr, got, id)
		}
	}
}

// TestTrackingIsAnsweredWithoutALeader: a follower that knows no leader
// still answers Tracking and ListOperations from its own copy, and refuses
// a cached call as Unavailable without attempting it.
func TestTrackingIsAnsweredWithoutALeader(t *testing.T) {
	o := newOpsSite()
	leader, follower := sitetest.StartPair(t, o.options(t, sitetest.Options{}))
	id := newID(t)
	if _, err := client(t, leader.Addr, nil).CachedCall(deadline(t), callReq(id, sitetest.MethodDown)); err != nil {
		t.Fatal(err)
	}
	follower.SetLeader(false, "")
	fc := client(t, follower.Addr, nil)
	tr, err := fc.Tracking(deadline(t), &pb.TrackingRequest{Ids: []string{id}})
	if err != nil || tr.GetOperations()[id].GetStatus() != string(ports.OpPending) {
		t.Fatalf("Tracking without a leader: %v, %v", tr, err)
	}
	page, err := fc.ListOperations(deadline(t), &pb.ListOperationsRequest{Statuses: []string{string(ports.OpPending)}})
	if err != nil || len(page.GetOperations()) != 1 || page.GetOperations()[0].GetId() != id {
		t.Fatalf("ListOperations without a leader: %v, %v", page, err)
	}
	_, err = fc.CachedCall(deadline(t), callReq(newID(t), sitetest.MethodOK))
	wantCode(t, err, codes.Unavailable, "no leader")
	if n := o.script.Attempts("follower"); n != 0 {
		t.Fatalf("the follower attempted %d times", n)
	}
}

// TestCachedWriteParksAndOperatorActs: a write whose target is down is
// buffered (Pending), or parked at once when no retries are allowed; Retry
// and Discard, made at the follower, act on the parked ones through the
// leader, and refuse what is not parked or not known.
func TestCachedWriteParksAndOperatorActs(t *testing.T) {
	o := newOpsSite()
	leader, follower := sitetest.StartPair(t, o.options(t, sitetest.Options{}))
	fc := client(t, follower.Addr, nil)
	write := func(conn string) *pb.OperationOutcome {
		t.Helper()
		resp, err := fc.CachedWrite(deadline(t), &pb.CachedWriteRequest{Id: newID(t), Connection: conn,
			Sql: "INSERT INTO counts (line, n) VALUES ($1, $2)", Args: []byte(`["line-3", 7]`)})
		if err != nil {
			t.Fatalf("CachedWrite to %s: %v", conn, err)
		}
		return resp
	}
	if r := write(sitetest.Connection); r.GetOperation().GetStatus() != string(ports.OpDelivered) || string(r.GetAnswer()) != string(sitetest.AnswerRows) {
		t.Fatalf("write to a target up: %v", r)
	}
	parked1 := write(sitetest.ConnectionDown).GetOperation()
	parked2 := write(sitetest.ConnectionDown).GetOperation()
	if parked1.GetStatus() != string(ports.OpParked) || !strings.Contains(parked1.GetLastError(), "503") {
		t.Fatalf("write to a target down with no retries: %v, want Parked with the error", parked1)
	}

	page, err := fc.ListOperations(deadline(t), &pb.ListOperationsRequest{Kind: string(ports.OpWrite),
		Statuses: []string{string(ports.OpParked)}, Limit: 1})
	if err != nil || len(page.GetOperations()) != 1 || page.GetNext() == "" {
		t.Fatalf("first page of parked writes: %v, %v", page, err)
	}
	next, err := fc.ListOperations(deadline(t), &pb.ListOperationsRequest{Kind: string(ports.OpWrite),
		Statuses: []string{string(ports.OpParked)}, Limit: 1, After: page.GetNext()})
	if err != nil || len(next.GetOperations()) != 1 || next.GetOperations()[0].GetId() == page.GetOperations()[0].GetId() {
		t.Fatalf("second page of parked writes: %v, %v", next, err)
	}

	retried, err := fc.RetryOperation(deadline(t), &pb.OperationRequest{Id: parked1.GetId()})
	if err != nil || retried.GetStatus() != string(ports.OpRetrying) || retried.GetRetryCount() != 0 {
		t.Fatalf("Retry: %v, %v", retried, err)
	}
	discarded, err := fc.DiscardOperation(deadline(t), &pb.OperationRequest{Id: parked2.GetId()})
	if err != nil || discarded.GetStatus() != string(ports.OpDiscarded) || discarded.GetTerminalAtMicros() == 0 {
		t.Fatalf("Discard: %v, %v", discarded, err)
	}
	_, err = fc.DiscardOperation(deadline(t), &pb.OperationRequest{Id: parked1.GetId()})
	wantCode(t, err, codes.FailedPrecondition, "Retrying")
	_, err = client(t, leader.Addr, nil).RetryOperation(deadline(t), &pb.OperationRequest{Id: newID(t)})
	wantCode(t, err, codes.NotFound, "not found")
	_, err = fc.RetryOperation(deadline(t), &pb.OperationRequest{Id: "not-an-id"})
	wantCode(t, err, codes.InvalidArgument, "")
	if n := o.script.Attempts("follower"); n != 0 {
		t.Fatalf("the follower attempted %d times", n)
	}
}

// TestOpsAuthenticateBeforeDecoding: a cached call of garbage without the
// token is refused as unauthenticated before it is read; nothing is
// attempted or stored.
func TestOpsAuthenticateBeforeDecoding(t *testing.T) {
	o := newOpsSite()
	leader, follower := sitetest.StartPair(t, o.options(t, sitetest.Options{Token: "s3cret"}))
	for _, m := range []string{pb.Site_CachedCall_FullMethodName, pb.Site_CachedWrite_FullMethodName,
		pb.Site_Tracking_FullMethodName, pb.Site_ListOperations_FullMethodName,
		pb.Site_RetryOperation_FullMethodName, pb.Site_DiscardOperation_FullMethodName} {
		for _, n := range []*sitetest.Node{leader, follower} {
			wantCode(t, invokeRaw(t, n.Addr, deadline(t), m, garbage), codes.Unauthenticated, "token")
		}
	}
	good, err := proto.Marshal(callReq(newID(t), sitetest.MethodOK))
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, invokeRaw(t, follower.Addr, deadline(t), pb.Site_CachedCall_FullMethodName, good), codes.Unauthenticated, "token")
	for _, n := range []*sitetest.Node{leader, follower} {
		if c := n.Server.Refusals().Count("malformed request"); c != 0 {
			t.Fatalf("unauthenticated garbage was read: %d malformed", c)
		}
	}
	if n := o.script.AllAttempts(); n != 0 || len(o.stored(t)) != 0 {
		t.Fatalf("unauthenticated calls were attempted (%d) or stored (%d)", n, len(o.stored(t)))
	}
	resp, err := client(t, follower.Addr, nil).CachedCall(withToken(deadline(t), "s3cret"), callReq(newID(t), sitetest.MethodOK))
	if err != nil || resp.GetOperation().GetStatus() != string(ports.OpDelivered) {
		t.Fatalf("with the token: %v, %v", resp, err)
	}
}

// TestOpsBadInputIsRefusedAndNothingStored: every kind of bad input is
// refused with InvalidArgument and its reason (a request over the size
// limit with ResourceExhausted, before it is read), at the follower as at
// the leader, and nothing is attempted or stored.
func TestOpsBadInputIsRefusedAndNothingStored(t *testing.T) {
	o := newOpsSite()
	leader, follower := sitetest.StartPair(t, o.options(t, sitetest.Options{}))
	bigParams := `{"blob":"` + strings.Repeat("x", 65<<10) + `"}`
	calls := []struct {
		name string
		req  func() *pb.CachedCallRequest
		want string
	}{
		{"unknown system", func() *pb.CachedCallRequest { r := callReq(newID(t), "x"); r.System = "mes"; return r }, `no external system "mes"`},
		{"unknown method", func() *pb.CachedCallRequest { return callReq(newID(t), "cancel") }, `no method "cancel"`},
		{"params not an object", func() *pb.CachedCallRequest {
			r := callReq(newID(t), sitetest.MethodOK)
			r.Params = []byte(`[1]`)
			return r
		}, "not a JSON object"},
		{"params not JSON", func() *pb.CachedCallRequest {
			r := callReq(newID(t), sitetest.MethodOK)
			r.Params = []byte(`{"a":`)
			return r
		}, "not a JSON object"},
		{"params not UTF-8", func() *pb.CachedCallRequest {
			r := callReq(newID(t), sitetest.MethodOK)
			r.Params = []byte("{\"a\":\"\xff\"}")
			return r
		}, "not valid UTF-8"},
		{"params over the payload limit", func() *pb.CachedCallRequest {
			r := callReq(newID(t), sitetest.MethodOK)
			r.Params = []byte(bigParams)
			return r
		}, "over the limit of 65536"},
		{"id not a UUID", func() *pb.CachedCallRequest { return callReq("order-17", sitetest.MethodOK) }, "order-17"},
		{"provenance too long", func() *pb.CachedCallRequest {
			r := callReq(newID(t), sitetest.MethodOK)
			r.Source.SourceScript = strings.Repeat("s", 4096)
			return r
		}, "source script is 4096 bytes"},
	}
	for _, n := range []*sitetest.Node{leader, follower} {
		c := client(t, n.Addr, nil)
		for _, tc := range calls {
			_, err := c.CachedCall(deadline(t), tc.req())
			wantCode(t, err, codes.InvalidArgument, tc.want)
		}
		_, err := c.CachedCall(context.Background(), callReq(newID(t), sitetest.MethodOK))
		wantCode(t, err, codes.InvalidArgument, "needs a deadline")
		_, err = c.CachedWrite(deadline(t), &pb.CachedWriteRequest{Id: newID(t), Connection: sitetest.Connection,
			Sql: "INSERT INTO t VALUES ($1)", Args: []byte(`[{"nested":1}]`)})
		wantCode(t, err, codes.InvalidArgument, "args[0]")
		_, err = c.CachedWrite(deadline(t), &pb.CachedWriteRequest{Id: newID(t), Connection: "historian", Sql: "SELECT 1"})
		wantCode(t, err, codes.InvalidArgument, `no database connection "historian"`)
		_, err = c.CachedWrite(deadline(t), &pb.CachedWriteRequest{Id: newID(t), Connection: sitetest.Connection})
		wantCode(t, err, codes.InvalidArgument, "sql")
		huge := callReq(newID(t), sitetest.MethodOK)
		huge.Params = []byte(`{"blob":"` + strings.Repeat("x", siteapi.DefaultMaxRequestBytes) + `"}`)
		_, err = c.CachedCall(deadline(t), huge)
		wantCode(t, err, codes.ResourceExhausted, "")
		_, err = c.ListOperations(deadline(t), &pb.ListOperationsRequest{Statuses: make([]string, 7)})
		wantCode(t, err, codes.InvalidArgument, "7 statuses")
		_, err = c.ListOperations(deadline(t), &pb.ListOperationsRequest{Statuses: []string{"Lost"}})
		wantCode(t, err, codes.InvalidArgument, `"Lost"`)
		_, err = c.ListOperations(deadline(t), &pb.ListOperationsRequest{Limit: 5000})
		wantCode(t, err, codes.InvalidArgument, "page size")
		_, err = c.Tracking(deadline(t), &pb.TrackingRequest{Ids: []string{"nope"}})
		wantCode(t, err, codes.InvalidArgument, "nope")
	}
	// A string field that is not UTF-8 (the system, field 2) and garbage are
	// not messages: grpc refuses them as they are read, with a code of its
	// own, and the refusal is counted.
	for _, body := range [][]byte{{0x12, 0x02, 0xff, 0xfe}, garbage} {
		err := invokeRaw(t, follower.Addr, deadline(t), pb.Site_CachedCall_FullMethodName, body)
		wantCode(t, err, codes.Internal, "unmarshal")
	}
	sitetest.WaitRefused(t, follower, "malformed request", 2)
	if n := o.script.AllAttempts(); n != 0 || len(o.stored(t)) != 0 {
		t.Fatalf("bad input was attempted (%d) or stored (%d)", n, len(o.stored(t)))
	}
}

// TestPermanentFailureIsRecordedFailed: a call the target refuses for good
// answers its Failed row, the target's error in it, and stores no payload.
func TestPermanentFailureIsRecordedFailed(t *testing.T) {
	o := newOpsSite()
	_, follower := sitetest.StartPair(t, o.options(t, sitetest.Options{}))
	id := newID(t)
	resp, err := client(t, follower.Addr, nil).CachedCall(deadline(t), callReq(id, sitetest.MethodRefuse))
	if err != nil {
		t.Fatal(err)
	}
	if op := resp.GetOperation(); op.GetStatus() != string(ports.OpFailed) || !strings.Contains(op.GetLastError(), "400") {
		t.Fatalf("row = %v, want Failed with the 400", op)
	}
	stored, err := o.store.Get(context.Background(), id)
	if err != nil || stored.Status != ports.OpFailed || stored.Payload.Params != nil {
		t.Fatalf("stored %+v, %v: want Failed without payload", stored, err)
	}
}

// TestOpsNeedOps: a server without ServerConfig.Ops answers the RPCs of
// cached operations Unimplemented, and passes nothing on.
func TestOpsNeedOps(t *testing.T) {
	leader, follower := sitetest.StartPair(t, sitetest.Options{})
	c := client(t, follower.Addr, nil)
	_, err := c.CachedCall(deadline(t), callReq(newID(t), sitetest.MethodOK))
	wantCode(t, err, codes.Unimplemented, "serves no cached operations")
	_, err = c.Tracking(deadline(t), &pb.TrackingRequest{Ids: []string{testID}})
	wantCode(t, err, codes.Unimplemented, "serves no cached operations")
	_, err = c.DiscardOperation(deadline(t), &pb.OperationRequest{Id: testID})
	wantCode(t, err, codes.Unimplemented, "serves no cached operations")
	if n := leader.LeaderCalls.Load() + follower.LeaderCalls.Load(); n != 0 {
		t.Fatalf("the leader was looked up %d times", n)
	}
}

// TestOpRequestBytes: the request size derived for a payload limit fits a
// request of that payload, and never falls below the Send's.
func TestOpRequestBytes(t *testing.T) {
	if got := siteapi.OpRequestBytes(255, 65536, 64<<10); got != siteapi.RequestBytes(255, 65536) {
		t.Fatalf("OpRequestBytes with the defaults = %d, want RequestBytes's %d", got, siteapi.RequestBytes(255, 65536))
	}
	limit := siteapi.OpRequestBytes(255, 65536, 1<<20)
	req := callReq(testID, sitetest.MethodOK)
	req.Params = json.RawMessage(`{"blob":"` + strings.Repeat("x", 1<<20-12) + `"}`)
	req.Source.SourceInstance, req.Source.SourceScript = strings.Repeat("i", 200), strings.Repeat("s", 200)
	req.Source.ExecutionId, req.Source.ParentExecutionId = strings.Repeat("e", 200), strings.Repeat("p", 200)
	if n := proto.Size(req); n > limit {
		t.Fatalf("a call of 1 MiB params is %d bytes, over the derived limit %d", n, limit)
	}
}

// TestOpsAreRateLimited: the RPCs of cached operations count against the
// caller's bucket as a Send does; a call past it is refused before it is
// read, and nothing is attempted.
func TestOpsAreRateLimited(t *testing.T) {
	o := newOpsSite()
	leader, _ := sitetest.StartPair(t, o.options(t, sitetest.Options{Limits: siteapi.Limits{Rate: 0.001, Burst: 1}}))
	c := client(t, leader.Addr, nil)
	if _, err := c.Tracking(deadline(t), &pb.TrackingRequest{Ids: []string{testID}}); err != nil {
		t.Fatalf("first call: %v", err)
	}
	_, err := c.CachedCall(deadline(t), callReq(newID(t), sitetest.MethodOK))
	wantCode(t, err, codes.ResourceExhausted, "rate limit")
	if n := o.script.AllAttempts(); n != 0 {
		t.Fatalf("a call past the rate was attempted %d times", n)
	}
}

// TestCachedCallForwardedOverMemberTLS: a script authenticated by its
// certificate calls the follower, which passes the call to the leader over
// member TLS; the leader limits it under the script's name, not the
// follower's, and attempts it once.
func TestCachedCallForwardedOverMemberTLS(t *testing.T) {
	o := newOpsSite()
	p := newPKI(t)
	leader, follower := p.startPair(t, o.options(t, sitetest.Options{Limits: siteapi.Limits{Rate: slow, Burst: 1}}))
	c := client(t, follower.Addr, p.script(t, "oven-watch"))
	resp, err := c.CachedCall(deadline(t), callReq(newID(t), sitetest.MethodOK))
	if err != nil || resp.GetOperation().GetStatus() != string(ports.OpDelivered) {
		t.Fatalf("CachedCall over member TLS: %v, %v", resp, err)
	}
	// The script's one token is spent at the follower; another script's
	// call through the same follower still passes at the leader.
	other := client(t, follower.Addr, p.script(t, "kiln-watch"))
	if _, err := other.CachedCall(deadline(t), callReq(newID(t), sitetest.MethodOK)); err != nil {
		t.Fatalf("another script's call: %v", err)
	}
	if n, m := o.script.Attempts("leader"), o.script.Attempts("follower"); n != 2 || m != 0 {
		t.Fatalf("attempts: leader %d, follower %d; want 2 and 0", n, m)
	}
	if n := leader.Server.Refusals().Count("rate limited"); n != 0 {
		t.Fatalf("the leader limited forwarded calls under the follower's name: %d refusals", n)
	}
}
