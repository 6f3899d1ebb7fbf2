package pluginhost_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/pluginhost"
	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/ports"
)

// perTargetChannel answers target by target, as a mail server would: a
// target starting with "bounce" is refused for good, one starting with
// "busy" is to be tried again in 3 s, any other is delivered. With the
// subject "miscount" it answers one target too many.
type perTargetChannel struct{}

func (perTargetChannel) Deliver(_ context.Context, req channel.Request) channel.Result {
	rs := make([]channel.TargetResult, 0, len(req.Targets)+1)
	for _, t := range req.Targets {
		switch {
		case strings.HasPrefix(t, "bounce"):
			rs = append(rs, channel.TargetResult{Outcome: channel.Permanent, Error: "550 5.1.1 mailbox unavailable"})
		case strings.HasPrefix(t, "busy"):
			rs = append(rs, channel.TargetResult{Outcome: channel.Transient, Error: "451 try again later", RetryAfter: 3 * time.Second})
		default:
			rs = append(rs, channel.TargetResult{Outcome: channel.Success})
		}
	}
	if req.Notification.Subject == "miscount" {
		rs = append(rs, channel.TargetResult{Outcome: channel.Success})
	}
	return channel.PerTarget(rs)
}

// A plugin process's answer for each target reaches central intact; a
// plugin that answers another count than it was given targets fails the
// whole delivery, Transient; a plugin that answers one outcome is passed on
// without per-target answers.
func TestPerTargetAnswersReachCentral(t *testing.T) {
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{selfPlugin(t, "per"), testPlugin(t)}})
	per := mustChannel(t, h, "per")

	res := deliver(t, per, delivery(nil, "a@example.com", "bounce@example.com", "busy@example.com", "b@example.com"))
	want := []ports.TargetResult{
		{Outcome: ports.OutcomeSuccess},
		{Outcome: ports.OutcomePermanent, Error: "550 5.1.1 mailbox unavailable"},
		{Outcome: ports.OutcomeTransient, Error: "451 try again later", RetryAfter: 3 * time.Second},
		{Outcome: ports.OutcomeSuccess},
	}
	if !slices.Equal(res.Targets, want) {
		t.Fatalf("per-target answers %+v, want %+v", res.Targets, want)
	}
	if res.Outcome != ports.OutcomeTransient || res.RetryAfter != 3*time.Second ||
		res.Error != "2 of 4 targets failed: 550 5.1.1 mailbox unavailable" {
		t.Errorf("overall %s %q after %v, want Transient, the failures counted, 3 s", res.Outcome, res.Error, res.RetryAfter)
	}

	d := delivery(nil, "a@example.com", "b@example.com")
	d.Notification.Subject = "miscount"
	res = deliver(t, per, d)
	if res.Outcome != ports.OutcomeTransient || res.Targets != nil ||
		!strings.Contains(res.Error, "answered for 3 targets, but the delivery had 2") || strings.Contains(res.Error, "@") {
		t.Errorf("a wrong count: %+v, want Transient for the whole delivery naming both counts and no address", res)
	}

	res = deliver(t, mustChannel(t, h, "test"), delivery(nil, "a@example.com", "b@example.com"))
	if res.Outcome != ports.OutcomeSuccess || res.Targets != nil {
		t.Errorf("an old-style plugin: %+v, want Success for the whole delivery", res)
	}
}

