package pertarget

import (
	"testing"
	"time"

	channel "github.com/siteline/outbox/plugins/channel/v1"
)

func TestResult(t *testing.T) {
	ok := channel.TargetResult{Outcome: channel.Success}
	busy := func(d time.Duration) channel.TargetResult {
		return channel.TargetResult{Outcome: channel.Transient, Error: "HTTP 503", RetryAfter: d}
	}
	gone := channel.TargetResult{Outcome: channel.Permanent, Error: "HTTP 410"}
	cases := []struct {
		name       string
		rs         []channel.TargetResult
		outcome    channel.Outcome
		err        string
		retryAfter time.Duration
	}{
		{"AllSucceed", []channel.TargetResult{ok, ok}, channel.Success, "", 0},
		{"One", []channel.TargetResult{gone}, channel.Permanent, "HTTP 410", 0},
		{"TransientWins", []channel.TargetResult{gone, busy(time.Second), ok, busy(time.Minute)}, channel.Transient,
			"3 of 4 targets failed: HTTP 410", time.Minute},
		{"AllAlike", []channel.TargetResult{busy(0), busy(0)}, channel.Transient, "HTTP 503", 0},
		{"PermanentRetryAfterIgnored", []channel.TargetResult{ok, {Outcome: channel.Permanent, RetryAfter: time.Hour}},
			channel.Permanent, "1 of 2 targets failed: Permanent failure", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := Result(c.rs)
			if res.Outcome != c.outcome || res.Error != c.err || res.RetryAfter != c.retryAfter {
				t.Errorf("Result = %v %q %v, want %v %q %v", res.Outcome, res.Error, res.RetryAfter, c.outcome, c.err, c.retryAfter)
			}
			if len(res.Targets) != len(c.rs) {
				t.Errorf("%d targets, want %d", len(res.Targets), len(c.rs))
			}
		})
	}
	if res := Result(nil); res.Outcome != channel.Permanent || res.Error == "" || res.Targets != nil {
		t.Errorf("Result(nil) = %+v, want a Permanent failure without targets", res)
	}
}
