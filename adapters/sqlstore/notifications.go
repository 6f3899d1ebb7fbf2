package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/siteline/outbox/ports"
)

// This file is ports.Store and ports.AuditLog. The statements are bun
// queries built by the methods named ...Query (sqlgen_test.go renders them
// for MS SQL); what differs between the databases comes from the dialect
// (h.d), and the claim and the batch writes are the dialect's own.

var (
	_ ports.Store    = (*Notifications)(nil)
	_ ports.AuditLog = (*Notifications)(nil)
)

// Batch sizes: the rows one INSERT carries, the updates one Record
// statement carries, the records one audit INSERT carries (MS SQL caps an
// INSERT VALUES at 1,000 rows), the ids of one IN list.
const (
	insertChunk = 500
	recordChunk = 500
	auditChunk  = 1000
	idChunk     = 1000
)

// validIDs returns the ids that can name a row (ids itself when all can),
// or ErrInvalid when one holds a NUL byte.
func (h *handle) validIDs(ids []string) ([]string, error) {
	if err := noNUL(ids...); err != nil {
		return nil, err
	}
	for i, id := range ids {
		if !h.d.validID(id) {
			out := append([]string(nil), ids[:i]...)
			for _, id := range ids[i+1:] {
				if h.d.validID(id) {
					out = append(out, id)
				}
			}
			return out, nil
		}
	}
	return ids, nil
}

// --- ports.Store --------------------------------------------------------------

