package siteapi_test

import (
	"context"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/siteline/outbox/adapters/membuffer"
	"github.com/siteline/outbox/adapters/siteapi/internal/pb"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

// centralStub answers every Status with Pending and refuses Submit: the
// fuzz targets never forward.
type centralStub struct{}

func (centralStub) Submit(context.Context, ports.SubmitRequest) (ports.SubmitResult, error) {
	return ports.SubmitResult{}, errors.New("not in a fuzz test")
}

func (centralStub) Status(_ context.Context, req ports.StatusRequest) (map[string]ports.Status, error) {
	out := make(map[string]ports.Status, len(req.IDs))
	for _, id := range req.IDs {
		out[id] = ports.StatusPending
	}
	return out, nil
}

func (centralStub) ReportOperations(context.Context, ports.OpReport) error {
	return errors.New("not in a fuzz test")
}

func (centralStub) Sync(context.Context, ports.SyncRequest) (ports.SyncAnswer, error) {
	return ports.SyncAnswer{}, errors.New("not in a fuzz test")
}

// fuzzSite is the core behind the site API, over a buffer in memory.
func fuzzSite(f *testing.F) (*core.Site, *membuffer.Buffer) {
	f.Helper()
	buf := membuffer.New("fuzz")
	site, err := core.NewSite(core.SiteConfig{Site: "plant-1"}, core.SiteDeps{Buffer: buf, Central: centralStub{}})
	if err != nil {
		f.Fatal(err)
	}
	return site, buf
}

// FuzzSendRequest feeds whatever a caller could send as a Send through what
// the server does with it: protobuf decoding, the conversion to
// ports.SendRequest and core.Site's validation. Anything is either refused
// as invalid input, with a bounded text, or buffered under a canonical UUID.
func FuzzSendRequest(f *testing.F) {
	for _, r := range []*pb.SendRequest{
		sendReq(),
		{List: "ops", Subject: "s", Body: "b"},
		{Id: "not-a-uuid", List: "ops"},
		{List: "", Subject: "no list"},
		{List: "ops", Subject: "nul\x00"},
		{Id: "0190A5A4-8C3E-7CC4-9B2A-6C1F2D3E4F50", List: "ops", SourceScript: "s", ExecutionId: "e"},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(garbage)
	f.Add([]byte{0x12, 0x02, 0xff, 0xfe}) // a list that is not UTF-8
	site, buf := fuzzSite(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var m pb.SendRequest
		if err := proto.Unmarshal(data, &m); err != nil {
			return // grpc answers a request it cannot decode itself
		}
		req := pb.SendRequestFromPB(&m)
		if req.ID != m.GetId() || req.List != m.GetList() || req.Subject != m.GetSubject() || req.Body != m.GetBody() {
			t.Fatalf("the conversion changed the request: %+v from %v", req, &m)
		}
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		defer cancel()
		id, err := site.Send(ctx, req)
		if err != nil {
			if !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("Send refused %v with %v, not as invalid input", &m, err)
			}
			if len(err.Error()) > 2048 || !utf8.ValidString(err.Error()) {
				t.Fatalf("Send's refusal is %d bytes or not UTF-8: %.200q", len(err.Error()), err.Error())
			}
			return
		}
		u, perr := uuid.Parse(id)
		if perr != nil || u.String() != id {
			t.Fatalf("Send returned id %q, not a canonical UUID", id)
		}
		got, err := buf.Contains(ctx, []string{id})
		if err != nil || !got[id] {
			t.Fatalf("Send returned %s but the buffer does not hold it (%v)", id, err)
		}
		if err := buf.Remove(ctx, []string{id}); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzStatusRequest does the same for Status: decoding, then core.Site's
// checks of the ids. Anything is either refused as invalid input or
// answered with one status per id asked.
func FuzzStatusRequest(f *testing.F) {
	for _, r := range []*pb.StatusRequest{
		{Ids: []string{testID}},
		{Ids: []string{testID, testID, "x"}},
		{},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(garbage)
	site, _ := fuzzSite(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var m pb.StatusRequest
		if err := proto.Unmarshal(data, &m); err != nil {
			return
		}
		ids := m.GetIds()
		got, err := site.Status(t.Context(), ids)
		if err != nil {
			if !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("Status refused %d ids with %v, not as invalid input", len(ids), err)
			}
			if len(err.Error()) > 2048 {
				t.Fatalf("Status's refusal is %d bytes", len(err.Error()))
			}
			return
		}
		for _, id := range ids {
			if got[id] == "" {
				t.Fatalf("Status answered nothing for %q", id)
			}
		}
		_ = pb.StatusesToPB(got)
	})
}
