package sitelink

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/siteline/outbox/adapters/sitelink/internal/pb"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/centraltest"
)

// FuzzSubmit feeds any bytes through what a Submit from an authenticated
// site goes through: protobuf decoding, the conversion to ports types,
// core's validation and ingest, and the answer's encoding. Every
// submission is accepted or rejected, once; every accepted row is stored as
// the calling site's; the answer always encodes.
func FuzzSubmit(f *testing.F) {
	valid := centraltest.NewSubmission("site-a")
	seed, _ := proto.Marshal(submitRequestToPB(ports.SubmitRequest{Notifications: []ports.Submission{valid}}))
	f.Add(seed)
	forged := centraltest.NewSubmission("site-b")
	forged.Type, forged.Priority, forged.Subject = "webhook", 1<<40, "caf\xe9"
	seed, _ = proto.Marshal(submitRequestToPB(ports.SubmitRequest{Notifications: []ports.Submission{forged, valid}}))
	f.Add(seed)
	f.Add([]byte{})
	f.Add([]byte("\x0a\x00\x0a\x02\x0a\x00"))
	f.Add([]byte("\xff\xff\xff\xff\x0f"))
	svc, store := newCore(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var req pb.SubmitRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return // gRPC answers a decoding error itself
		}
		subs := submitRequestFromPB(&req)
		res, err := svc.Submit(t.Context(), ports.SubmitRequest{Site: "site-a", Notifications: subs})
		if err != nil {
			if !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("Submit: %v, want nil or ErrInvalid", err)
			}
			return
		}
		if len(res.Accepted)+len(res.Rejected) != len(subs) {
			t.Fatalf("%d submissions gave %d accepted and %d rejected", len(subs), len(res.Accepted), len(res.Rejected))
		}
		for _, id := range res.Accepted {
			// An accepted id is a UUID in canonical form, in any case.
			n, ok := centraltest.FromStore(store)(t, strings.ToLower(id))
			if !ok {
				t.Fatalf("accepted %q is not stored", id)
			}
			if n.SourceSite != "site-a" {
				t.Fatalf("row %s stored from %q, want site-a", id, n.SourceSite)
			}
			if n.Priority < ports.MinPriority || n.Priority > ports.MaxPriority {
				t.Fatalf("row %s stored with priority %d", id, n.Priority)
			}
		}
		out := submitResultToPB(res)
		if _, err := proto.Marshal(out); err != nil {
			t.Fatalf("the answer does not encode: %v", err)
		}
		for _, r := range out.GetRejected() {
			if !utf8.ValidString(r.GetReason()) {
				t.Fatalf("reason %q is not UTF-8", r.GetReason())
			}
		}
	})
}

// FuzzStatus feeds any bytes through a Status from an authenticated site:
// every id asked is answered, once, in order, and the answer encodes.
func FuzzStatus(f *testing.F) {
	seed, _ := proto.Marshal(&pb.StatusRequest{Ids: [][]byte{[]byte("0195f0d2-7a3b-7c4d-8e5f-000000000042"), []byte("x\xff")}})
	f.Add(seed)
	f.Add([]byte{})
	f.Add([]byte("\x0a\x00\x0a\x00"))
	svc, _ := newCore(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var req pb.StatusRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return
		}
		sreq := statusRequestFromPB("site-a", &req)
		got, err := svc.Status(t.Context(), sreq)
		if err != nil {
			if !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("Status: %v", err)
			}
			return
		}
		out := statusResponseToPB(&req, got)
		if len(out.GetStatuses()) != len(req.GetIds()) {
			t.Fatalf("%d ids answered with %d statuses", len(req.GetIds()), len(out.GetStatuses()))
		}
		if _, err := proto.Marshal(out); err != nil {
			t.Fatalf("the answer does not encode: %v", err)
		}
	})
}

// FuzzAuthorization feeds any authorization headers (none, one or two)
// to the server's identification of a plaintext caller: it never panics,
// and names a site only for exactly one "Bearer <that site's token>".
func FuzzAuthorization(f *testing.F) {
	for _, h := range []string{"Bearer " + tokenA, "bearer  " + tokenB + " ", "Basic " + tokenA, "Bearer", "Bearer ", "", " Bearer " + tokenA, "Bearer\t" + tokenA, "Bearer " + tokenA + "x"} {
		f.Add(h, "", uint8(1))
	}
	f.Add("Bearer "+tokenA, "Bearer "+tokenA, uint8(2))
	f.Add("Bearer "+tokenA, "", uint8(0))
	svc, _ := newCore(f)
	srv, err := NewServer(ServerConfig{Central: svc, Sites: tokenSites})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, first, second string, n uint8) {
		md := metadata.MD{}
		switch n % 3 {
		case 1:
			md.Append("authorization", first)
		case 2:
			md.Append("authorization", first, second)
		}
		site, err := srv.identify(nil, md, "/outbox.link.v1.Central/Submit")
		want := ""
		if n%3 == 1 {
			if tok, ok := strings.CutPrefix(first, first[:min(len(first), 7)]); ok && strings.EqualFold(first[:min(len(first), 7)], "Bearer ") {
				switch strings.TrimSpace(tok) {
				case tokenA:
					want = "site-a"
				case tokenB:
					want = "site-b"
				}
			}
		}
		if site != want {
			t.Fatalf("identify(%q) = %q, %v; want %q", md, site, err, want)
		}
		if (err == nil) != (want != "") {
			t.Fatalf("identify(%q) = %q, %v", md, site, err)
		}
		if err != nil && (strings.Contains(err.Error(), tokenA) || strings.Contains(err.Error(), tokenB)) {
			t.Fatalf("the error holds a token: %v", err)
		}
	})
}