// Insert implements ports.Store: insert-if-not-exists of each notification,
// all or nothing, returning the ids it inserted.
func (s *Notifications) Insert(ctx context.Context, ns []ports.Notification) ([]string, error) {
	if len(ns) == 0 {
		return nil, nil
	}
	seen := make(map[string]struct{}, len(ns))
	rows := make([]notificationRow, 0, len(ns))
	for i := range ns {
		n := &ns[i]
		if err := s.checkNotification(n); err != nil {
			return nil, err
		}
		if _, dup := seen[n.ID]; dup {
			continue
		}
		seen[n.ID] = struct{}{}
		r, err := toRow(n)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	inserted, err := s.d.insert(ctx, s.handle, rows)
	if err != nil {
		return nil, s.fail(fmt.Sprintf("insert %d notifications", len(rows)), err)
	}
	return inserted, nil
}

func (s *Notifications) checkNotification(n *ports.Notification) error {
	switch {
	case n.ID == "":
		return fmt.Errorf("sqlstore: insert: notification without an id: %w", ports.ErrInvalid)
	case !s.d.validID(n.ID):
		return fmt.Errorf("sqlstore: insert: id %.40q is not a UUID: %w", n.ID, ports.ErrInvalid)
	case !n.Status.Valid():
		return fmt.Errorf("sqlstore: insert %s: status %q is not a central status: %w", n.ID, n.Status, ports.ErrInvalid)
	case n.CreatedAt.IsZero():
		return fmt.Errorf("sqlstore: insert %s: CreatedAt is unset: %w", n.ID, ports.ErrInvalid)
	case len(n.TypeData) > 0 && !json.Valid(n.TypeData):
		return fmt.Errorf("sqlstore: insert %s: TypeData is not valid JSON: %w", n.ID, ports.ErrInvalid)
	}
	return nil
}

// Claim implements ports.Store.
func (s *Notifications) Claim(ctx context.Context, req ports.ClaimRequest) ([]ports.Notification, error) {
	switch {
	case req.Limit <= 0:
		return nil, fmt.Errorf("sqlstore: claim: Limit %d must be positive: %w", req.Limit, ports.ErrInvalid)
	case req.Owner == "":
		return nil, fmt.Errorf("sqlstore: claim: empty Owner: %w", ports.ErrInvalid)
	case req.Lease <= 0:
		return nil, fmt.Errorf("sqlstore: claim: Lease %s must be positive: %w", req.Lease, ports.ErrInvalid)
	case req.Now.IsZero():
		return nil, fmt.Errorf("sqlstore: claim: Now is unset: %w", ports.ErrInvalid)
	}
	if err := noNUL(req.Owner); err != nil {
		return nil, err
	}
	rows, err := s.claimRows(ctx, req)
	if err != nil {
		return nil, s.fail(fmt.Sprintf("claim %d for %s", req.Limit, req.Owner), err)
	}
	ns, err := notifications(rows)
	if err != nil {
		return nil, s.fail(fmt.Sprintf("claim %d for %s", req.Limit, req.Owner), err)
	}
	slices.SortFunc(ns, claimOrder)
	return ns, nil
}

// claimRows runs the dialect's claim, which returns the model's columns in
// their order, and scans them (scanModel).
func (s *Notifications) claimRows(ctx context.Context, req ports.ClaimRequest) ([]notificationRow, error) {
	rs, err := s.writer().QueryContext(ctx, s.d.claim(s.w, req).String())
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	return scanModel(rs, notificationModel, make([]notificationRow, 0, req.Limit))
}

// claimOrder orders by Priority descending, then CreatedAt, then ID.
func claimOrder(a, b ports.Notification) int {
	switch {
	case a.Priority != b.Priority:
		if a.Priority > b.Priority {
			return -1
		}
		return 1
	case !a.CreatedAt.Equal(b.CreatedAt):
		return a.CreatedAt.Compare(b.CreatedAt)
	}
	return strings.Compare(a.ID, b.ID)
}

// Record implements ports.Store: one statement (one transaction beyond
// recordChunk updates) writes every update whose row owner still holds,
// and the audit records of those updates with them (see recordAudited).
func (s *Notifications) Record(ctx context.Context, owner string, updates []ports.Update) ([]string, error) {
	if len(updates) == 0 {
		return nil, nil
	}
	if owner == "" {
		return nil, fmt.Errorf("sqlstore: record: empty owner: %w", ports.ErrInvalid)
	}
	if err := noNUL(owner); err != nil {
		return nil, err
	}
	// The last update of an id wins. An id that cannot name a row (see
	// validID) names no row owner holds: it is lost without a statement.
	last := make(map[string]int, len(updates))
	for i := range updates {
		u := &updates[i]
		if u.ID == "" {
			return nil, fmt.Errorf("sqlstore: record: update without an id: %w", ports.ErrInvalid)
		}
		if !u.Status.Valid() {
			return nil, fmt.Errorf("sqlstore: record %s: status %q is not a central status: %w", u.ID, u.Status, ports.ErrInvalid)
		}
		last[u.ID] = i
	}
	var (
		lost    []string
		audits  [][]auditRow // audits[i] are the records of rows[i]
		carried bool
	)
	rows := make([]recordRow, 0, len(last))
	for i := range updates {
		switch id := updates[i].ID; {
		case last[id] != i:
		case !s.d.validID(id):
			lost = append(lost, id)
		default:
			r, err := toRecordRow(&updates[i])
			if err != nil {
				return nil, err
			}
			a, err := s.updateAudits(&updates[i])
			if err != nil {
				return nil, err
			}
			rows, audits, carried = append(rows, r), append(audits, a), carried || len(a) > 0
		}
	}
	if len(rows) == 0 {
		return lost, nil
	}
	var (
		applied []string
		err     error
	)
	if carried {
		applied, err = s.recordAudited(ctx, owner, rows, audits)
	} else {
		var qs []query
		qs, err = build(rows, recordChunk, func(part []recordRow) (query, error) { return s.d.recordQuery(s.handle, owner, part) })
		if err != nil {
			return nil, err
		}
		applied, err = s.writeIDs(ctx, qs, len(rows))
	}
	if err != nil {
		return nil, s.fail(fmt.Sprintf("record %d updates for %s", len(rows), owner), err)
	}
	if len(applied) == len(rows) {
		return lost, nil
	}
	// PostgreSQL returns uuids in lower case; compare ids without case.
	done := make(map[string]struct{}, len(applied))
	for _, id := range applied {
		done[strings.ToLower(id)] = struct{}{}
	}
	for i := range rows {
		if _, ok := done[strings.ToLower(rows[i].ID)]; !ok {
			lost = append(lost, rows[i].ID)
		}
	}
	return lost, nil
}

// updateAudits returns u's audit records as rows, each checked as Append
// checks a record, and of u's id.
func (s *Notifications) updateAudits(u *ports.Update) ([]auditRow, error) {
	if len(u.Records) == 0 {
		return nil, nil
	}
	out := make([]auditRow, len(u.Records))
	for i := range u.Records {
		r := &u.Records[i]
		if r.NotificationID != u.ID {
			return nil, fmt.Errorf("sqlstore: record %s: audit record %d is of another notification: %w", u.ID, i, ports.ErrInvalid)
		}
		var err error
		if out[i], err = s.auditRow(r); err != nil {
			return nil, fmt.Errorf("sqlstore: record %s: audit record %d: %w", u.ID, i, err)
		}
	}
	return out, nil
}

// recordAudited writes rows and, of those applied, their audit records
// (audits[i] of rows[i]) in one transaction, and returns the ids applied.
// On PostgreSQL each piece of recordChunk updates is one statement that
// inserts the records of the rows its update returned (see
// pgDialect.recordAuditedQuery): one round trip and one commit for a
// batch. Elsewhere the updates run first, then the INSERTs of the records
// of the ids they returned.
func (s *Notifications) recordAudited(ctx context.Context, owner string, rows []recordRow, audits [][]auditRow) ([]string, error) {
	if pg, ok := s.d.(pgDialect); ok {
		var qs []query
		for start := 0; start < len(rows); start += recordChunk {
			end := min(start+recordChunk, len(rows))
			qs = append(qs, pg.recordAuditedQuery(s.handle, owner, rows[start:end], slices.Concat(audits[start:end]...)))
		}
		return s.writeIDs(ctx, qs, len(rows))
	}
	qs, err := build(rows, recordChunk, func(part []recordRow) (query, error) { return s.d.recordQuery(s.handle, owner, part) })
	if err != nil {
		return nil, err
	}
	var applied []string
	err = s.write(ctx, true, func(ctx context.Context, c conn) (err error) {
		applied = make([]string, 0, len(rows)) // afresh: a group writer may run this twice
		for _, q := range qs {
			if applied, err = queryIDs(ctx, c, q, applied); err != nil {
				return err
			}
		}
		done := make(map[string]bool, len(applied))
		for _, id := range applied {
			done[strings.ToLower(id)] = true
		}
		var recs []auditRow
		for i := range rows {
			if done[strings.ToLower(rows[i].ID)] {
				recs = append(recs, audits[i]...)
			}
		}
		return chunks(recs, auditChunk, func(part []auditRow) error {
			q, err := s.d.appendQuery(s.handle, part)
			if err == nil {
				err = exec(ctx, c, q)
			}
			return err
		})
	})
	return applied, err
}

// releaseQuery drops owner's leases on ids.
func (s *Notifications) releaseQuery(owner string, ids []string) *bun.UpdateQuery {
	return s.w.NewUpdate().Table("notifications").Set(`"claimed_by" = NULL`).Set(`"claimed_until" = NULL`).
		Where(`"id" IN (?)`, bun.List(ids)).Where(`"claimed_by" = ?`, owner)
}

// Release implements ports.Store.
func (s *Notifications) Release(ctx context.Context, owner string, ids []string) error {
	ids, err := s.validIDs(ids)
	if err == nil {
		err = noNUL(owner)
	}
	if err != nil {
		return fmt.Errorf("sqlstore: release: %w", err)
	}
	err = chunks(ids, idChunk, func(part []string) error {
		_, err := s.releaseQuery(owner, part).Exec(ctx)
		return err
	})
	if err != nil {
		return s.fail(fmt.Sprintf("release %d rows of %s", len(ids), owner), err)
	}
	return nil
}

// releaseNodeQuery drops the leases that the owners of node other than
// keep hold on Pending and Retrying rows (see ports.Store.ReleaseNode): an
// owner of node begins with ports.LeaseOwnerPrefix(node), compared byte for
// byte (see the dialect's ownerHasPrefix).
func (s *Notifications) releaseNodeQuery(node, keep string) *bun.UpdateQuery {
	q := s.w.NewUpdate().Table("notifications").Set(`"claimed_by" = NULL`).Set(`"claimed_until" = NULL`).
		Where(`"status" IN (?)`, bun.List(dueStatuses))
	q = s.d.ownerHasPrefix(q, ports.LeaseOwnerPrefix(node))
	if keep != "" {
		q = q.Where(`"claimed_by" <> ?`, keep)
	}
	return q
}

// ReleaseNode implements ports.Store: one statement.
func (s *Notifications) ReleaseNode(ctx context.Context, node, keep string) (int, error) {
	if node == "" || strings.Contains(node, "/") {
		return 0, fmt.Errorf("sqlstore: release the leases of node %q: a node id is not empty and holds no '/': %w", node, ports.ErrInvalid)
	}
	if err := noNUL(node, keep); err != nil {
		return 0, err
	}
	res, err := s.releaseNodeQuery(node, keep).Exec(ctx)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		return 0, s.fail(fmt.Sprintf("release the leases of node %q", node), err)
	}
	return int(n), nil
}

