package core

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/siteline/outbox/ports"
)

// Delivery is tracked target by target. A row's Targets hold each target's
// fate; an attempt goes only to the targets still due (targetsDue), and
// what each target's answer makes of the row is decided by settle.

// targetsDue brings a row's target states up to the list's targets now and
// returns them with the indexes (into the states) of the targets the next
// attempt goes to, in the list's order:
//   - a target the list holds that no attempt went to yet is due;
//   - a Retrying target is due, and so is a Dropped one the list holds
//     again;
//   - a Failed target is due only when the row is Pending again (an
//     operator retried it): in a Retrying row it waits for that;
//   - a Delivered target is never due;
//   - a target the list no longer holds is Dropped unless it was delivered.
//
// A target the list holds twice counts once.
func targetsDue(row ports.Notification, list []string) (states []ports.TargetState, due []int) {
	states = slices.Clone(row.Targets)
	at := make(map[string]int, len(states)+len(list))
	for i, s := range states {
		at[s.Target] = i
	}
	listed := make(map[string]bool, len(list))
	for _, t := range list {
		if listed[t] {
			continue
		}
		listed[t] = true
		i, ok := at[t]
		if !ok {
			i = len(states)
			states = append(states, ports.TargetState{Target: t})
			at[t] = i
		}
		switch states[i].Status {
		case ports.TargetDelivered:
		case ports.TargetFailed:
			if row.Status == ports.StatusPending {
				due = append(due, i)
			}
		default: // not attempted yet, Retrying, or Dropped and listed again
			due = append(due, i)
		}
	}
	for i := range states {
		if s := &states[i]; !listed[s.Target] && s.Status != ports.TargetDelivered {
			s.Status = ports.TargetDropped
		}
	}
	return states, due
}

// targetResults returns the channel's answer for each of n targets: its
// per-target answers when it gave one per target, otherwise its one
// outcome for all of them. An outcome the core does not know, or a count of
// answers that does not match, is a Transient failure.
func targetResults(res ports.Result, n int) []ports.TargetResult {
	out := make([]ports.TargetResult, n)
	switch {
	case len(res.Targets) == n && n > 0:
		copy(out, res.Targets)
	case len(res.Targets) > 0:
		bad := ports.TargetResult{Outcome: ports.OutcomeTransient,
			Error: fmt.Sprintf("channel answered for %d targets, but the attempt went to %d", len(res.Targets), n)}
		for i := range out {
			out[i] = bad
		}
		return out
	default:
		for i := range out {
			out[i] = ports.TargetResult{Outcome: res.Outcome, Error: res.Error, RetryAfter: res.RetryAfter}
		}
	}
	for i, r := range out {
		switch r.Outcome {
		case ports.OutcomeSuccess, ports.OutcomePermanent, ports.OutcomeTransient:
		default:
			r = ports.TargetResult{Outcome: ports.OutcomeTransient,
				Error: fmt.Sprintf("channel answered an unknown outcome %q: %s", r.Outcome, r.Error)}
		}
		r.Error = storableText(r.Error)
		out[i] = r
	}
	return out
}

// storableText is s as valid UTF-8 without NUL bytes, which every store can
// keep: a channel's error text that is neither must not make the row's
// outcome unrecordable (it would then be delivered again).
func storableText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}

// anySuccess reports whether some target was delivered.
func anySuccess(rs []ports.TargetResult) bool {
	return slices.ContainsFunc(rs, func(r ports.TargetResult) bool { return r.Outcome == ports.OutcomeSuccess })
}

// overall is one outcome for an attempt's targets: Transient when one is
// still to be tried, else Permanent when one failed for good, else Success.
func overall(rs []ports.TargetResult) ports.Outcome {
	o := ports.OutcomeSuccess
	for _, r := range rs {
		switch r.Outcome {
		case ports.OutcomeTransient:
			return ports.OutcomeTransient
		case ports.OutcomePermanent:
			o = ports.OutcomePermanent
		}
	}
	return o
}

// settled is what an attempt's answers make of a row.
type settled struct {
	update ports.Update
	// audit is the attempt's targets with their outcomes, and outcome and
	// err the attempt's as one (see overall and failureText).
	audit   []ports.AuditTarget
	outcome ports.Outcome
	err     string
}

