// Package pertarget builds the per-target answer of the built-in channels:
// a channel.Result whose Targets answer each target of the request, and
// whose Outcome, Error and RetryAfter sum them up for a central that reads
// only those. Result does what channel.PerTarget does; it stands in for it
// until the contract package provides it.
package pertarget

import (
	"errors"
	"fmt"

	channel "github.com/siteline/outbox/plugins/channel/v1"
)

// Result returns the result of rs, rs[i] answering the request's target i:
//   - Outcome is Transient if any target is Transient, else Permanent if any
//     is Permanent, else Success;
//   - Error counts the failed targets and gives the first failure's error
//     ("2 of 5 targets failed: 550 no such user"), or that error alone when
//     every target failed alike; it never names a target;
//   - RetryAfter is the largest RetryAfter of a Transient target.
//
// An empty rs (a request without targets) is a Permanent result.
func Result(rs []channel.TargetResult) channel.Result {
	if len(rs) == 0 {
		return channel.Fail(errors.New("no target to deliver to"))
	}
	res := channel.Result{Outcome: channel.Success, Targets: rs}
	var failed []string
	alike := true
	for _, r := range rs {
		switch r.Outcome {
		case channel.Success:
			continue
		case channel.Permanent:
			if res.Outcome == channel.Success {
				res.Outcome = channel.Permanent
			}
		default:
			res.Outcome = channel.Transient
			res.RetryAfter = max(res.RetryAfter, r.RetryAfter)
		}
		e := r.Error
		if e == "" {
			e = r.Outcome.String() + " failure"
		}
		alike = alike && (len(failed) == 0 || e == failed[0])
		failed = append(failed, e)
	}
	switch {
	case len(failed) == 0:
	case alike && len(failed) == len(rs):
		res.Error = failed[0]
	default:
		res.Error = fmt.Sprintf("%d of %d targets failed: %s", len(failed), len(rs), failed[0])
	}
	return res
}