// FuzzReportOperations feeds any bytes through what a ReportOperations
// from an authenticated site goes through before central: protobuf
// decoding and the conversion to ports types. The report is always the
// calling site's, never carries a payload, keeps every row, and converts
// back to the same wire form (a retry count outside int32 aside, which is
// clamped); central's row validation never panics on it.
func FuzzReportOperations(f *testing.F) {
	op := newOperation()
	seed, _ := proto.Marshal(opReportToPB(ports.OpReport{Ops: []ports.Operation{op}, Feed: &ports.FeedPage{Epoch: "e", Next: "1"}}))
	f.Add(seed)
	op.ID, op.Status, op.LastError, op.RetryCount = "x\xff", "Nope", "caf\xe9", -1
	seed, _ = proto.Marshal(opReportToPB(ports.OpReport{Ops: []ports.Operation{op, {}}}))
	f.Add(seed)
	f.Add([]byte{})
	f.Add([]byte("\x0a\x00\x12\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var req pb.ReportOperationsRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return // gRPC answers a decoding error itself
		}
		rep := opReportFromPB("site-a", &req)
		if rep.Site != "site-a" || len(rep.Ops) != len(req.GetOps()) || (rep.Feed == nil) != (req.GetFeed() == nil) {
			t.Fatalf("report %+v from request %v", rep, &req)
		}
		for i, op := range rep.Ops {
			if op.Payload.Params != nil || op.Payload.SQL != "" || op.Payload.Args != nil {
				t.Fatalf("row %d carries a payload", i)
			}
			if err := ports.ValidateSiteCallReport(op); err != nil && !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("row %d: %v, want nil or ErrInvalid", i, err)
			}
			if rc := req.GetOps()[i].GetRetryCount(); rc == int64(int32(rc)) && int64(op.RetryCount) != rc {
				t.Fatalf("row %d: retry count %d became %d", i, rc, op.RetryCount)
			}
		}
		back := opReportToPB(rep)
		for i, o := range back.GetOps() {
			o.RetryCount = req.GetOps()[i].GetRetryCount()
		}
		if !proto.Equal(normalReport(back), normalReport(&req)) {
			t.Fatalf("round trip: %v became %v", &req, back)
		}
	})
}

// normalReport drops what does not survive a conversion: unknown fields,
// and empty texts versus absent ones.
func normalReport(r *pb.ReportOperationsRequest) *pb.ReportOperationsRequest {
	out := proto.Clone(r).(*pb.ReportOperationsRequest)
	out.ProtoReflect().SetUnknown(nil)
	for _, o := range out.GetOps() {
		o.ProtoReflect().SetUnknown(nil)
	}
	if out.GetFeed() != nil {
		out.Feed.ProtoReflect().SetUnknown(nil)
	}
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(out)
	var n pb.ReportOperationsRequest
	_ = proto.Unmarshal(b, &n)
	return &n
}

// FuzzSync feeds any bytes through what a Sync from an authenticated site
// goes through before central: decoding, the conversion (the site, and
// the health's site, are always the caller's; the wait is never negative;
// every answer is kept), central's health validation, the server's bound
// on the wait, and the encoding of an answer.
func FuzzSync(f *testing.F) {
	seed, _ := proto.Marshal(syncRequestToPB(ports.SyncRequest{Health: ports.SiteHealth{Node: "n1", Backlog: 3,
		Operations: []ports.OpKindStats{{Kind: ports.OpCall, Parked: 1}}}, Leads: true, Wait: ports.MaxSyncWait,
		Answers: []ports.CommandAnswer{{ID: "c1", State: ports.CommandRefused, Result: "no"}}}))
	f.Add(seed)
	seed, _ = proto.Marshal(&pb.SyncRequest{WaitMillis: -1 << 62, Health: &pb.SiteHealth{Node: []byte("\xff"), Backlog: -5}})
	f.Add(seed)
	seed, _ = proto.Marshal(&pb.SyncRequest{WaitMillis: 1 << 62})
	f.Add(seed)
	f.Add([]byte{})
	srv, err := NewServer(ServerConfig{Central: &mirror{}, Sites: tokenSites})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req pb.SyncRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return
		}
		sreq := syncRequestFromPB("site-a", &req)
		if sreq.Site != "site-a" || sreq.Health.Site != "site-a" {
			t.Fatalf("a Sync of site-a became one of %q (health of %q)", sreq.Site, sreq.Health.Site)
		}
		if sreq.Wait < 0 || len(sreq.Answers) != len(req.GetAnswers()) || len(sreq.Health.Operations) != len(req.GetHealth().GetOperations()) {
			t.Fatalf("Sync %+v from request %v", sreq, &req)
		}
		if w := srv.syncWait(t.Context(), sreq.Wait); w < 0 || w > ports.MaxSyncWait {
			t.Fatalf("wait %s bounded to %s", sreq.Wait, w)
		}
		if err := ports.ValidateSiteHealth(sreq.Health); err != nil && !errors.Is(err, ports.ErrInvalid) {
			t.Fatalf("ValidateSiteHealth: %v, want nil or ErrInvalid", err)
		}
		ans := ports.SyncAnswer{Feed: &ports.SiteCursor{Epoch: string(req.GetHealth().GetNode())}}
		for _, a := range sreq.Answers {
			ans.Commands = append(ans.Commands, ports.SiteCommand{ID: a.ID, Result: a.Result, Action: ports.SiteCommandAction(a.State)})
		}
		if _, err := proto.Marshal(syncAnswerToPB(ans)); err != nil {
			t.Fatalf("the answer does not encode: %v", err)
		}
	})
}