// getQuery selects the row of id into row.
func (s *Notifications) getQuery(row *notificationRow, id string) *bun.SelectQuery {
	return s.r.NewSelect().Model(row).Where(`"id" = ?`, id)
}

// Get implements ports.Store.
func (s *Notifications) Get(ctx context.Context, id string) (ports.Notification, error) {
	if noNUL(id) != nil || !s.d.validID(id) {
		return ports.Notification{}, fmt.Errorf("sqlstore: get %.40q: %w", id, ports.ErrNotFound)
	}
	var row notificationRow
	err := s.getQuery(&row, id).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return ports.Notification{}, fmt.Errorf("sqlstore: notification %s: %w", id, ports.ErrNotFound)
	}
	if err != nil {
		return ports.Notification{}, s.fail("get "+id, err)
	}
	n, err := row.notification()
	if err != nil {
		return ports.Notification{}, s.fail("get "+id, err)
	}
	return n, nil
}

// statusesQuery selects the id and status of the known rows among ids,
// only of source site site when it is not empty.
func (s *Notifications) statusesQuery(site string, ids []string) *bun.SelectQuery {
	q := s.r.NewSelect().Model((*notificationRow)(nil)).Column("id", "status").Where(`"id" IN (?)`, bun.List(ids))
	if site != "" {
		q = q.Where(`"source_site" = ?`, site)
	}
	return q
}

// Statuses implements ports.Store.
func (s *Notifications) Statuses(ctx context.Context, site string, ids []string) (map[string]ports.Status, error) {
	out := make(map[string]ports.Status, len(ids))
	ids, err := s.validIDs(ids)
	if err == nil {
		err = noNUL(site)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlstore: statuses: %w", err)
	}
	err = chunks(ids, idChunk, func(part []string) error {
		var found, statuses []string
		if err := s.statusesQuery(site, part).Scan(ctx, &found, &statuses); err != nil {
			return err
		}
		for i, id := range found {
			out[id] = ports.Status(statuses[i])
		}
		return nil
	})
	if err != nil {
		return nil, s.fail(fmt.Sprintf("statuses of %d ids", len(ids)), err)
	}
	return out, nil
}

// checkFilter reports a filter no statement can carry: a status that is
// not a central one, a text with a NUL byte.
func checkFilter(f ports.Filter) error {
	for _, st := range f.Statuses {
		if !st.Valid() {
			return fmt.Errorf("sqlstore: filter status %q is not a central status: %w", st, ports.ErrInvalid)
		}
	}
	return noNUL(f.Type, f.SourceSite, f.List, f.Subject)
}

