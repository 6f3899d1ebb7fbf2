package core

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/siteline/outbox/ports"
)

// This file is what core.Operators and core.DirectoryEditor share to record
// admin changes in the admin audit log (ports.AdminAudit).

// adminAuditWait bounds the write of one admin record. It runs detached
// from the request's cancellation: a caller that goes away once its change
// is made must not take the record with it.
const adminAuditWait = 10 * time.Second

// adminLogPage bounds a page of AdminLog (the port allows more; one is
// asked for to learn whether another page follows).
const adminLogPage = 200

// maxSummaryRunes bounds the summary the core writes; the port's byte bound
// is well above it.
const maxSummaryRunes = 600

// adminRecorder writes admin records.
type adminRecorder struct {
	audit ports.AdminAudit
	clock ports.Clock
	log   *slog.Logger
}

// record appends the record of a change already made. When the log cannot
// take it, the record goes to the error log in full (it holds no secret)
// and the error says that the change was made. E-mail addresses in the
// summary (a channel's from, an account's name) are masked as the logs mask
// them; the record's name is the entry's own and stays whole.
func (a adminRecorder) record(ctx context.Context, actor string, kind ports.AdminKind, name string, action ports.AdminAction, summary string) error {
	r := ports.AdminRecord{At: a.clock.Now().UTC(), Actor: actor, Kind: kind, Name: name, Action: action,
		Summary: clipRunes(ports.MaskEmails(summary), maxSummaryRunes)}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), adminAuditWait)
	defer cancel()
	if _, err := a.audit.AppendAdmin(ctx, r); err != nil {
		a.log.Error("an admin change was made but the audit log could not record it",
			"actor", r.Actor, "kind", r.Kind, "name", r.Name, "action", r.Action, "summary", r.Summary, "err", err)
		return fmt.Errorf("the %s %q was %s, but the audit log could not record it (the server log has the record): %v",
			kind, truncate(name, 64), action, err)
	}
	a.log.Info("admin change", "actor", r.Actor, "kind", r.Kind, "name", r.Name, "action", r.Action)
	return nil
}

// checkActor refuses a change whose actor the audit log could not record,
// before the change is made.
func checkActor(actor string) error {
	if !ports.IsAccountKey(actor) || len(actor) > ports.MaxAdminName {
		return fmt.Errorf("actor: the change names no valid actor for the audit log: %w", ports.ErrInvalid)
	}
	return nil
}

// adminLog is one page of the admin audit log.
func adminLog(ctx context.Context, audit ports.AdminAudit, q ports.AdminQuery) (ports.AdminPage, error) {
	if q.Limit < 1 || q.Limit > adminLogPage {
		return ports.AdminPage{}, fmt.Errorf("limit: %d is not between 1 and %d: %w", q.Limit, adminLogPage, ports.ErrInvalid)
	}
	want := q.Limit
	q.Limit++
	if err := q.Validate(); err != nil {
		return ports.AdminPage{}, err
	}
	rs, err := audit.AdminRecords(ctx, q)
	if err != nil {
		return ports.AdminPage{}, fmt.Errorf("admin audit log: %w", err)
	}
	page := ports.AdminPage{Records: rs}
	if len(rs) > want {
		page.Records = rs[:want]
		page.Next = rs[want-1].ID
	}
	return page, nil
}

// clipRunes cuts s to at most n runes, marking the cut.
func clipRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for k := range s {
		if i == n {
			return s[:k] + "…"
		}
		i++
	}
	return s
}

// formatExpiry is a token's expiry in a summary.
func formatExpiry(t time.Time) string {
	if t.IsZero() {
		return "never expires"
	}
	return "expires " + t.UTC().Format(time.RFC3339)
}

// joinParts joins the non-empty parts of a summary with "; ".
func joinParts(parts ...string) string {
	out := parts[:0:0]
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}