// A target whose reference the policy refuses fails alone: the plugin gets
// the other targets, and the answer holds the refusal for that target and
// the plugin's answer for the others. A refused secret setting still fails
// the whole delivery.
func TestRefusedTargetReferenceFailsThatTargetOnly(t *testing.T) {
	f := newSecretsFixture(t)
	t.Setenv("OUTBOX_SECRET_TEST_ADDR", "c@example.com")
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{testPlugin(t)}, Secrets: f.policy})
	ch := mustChannel(t, h, "test")
	bad := "file:" + f.outside

	res := deliver(t, ch, delivery(map[string]string{"report": ""}, "a@example.com", bad, "env:OUTBOX_SECRET_TEST_ADDR"))
	if len(res.Targets) != 3 {
		t.Fatalf("%+v, want an answer per target", res)
	}
	if r := res.Targets[1]; r.Outcome != ports.OutcomePermanent || !strings.Contains(r.Error, bad) ||
		!strings.Contains(r.Error, "not allowed") || strings.Contains(r.Error, "central-private-key") {
		t.Errorf("refused target: %s %q, want Permanent naming the reference, not its value", r.Outcome, r.Error)
	}
	// The report plugin answers Permanent for the whole delivery, with what
	// it received: the two other targets, resolved.
	for _, i := range []int{0, 2} {
		r := res.Targets[i]
		got := reported(t, ports.Result{Error: r.Error})
		if r.Outcome != ports.OutcomePermanent || !slices.Equal(got.Targets, []string{"a@example.com", "c@example.com"}) {
			t.Errorf("target %d: %s, the plugin got %q, want the other two targets", i+1, r.Outcome, got.Targets)
		}
	}
	if res.Outcome != ports.OutcomePermanent {
		t.Errorf("overall %s, want Permanent", res.Outcome)
	}

	// Without report, the plugin delivers: only the refused target fails.
	res = deliver(t, ch, delivery(nil, "a@example.com", bad))
	want := []ports.Outcome{ports.OutcomeSuccess, ports.OutcomePermanent}
	if got := []ports.Outcome{res.Targets[0].Outcome, res.Targets[1].Outcome}; !slices.Equal(got, want) || res.Outcome != ports.OutcomePermanent {
		t.Errorf("answers %v (overall %s), want %v", got, res.Outcome, want)
	}

	// Every target refused: the plugin is not asked.
	res = deliver(t, ch, delivery(map[string]string{"report": ""}, bad, "file:/etc/passwd"))
	if len(res.Targets) != 2 || res.Targets[0].Outcome != ports.OutcomePermanent || res.Targets[1].Outcome != ports.OutcomePermanent ||
		strings.Contains(res.Error, "{") || res.Outcome != ports.OutcomePermanent {
		t.Errorf("every target refused: %+v, want each Permanent with its refusal", res)
	}

	res = deliver(t, ch, delivery(map[string]string{"token": bad}, "a@example.com", "b@example.com"))
	if res.Outcome != ports.OutcomePermanent || res.Targets != nil || !strings.Contains(res.Error, "setting token") {
		t.Errorf("refused secret setting: %+v, want the whole delivery Permanent", res)
	}
}

// TestOneBadTargetDoesNotSilenceTheList runs the real dispatcher through
// the real plugin process: a list of four targets, one of which the
// receiver refuses and one whose reference the policy refuses. The other
// two are delivered and recorded so; the notification parks with the two
// failures, each on its own target, and no error text names an address.
func TestOneBadTargetDoesNotSilenceTheList(t *testing.T) {
	f := newSecretsFixture(t)
	t.Setenv("OUTBOX_SECRET_TEST_ADDR", "c@example.com")
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{selfPlugin(t, "per")}, Secrets: f.policy})
	bad := "file:" + filepath.Join(f.dir, "..", filepath.Base(f.outside))
	targets := []string{"a@example.com", "bounce@example.com", bad, "env:OUTBOX_SECRET_TEST_ADDR"}
	d := deliverOne(t, h, ports.List{Name: "ops", Type: "per", Targets: targets}, ports.StatusParked)
	want := map[string]ports.TargetStatus{targets[0]: ports.TargetDelivered, targets[1]: ports.TargetFailed,
		targets[2]: ports.TargetFailed, targets[3]: ports.TargetDelivered}
	if len(d.Targets) != len(targets) {
		t.Fatalf("targets %+v, want one state per target", d.Targets)
	}
	for _, s := range d.Targets {
		if s.Status != want[s.Target] || s.Attempts != 1 {
			t.Errorf("target %s: %s after %d attempts, want %s after 1", s.Target, s.Status, s.Attempts, want[s.Target])
		}
		if strings.Contains(s.LastError, "@") || strings.Contains(s.LastError, "central-private-key") {
			t.Errorf("target %s: error %q names an address or a value", s.Target, s.LastError)
		}
	}
	if !slices.Equal(d.ResolvedTargets, []string{targets[0], targets[3]}) {
		t.Errorf("delivered targets %q, want %q", d.ResolvedTargets, []string{targets[0], targets[3]})
	}
	if !strings.HasPrefix(d.LastError, "2 of 4 targets") || strings.Contains(d.LastError, "@") {
		t.Errorf("LastError %q, want the two failures counted, no address", d.LastError)
	}
}