// keysUse is how a read of the notifications uses notification_keys, the
// table of their keys that PostgreSQL keeps beside them (migration 0011):
// columns no outcome changes (created_at, list, type, subject) with the
// indexes that order and filter the lists by them, which an outcome, never
// a HOT update there, would otherwise enter again.
type keysUse int

const (
	// noKeys reads the notifications alone, every condition unqualified:
	// always on SQLite and MS SQL; on PostgreSQL, a read that the
	// notifications' own indexes serve (status, site).
	noKeys keysUse = iota
	// joinKeys joins the keys, as "k", to the notifications, as "n", on
	// id: the keys' conditions and a list's order are on "k", the others
	// on "n".
	joinKeys
	// keysOnly reads the keys alone, as "k": a count that names only
	// keys.
	keysOnly
	// eachStatus reads the notifications alone, one status at a time (see
	// listQuery): a list of several statuses, or of the stuck ones, without
	// a list or type, on PostgreSQL, whose (status, created_at, id) index
	// orders the rows of each status but not of their union.
	eachStatus
)

// filterRead is the kind of read of a filter's rows (see dialect.keys).
type filterRead int

const (
	readList  filterRead = iota // a page of rows, in creation order
	readCount                   // their count
	readGroup                   // their counts per status
)

// where adds the conditions of f (checked by checkFilter) to q, on the
// tables use names.
func (s *Notifications) where(q bun.QueryBuilder, f ports.Filter, use keysUse) bun.QueryBuilder {
	row, key := "", "" // the qualifiers of the notifications' columns and of the keys'
	switch use {
	case joinKeys:
		row, key = `"n".`, `"k".`
	case keysOnly:
		key = `"k".`
	}
	if len(f.Statuses) > 0 {
		q = q.Where(row+`"status" IN (?)`, bun.List(f.Statuses))
	}
	if f.Type != "" {
		q = q.Where(key+`"type" = ?`, f.Type)
	}
	if f.SourceSite != "" {
		q = q.Where(row+`"source_site" = ?`, f.SourceSite)
	}
	if f.List != "" {
		q = q.Where(key+`"list" = ?`, f.List)
	}
	if !f.CreatedFrom.IsZero() {
		q = q.Where(key+`"created_at" >= ?`, at(f.CreatedFrom))
	}
	if !f.CreatedTo.IsZero() {
		q = q.Where(key+`"created_at" < ?`, at(f.CreatedTo))
	}
	if !f.UpdatedFrom.IsZero() {
		q = q.Where(row+`"updated_at" >= ?`, at(f.UpdatedFrom))
	}
	if !f.UpdatedTo.IsZero() {
		q = q.Where(row+`"updated_at" < ?`, at(f.UpdatedTo))
	}
	if !f.StuckBefore.IsZero() {
		q = q.Where(row+`"status" IN (?)`, bun.List(dueStatuses)).Where(key+`"created_at" < ?`, at(f.StuckBefore))
	}
	if f.Subject != "" {
		q = s.d.subjectContains(q, f.Subject, use != noKeys)
	}
	return q
}

// filtered selects the rows of f as use says: from the notifications,
// with or without their keys, or from the keys alone; among the candidates
// only, when not nil (SQLite's keyword path).
func (s *Notifications) filtered(f ports.Filter, c *candidates, use keysUse) *bun.SelectQuery {
	var q *bun.SelectQuery
	switch use {
	case keysOnly:
		q = s.r.NewSelect().TableExpr(`"notification_keys" AS "k"`)
	case joinKeys:
		q = s.r.NewSelect().Model((*notificationRow)(nil)).Join(`JOIN "notification_keys" AS "k" ON "k"."id" = "n"."id"`)
	default:
		q = s.r.NewSelect().Model((*notificationRow)(nil))
		if c != nil {
			q = fromCandidates(q, c)
		}
	}
	return q.ApplyQueryBuilder(func(q bun.QueryBuilder) bun.QueryBuilder { return s.where(q, f, use) })
}

// listQuery selects up to limit rows of f after the cursor, newest first
// (created_at DESC, id DESC) or if oldest oldest first (both ASC), by
// keyset: either order reads the same index, one way or the other.
//
// Past a cursor, the bound of f the cursor already implies is left out
// (CreatedFrom oldest first, CreatedTo newest first): SQLite, without
// statistics, would otherwise start its index range at that bound rather
// than at the cursor, and read every earlier page again on each page. A
// cursor that does not imply it (one made up) keeps it.
func (s *Notifications) listQuery(f ports.Filter, after *cursor, limit int, c *candidates, oldest bool) *bun.SelectQuery {
	if after != nil {
		if oldest && !after.createdAt.Before(f.CreatedFrom) {
			f.CreatedFrom = time.Time{} // created_at >= the cursor's >= CreatedFrom
		}
		// Compared as stored (microseconds): the cursor's instant must stay
		// below CreatedTo once both are written as SQL.
		if !oldest && !f.CreatedTo.IsZero() && after.createdAt.Truncate(time.Microsecond).Before(f.CreatedTo.Truncate(time.Microsecond)) {
			f.CreatedTo = time.Time{} // created_at <= the cursor's < CreatedTo
		}
	}
	use := s.d.keys(f, readList)
	if use == eachStatus {
		// The first rows of each status, through its range of the status
		// index, and the first of those: a bounded read however few rows
		// match, where the keys' creation index would be walked until
		// enough did.
		statuses := slices.Compact(slices.Sorted(slices.Values(f.Statuses))) // each once
		if len(statuses) == 0 {
			statuses = []ports.Status{ports.StatusPending, ports.StatusRetrying} // the stuck filter's (dueStatuses)
		}
		var union *bun.SelectQuery
		for _, st := range statuses {
			g := f
			g.Statuses = []ports.Status{st}
			part := s.page(s.filtered(g, c, noKeys), "", after, limit, oldest)
			if union == nil {
				union = part
			} else {
				union = union.UnionAll(part)
			}
		}
		return s.page(s.r.NewSelect().TableExpr(`(?) AS "n"`, union).ColumnExpr(`"n".*`), "", nil, limit, oldest)
	}
	table := "" // the table whose columns order the page
	if use == joinKeys {
		table = `"k".`
	}
	return s.page(s.filtered(f, c, use), table, after, limit, oldest)
}

