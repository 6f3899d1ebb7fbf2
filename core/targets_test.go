package core

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

var tAt = time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)

// st is a target state in a test's shorthand.
func st(target string, status ports.TargetStatus) ports.TargetState {
	return ports.TargetState{Target: target, Status: status, Attempts: 1}
}

func dueTargets(states []ports.TargetState, due []int) []string {
	out := make([]string, len(due))
	for i, k := range due {
		out[i] = states[k].Target
	}
	return out
}

func statuses(states []ports.TargetState) string {
	var b strings.Builder
	for _, s := range states {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s.Target + "=" + string(s.Status))
	}
	return b.String()
}

// TestTargetsDue: an attempt goes to the targets not yet delivered; a
// Failed target only once an operator retried the row; a target the list
// dropped is Dropped unless delivered; a dropped one listed again is due.
func TestTargetsDue(t *testing.T) {
	tests := []struct {
		name     string
		status   ports.Status
		states   []ports.TargetState
		list     []string
		due      []string
		statuses string
	}{
		{name: "first attempt", status: ports.StatusPending, list: []string{"a", "b"},
			due: []string{"a", "b"}, statuses: "a= b="},
		{name: "a list holding a target twice", status: ports.StatusPending, list: []string{"a", "b", "a"},
			due: []string{"a", "b"}, statuses: "a= b="},
		{name: "retrying: not the delivered, not the failed",
			status: ports.StatusRetrying,
			states: []ports.TargetState{st("a", ports.TargetDelivered), st("b", ports.TargetRetrying), st("c", ports.TargetFailed)},
			list:   []string{"a", "b", "c"}, due: []string{"b"},
			statuses: "a=Delivered b=Retrying c=Failed"},
		{name: "retried by an operator: the failed again, never the delivered",
			status: ports.StatusPending,
			states: []ports.TargetState{st("a", ports.TargetDelivered), st("b", ports.TargetFailed), st("c", ports.TargetFailed)},
			list:   []string{"a", "b", "c"}, due: []string{"b", "c"},
			statuses: "a=Delivered b=Failed c=Failed"},
		{name: "the list corrected: the typo dropped, the correction due",
			status: ports.StatusPending,
			states: []ports.TargetState{st("a", ports.TargetDelivered), st("typo", ports.TargetFailed)},
			list:   []string{"a", "fixed"}, due: []string{"fixed"},
			statuses: "a=Delivered typo=Dropped fixed="},
		{name: "a delivered target the list no longer holds stays delivered",
			status: ports.StatusRetrying,
			states: []ports.TargetState{st("gone", ports.TargetDelivered), st("b", ports.TargetRetrying)},
			list:   []string{"b"}, due: []string{"b"},
			statuses: "gone=Delivered b=Retrying"},
		{name: "a dropped target listed again is due",
			status: ports.StatusRetrying,
			states: []ports.TargetState{st("a", ports.TargetDropped), st("b", ports.TargetRetrying)},
			list:   []string{"a", "b"}, due: []string{"a", "b"},
			statuses: "a=Dropped b=Retrying"},
		{name: "a target added while retrying is due",
			status: ports.StatusRetrying,
			states: []ports.TargetState{st("a", ports.TargetDelivered), st("b", ports.TargetRetrying)},
			list:   []string{"a", "b", "new"}, due: []string{"b", "new"},
			statuses: "a=Delivered b=Retrying new="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			row := ports.Notification{ID: "n", Status: tt.status, Targets: slices.Clone(tt.states)}
			states, due := targetsDue(row, tt.list)
			if got := dueTargets(states, due); !slices.Equal(got, tt.due) {
				t.Errorf("due %q, want %q", got, tt.due)
			}
			if got := statuses(states); got != tt.statuses {
				t.Errorf("states %q, want %q", got, tt.statuses)
			}
			if !slices.Equal(row.Targets, tt.states) {
				t.Error("targetsDue changed the row's own states")
			}
		})
	}
}

