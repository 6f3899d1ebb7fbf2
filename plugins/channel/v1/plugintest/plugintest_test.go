package plugintest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"

	channel "github.com/siteline/outbox/plugins/channel/v1"
)

// The kit's own tests run three channels that need no server: one that
// answers per target, one that answers one outcome for all its targets (as
// every channel did before per-target answers), and one that answers one
// target too many.
func TestMain(m *testing.M) {
	Main(m, map[string]func() channel.Channel{
		"pertarget": func() channel.Channel { return perTarget{} },
		"single":    func() channel.Channel { return single{} },
		"miscount":  func() channel.Channel { return miscount{} },
	})
}

const (
	bounced = "550 5.1.1 mailbox unavailable"
	busy    = "451 try again later"
)

// answer is a mail server's answer for target: a target starting with
// "bounce" is refused for good, one starting with "busy" is to be tried
// again in 2 s, any other is accepted.
func answer(target string) channel.TargetResult {
	switch {
	case strings.HasPrefix(target, "bounce"):
		return channel.TargetResult{Outcome: channel.Permanent, Error: bounced}
	case strings.HasPrefix(target, "busy"):
		return channel.TargetResult{Outcome: channel.Transient, Error: busy, RetryAfter: 2 * time.Second}
	}
	return channel.TargetResult{Outcome: channel.Success}
}

// perTarget answers each target on its own.
type perTarget struct{}

func (perTarget) Describe(context.Context) (channel.Description, error) {
	return channel.Description{Name: "pertarget", Version: "1"}, nil
}

func (perTarget) Deliver(ctx context.Context, req channel.Request) channel.Result {
	if err := ctx.Err(); err != nil {
		return channel.Retry(err)
	}
	rs := make([]channel.TargetResult, len(req.Targets))
	for i, t := range req.Targets {
		rs[i] = answer(t)
	}
	return channel.PerTarget(rs)
}

// single answers one outcome for all its targets: the first failure's.
type single struct{}

func (single) Deliver(ctx context.Context, req channel.Request) channel.Result {
	if err := ctx.Err(); err != nil {
		return channel.Retry(err)
	}
	if len(req.Targets) == 0 {
		return channel.Fail(errors.New("no target"))
	}
	for _, t := range req.Targets {
		if r := answer(t); r.Outcome != channel.Success {
			return channel.Result{Outcome: r.Outcome, Error: r.Error, RetryAfter: r.RetryAfter}
		}
	}
	return channel.Delivered()
}

// miscount answers Success for one target more than it got.
type miscount struct{}

func (miscount) Deliver(_ context.Context, req channel.Request) channel.Result {
	return channel.PerTarget(make([]channel.TargetResult, len(req.Targets)+1))
}

func request(targets ...string) channel.Request {
	return channel.Request{Notification: channel.Notification{List: "ops", Subject: "Pump 3 stopped", Body: "Pressure low."},
		Targets: targets}
}

// A channel answering per target passes the kit in its three modes, its
// answers intact: each target's outcome, error text and RetryAfter, and the
// overall outcome and error PerTarget made of them.
func TestKitPerTarget(t *testing.T) {
	mixed := request("a@example.com", "bounce@example.com", "busy@example.com")
	want := perTarget{}.Deliver(t.Context(), mixed)
	var checked sync.Map
	Run(t, Target{
		Name:    "pertarget",
		New:     func(*testing.T) channel.Channel { return perTarget{} },
		Command: Reexec("pertarget"),
		Cases: func(t *testing.T) []Case {
			return []Case{
				{Name: "Delivered", Request: request("a@example.com", "b@example.com"), Want: channel.Success,
					WantTargets: []channel.Outcome{channel.Success, channel.Success}},
				{Name: "OneBouncesOneBusy", Request: mixed, Want: channel.Transient,
					WantTargets: []channel.Outcome{channel.Success, channel.Permanent, channel.Transient},
					Check: func(t *testing.T, _ channel.Request, res channel.Result) {
						if !slices.Equal(res.Targets, want.Targets) || res.Error != want.Error || res.RetryAfter != want.RetryAfter {
							t.Errorf("answers %+v, want %+v", res, want)
						}
						checked.Store(t.Name(), true)
					}},
			}
		},
	})
	for _, mode := range []string{"InProcess", "GRPC", "Subprocess"} {
		if _, ok := checked.Load(t.Name() + "/" + mode + "/Cases/OneBouncesOneBusy"); !ok {
			t.Errorf("%s: the per-target answers were not checked", mode)
		}
	}
}