// page orders q by creation time and id on the columns of table (a
// qualifier, or ""), newest first or if oldest oldest first, and keeps
// the first limit rows after the cursor.
func (s *Notifications) page(q *bun.SelectQuery, table string, after *cursor, limit int, oldest bool) *bun.SelectQuery {
	if after != nil {
		q = s.d.after(q, table, *after, oldest)
	}
	if oldest {
		return q.OrderExpr(table + `"created_at" ASC, ` + table + `"id" ASC`).Limit(int64(limit))
	}
	return q.OrderExpr(table + `"created_at" DESC, ` + table + `"id" DESC`).Limit(int64(limit))
}

// Query implements ports.Store.
func (s *Notifications) Query(ctx context.Context, f ports.Filter, page ports.PageRequest) (ports.Page, error) {
	if page.Limit <= 0 {
		return ports.Page{}, fmt.Errorf("sqlstore: query: page Limit %d must be positive: %w", page.Limit, ports.ErrInvalid)
	}
	if err := checkFilter(f); err != nil {
		return ports.Page{}, err
	}
	var after *cursor
	if page.After != "" {
		c, err := decodeCursor(page.After)
		if err != nil {
			return ports.Page{}, err
		}
		if !s.d.validID(c.id) {
			return ports.Page{}, fmt.Errorf("sqlstore: page cursor %.40q names no row: %w", page.After, ports.ErrInvalid)
		}
		after = &c
	}
	c, err := s.subjectRowids(ctx, f.Subject)
	if err != nil {
		return ports.Page{}, err
	}
	if c != nil && len(c.rowids) == 0 {
		return ports.Page{Items: []ports.Notification{}}, nil // no subject holds the keyword
	}
	rs, err := s.listQuery(f, after, page.Limit+1, c, page.Oldest).Rows(ctx)
	if err != nil {
		return ports.Page{}, s.fail("query", err)
	}
	defer rs.Close()
	// The select names the model's columns in their order (bun's Model):
	// scanModel reads a page faster than bun's scan by column name.
	rows, err := scanModel(rs, notificationModel, make([]notificationRow, 0, page.Limit+1))
	if err != nil {
		return ports.Page{}, s.fail("query", err)
	}
	ns, err := notifications(rows)
	if err != nil {
		return ports.Page{}, s.fail("query", err)
	}
	var p ports.Page
	if len(ns) > page.Limit {
		ns = ns[:page.Limit]
		lastRow := ns[len(ns)-1]
		p.Next = encodeCursor(cursor{createdAt: lastRow.CreatedAt, id: lastRow.ID})
	}
	p.Items = ns
	return p, nil
}

// countQuery counts the rows of f.
func (s *Notifications) countQuery(f ports.Filter, c *candidates) *bun.SelectQuery {
	return s.filtered(f, c, s.d.keys(f, readCount)).ColumnExpr(s.d.countAll())
}

// Count implements ports.Store.
func (s *Notifications) Count(ctx context.Context, f ports.Filter) (int64, error) {
	if err := checkFilter(f); err != nil {
		return 0, err
	}
	c, found, err := s.subjectCount(ctx, f.Subject)
	if err != nil {
		return 0, err
	}
	if c != nil && found == 0 {
		return 0, nil // no subject holds the keyword
	}
	var n int64
	if err := s.countQuery(f, c).Scan(ctx, &n); err != nil {
		return 0, s.fail("count", err)
	}
	return n, nil
}

// statusCount is a row of countByStatusQuery.
type statusCount struct {
	Status  string `bun:"status"`
	Matched int64  `bun:"matched"`
}

// countByStatusQuery counts the rows of f per status.
func (s *Notifications) countByStatusQuery(f ports.Filter, c *candidates) *bun.SelectQuery {
	return s.filtered(f, c, s.d.keys(f, readGroup)).ColumnExpr(`"status"`).ColumnExpr(s.d.countAll() + ` AS "matched"`).GroupExpr(`"status"`)
}