// TestSettle: what each target's answer makes of the row.
func TestSettle(t *testing.T) {
	policy := FixedRetry{MaxRetries: 3, Interval: time.Minute}
	ok := ports.TargetResult{Outcome: ports.OutcomeSuccess}
	perm := ports.TargetResult{Outcome: ports.OutcomePermanent, Error: "550 5.1.1 mailbox unavailable"}
	busy := ports.TargetResult{Outcome: ports.OutcomeTransient, Error: "503 busy", RetryAfter: 5 * time.Minute}
	tests := []struct {
		name       string
		row        ports.Notification
		list       []string
		answers    []ports.TargetResult
		status     ports.Status
		statuses   string
		lastError  string
		resolved   []string
		retryCount int
		next       time.Time
		outcome    ports.Outcome
	}{
		{name: "every target delivered",
			row:  ports.Notification{Status: ports.StatusPending},
			list: []string{"a", "b"}, answers: []ports.TargetResult{ok, ok},
			status: ports.StatusDelivered, statuses: "a=Delivered b=Delivered", resolved: []string{"a", "b"},
			outcome: ports.OutcomeSuccess},
		{name: "one of five refused for good parks the row, the four delivered",
			row:  ports.Notification{Status: ports.StatusPending},
			list: []string{"a", "b", "c", "d", "e"}, answers: []ports.TargetResult{ok, ok, ok, ok, perm},
			status: ports.StatusParked, statuses: "a=Delivered b=Delivered c=Delivered d=Delivered e=Failed",
			lastError: "1 of 5 targets not delivered: 550 5.1.1 mailbox unavailable", resolved: []string{"a", "b", "c", "d"},
			outcome: ports.OutcomePermanent},
		{name: "one busy: the row retries at the later of the policy and its Retry-After",
			row:  ports.Notification{Status: ports.StatusPending},
			list: []string{"a", "b", "c"}, answers: []ports.TargetResult{ok, busy, ok},
			status: ports.StatusRetrying, statuses: "a=Delivered b=Retrying c=Delivered",
			lastError: "1 of 3 targets not delivered: 503 busy", resolved: []string{"a", "c"}, retryCount: 1,
			next: tAt.Add(5 * time.Minute), outcome: ports.OutcomeTransient},
		{name: "one failed for good and one busy: retrying for the busy one",
			row:  ports.Notification{Status: ports.StatusPending},
			list: []string{"a", "b"}, answers: []ports.TargetResult{perm, busy},
			status: ports.StatusRetrying, statuses: "a=Failed b=Retrying",
			lastError:  "2 of 2 targets not delivered: 550 5.1.1 mailbox unavailable (and 1 other error)",
			retryCount: 1, next: tAt.Add(5 * time.Minute), outcome: ports.OutcomeTransient},
		{name: "the busy one delivered at last, the failed one parks the row",
			row: ports.Notification{Status: ports.StatusRetrying, RetryCount: 1,
				Targets: []ports.TargetState{{Target: "a", Status: ports.TargetFailed, Attempts: 1, LastError: perm.Error},
					st("b", ports.TargetRetrying)}},
			list: []string{"a", "b"}, answers: []ports.TargetResult{ok},
			status: ports.StatusParked, statuses: "a=Failed b=Delivered",
			lastError: "1 of 2 targets not delivered: 550 5.1.1 mailbox unavailable", resolved: []string{"b"}, retryCount: 1,
			outcome: ports.OutcomeSuccess},
		{name: "retries run out: the busy target fails, the row parks",
			row: ports.Notification{Status: ports.StatusRetrying, RetryCount: 2,
				Targets: []ports.TargetState{st("a", ports.TargetDelivered), st("b", ports.TargetRetrying)}},
			list: []string{"a", "b"}, answers: []ports.TargetResult{busy},
			status: ports.StatusParked, statuses: "a=Delivered b=Failed",
			lastError: "1 of 2 targets not delivered: retries exhausted after 3 attempts: 503 busy",
			resolved:  []string{"a"}, retryCount: 3, outcome: ports.OutcomeTransient},
		{name: "a list of one keeps the one error as it was",
			row:  ports.Notification{Status: ports.StatusRetrying, RetryCount: 2},
			list: []string{"a"}, answers: []ports.TargetResult{busy},
			status: ports.StatusParked, statuses: "a=Failed",
			lastError: "retries exhausted after 3 attempts: 503 busy", retryCount: 3, outcome: ports.OutcomeTransient},
		{name: "every target failing alike reads as the one error",
			row:  ports.Notification{Status: ports.StatusPending},
			list: []string{"a", "b"}, answers: []ports.TargetResult{perm, perm},
			status: ports.StatusParked, statuses: "a=Failed b=Failed",
			lastError: "550 5.1.1 mailbox unavailable", outcome: ports.OutcomePermanent},
		{name: "nothing due: every listed target delivered already",
			row: ports.Notification{Status: ports.StatusPending,
				Targets: []ports.TargetState{st("a", ports.TargetDelivered), st("typo", ports.TargetFailed)}},
			list:   []string{"a"},
			status: ports.StatusDelivered, statuses: "a=Delivered typo=Dropped", resolved: []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.row.ID = "n"
			states, due := targetsDue(tt.row, tt.list)
			if len(due) != len(tt.answers) {
				t.Fatalf("%d targets due, the test answers %d", len(due), len(tt.answers))
			}
			s := settle(tt.row, states, due, tt.answers, policy, tAt, false)
			u := s.update
			if u.Status != tt.status || statuses(u.Targets) != tt.statuses {
				t.Errorf("row %s with %q, want %s with %q", u.Status, statuses(u.Targets), tt.status, tt.statuses)
			}
			if u.LastError != tt.lastError && !(tt.lastError == "" && u.LastError == tt.row.LastError) {
				t.Errorf("LastError %q, want %q", u.LastError, tt.lastError)
			}
			if !slices.Equal(u.ResolvedTargets, tt.resolved) {
				t.Errorf("ResolvedTargets %q, want %q", u.ResolvedTargets, tt.resolved)
			}
			if u.RetryCount != tt.retryCount || !u.NextAttemptAt.Equal(tt.next) {
				t.Errorf("RetryCount %d, NextAttemptAt %v; want %d, %v", u.RetryCount, u.NextAttemptAt, tt.retryCount, tt.next)
			}
			if (u.Status == ports.StatusDelivered) != !u.DeliveredAt.IsZero() {
				t.Errorf("status %s with DeliveredAt %v", u.Status, u.DeliveredAt)
			}
			if s.outcome != tt.outcome {
				t.Errorf("attempt outcome %q, want %q", s.outcome, tt.outcome)
			}
			if len(s.audit) != len(due) {
				t.Errorf("the attempt's record names %d targets, want %d", len(s.audit), len(due))
			}
			for _, k := range due {
				if ts := u.Targets[k]; ts.Attempts != countAttempts(tt.row, ts.Target)+1 || !ts.LastAttemptAt.Equal(tAt) {
					t.Errorf("target %s: %d attempts, last at %v", ts.Target, ts.Attempts, ts.LastAttemptAt)
				}
			}
		})
	}
}

