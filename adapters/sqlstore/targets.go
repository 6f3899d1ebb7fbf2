package sqlstore

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/siteline/outbox/ports"
)

// The fate of each target of a notification (its target_states column) and
// the targets of an Attempted audit record (the audit's targets column) are
// JSON arrays in a text column, NULL for nil (DESIGN.md, "Targets"). Keys
// are one letter, since the states are written with every attempt; times
// are integer Unix microseconds, the store's precision, and absent when
// zero; empty texts and counts are left out.

// targetStateJSON is one element of target_states.
type targetStateJSON struct {
	Target        string `json:"t"`
	Status        string `json:"s"`
	Attempts      int    `json:"n,omitempty"`
	LastError     string `json:"e,omitempty"`
	LastAttemptAt *int64 `json:"a,omitempty"`
	DeliveredAt   *int64 `json:"d,omitempty"`
}

// auditTargetJSON is one element of an audit record's targets.
type auditTargetJSON struct {
	Target  string `json:"t"`
	Outcome string `json:"o"`
	Error   string `json:"e,omitempty"`
}

// storableText reports, as ErrInvalid, a text of a target that the column
// could not keep as given: a NUL byte (which no dialect stores in text) or
// invalid UTF-8 (which JSON would replace). The error names the target by
// its index only: a target is an address.
func storableText(what string, i int, vs ...string) error {
	for _, v := range vs {
		switch {
		case strings.IndexByte(v, 0) >= 0:
			return fmt.Errorf("sqlstore: %s: target %d holds a NUL byte: %w", what, i, ports.ErrInvalid)
		case !utf8.ValidString(v):
			return fmt.Errorf("sqlstore: %s: target %d holds text that is not UTF-8: %w", what, i, ports.ErrInvalid)
		}
	}
	return nil
}

// unixMicro is t in Unix microseconds, or nil for the zero time.
func unixMicro(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	us := t.UnixMicro()
	return &us
}

// fromUnixMicro is the UTC time of us, or the zero time for nil.
func fromUnixMicro(us *int64) time.Time {
	if us == nil {
		return time.Time{}
	}
	return time.UnixMicro(*us).UTC()
}

// encodeTargetStates is the target_states of ts; empty (NULL) when ts is.
// id names the row in errors.
func encodeTargetStates(id string, ts []ports.TargetState) (nullText, error) {
	if len(ts) == 0 {
		return "", nil
	}
	what := "target states of " + id
	out := make([]targetStateJSON, len(ts))
	for i := range ts {
		s := &ts[i]
		if err := storableText(what, i, s.Target, string(s.Status), s.LastError); err != nil {
			return "", err
		}
		out[i] = targetStateJSON{Target: s.Target, Status: string(s.Status), Attempts: s.Attempts,
			LastError: s.LastError, LastAttemptAt: unixMicro(s.LastAttemptAt), DeliveredAt: unixMicro(s.DeliveredAt)}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", fmt.Errorf("sqlstore: encode %s: %w", what, err)
	}
	return nullText(b), nil
}

// decodeTargetStates is the states of a target_states column; nil for NULL.
func decodeTargetStates(id string, v nullText) ([]ports.TargetState, error) {
	if v == "" {
		return nil, nil
	}
	var in []targetStateJSON
	if err := json.Unmarshal([]byte(v), &in); err != nil {
		return nil, fmt.Errorf("decode target_states of %s: %w", id, err)
	}
	out := make([]ports.TargetState, len(in))
	for i, s := range in {
		out[i] = ports.TargetState{Target: s.Target, Status: ports.TargetStatus(s.Status), Attempts: s.Attempts,
			LastError: s.LastError, LastAttemptAt: fromUnixMicro(s.LastAttemptAt), DeliveredAt: fromUnixMicro(s.DeliveredAt)}
	}
	return out, nil
}

// encodeAuditTargets is the targets column of an audit record of id; empty
// (NULL) when ts is.
func encodeAuditTargets(id string, ts []ports.AuditTarget) (nullText, error) {
	if len(ts) == 0 {
		return "", nil
	}
	what := "audit targets of " + id
	out := make([]auditTargetJSON, len(ts))
	for i := range ts {
		t := &ts[i]
		if err := storableText(what, i, t.Target, string(t.Outcome), t.Error); err != nil {
			return "", err
		}
		out[i] = auditTargetJSON{Target: t.Target, Outcome: string(t.Outcome), Error: t.Error}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", fmt.Errorf("sqlstore: encode %s: %w", what, err)
	}
	return nullText(b), nil
}

// decodeAuditTargets is the targets of an audit record's column; nil for
// NULL.
func decodeAuditTargets(id string, v nullText) ([]ports.AuditTarget, error) {
	if v == "" {
		return nil, nil
	}
	var in []auditTargetJSON
	if err := json.Unmarshal([]byte(v), &in); err != nil {
		return nil, fmt.Errorf("decode audit targets of %s: %w", id, err)
	}
	out := make([]ports.AuditTarget, len(in))
	for i, t := range in {
		out[i] = ports.AuditTarget{Target: t.Target, Outcome: ports.Outcome(t.Outcome), Error: t.Error}
	}
	return out, nil
}