// CountByStatus implements ports.Store. Capped, for a filter of statuses
// and creation time only, it is one count per status (of f's, or every
// status) of at most limit+1 rows, each a range of the (status,
// created_at, id) index that stops at the cap, all in one statement: its
// cost is bounded whatever the table's size. Otherwise it is one grouped
// count, exact: a capped count per status of a filter the index does not
// answer reads the rows of a status one by one through the index until
// limit of them match (all of them for a status the filter rarely
// matches), measured three times slower on SQLite than the one scan.
func (s *Notifications) CountByStatus(ctx context.Context, f ports.Filter, limit int64) (map[ports.Status]int64, error) {
	if err := checkFilter(f); err != nil {
		return nil, err
	}
	out := map[ports.Status]int64{}
	c, found, err := s.subjectCount(ctx, f.Subject)
	if err != nil {
		return nil, err
	}
	if c != nil && found == 0 {
		return out, nil // no subject holds the keyword
	}
	q := s.countByStatusQuery(f, c)
	if limit > 0 && byStatusIndex(f) {
		q = s.cappedCountByStatusQuery(f, c, limit)
	}
	var rows []statusCount
	if err := q.Scan(ctx, &rows); err != nil {
		return nil, s.fail("count by status", err)
	}
	for _, r := range rows {
		if r.Matched > 0 {
			out[ports.Status(r.Status)] += r.Matched
		}
	}
	return out, nil
}

// byStatusIndex reports whether f narrows by nothing but statuses and the
// creation time: what the (status, created_at, id) index answers alone.
func byStatusIndex(f ports.Filter) bool {
	return f.Type == "" && f.SourceSite == "" && f.List == "" && f.UpdatedFrom.IsZero() && f.UpdatedTo.IsZero() &&
		f.StuckBefore.IsZero() && f.Subject == ""
}

// cappedCountByStatusQuery counts the rows of f per status up to limit+1
// each: the union of one count per status of f's (every central status
// when f names none), each over the first limit+1 rows of that status.
func (s *Notifications) cappedCountByStatusQuery(f ports.Filter, c *candidates, limit int64) *bun.SelectQuery {
	statuses := f.Statuses
	if len(statuses) == 0 {
		statuses = ports.CentralStatuses
	}
	var q *bun.SelectQuery
	for _, st := range statuses {
		g := f
		g.Statuses = []ports.Status{st}
		rows := s.filtered(g, c, s.d.keys(g, readCount))
		part := s.r.NewSelect().TableExpr(`(?) AS "capped"`, s.d.firstRows(rows, limit+1)).
			ColumnExpr(`? AS "status"`, string(st)).ColumnExpr(s.d.countAll() + ` AS "matched"`)
		if q == nil {
			q = part
		} else {
			q = q.UnionAll(part)
		}
	}
	return q
}

// The most keyword candidates that Query and Count read by rowid on SQLite
// (see subjectRowids); beyond them they scan. Reading a candidate costs
// about 4 µs at 1,000,000 rows, and a keyword with n matches fills a
// newest-first page of 50 after reading about 50/n of the table (the whole
// of it: 0.4 s): past 2,000 matches the scan is as fast. A count reads
// every matching row either way, so its candidates pay up to a tenth of the
// table.
const (
	subjectQueryCap = 2_000
	subjectCountCap = 100_000
)

// subjectRowids returns the candidates of a list filtered by keyword, on
// SQLite: the rowids of the rows whose subject may contain keyword, found
// through the trigram index of migration 0004, and of the rows not yet
// indexed whose subject does (see subjectIndexer). They are a superset of
// the matching rows, which the list filters with the same LIKE as without
// them.
// It returns nil, and the list scans as before, when the index cannot
// answer (not SQLite; no keyword, or one shorter than three characters or
// not valid UTF-8: see subjectMatch) or
// when more than the store's cap may match: a common keyword fills a
// newest-first page sooner than its candidates are read and sorted. No
// candidate at all means that no row matches.
func (s *Notifications) subjectRowids(ctx context.Context, keyword string) (*candidates, error) {
	match, ok := s.d.subjectIndex(keyword)
	if !ok {
		return nil, nil
	}
	ids := make([]int64, 0, 64)
	if err := subjectCandidates(s.r, keyword, match, s.subjectQueryCap+1).Scan(ctx, &ids); err != nil {
		return nil, s.fail("keyword candidates", err)
	}
	if len(ids) > s.subjectQueryCap {
		return nil, nil
	}
	return &candidates{rowids: ids}, nil
}

// subjectCount is subjectRowids for a count: it counts the candidates (up
// to the store's count cap) and returns, when they are within it, the index
// query that finds them again in the count, and their number.
func (s *Notifications) subjectCount(ctx context.Context, keyword string) (*candidates, int64, error) {
	match, ok := s.d.subjectIndex(keyword)
	if !ok {
		return nil, 0, nil
	}
	var n int64
	if err := subjectCandidateCount(s.r, keyword, match, s.subjectCountCap+1).Scan(ctx, &n); err != nil {
		return nil, 0, s.fail("count keyword candidates", err)
	}
	if n > int64(s.subjectCountCap) {
		return nil, 0, nil
	}
	return &candidates{match: match}, n, nil
}

// kpiRow is a row of kpisQuery.
type kpiRow struct {
	Kind   int     `bun:"kind"`
	Site   string  `bun:"source_site"`
	Status string  `bun:"status"`
	N      int64   `bun:"n"`
	Stuck  int64   `bun:"stuck"`
	Oldest instant `bun:"oldest"`
}

