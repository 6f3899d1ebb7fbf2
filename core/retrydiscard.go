package core

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/siteline/outbox/ports"
)

// Retry implements ports.Outbox: Parked rows go back to Pending with
// RetryCount, NextAttemptAt and LastError reset, and the dispatcher is woken.
func (s *Service) Retry(ctx context.Context, a ports.Action) (ports.ActionResult, error) {
	res, err := s.act(ctx, a, operatorMove{from: ports.StatusParked, to: ports.StatusPending, reset: true,
		kind: ports.AuditRetried, verb: "retried"})
	if len(res.Moved) > 0 {
		s.Wake()
	}
	return res, err
}

// Discard implements ports.Outbox: Parked rows become Discarded and stay in
// the table for the audit record.
func (s *Service) Discard(ctx context.Context, a ports.Action) (ports.ActionResult, error) {
	return s.act(ctx, a, operatorMove{from: ports.StatusParked, to: ports.StatusDiscarded,
		kind: ports.AuditDiscarded, verb: "discarded"})
}

// RetryNow implements ports.Outbox: Retrying rows that wait for their next
// attempt become due at once (their retry count and last error kept), and
// the dispatcher is woken. A row a dispatcher holds is refused until a
// grace after its lease (see leaseEndedBy).
//
// It does not wait for a Retry-After a target asked for: the row keeps
// only its next attempt time (the later of the retry policy's delay and
// the Retry-After), and an operator's Retry now is the explicit choice to
// try before it. A target still busy answers Transient again, with its
// Retry-After, and the row goes on waiting as the policy says.
func (s *Service) RetryNow(ctx context.Context, a ports.Action) (ports.ActionResult, error) {
	res, err := s.act(ctx, a, operatorMove{from: ports.StatusRetrying, to: ports.StatusRetrying, dueNow: true,
		kind: ports.AuditRetried, verb: "retried now"})
	if len(res.Moved) > 0 {
		s.Wake()
	}
	return res, err
}

// Park implements ports.Outbox: Retrying rows are parked by an operator
// (their retry count and last error kept) and wait, like a row the
// dispatcher parked, for a Retry or a Discard. A row a dispatcher holds is
// refused until a grace after its lease (see leaseEndedBy).
func (s *Service) Park(ctx context.Context, a ports.Action) (ports.ActionResult, error) {
	return s.act(ctx, a, operatorMove{from: ports.StatusRetrying, to: ports.StatusParked,
		kind: ports.AuditParked, verb: "parked"})
}

// operatorMove is one operator action on rows: the move from status from
// to status to (the store's Transition with reset or dueNow), the audit
// record's kind, and the past participle of the action for messages.
type operatorMove struct {
	from, to      ports.Status
	reset, dueNow bool
	kind          ports.AuditKind
	verb          string
}

// act moves the rows an operator selected as m says. The legality of the
// move is the core's (Move); the store checks From atomically with the
// change, so a row that left From meanwhile is refused, not moved. A
// Retrying row a dispatcher holds (being delivered) is left to the
// dispatcher until its lease ended a grace ago (leaseEndedBy): its
// attempt's outcome is recorded under the lease.
func (s *Service) act(ctx context.Context, a ports.Action, m operatorMove) (ports.ActionResult, error) {
	if err := Move(m.from, m.to); err != nil {
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
	rows, err := s.store.Transition(ctx, ports.TransitionRequest{
		Selection: ports.Selection{IDs: ids, Filter: a.Filter},
		From:      m.from, To: m.to, Now: now, Reset: m.reset, DueNow: m.dueNow,
		LeaseEndedBy: s.leaseEndedBy(m.from, now),
	})
	if err != nil {
		return ports.ActionResult{}, fmt.Errorf("%s: %w", m.verb, err)
	}
	moved := make([]string, len(rows))
	recs := make([]ports.AuditRecord, len(rows))
	for i, r := range rows {
		moved[i] = r.ID
		// The row's site and type, as on the dispatcher's records: an
		// operator's parking counts under them in Store.Throughput.
		recs[i] = ports.AuditRecord{NotificationID: r.ID, At: now, Kind: m.kind, Actor: a.Actor, Status: m.to,
			SourceSite: r.SourceSite, Type: r.Type}
	}
	s.appendAudit(ctx, recs) // before anything else can fail: the rows have moved
	res := ports.ActionResult{Moved: moved}
	if len(ids) > 0 && len(moved) < len(ids) {
		res.Refused, err = s.refusals(ctx, ids, moved, m)
		if err != nil {
			return res, err
		}
	}
	if len(moved) > 0 {
		s.log.Info("operator action", "action", m.verb, "actor", a.Actor, "rows", len(moved), "refused", len(res.Refused))
	}
	return res, nil
}

// LeaseGraceMargin is what an operator's Retry now or Park of a Retrying
// row waits, beyond a dispatcher's lease and the delivery timeout, before
// it takes the row from that dispatcher (see leaseEndedBy).
const LeaseGraceMargin = time.Minute

// leaseEndedBy is the TransitionRequest.LeaseEndedBy of an operator's move
// from status from at now: for a Retrying row, now less the delivery
// timeout and LeaseGraceMargin. A lease is measured by the claiming
// node's clock, which may run behind this one, and the dispatcher's
// Record (which checks only that it still holds the row) may land after
// the lease ended; taking the row from it earlier would lose the
// attempt's outcome (Park) or deliver it twice (Retry now). A row whose
// node died is the operator's once its lease and the grace have passed,
// or at once when the node restarts and releases its leases; a row
// another node took over after the lease is held by that node's lease.
func (s *Service) leaseEndedBy(from ports.Status, now time.Time) time.Time {
	if from != ports.StatusRetrying {
		return time.Time{}
	}
	return now.Add(-s.cfg.DeliveryTimeout - LeaseGraceMargin)
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
func (s *Service) refusals(ctx context.Context, ids, moved []string, m operatorMove) ([]ports.Refusal, error) {
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
		return nil, fmt.Errorf("%s: explain refusals: %w", m.verb, err)
	}
	out := make([]ports.Refusal, 0, len(rest))
	for _, id := range rest {
		st, ok := statuses[id]
		var err error
		if !ok {
			err = fmt.Errorf("notification %s: %w", id, ports.ErrNotFound)
		} else if st == m.from && m.from == ports.StatusRetrying {
			err = fmt.Errorf("notification %s is being delivered now; try again once the attempt is over: %w", id, ports.ErrConflict)
		} else {
			why := Move(st, m.to)
			if why == nil || st == m.from { // it left From and came back meanwhile, or was leased
				why = ports.ErrConflict
			}
			err = fmt.Errorf("notification %s is %s; only %s notifications can be %s: %w", id, st, m.from, m.verb, why)
		}
		out = append(out, ports.Refusal{ID: id, Err: err})
	}
	return out, nil
}
