// Package pertarget builds the per-target answer of the built-in channels:
// a channel.Result whose Targets answer each target of the request, and
// whose Outcome, Error and RetryAfter sum them up for a central that reads
// only those.
package pertarget

import (
	"fmt"
	"strings"

	channel "github.com/siteline/outbox/plugins/channel/v1"
)

// maxListed bounds the failed targets the summary names one by one.
const maxListed = 5

// Result returns the result of rs, rs[i] answering the request's target i:
// Outcome is Transient when any target is Transient, else Permanent when
// any is Permanent, else Success; RetryAfter is the largest of the
// Transient targets'; Error names the failed targets by their position in
// the list (never by address), or is the one text every target failed
// with. An empty rs is a Permanent result without Targets.
func Result(rs []channel.TargetResult) channel.Result {
	if len(rs) == 0 {
		return channel.Result{Outcome: channel.Permanent, Error: "no targets"}
	}
	res := channel.Result{Outcome: channel.Success, Targets: rs}
	var (
		failed []int
		same   = true
	)
	for i, r := range rs {
		switch r.Outcome {
		case channel.Success:
			continue
		case channel.Transient:
			res.Outcome = channel.Transient
			res.RetryAfter = max(res.RetryAfter, r.RetryAfter)
		default:
			if res.Outcome == channel.Success {
				res.Outcome = channel.Permanent
			}
		}
		if len(failed) > 0 && rs[failed[0]].Error != r.Error {
			same = false
		}
		failed = append(failed, i)
	}
	switch {
	case len(failed) == 0:
		return res
	case len(rs) == 1 || (same && len(failed) == len(rs)):
		res.Error = text(rs[failed[0]].Error)
		return res
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d targets failed: ", len(failed), len(rs))
	for n, i := range failed {
		if n == maxListed {
			fmt.Fprintf(&b, "; and %d more", len(failed)-maxListed)
			break
		}
		if n > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "target %d: %s", i+1, text(rs[i].Error))
	}
	res.Error = b.String()
	return res
}

func text(s string) string {
	if s == "" {
		return "unknown error"
	}
	return s
}
