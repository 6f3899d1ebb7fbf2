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
//
// A read or write of the store or the directory that fails is tried again,
// with backoff, until shortly before ctx's deadline (see
// ingestRetryUntil), so that a blip of the database costs the site a late
// acknowledgement rather than an error and a resend of the batch.
func (s *Service) Submit(ctx context.Context, req ports.SubmitRequest) (ports.SubmitResult, error) {
	if len(req.Notifications) > s.cfg.MaxBatch {
		return ports.SubmitResult{}, fmt.Errorf("batch of %d notifications exceeds the limit of %d: %w",
			len(req.Notifications), s.cfg.MaxBatch, ports.ErrInvalid)
	}
	now := s.clock.Now()
	until := ingestRetryUntil(ctx)
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
		typ, known, err := s.listType(ctx, until, sub.List, types)
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
		status, lastError := ports.StatusPending, ""
		if emptyContent(sub.Subject, sub.Body) {
			status, lastError = ports.StatusParked, emptyParkReason
		}
		rows = append(rows, ports.Notification{
			ID:                id,
			Type:              typ,
			List:              sub.List,
			Subject:           sub.Subject,
			Body:              sub.Body,
			TypeData:          sub.TypeData,
			Priority:          sub.Priority,
			Status:            status,
			LastError:         lastError,
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
	// Insert-if-not-exists: a try that stored the rows although it failed
	// makes the next one insert nothing and the rows count as stored
	// already (see keepOwn).
	inserted, tries, err := retryValue(ctx, s.log, until, "ingest: store notifications",
		"the site is told to send them again", func(ctx context.Context) ([]string, error) {
			return s.store.Insert(ctx, rows)
		}, "notifications", len(rows))
	if err != nil {
		return ports.SubmitResult{}, fmt.Errorf("ingest %d notifications: %w", len(rows), err)
	}
	res.Accepted = accepted
	if req.Site != "" && len(inserted) < len(rows) {
		if res, err = s.keepOwn(ctx, until, req.Site, rows, inserted, res); err != nil {
			return ports.SubmitResult{}, err
		}
	}
	if len(inserted) > 0 || tries > 1 {
		// The new rows are their own ingest record (see ingestRecord): no
		// audit write on the hottest path. (A failed try may have
		// inserted them, so that the last try inserted none.)
		s.Wake()
	}
	return res, nil
}

// emptyParkReason is the reason of a notification parked at ingest for
// having neither subject nor body. A site refuses such a notification at
// Send; one buffered by a site from before that rule still reaches central,
// which takes it (a refusal would keep it in the site's buffer for ever)
// and parks it at once, for an operator to discard.
const emptyParkReason = "subject and body are both empty: parked at ingest, never delivered; discard it " +
	"(a site sends no such notification any more; this one was buffered before the rule)"

// keepOwn checks the rows a site submitted that were stored already (those
// not in inserted): a row of the site's own is a resend and stays
// accepted; one stored for another site is moved from res.Accepted to
// res.Rejected, since acknowledging it would tell the site a notification
// of its is stored when none is. The reason does not say whose the id is.
func (s *Service) keepOwn(ctx context.Context, until time.Time, site string, rows []ports.Notification, inserted []string,
	res ports.SubmitResult) (ports.SubmitResult, error) {
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
	own, _, err := retryValue(ctx, s.log, until, "ingest: look up ids already stored",
		"the site is told to send the batch again", func(ctx context.Context) (map[string]ports.Status, error) {
			return s.store.Statuses(ctx, site, existing)
		}, "ids", len(existing))
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
	// Not errs.content: a notification with neither subject nor body is
	// accepted here and parked (see emptyParkReason).
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
		return "", fmt.Errorf("notification %s: %s: %w", u, err, ports.ErrInvalid)
	}
	return u, nil
}

// listType resolves a list's channel type for ingest, caching per batch, and
// reports whether the list is known. An unknown list is not an ingest error:
// the row is stored with no type (whatever the submission said) and parks at
// dispatch with a reason an operator can act on.
func (s *Service) listType(ctx context.Context, until time.Time, list string, cache map[string]listTypeOf) (string, bool, error) {
	if t, ok := cache[list]; ok {
		return t.typ, t.known, nil
	}
	l, _, err := retryValue(ctx, s.log, until, "ingest: resolve list type",
		"the site is told to send the batch again", func(ctx context.Context) (ports.List, error) {
			return s.directory.List(ctx, list)
		})
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

// Bounds of ingest's retries through a blip of the database: up to
// ingestReplyMargin (or a fifth of the time left, when less) before the
// caller's deadline is kept for the answer to reach it; a caller without a
// deadline gets ingestRetryBound.
const (
	ingestReplyMargin = 2 * time.Second
	ingestRetryBound  = 10 * time.Second
)

// ingestRetryUntil is when ingest stops starting new tries of a failed read
// or write.
func ingestRetryUntil(ctx context.Context) time.Time {
	dl, ok := ctx.Deadline()
	if !ok {
		return time.Now().Add(ingestRetryBound)
	}
	return dl.Add(-min(ingestReplyMargin, time.Until(dl)/5))
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
// fails the change it records (the Notifications row stands on its own). It
// goes on for up to recordTimeout after ctx ends: the change it records has
// happened.
func (s *Service) appendAudit(ctx context.Context, recs []ports.AuditRecord) {
	ctx, stop := graceContext(ctx, recordTimeout)
	defer stop()
	s.appendAuditWithin(ctx, recs)
}

// appendAuditWithin writes audit records in chunks, trying each again through
// a blip of the database for up to recordTimeout in all, or until ctx ends
// (ctx must not end with the caller's request or shutdown; see
// graceContext). An Append is all or nothing, so before trying a chunk
// again it asks whether the failed try was written after all (see
// appended), and does not write it twice.
func (s *Service) appendAuditWithin(ctx context.Context, recs []ports.AuditRecord) {
	if len(recs) == 0 {
		return
	}
	const chunk = 1000
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	for len(recs) > 0 {
		part := recs[:min(chunk, len(recs))]
		failed := false
		tries, err := retryBlip(ctx, s.log, time.Time{}, "audit append",
			"these records are missing from the notifications' histories",
			func(ctx context.Context) error {
				if failed && s.appended(ctx, part[0]) {
					return nil
				}
				err := s.audit.Append(ctx, part)
				failed = failed || err != nil
				return err
			}, "records", len(part))
		if err != nil && tries == 1 && unfixable(err) { // retryBlip said nothing
			s.log.Error("audit append failed", "records", len(part), "err", err)
		}
		recs = recs[len(part):]
	}
}

// appended reports whether r is in its notification's history already, to
// the store's precision. A record and the chunk it was appended with are
// written together or not at all, so finding r tells that a try which
// failed had written its chunk after all.
func (s *Service) appended(ctx context.Context, r ports.AuditRecord) bool {
	hist, err := s.audit.History(ctx, r.NotificationID)
	if err != nil {
		return false // the Append that follows fails too, or writes it
	}
	for _, h := range hist {
		if h.Kind == r.Kind && h.Actor == r.Actor && h.Status == r.Status && h.Outcome == r.Outcome &&
			h.At.Truncate(storePrecision).Equal(r.At.Truncate(storePrecision)) {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
