package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/siteline/outbox/ports"
)

// Limits on provenance fields, which have no setting of their own.
const (
	maxNameBytes = 200
	maxTypeData  = 64 << 10
)

// Submit implements ports.Outbox: it validates each submission, inserts the
// valid ones if not already stored, and wakes the dispatcher. An id already
// stored is accepted when the stored row is the caller's own (a resend);
// for an authenticated site, an id stored for another site is rejected
// ("already in use"), without saying whose it is.
func (s *Service) Submit(ctx context.Context, req ports.SubmitRequest) (ports.SubmitResult, error) {
	if len(req.Notifications) > s.cfg.MaxBatch {
		return ports.SubmitResult{}, fmt.Errorf("%w: batch of %d notifications exceeds the limit of %d",
			ports.ErrInvalid, len(req.Notifications), s.cfg.MaxBatch)
	}
	now := s.clock.Now()
	var res ports.SubmitResult
	rows := make([]ports.Notification, 0, len(req.Notifications))
	accepted := make([]string, 0, len(req.Notifications)) // ids as submitted
	types := make(map[string]listTypeOf)                  // list → type, per batch
	for _, sub := range req.Notifications {
		id, err := s.validate(req.Site, sub)
		if err != nil {
			res.Rejected = append(res.Rejected, ports.Rejection{ID: sub.ID, Reason: err.Error()})
			continue
		}
		// The list decides the type: a submission cannot send a list's
		// targets through another channel.
		typ, known, err := s.listType(ctx, sub.List, types)
		if err != nil {
			return ports.SubmitResult{}, err
		}
		if known && sub.Type != "" && sub.Type != typ {
			res.Rejected = append(res.Rejected, ports.Rejection{ID: sub.ID, Reason: fmt.Sprintf(
				"%s: notification %s: type %q is not list %q's type %q: the list decides the type; leave type empty",
				ports.ErrInvalid, id, truncate(sub.Type, 40), truncate(sub.List, 40), typ)})
			continue
		}
		accepted = append(accepted, sub.ID)
		rows = append(rows, ports.Notification{
			ID:                id,
			Type:              typ,
			List:              sub.List,
			Subject:           sub.Subject,
			Body:              sub.Body,
			TypeData:          sub.TypeData,
			Priority:          sub.Priority,
			Status:            ports.StatusPending,
			SourceSite:        sub.SourceSite,
			SourceInstance:    sub.SourceInstance,
			SourceScript:      sub.SourceScript,
			ExecutionID:       sub.ExecutionID,
			ParentExecutionID: sub.ParentExecutionID,
			SiteEnqueuedAt:    sub.SiteEnqueuedAt.UTC(),
			ExpiresAt:         sub.ExpiresAt.UTC(),
			CreatedAt:         now,
			UpdatedAt:         now,
		})
	}
	if len(rows) == 0 {
		return res, nil
	}
	inserted, err := s.store.Insert(ctx, rows)
	if err != nil {
		return ports.SubmitResult{}, fmt.Errorf("ingest %d notifications: %w", len(rows), err)
	}
	res.Accepted = accepted
	if req.Site != "" && len(inserted) < len(rows) {
		if res, err = s.keepOwn(ctx, req.Site, rows, inserted, res); err != nil {
			return ports.SubmitResult{}, err
		}
	}
	if len(inserted) > 0 {
		// The new rows are their own ingest record (see ingestRecord): no
		// audit write on the hottest path.
		s.Wake()
	}
	return res, nil
}

// keepOwn checks the rows a site submitted that were stored already (those
// not in inserted): a row of the site's own is a resend and stays
// accepted; one stored for another site is moved from res.Accepted to
// res.Rejected, since acknowledging it would tell the site a notification
// of its is stored when none is. The reason does not say whose the id is.
func (s *Service) keepOwn(ctx context.Context, site string, rows []ports.Notification, inserted []string, res ports.SubmitResult) (ports.SubmitResult, error) {
	fresh := make(map[string]bool, len(inserted))
	for _, id := range inserted {
		fresh[id] = true
	}
	var existing []string
	for _, n := range rows {
		if !fresh[n.ID] {
			existing = append(existing, n.ID)
		}
	}
	own, err := s.store.Statuses(ctx, site, existing)
	if err != nil {
		// Nothing is acknowledged: the site sends the batch again, and the
		// rows stored now are resends then.
		return res, fmt.Errorf("ingest: look up %d ids already stored: %w", len(existing), err)
	}
	accepted := res.Accepted[:0:0]
	for i, n := range rows {
		if _, ok := own[n.ID]; fresh[n.ID] || ok {
			accepted = append(accepted, res.Accepted[i])
			continue
		}
		res.Rejected = append(res.Rejected, ports.Rejection{ID: res.Accepted[i], Reason: fmt.Sprintf(
			"%s: notification %s: the id is already in use; give the notification a new id", ports.ErrConflict, n.ID)})
	}
	res.Accepted = accepted
	return res, nil
}

