package core

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/siteline/outbox/ports"
)

// Retry implements ports.Outbox: Parked rows go back to Pending with
// RetryCount, NextAttemptAt and LastError reset, and the dispatcher is woken.
func (s *Service) Retry(ctx context.Context, a ports.Action) (ports.ActionResult, error) {
	res, err := s.act(ctx, a, ports.StatusPending, true, ports.AuditRetried, "retried")
	if len(res.Moved) > 0 {
		s.Wake()
	}
	return res, err
}

// Discard implements ports.Outbox: Parked rows become Discarded and stay in
// the table for the audit record.
func (s *Service) Discard(ctx context.Context, a ports.Action) (ports.ActionResult, error) {
	return s.act(ctx, a, ports.StatusDiscarded, false, ports.AuditDiscarded, "discarded")
}

// act moves the rows an operator selected from Parked to status to. The
// legality of the move is the core's (Move); the store checks From atomically
// with the change, so a row that left Parked meanwhile is refused, not moved.
func (s *Service) act(ctx context.Context, a ports.Action, to ports.Status, reset bool,
	kind ports.AuditKind, verb string) (ports.ActionResult, error) {
	if err := Move(ports.StatusParked, to); err != nil {
		return ports.ActionResult{}, err
	}
	if len(a.IDs) == 0 && !a.All && filterEmpty(a.Filter) {
		return ports.ActionResult{}, fmt.Errorf("select notifications by ids or by a filter (or ask for all explicitly): %w", ports.ErrInvalid)
	}
	if err := checkOperator(a.Actor, "the audit log"); err != nil {
		return ports.ActionResult{}, err
	}
	if err := validFilter(a.Filter); err != nil {
		return ports.ActionResult{}, err
	}
	ids, err := canonicalIDs(a.IDs)
	if err != nil {
		return ports.ActionResult{}, err
	}
	now := s.clock.Now()
	moved, err := s.store.Transition(ctx, ports.TransitionRequest{
		Selection: ports.Selection{IDs: ids, Filter: a.Filter},
		From:      ports.StatusParked, To: to, Now: now, Reset: reset,
	})
	if err != nil {
		return ports.ActionResult{}, fmt.Errorf("%s: %w", verb, err)
	}
	recs := make([]ports.AuditRecord, len(moved))
	for i, id := range moved {
		recs[i] = ports.AuditRecord{NotificationID: id, At: now, Kind: kind, Actor: a.Actor, Status: to}
	}
	s.appendAudit(ctx, recs) // before anything else can fail: the rows have moved
	res := ports.ActionResult{Moved: moved}
	if len(ids) > 0 && len(moved) < len(ids) {
		res.Refused, err = s.refusals(ctx, ids, moved, to, verb)
		if err != nil {
			return res, err
		}
	}
	if len(moved) > 0 {
		s.log.Info("operator action", "action", verb, "actor", a.Actor, "rows", len(moved), "refused", len(res.Refused))
	}
	return res, nil
}

// checkOperator refuses an operator action whose actor record (the audit
// log, the commands' history) could not keep: a name of 1 to
// maxNameBytes bytes of UTF-8 text without NUL.
func checkOperator(actor, record string) error {
	if strings.TrimSpace(actor) == "" || len(actor) > maxNameBytes || !utf8.ValidString(actor) || strings.IndexByte(actor, 0) >= 0 {
		return fmt.Errorf("an operator action needs an actor for %s: a name of 1 to %d bytes of UTF-8 text: %w",
			record, maxNameBytes, ports.ErrInvalid)
	}
	return nil
}

// refusals explains, for each requested id that did not move, why not.
func (s *Service) refusals(ctx context.Context, ids, moved []string, to ports.Status, verb string) ([]ports.Refusal, error) {
	done := make(map[string]bool, len(moved))
	for _, id := range moved {
		done[id] = true
	}
	var rest []string
	for _, id := range ids {
		if !done[id] {
			rest = append(rest, id)
			done[id] = true // a repeated id is reported once
		}
	}
	statuses, err := s.store.Statuses(ctx, "", rest)
	if err != nil {
		return nil, fmt.Errorf("%s: explain refusals: %w", verb, err)
	}
	out := make([]ports.Refusal, 0, len(rest))
	for _, id := range rest {
		st, ok := statuses[id]
		var err error
		if !ok {
			err = fmt.Errorf("notification %s: %w", id, ports.ErrNotFound)
		} else {
			why := Move(st, to)
			if why == nil { // it left Parked and came back meanwhile
				why = ports.ErrConflict
			}
			err = fmt.Errorf("notification %s is %s; only Parked notifications can be %s: %w", id, st, verb, why)
		}
		out = append(out, ports.Refusal{ID: id, Err: err})
	}
	return out, nil
}