// A channel answering one outcome for all its targets still passes.
func TestKitOneOutcome(t *testing.T) {
	Run(t, Target{
		Name:    "single",
		New:     func(*testing.T) channel.Channel { return single{} },
		Command: Reexec("single"),
		Cases: func(*testing.T) []Case {
			return []Case{
				{Name: "Delivered", Request: request("a@example.com", "b@example.com"), Want: channel.Success},
				{Name: "Bounced", Request: request("a@example.com", "bounce@example.com"), Want: channel.Permanent},
			}
		},
	})
}

// recorder is a reporter that keeps what it is told.
type recorder struct{ errs []string }

func (*recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// A channel answering another count of targets than it got fails the kit
// in each mode: in-process the kit counts, over gRPC and as a subprocess
// central's client makes the answer a Transient failure naming both counts.
func TestKitCatchesAWrongCount(t *testing.T) {
	modes := map[string]func(t *testing.T) channel.Channel{
		"InProcess": func(*testing.T) channel.Channel { return miscount{} },
		"GRPC": func(t *testing.T) channel.Channel {
			client, server := plugin.TestPluginGRPCConn(t, false, channel.PluginMap(miscount{}))
			t.Cleanup(func() {
				server.Stop()
				_ = client.Close()
			})
			return dispense(t, client)
		},
		"Subprocess": func(t *testing.T) channel.Channel { return Start(t, Reexec("miscount")(t)) },
	}
	for name, want := range map[string]string{
		"InProcess":  "3 per-target answers for 2 targets",
		"GRPC":       "answered for 3 targets, but the delivery had 2",
		"Subprocess": "answered for 3 targets, but the delivery had 2",
	} {
		t.Run(name, func(t *testing.T) {
			ch := modes[name](t)
			c := Case{Name: "Delivered", Request: request("a@example.com", "b@example.com"), Want: channel.Success}
			req := withID(c.Request)
			var rec recorder
			if checkResult(&rec, c, req, deliver(t, t.Context(), ch, req), channel.Description{}) {
				t.Fatal("the kit took a wrong count for an answer as wanted")
			}
			if len(rec.errs) != 1 || !strings.Contains(rec.errs[0], want) {
				t.Fatalf("the kit said %q, want it to say %q", rec.errs, want)
			}
		})
	}
}

// The kit catches per-target answers that do not match the case, disagree
// with the result's outcome, or lack an error text, and an address in a
// target's error.
func TestCheckResultPerTarget(t *testing.T) {
	req := request("a@example.com", "bounce@example.com")
	ok, bad := channel.TargetResult{Outcome: channel.Success}, channel.TargetResult{Outcome: channel.Permanent, Error: bounced}
	for _, c := range []struct {
		name     string
		want     []channel.Outcome
		res      channel.Result
		answered bool
		says     string
	}{
		{"AsWanted", []channel.Outcome{channel.Success, channel.Permanent}, channel.PerTarget([]channel.TargetResult{ok, bad}), true, ""},
		{"OtherOutcomes", []channel.Outcome{channel.Permanent, channel.Success}, channel.PerTarget([]channel.TargetResult{ok, bad}), false,
			"per-target outcomes [Success Permanent], want [Permanent Success]"},
		{"OneOutcomeWherePerTargetWanted", []channel.Outcome{channel.Success, channel.Permanent}, channel.Fail(errors.New(bounced)), false,
			"per-target outcomes [], want"},
		{"OutcomeDisagrees", nil, channel.Result{Outcome: channel.Permanent, Error: "x", Targets: []channel.TargetResult{ok, ok}}, true,
			"its per-target answers make Success"},
		{"FailureWithoutText", nil, channel.PerTarget([]channel.TargetResult{ok, {Outcome: channel.Permanent}}), true,
			"target 2: Permanent without an error text"},
		{"AddressInTargetError", nil, channel.PerTarget([]channel.TargetResult{ok, {Outcome: channel.Permanent, Error: "550 bounce@example.com unknown"}}), true,
			"target 2: the error text holds a target"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rec recorder
			answered := checkResult(&rec, Case{Name: "c", Request: req, Want: channel.Permanent, WantTargets: c.want}, req, c.res, channel.Description{})
			if answered != c.answered {
				t.Errorf("answered as wanted: %v, want %v", answered, c.answered)
			}
			if c.says == "" && len(rec.errs) > 0 || c.says != "" && !slices.ContainsFunc(rec.errs, func(e string) bool { return strings.Contains(e, c.says) }) {
				t.Errorf("the kit said %q, want %q", rec.errs, c.says)
			}
		})
	}
}