// countAttempts is how many attempts the row's states count for target.
func countAttempts(row ports.Notification, target string) int {
	for _, s := range row.Targets {
		if s.Target == target {
			return s.Attempts
		}
	}
	return 0
}

// TestTargetResults: a channel's answers are taken per target when it gave
// one per target, its one outcome applies to all otherwise, and a count that
// does not match or an unknown outcome is a transient failure.
func TestTargetResults(t *testing.T) {
	whole := targetResults(ports.Result{Outcome: ports.OutcomePermanent, Error: "no such list"}, 3)
	for _, r := range whole {
		if r.Outcome != ports.OutcomePermanent || r.Error != "no such list" {
			t.Fatalf("one outcome for all: %+v", whole)
		}
	}
	per := targetResults(ports.Result{Outcome: ports.OutcomeTransient, Targets: []ports.TargetResult{
		{Outcome: ports.OutcomeSuccess}, {Outcome: "Maybe", Error: "?"}}}, 2)
	if per[0].Outcome != ports.OutcomeSuccess || per[1].Outcome != ports.OutcomeTransient || !strings.Contains(per[1].Error, `unknown outcome "Maybe"`) {
		t.Fatalf("per target: %+v", per)
	}
	bad := targetResults(ports.Result{Outcome: ports.OutcomePermanent, Error: "550 \xff\x00mailbox"}, 1)
	if bad[0].Error != "550 \uFFFDmailbox" {
		t.Fatalf("an error text no store can keep: %q", bad[0].Error)
	}
	wrong := targetResults(ports.Result{Outcome: ports.OutcomeSuccess, Targets: []ports.TargetResult{{Outcome: ports.OutcomeSuccess}}}, 2)
	for _, r := range wrong {
		if r.Outcome != ports.OutcomeTransient || !strings.Contains(r.Error, "answered for 1 targets, but the attempt went to 2") {
			t.Fatalf("a wrong count: %+v", wrong)
		}
	}
}