// validate checks one submission and returns its id in canonical form. The
// error text names the field and the rule.
func (s *Service) validate(site string, sub ports.Submission) (string, error) {
	u, err := parseID(sub.ID)
	if err != nil {
		return "", err
	}
	var errs fieldErrors
	if sub.Priority < ports.MinPriority || sub.Priority > ports.MaxPriority {
		errs.add(fmt.Errorf("priority %d is outside %d to %d", sub.Priority, ports.MinPriority, ports.MaxPriority))
	}
	for field, t := range map[string]time.Time{"expires at": sub.ExpiresAt, "site enqueued at": sub.SiteEnqueuedAt} {
		if !t.IsZero() && (t.UTC().Year() < 1 || t.UTC().Year() > 9999) {
			errs.add(fmt.Errorf("%s is outside the years 1 to 9999", field))
		}
	}
	errs.text("list", sub.List, maxNameBytes, true)
	errs.text("subject", sub.Subject, s.cfg.MaxSubjectBytes, false)
	errs.text("body", sub.Body, s.cfg.MaxBodyBytes, false)
	errs.text("type", sub.Type, maxNameBytes, false)
	errs.text("source site", sub.SourceSite, maxNameBytes, true)
	errs.provenance(sub.SourceInstance, sub.SourceScript, sub.ExecutionID, sub.ParentExecutionID)
	if site != "" && sub.SourceSite != site {
		errs.add(fmt.Errorf("source site %q is not the calling site %q", truncate(sub.SourceSite, 40), site))
	}
	if len(sub.TypeData) > maxTypeData {
		errs.add(fmt.Errorf("type data is %d bytes, over the limit of %d", len(sub.TypeData), maxTypeData))
	} else if len(sub.TypeData) > 0 && !json.Valid(sub.TypeData) {
		errs.add(errors.New("type data is not valid JSON"))
	}
	if err := errs.err(); err != nil {
		return "", fmt.Errorf("%w: notification %s: %s", ports.ErrInvalid, u, err)
	}
	return u, nil
}

// listType resolves a list's channel type for ingest, caching per batch, and
// reports whether the list is known. An unknown list is not an ingest error:
// the row is stored with no type (whatever the submission said) and parks at
// dispatch with a reason an operator can act on.
func (s *Service) listType(ctx context.Context, list string, cache map[string]listTypeOf) (string, bool, error) {
	if t, ok := cache[list]; ok {
		return t.typ, t.known, nil
	}
	l, err := s.directory.List(ctx, list)
	var t listTypeOf
	switch {
	case errors.Is(err, ports.ErrNotFound):
	case err != nil:
		return "", false, fmt.Errorf("ingest: resolve list type: %w", err)
	default:
		t = listTypeOf{typ: l.Type, known: true}
	}
	cache[list] = t
	return t.typ, t.known, nil
}

// listTypeOf is a list's type as ingest found it.
type listTypeOf struct {
	typ   string
	known bool
}

// ingestRecord is the Ingested record of a row. Ingest writes no audit
// record: the row itself records it, immutably — CreatedAt is when central
// accepted it, and SourceSite is the site that sent it (the site link refuses
// a row whose source site is not the authenticated caller). Writing the same
// facts again cost about a quarter of ingest's throughput (BenchmarkIngest),
// on the hottest path; History presents them as the first record.
func ingestRecord(n ports.Notification) ports.AuditRecord {
	return ports.AuditRecord{NotificationID: n.ID, At: n.CreatedAt, Kind: ports.AuditIngested,
		Actor: "site:" + n.SourceSite, Status: ports.StatusPending}
}

// appendAudit writes audit records; a failure is logged and never undoes or
// fails the change it records (the Notifications row stands on its own).
func (s *Service) appendAudit(ctx context.Context, recs []ports.AuditRecord) {
	const chunk = 1000
	// Detached from cancellation (the change it records has happened), but
	// bounded, so a hung database cannot hold up shutdown.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	for len(recs) > 0 {
		n := min(chunk, len(recs))
		if err := s.audit.Append(ctx, recs[:n]); err != nil {
			s.log.Error("audit append failed", "records", n, "err", err)
		}
		recs = recs[n:]
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
