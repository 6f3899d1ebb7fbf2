package channel

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/siteline/outbox/plugins/channel/v1/internal/pb"
)

// FuzzResultFromPlugin decodes what a plugin process may send central as
// one delivery's answer (a DeliverResult: index and result) and converts
// it as central does, for a delivery of targets targets: it never panics,
// every outcome is one of three, every RetryAfter lies in [0,
// MaxRetryAfter], and every error text is valid UTF-8 without NUL bytes
// (which a database refuses) and at most MaxErrorBytes; there are 0 or
// exactly targets per-target answers, and another count on the wire is a
// Transient failure of the whole delivery.
func FuzzResultFromPlugin(f *testing.F) {
	for _, c := range []struct {
		r       *pb.DeliverResult
		targets uint8
	}{
		{&pb.DeliverResult{Index: 0, Result: &pb.Result{Outcome: pb.Outcome_OUTCOME_SUCCESS, ResolvedTargets: []string{"/etc/passwd"}}}, 1},
		{&pb.DeliverResult{Index: 3, Result: &pb.Result{Outcome: pb.Outcome_OUTCOME_PERMANENT, Error: "550 no such user"}}, 1},
		{&pb.DeliverResult{Index: -1, Result: &pb.Result{Outcome: 42, Error: "bad\x00nul", RetryAfterMicros: -5}}, 0},
		{&pb.DeliverResult{Result: &pb.Result{Outcome: pb.Outcome_OUTCOME_TRANSIENT, RetryAfterMicros: 1 << 62, Error: strings.Repeat("é", 5000)}}, 2},
		{&pb.DeliverResult{Result: &pb.Result{Outcome: pb.Outcome_OUTCOME_TRANSIENT, RetryAfterMicros: 1500000}}, 1},
		{&pb.DeliverResult{Result: &pb.Result{Outcome: pb.Outcome_OUTCOME_SUCCESS, Targets: []*pb.TargetResult{
			{Outcome: pb.Outcome_OUTCOME_SUCCESS},
			{Outcome: pb.Outcome_OUTCOME_PERMANENT, Error: "550 no such user"},
			{Outcome: 7, Error: "x\x00" + strings.Repeat("ü", 3000), RetryAfterMicros: 1 << 62},
			{Outcome: pb.Outcome_OUTCOME_TRANSIENT, RetryAfterMicros: -1},
		}}}, 4},
		{&pb.DeliverResult{Result: &pb.Result{Targets: []*pb.TargetResult{{}, {}}}}, 3},
		{&pb.DeliverResult{}, 0},
	} {
		b, err := proto.Marshal(c.r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, c.targets)
	}
	f.Add([]byte{0x12, 0xff, 0xff, 0xff, 0xff, 0x0f}, uint8(1))
	// A result whose error is not UTF-8 (protobuf refuses it).
	f.Add([]byte{0x12, 0x05, 0x1a, 0x03, 'a', 0xff, 'b'}, uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, targets uint8) {
		var m pb.DeliverResult
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		n := int(targets)
		res := resultFromPB(m.GetResult(), n)
		bounded(t, "result", res.Outcome, res.Error, res.RetryAfter)
		for i, r := range res.Targets {
			bounded(t, fmt.Sprintf("target %d", i), r.Outcome, r.Error, r.RetryAfter)
		}
		wire := m.GetResult().GetTargets()
		switch {
		case len(wire) == 0:
			if res.Targets != nil {
				t.Fatalf("%d target results from none", len(res.Targets))
			}
		case len(wire) != n:
			if res.Targets != nil || res.Outcome != Transient {
				t.Fatalf("%d answers for %d targets: %s with %d target results", len(wire), n, res.Outcome, len(res.Targets))
			}
			return
		default:
			if len(res.Targets) != n {
				t.Fatalf("%d target results for %d targets", len(res.Targets), n)
			}
			for i, w := range wire {
				if w.GetOutcome() == pb.Outcome_OUTCOME_SUCCESS && res.Targets[i].Outcome != Success {
					t.Fatalf("target %d: a Success lost", i)
				}
				unchanged(t, fmt.Sprintf("target %d", i), w.GetError(), res.Targets[i].Error, w.GetRetryAfterMicros(), res.Targets[i].RetryAfter)
			}
			if want := PerTarget(res.Targets).Outcome; res.Outcome != want {
				t.Fatalf("overall %s, but the targets make %s", res.Outcome, want)
			}
			return
		}
		if m.GetResult().GetOutcome() == pb.Outcome_OUTCOME_SUCCESS && res.Outcome != Success {
			t.Fatal("a Success lost")
		}
		unchanged(t, "result", m.GetResult().GetError(), res.Error, m.GetResult().GetRetryAfterMicros(), res.RetryAfter)
	})
}

// bounded fails the test unless an answer is within what central takes.
func bounded(t *testing.T, what string, o Outcome, err string, retryAfter time.Duration) {
	t.Helper()
	if o != Success && o != Transient && o != Permanent {
		t.Fatalf("%s: outcome %v", what, o)
	}
	if retryAfter < 0 || retryAfter > MaxRetryAfter {
		t.Fatalf("%s: RetryAfter %v", what, retryAfter)
	}
	if !utf8.ValidString(err) || strings.IndexByte(err, 0) >= 0 || len(err) > MaxErrorBytes {
		t.Fatalf("%s: error text %q (%d bytes)", what, err, len(err))
	}
}

// unchanged fails the test when a clean error text or a RetryAfter within
// bounds was changed.
func unchanged(t *testing.T, what, wireErr, err string, us int64, retryAfter time.Duration) {
	t.Helper()
	if utf8.ValidString(wireErr) && !strings.Contains(wireErr, "\x00") && len(wireErr) <= MaxErrorBytes && err != wireErr {
		t.Fatalf("%s: a clean error text changed: %q → %q", what, wireErr, err)
	}
	if us > 0 && us < MaxRetryAfter.Microseconds() && retryAfter != time.Duration(us)*time.Microsecond {
		t.Fatalf("%s: RetryAfter %d µs became %v", what, us, retryAfter)
	}
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