// settle applies an attempt made at at to the targets due (indexes into
// states, as targetsDue returned them), whose answers are rs, and decides
// the row's next status:
//   - while a target failed transiently and the retry policy allows
//     another attempt, Retrying, at the policy's delay (or the latest
//     RetryAfter a target asked for, if later);
//   - when the retries run out, those targets are Failed;
//   - then Parked when a target the list holds failed for good, else
//     Delivered (every target the list holds was delivered).
//
// With no target due (rs empty), the row is settled as its targets stand.
// LastError is the failed target's error for a list of one target, and a
// summary naming how many targets were not delivered otherwise.
//
// An attempt cut short (a shutdown) is an attempt only for the targets it
// delivered: the others keep their state, no retry is counted, while one
// of them is left the row is Retrying, due at once, and the attempt's
// outcome is Interrupted (not counted as a failed attempt).
func settle(row ports.Notification, states []ports.TargetState, due []int, rs []ports.TargetResult,
	policy RetryPolicy, at time.Time, cutShort bool) settled {
	u := ports.Update{
		ID: row.ID, RetryCount: row.RetryCount, LastError: row.LastError,
		LastAttemptAt: row.LastAttemptAt, UpdatedAt: at,
	}
	var s settled
	transient, retryAfter := false, time.Duration(0)
	for i, k := range due {
		t, r := &states[k], rs[i]
		s.audit = append(s.audit, ports.AuditTarget{Target: t.Target, Outcome: r.Outcome, Error: r.Error})
		if cutShort && r.Outcome != ports.OutcomeSuccess {
			continue
		}
		t.Attempts++
		t.LastAttemptAt = at
		u.LastAttemptAt = at
		switch r.Outcome {
		case ports.OutcomeSuccess:
			t.Status, t.DeliveredAt, t.LastError = ports.TargetDelivered, at, ""
		case ports.OutcomePermanent:
			t.Status, t.LastError = ports.TargetFailed, r.Error
		default:
			t.Status, t.LastError = ports.TargetRetrying, r.Error
			transient, retryAfter = true, max(retryAfter, r.RetryAfter)
		}
	}
	if len(rs) > 0 {
		s.outcome = overall(rs)
		s.err = failureText(rs)
		if cutShort && s.outcome != ports.OutcomeSuccess {
			// Not a failure: the attempt's failures are the shutdown's.
			s.outcome = ports.OutcomeInterrupted
		}
	}
	if transient {
		u.RetryCount++
		if delay, ok := policy.Next(u.RetryCount); ok {
			u.Status, u.NextAttemptAt = ports.StatusRetrying, at.Add(max(delay, retryAfter))
		} else {
			for _, k := range due {
				if t := &states[k]; t.Status == ports.TargetRetrying {
					t.Status = ports.TargetFailed
					t.LastError = fmt.Sprintf("retries exhausted after %d attempts: %s", u.RetryCount, t.LastError)
				}
			}
		}
	}
	if cutShort && slices.ContainsFunc(states, func(t ports.TargetState) bool {
		return t.Status == "" || t.Status == ports.TargetRetrying
	}) {
		u.Status, u.NextAttemptAt = ports.StatusRetrying, at
	}
	if u.Status == "" {
		u.Status, u.DeliveredAt = ports.StatusDelivered, at
		if slices.ContainsFunc(states, func(t ports.TargetState) bool { return t.Status == ports.TargetFailed }) {
			u.Status, u.DeliveredAt = ports.StatusParked, time.Time{}
		}
	}
	var failing []ports.TargetState
	for _, t := range states {
		switch t.Status {
		case ports.TargetDelivered:
			u.ResolvedTargets = append(u.ResolvedTargets, t.Target)
		case ports.TargetFailed, ports.TargetRetrying:
			failing = append(failing, t)
		}
	}
	if len(failing) > 0 {
		listed := 0
		for _, t := range states {
			if t.Status != ports.TargetDropped {
				listed++
			}
		}
		u.LastError = summary(failing, listed)
	}
	u.Targets = states
	s.update = u
	return s
}

// failureText describes the failures among an attempt's answers: the one
// error of a single answer, else how many failed and the first failure's
// error. It is empty when none failed.
func failureText(rs []ports.TargetResult) string {
	if len(rs) == 1 {
		return rs[0].Error
	}
	var failed []string
	for _, r := range rs {
		if r.Outcome != ports.OutcomeSuccess {
			failed = append(failed, r.Error)
		}
	}
	return countedErrors(failed, len(rs))
}

// summary is a row's LastError: the error of its failing target when the
// list holds one target, else how many of the listed targets are not
// delivered and their first error.
func summary(failing []ports.TargetState, listed int) string {
	if listed == 1 && len(failing) == 1 {
		return failing[0].LastError
	}
	errs := make([]string, len(failing))
	for i, t := range failing {
		errs[i] = t.LastError
	}
	return countedErrors(errs, listed)
}

// countedErrors writes "k of n targets not delivered: first error", with
// how many other errors there were when they differ; when all n failed
// alike (a channel that answers one outcome for all its targets), the one
// error alone. Targets are counted, never named: an error text holds no
// address.
func countedErrors(errs []string, n int) string {
	if len(errs) == 0 {
		return ""
	}
	other := 0
	for _, e := range errs[1:] {
		if e != errs[0] {
			other++
		}
	}
	if other == 0 && len(errs) == n {
		return errs[0]
	}
	s := fmt.Sprintf("%d of %d targets not delivered: %s", len(errs), n, errs[0])
	if other > 0 {
		s += " (and " + plural(other, "other error") + ")"
	}
	return s
}