// kpisQuery selects, per source site, two kinds of rows (kpiRow):
//
//   - kind 0, one per (status, site) among Pending, Retrying and Parked: the
//     row count, the count created before StuckBefore, the oldest created_at
//     (served by the (status, created_at, id) index, which carries
//     source_site, on PostgreSQL and MS SQL; by a partial (status,
//     source_site, created_at) index on SQLite, which groups by sorting
//     unless an index yields the groups in order);
//   - kind 1, one per site: the count delivered since DeliveredSince (served
//     by the delivered_at index, which SQLite must be told of).
func (s *Notifications) kpisQuery(req ports.KPIRequest) *bun.SelectQuery {
	count := bun.Safe(s.d.countAll())
	queue := s.r.NewSelect().TableExpr("?", s.d.from("notifications_kpi_idx")).
		ColumnExpr(`0 AS "kind", "source_site", "status", ? AS "n"`, count)
	if req.StuckBefore.IsZero() {
		queue = queue.ColumnExpr(`0 AS "stuck"`)
	} else {
		queue = queue.ColumnExpr(`SUM(CASE WHEN "created_at" < ? THEN 1 ELSE 0 END) AS "stuck"`, at(req.StuckBefore))
	}
	queue = queue.ColumnExpr(`MIN("created_at") AS "oldest"`).
		Where(`"status" IN (?)`, bun.List(kpiStatuses)).GroupExpr(`"status", "source_site"`)
	delivered := s.r.NewSelect().TableExpr("?", s.d.from("notifications_delivered_idx")).
		ColumnExpr(`1, "source_site", ?, ?, 0, ?`, "", count, at(time.Time{})).
		Where(`"delivered_at" IS NOT NULL`)
	if req.DeliveredSince.IsZero() {
		delivered = delivered.Where(`"delivered_at" >= "delivered_at"`) // every delivered row has it set
	} else {
		delivered = delivered.Where(`"delivered_at" >= ?`, at(req.DeliveredSince))
	}
	return queue.UnionAll(delivered.GroupExpr(`"source_site"`))
}

// KPIs implements ports.Store.
func (s *Notifications) KPIs(ctx context.Context, req ports.KPIRequest) (ports.KPIs, error) {
	var rows []kpiRow
	if err := s.kpisQuery(req).Scan(ctx, &rows); err != nil {
		return ports.KPIs{}, s.fail("kpis", err)
	}
	sites := map[string]*ports.KPICounts{}
	var out ports.KPIs
	for _, r := range rows {
		siteCounts := sites[r.Site]
		if siteCounts == nil {
			siteCounts = &ports.KPICounts{}
			sites[r.Site] = siteCounts
		}
		for _, c := range []*ports.KPICounts{&out.Global, siteCounts} {
			if r.Kind == 1 {
				c.Delivered += r.N
				continue
			}
			switch ports.Status(r.Status) {
			case ports.StatusParked:
				c.Parked += r.N
			case ports.StatusPending, ports.StatusRetrying:
				c.QueueDepth += r.N
				c.Stuck += r.Stuck
				if t := r.Oldest.t; !t.IsZero() && (c.OldestPendingAt.IsZero() || t.Before(c.OldestPendingAt)) {
					c.OldestPendingAt = t
				}
			}
		}
	}
	out.Sites = make([]ports.SiteKPICounts, 0, len(sites))
	for site, c := range sites {
		out.Sites = append(out.Sites, ports.SiteKPICounts{Site: site, KPICounts: *c})
	}
	slices.SortFunc(out.Sites, func(a, b ports.SiteKPICounts) int { return strings.Compare(a.Site, b.Site) })
	return out, nil
}

// movedRow is a row transitionQuery returns.
type movedRow struct {
	ID         string `bun:"id"`
	SourceSite string `bun:"source_site"`
	Type       string `bun:"type"`
}

// transitionQuery moves the selected rows from req.From to req.To and
// returns their ids, sites and types (movedRow).
func (s *Notifications) transitionQuery(req ports.TransitionRequest) *bun.UpdateQuery {
	q := s.w.NewUpdate().Table("notifications").Set(`"status" = ?`, req.To).Set(`"updated_at" = ?`, at(req.Now)).
		Set(`"claimed_by" = NULL`).Set(`"claimed_until" = NULL`)
	if req.Reset {
		q = q.Set(`"retry_count" = 0`).Set(`"next_attempt_at" = NULL`).Set(`"last_error" = ?`, "")
	} else if req.DueNow {
		q = q.Set(`"next_attempt_at" = NULL`)
	}
	q = q.Where(`"status" = ?`, req.From)
	if !req.LeaseEndedBy.IsZero() {
		q = q.Where(`("claimed_by" IS NULL OR "claimed_until" <= ?)`, at(req.LeaseEndedBy))
	}
	if len(req.Selection.IDs) > 0 {
		q = q.Where(`"id" IN (?)`, bun.List(req.Selection.IDs))
	} else {
		q = q.ApplyQueryBuilder(func(q bun.QueryBuilder) bun.QueryBuilder { return s.where(q, req.Selection.Filter, noKeys) })
	}
	return q.Returning(s.d.returned("id") + ", " + s.d.returned("source_site") + ", " + s.d.returned("type"))
}

