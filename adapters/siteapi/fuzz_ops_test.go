package siteapi_test

import (
	"context"
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/siteline/outbox/adapters/membuffer"
	"github.com/siteline/outbox/adapters/siteapi/internal/pb"
	"github.com/siteline/outbox/adapters/siteapi/internal/sitetest"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

// fuzzOps is the core behind the site API's cached operations, over a store
// in memory and a gateway that delivers everything.
func fuzzOps(f *testing.F) (*core.Site, *membuffer.Ops) {
	f.Helper()
	store := membuffer.NewOps()
	script := &sitetest.Script{Result: func(string, ports.Operation) ports.OpResult {
		return ports.OpResult{Outcome: ports.OutcomeSuccess}
	}}
	site, err := core.NewSite(core.SiteConfig{Site: "plant-1"}, core.SiteDeps{
		Buffer: membuffer.New("fuzz"), Central: centralStub{}, Ops: store, Gateway: script.Gateway("fuzz")})
	if err != nil {
		f.Fatal(err)
	}
	return site, store
}

// seed adds the wire form of each message to f's corpus, and garbage.
func seed(f *testing.F, msgs ...proto.Message) {
	f.Helper()
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(garbage)
}

// checkRefusal fails unless err is a bounded refusal of invalid input.
func checkRefusal(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("%s refused with %v, not as invalid input", what, err)
	}
	if len(err.Error()) > 2048 || !utf8.ValidString(err.Error()) {
		t.Fatalf("%s's refusal is %d bytes or not UTF-8: %.200q", what, len(err.Error()), err.Error())
	}
}

// checkStored fails unless o is a delivered operation under a canonical
// UUID that the store holds, then purges it.
func checkStored(t *testing.T, store *membuffer.Ops, o ports.OpOutcome) {
	t.Helper()
	u, err := uuid.Parse(o.Operation.ID)
	if err != nil || u.String() != o.Operation.ID {
		t.Fatalf("operation id %q is not a canonical UUID", o.Operation.ID)
	}
	if _, err := store.Get(t.Context(), o.Operation.ID); err != nil {
		t.Fatalf("operation %s answered but not stored: %v", o.Operation.ID, err)
	}
	_ = pb.OutcomeToPB(o)
	if _, err := store.Purge(t.Context(), time.Now().Add(time.Hour), 10); err != nil {
		t.Fatal(err)
	}
}

// FuzzCachedCallRequest feeds whatever a caller could send as a CachedCall
// through what the server does with it: decoding, the conversion and
// core.Site's checks. Anything is refused as invalid input, with a bounded
// text, or delivered and stored under a canonical UUID.
func FuzzCachedCallRequest(f *testing.F) {
	seed(f, callReq(testID, sitetest.MethodOK),
		&pb.CachedCallRequest{System: sitetest.System, Method: sitetest.MethodOK},
		&pb.CachedCallRequest{System: sitetest.System, Method: sitetest.MethodOK, Params: []byte(`{"a":[1,{"b":null}]}`)},
		&pb.CachedCallRequest{Id: "x", System: "", Params: []byte{0xff}},
		&pb.CachedCallRequest{System: sitetest.System, Method: "nope", Source: &pb.Source{SourceScript: "\x00"}})
	site, store := fuzzOps(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var m pb.CachedCallRequest
		if err := proto.Unmarshal(data, &m); err != nil {
			return
		}
		req := pb.CallRequestFromPB(&m)
		if req.ID != m.GetId() || req.System != m.GetSystem() || string(req.Params) != string(m.GetParams()) {
			t.Fatalf("the conversion changed the request: %+v from %v", req, &m)
		}
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		defer cancel()
		o, err := site.CachedCall(ctx, req)
		if err != nil {
			checkRefusal(t, "CachedCall", err)
			return
		}
		checkStored(t, store, o)
	})
}

// FuzzCachedWriteRequest does the same for CachedWrite.
func FuzzCachedWriteRequest(f *testing.F) {
	seed(f, &pb.CachedWriteRequest{Id: testID, Connection: sitetest.Connection, Sql: "INSERT INTO t VALUES ($1, $2)",
		Args: []byte(`["a", 1.5, true, null]`)},
		&pb.CachedWriteRequest{Connection: sitetest.Connection, Sql: "DELETE FROM t"},
		&pb.CachedWriteRequest{Connection: sitetest.Connection, Sql: "x", Args: []byte(`[[1]]`)},
		&pb.CachedWriteRequest{Connection: "nope", Sql: "x", Args: []byte(`{}`)})
	site, store := fuzzOps(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var m pb.CachedWriteRequest
		if err := proto.Unmarshal(data, &m); err != nil {
			return
		}
		req := pb.WriteRequestFromPB(&m)
		if req.ID != m.GetId() || req.SQL != m.GetSql() || string(req.Args) != string(m.GetArgs()) {
			t.Fatalf("the conversion changed the request: %+v from %v", req, &m)
		}
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		defer cancel()
		o, err := site.CachedWrite(ctx, req)
		if err != nil {
			checkRefusal(t, "CachedWrite", err)
			return
		}
		checkStored(t, store, o)
	})
}

