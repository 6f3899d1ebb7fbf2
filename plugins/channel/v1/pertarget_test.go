package channel

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/plugins/channel/v1/internal/pb"
)

func TestPerTargetOverall(t *testing.T) {
	ok := TargetResult{Outcome: Success}
	bounced := TargetResult{Outcome: Permanent, Error: "550 no such user"}
	busy := TargetResult{Outcome: Transient, Error: "451 try later", RetryAfter: 3 * time.Second}
	slow := TargetResult{Outcome: Transient, Error: "timeout", RetryAfter: time.Second}
	for _, c := range []struct {
		name       string
		rs         []TargetResult
		want       Outcome
		err        string
		retryAfter time.Duration
	}{
		{"AllDelivered", []TargetResult{ok, ok}, Success, "", 0},
		{"OneBounced", []TargetResult{ok, bounced, ok}, Permanent, "1 of 3 targets failed: 550 no such user", 0},
		{"TransientWinsOverPermanent", []TargetResult{bounced, slow, busy}, Transient,
			"3 of 3 targets failed: 550 no such user", 3 * time.Second},
		{"AllFailedAlike", []TargetResult{bounced, bounced}, Permanent, "550 no such user", 0},
		{"OneTarget", []TargetResult{busy}, Transient, "451 try later", 3 * time.Second},
		{"PermanentRetryAfterIgnored", []TargetResult{{Outcome: Permanent, Error: "x", RetryAfter: time.Hour}, ok},
			Permanent, "1 of 2 targets failed: x", 0},
		{"FailureWithoutText", []TargetResult{{Outcome: Permanent}, ok}, Permanent, "1 of 2 targets failed: Permanent failure", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := PerTarget(c.rs)
			if res.Outcome != c.want || res.Error != c.err || res.RetryAfter != c.retryAfter || !slices.Equal(res.Targets, c.rs) {
				t.Fatalf("PerTarget: %+v, want %s %q retry after %v with the targets' answers", res, c.want, c.err, c.retryAfter)
			}
		})
	}
	if res := PerTarget(nil); res.Outcome != Permanent || res.Error == "" || res.Targets != nil {
		t.Fatalf("PerTarget(nil): %+v, want Permanent with an error", res)
	}
}

// resultFromPB bounds the per-target answers as it bounds the result: the
// count, each error text, each RetryAfter, each outcome.
func TestResultFromPluginBoundsTargets(t *testing.T) {
	wire := &pb.Result{Outcome: pb.Outcome_OUTCOME_SUCCESS, Targets: []*pb.TargetResult{
		{Outcome: pb.Outcome_OUTCOME_SUCCESS},
		{Outcome: pb.Outcome_OUTCOME_PERMANENT, Error: "bad\x00nul " + strings.Repeat("é", 3000)},
		{Outcome: 42, Error: "what", RetryAfterMicros: 1 << 62},
		{Outcome: pb.Outcome_OUTCOME_TRANSIENT, RetryAfterMicros: -5},
	}}
	res := resultFromPB(wire, 4)
	if len(res.Targets) != 4 {
		t.Fatalf("%d target results, want 4", len(res.Targets))
	}
	if r := res.Targets[1]; r.Outcome != Permanent || strings.Contains(r.Error, "\x00") || len(r.Error) > MaxErrorBytes ||
		!strings.HasPrefix(r.Error, "badnul é") || !strings.HasSuffix(r.Error, "…") {
		t.Errorf("target 2: %s %.40q (%d bytes), want Permanent, cleaned and cut", r.Outcome, r.Error, len(r.Error))
	}
	if r := res.Targets[2]; r.Outcome != Transient || r.RetryAfter != MaxRetryAfter {
		t.Errorf("target 3: %s after %v, want an unknown outcome as Transient, RetryAfter cut to %v", r.Outcome, r.RetryAfter, MaxRetryAfter)
	}
	if r := res.Targets[3]; r.Outcome != Transient || r.RetryAfter != 0 {
		t.Errorf("target 4: %s after %v, want Transient, no negative wait", r.Outcome, r.RetryAfter)
	}
	// The plugin said Success overall: central derives it from the
	// targets instead.
	if res.Outcome != Transient || res.RetryAfter != MaxRetryAfter || !strings.HasPrefix(res.Error, "3 of 4 targets failed: ") ||
		len(res.Error) > MaxErrorBytes {
		t.Errorf("overall %s %.60q after %v, want Transient from the targets", res.Outcome, res.Error, res.RetryAfter)
	}

	for _, n := range []int{0, 3, 5} {
		res := resultFromPB(wire, n)
		if res.Outcome != Transient || res.Targets != nil ||
			res.Error != fmt.Sprintf("channel plugin answered for 4 targets, but the delivery had %d", n) {
			t.Errorf("4 answers for %d targets: %+v, want Transient naming both counts", n, res)
		}
	}
	// An old plugin's answer: no targets, its one outcome stands.
	if res := resultFromPB(&pb.Result{Outcome: pb.Outcome_OUTCOME_PERMANENT, Error: "e"}, 3); res.Outcome != Permanent ||
		res.Error != "e" || res.Targets != nil {
		t.Errorf("one outcome for 3 targets: %+v", res)
	}
}

// perTarget answers each target by its text: "ok" Success, "bounce"
// Permanent, "busy" Transient after 2 s; with the subject "miscount" it
// answers one target too many.
type perTarget struct{}

func (perTarget) Deliver(_ context.Context, req Request) Result {
	rs := make([]TargetResult, 0, len(req.Targets)+1)
	for _, t := range req.Targets {
		switch t {
		case "ok":
			rs = append(rs, TargetResult{Outcome: Success})
		case "bounce":
			rs = append(rs, TargetResult{Outcome: Permanent, Error: "550 no such user"})
		default:
			rs = append(rs, TargetResult{Outcome: Transient, Error: "451 busy", RetryAfter: 2 * time.Second})
		}
	}
	if req.Notification.Subject == "miscount" {
		rs = append(rs, TargetResult{Outcome: Success})
	}
	return PerTarget(rs)
}

// Over gRPC, per-target answers arrive intact, and a wrong count becomes a
// Transient failure of the whole delivery.
func TestClientCarriesTargetResults(t *testing.T) {
	c, _, _ := serve(t, perTarget{})
	req := Request{Notification: Notification{ID: "n1", Subject: "s"}, Targets: []string{"ok", "bounce", "busy"}}
	res := c.Deliver(t.Context(), req)
	want := perTarget{}.Deliver(t.Context(), req)
	if res.Outcome != want.Outcome || res.Error != want.Error || res.RetryAfter != want.RetryAfter ||
		!slices.Equal(res.Targets, want.Targets) {
		t.Fatalf("over gRPC: %+v, want %+v", res, want)
	}
	req.Notification.Subject = "miscount"
	res = c.Deliver(t.Context(), req)
	if res.Outcome != Transient || res.Targets != nil || !strings.Contains(res.Error, "answered for 4 targets, but the delivery had 3") {
		t.Fatalf("a wrong count over gRPC: %+v, want Transient naming both counts", res)
	}
	// An old-style channel's one outcome comes through without targets.
	old, _, _ := serve(t, echoChannel{})
	if res := old.Deliver(t.Context(), req); res.Outcome != Success || res.Targets != nil {
		t.Fatalf("one outcome over gRPC: %+v", res)
	}
}