// Transition implements ports.Store.
func (s *Notifications) Transition(ctx context.Context, req ports.TransitionRequest) ([]ports.Moved, error) {
	if !req.From.Valid() || !req.To.Valid() {
		return nil, fmt.Errorf("sqlstore: transition %q to %q: not central statuses: %w", req.From, req.To, ports.ErrInvalid)
	}
	if req.Now.IsZero() {
		return nil, fmt.Errorf("sqlstore: transition: Now is unset: %w", ports.ErrInvalid)
	}
	if err := checkFilter(req.Selection.Filter); err != nil {
		return nil, err
	}
	if len(req.Selection.IDs) > 0 {
		ids, err := s.validIDs(req.Selection.IDs)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: transition: %w", err)
		}
		if len(ids) == 0 {
			return nil, nil // no row has those ids
		}
		req.Selection.IDs = ids
	}
	var rows []movedRow
	var err error
	if ids := req.Selection.IDs; len(ids) > idChunk {
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			rows = nil
			return chunks(ids, idChunk, func(part []string) error {
				r := req
				r.Selection = ports.Selection{IDs: part}
				var got []movedRow
				err := s.transitionQuery(r).Conn(tx).Scan(ctx, &got)
				rows = append(rows, got...)
				return err
			})
		})
	} else {
		err = s.transitionQuery(req).Scan(ctx, &rows)
	}
	if err != nil {
		return nil, s.fail(fmt.Sprintf("transition %s to %s", req.From, req.To), err)
	}
	moved := make([]ports.Moved, len(rows))
	for i, r := range rows {
		moved[i] = ports.Moved{ID: r.ID, SourceSite: r.SourceSite, Type: r.Type}
	}
	return moved, nil
}

// Purge implements ports.Store.
func (s *Notifications) Purge(ctx context.Context, cutoff time.Time, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("sqlstore: purge: limit %d must be positive: %w", limit, ports.ErrInvalid)
	}
	var deleted []string
	if err := s.d.purge(s.w, cutoff, limit).Scan(ctx, &deleted); err != nil {
		return nil, s.fail("purge", err)
	}
	return deleted, nil
}

// --- ports.AuditLog -----------------------------------------------------------

// Append implements ports.AuditLog: all records or none.
func (s *Notifications) Append(ctx context.Context, records []ports.AuditRecord) error {
	if len(records) == 0 {
		return nil
	}
	rows := make([]auditRow, len(records))
	for i := range records {
		var err error
		if rows[i], err = s.auditRow(&records[i]); err != nil {
			return fmt.Errorf("sqlstore: append audit: record %d: %w", i, err)
		}
	}
	qs, err := build(rows, auditChunk, func(part []auditRow) (query, error) { return s.d.appendQuery(s.handle, part) })
	if err != nil {
		return err
	}
	err = s.write(ctx, len(qs) > 1, func(ctx context.Context, c conn) error {
		for _, q := range qs {
			if err := exec(ctx, c, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return s.fail(fmt.Sprintf("append %d audit records", len(records)), err)
	}
	return nil
}

// auditRow checks r and returns it as a row.
func (s *Notifications) auditRow(r *ports.AuditRecord) (auditRow, error) {
	if r.NotificationID == "" || r.Kind == "" || r.At.IsZero() {
		return auditRow{}, fmt.Errorf("it lacks a notification id, kind or time: %w", ports.ErrInvalid)
	}
	if !s.d.validID(r.NotificationID) {
		return auditRow{}, fmt.Errorf("notification id %.40q is not a UUID: %w", r.NotificationID, ports.ErrInvalid)
	}
	return toAuditRow(r)
}

// historyQuery selects the records of one notification into rows, oldest
// first, then in append order.
func (s *Notifications) historyQuery(rows *[]auditRow, id string) *bun.SelectQuery {
	return s.r.NewSelect().Model(rows).Where(`"notification_id" = ?`, id).OrderExpr(`"at", "id"`)
}

// History implements ports.AuditLog.
func (s *Notifications) History(ctx context.Context, notificationID string) ([]ports.AuditRecord, error) {
	out := []ports.AuditRecord{}
	if noNUL(notificationID) != nil || !s.d.validID(notificationID) {
		return out, nil // no stored id is like that
	}
	var rows []auditRow
	if err := s.historyQuery(&rows, notificationID).Scan(ctx); err != nil {
		return nil, s.fail("history of "+notificationID, err)
	}
	for i := range rows {
		rec, err := rows[i].record()
		if err != nil {
			return nil, s.fail("history of "+notificationID, err)
		}
		out = append(out, rec)
	}
	return out, nil
}

// forgetQuery deletes the records of ids.
func (s *Notifications) forgetQuery(ids []string) *bun.DeleteQuery {
	return s.w.NewDelete().TableExpr(`"notification_audit"`).Where(`"notification_id" IN (?)`, bun.List(ids))
}

// Forget implements ports.AuditLog.
func (s *Notifications) Forget(ctx context.Context, notificationIDs []string) error {
	ids, err := s.validIDs(notificationIDs)
	if err != nil {
		return fmt.Errorf("sqlstore: forget: %w", err)
	}
	err = chunks(ids, idChunk, func(part []string) error {
		_, err := s.forgetQuery(part).Exec(ctx)
		return err
	})
	if err != nil {
		return s.fail(fmt.Sprintf("forget %d notifications", len(ids)), err)
	}
	return nil
}