// FuzzTrackingRequest: any Tracking request is refused as invalid input or
// answered with rows of ids asked only.
func FuzzTrackingRequest(f *testing.F) {
	seed(f, &pb.TrackingRequest{Ids: []string{testID}}, &pb.TrackingRequest{Ids: []string{testID, "x", ""}}, &pb.TrackingRequest{})
	site, _ := fuzzOps(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var m pb.TrackingRequest
		if err := proto.Unmarshal(data, &m); err != nil {
			return
		}
		got, err := site.Tracking(t.Context(), m.GetIds())
		if err != nil {
			checkRefusal(t, "Tracking", err)
			return
		}
		if len(got) > len(m.GetIds()) {
			t.Fatalf("Tracking answered %d rows for %d ids", len(got), len(m.GetIds()))
		}
		_ = pb.TrackingToPB(got)
	})
}

// FuzzListOperationsRequest: any ListOperations request is refused as
// invalid input or answered with a page within its limit.
func FuzzListOperationsRequest(f *testing.F) {
	seed(f, &pb.ListOperationsRequest{},
		&pb.ListOperationsRequest{Kind: string(ports.OpCall), Statuses: []string{"Parked", "Pending"}, Target: "erp", Limit: 10},
		&pb.ListOperationsRequest{CreatedFromMicros: -1 << 62, CreatedToMicros: 1 << 62, After: "garbage-cursor", Limit: -3},
		&pb.ListOperationsRequest{Statuses: make([]string, 40)})
	site, _ := fuzzOps(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var m pb.ListOperationsRequest
		if err := proto.Unmarshal(data, &m); err != nil {
			return
		}
		filter, page, err := pb.ListRequestFromPB(&m)
		if err != nil {
			checkRefusal(t, "the conversion of ListOperations", err)
			return
		}
		p, err := site.ListOperations(t.Context(), filter, page)
		if err != nil {
			checkRefusal(t, "ListOperations", err)
			return
		}
		if len(p.Items) > max(page.Limit, core.DefaultPageSize) {
			t.Fatalf("a page of %d rows for a limit of %d", len(p.Items), page.Limit)
		}
		_ = pb.PageToPB(p)
	})
}

// FuzzOperationRequest: any Retry or Discard request is refused as
// invalid input, or names an operation the site does not know.
func FuzzOperationRequest(f *testing.F) {
	seed(f, &pb.OperationRequest{Id: testID}, &pb.OperationRequest{Id: "x"}, &pb.OperationRequest{})
	site, _ := fuzzOps(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var m pb.OperationRequest
		if err := proto.Unmarshal(data, &m); err != nil {
			return
		}
		for _, act := range []func(context.Context, string) (ports.Operation, error){site.RetryOperation, site.DiscardOperation} {
			_, err := act(t.Context(), m.GetId())
			if errors.Is(err, ports.ErrNotFound) {
				continue
			}
			checkRefusal(t, "an operator's action", err)
		}
	})
}

// FuzzOperationOutcome feeds whatever a node could answer a client's
// cached call with through the client's conversion: it never fails, and
// keeps the retry count in range.
func FuzzOperationOutcome(f *testing.F) {
	seed(f, pb.OutcomeToPB(ports.OpOutcome{Operation: ports.Operation{ID: testID, Status: ports.OpDelivered,
		RetryCount: 3, CreatedAt: time.Unix(1, 0)}, Answer: []byte(`{}`)}),
		&pb.OperationOutcome{Operation: &pb.Operation{RetryCount: -1 << 62, CreatedAtMicros: 1 << 62}})
	f.Fuzz(func(t *testing.T, data []byte) {
		var m pb.OperationOutcome
		if err := proto.Unmarshal(data, &m); err != nil {
			return
		}
		o := pb.OutcomeFromPB(&m)
		if o.Operation.RetryCount < 0 || o.Operation.ID != m.GetOperation().GetId() {
			t.Fatalf("converted %v to %+v", &m, o.Operation)
		}
	})
}
