package channel

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/siteline/outbox/plugins/channel/v1/internal/pb"
)

// FuzzResultFromPlugin decodes what a plugin process may send central as
// one delivery's answer (a DeliverResult: index and result) and converts
// it as central does: it never panics, the outcome is one of three,
// RetryAfter lies in [0, MaxRetryAfter], and the error text is valid UTF-8
// without NUL bytes (which a database refuses) and at most MaxErrorBytes.
func FuzzResultFromPlugin(f *testing.F) {
	for _, r := range []*pb.DeliverResult{
		{Index: 0, Result: &pb.Result{Outcome: pb.Outcome_OUTCOME_SUCCESS, ResolvedTargets: []string{"/etc/passwd"}}},
		{Index: 3, Result: &pb.Result{Outcome: pb.Outcome_OUTCOME_PERMANENT, Error: "550 no such user"}},
		{Index: -1, Result: &pb.Result{Outcome: 42, Error: "bad\x00nul", RetryAfterMicros: -5}},
		{Result: &pb.Result{Outcome: pb.Outcome_OUTCOME_TRANSIENT, RetryAfterMicros: 1 << 62, Error: strings.Repeat("é", 5000)}},
		{Result: &pb.Result{Outcome: pb.Outcome_OUTCOME_TRANSIENT, RetryAfterMicros: 1500000}},
		{},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x12, 0xff, 0xff, 0xff, 0xff, 0x0f})
	// A result whose error is not UTF-8 (protobuf refuses it).
	f.Add([]byte{0x12, 0x05, 0x1a, 0x03, 'a', 0xff, 'b'})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m pb.DeliverResult
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		res := resultFromPB(m.GetResult())
		if res.Outcome != Success && res.Outcome != Transient && res.Outcome != Permanent {
			t.Fatalf("outcome %v", res.Outcome)
		}
		if res.RetryAfter < 0 || res.RetryAfter > MaxRetryAfter {
			t.Fatalf("RetryAfter %v", res.RetryAfter)
		}
		if !utf8.ValidString(res.Error) || strings.IndexByte(res.Error, 0) >= 0 || len(res.Error) > MaxErrorBytes {
			t.Fatalf("error text %q (%d bytes)", res.Error, len(res.Error))
		}
		if m.GetResult().GetOutcome() == pb.Outcome_OUTCOME_SUCCESS && res.Outcome != Success {
			t.Fatal("a Success lost")
		}
		if e := m.GetResult().GetError(); utf8.ValidString(e) && !strings.Contains(e, "\x00") && len(e) <= MaxErrorBytes && res.Error != e {
			t.Fatalf("a clean error text changed: %q → %q", e, res.Error)
		}
		if us := m.GetResult().GetRetryAfterMicros(); us > 0 && us < MaxRetryAfter.Microseconds() && res.RetryAfter != time.Duration(us)*time.Microsecond {
			t.Fatalf("RetryAfter %d µs became %v", us, res.RetryAfter)
		}
	})
}

// FuzzDescriptionFromPlugin decodes a plugin's description as central does
// and checks settings against it: nothing panics.
func FuzzDescriptionFromPlugin(f *testing.F) {
	for _, d := range []*pb.DescribeResponse{
		{Name: "email", Version: "1", Implemented: true, Settings: []*pb.Setting{{Name: "password", Secret: true}, {Name: "tls", Allowed: []string{"a"}}}},
		{Name: "\x00", Settings: []*pb.Setting{{}, {Name: "", Required: true}}},
		{},
	} {
		b, err := proto.Marshal(d)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m pb.DescribeResponse
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		d := descriptionFromPB(&m)
		if len(d.Settings) != len(m.GetSettings()) {
			t.Fatalf("%d settings of %d", len(d.Settings), len(m.GetSettings()))
		}
		_ = d.Validate(map[string]string{"password": "env:X", "tls": "b", "other": "x"})
	})
}
