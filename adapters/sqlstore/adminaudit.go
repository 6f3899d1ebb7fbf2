package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/siteline/outbox/ports"
)

// This file is ports.AdminAudit over the table admin_audit (migration
// 0005_admin_audit): one row per admin change, its id given by the database
// (an identity column; SQLite's rowid), increasing with each insert. Reads
// page by id, newest first, through the primary key or the index on (kind,
// name, id).

var _ ports.AdminAudit = (*Accounts)(nil)

// adminColumns are admin_audit's columns as written, in order; reads add
// the id first.
var adminColumns = []string{"at", "actor", "kind", "name", "action", "summary"}

// appendAdmin inserts r and returns its id: RETURNING on SQLite and
// PostgreSQL, OUTPUT on MS SQL.
func (g *sqlgen) appendAdmin(r ports.AdminRecord) (query, error) {
	s := g.stmt(256)
	s.sql(`INSERT INTO "admin_audit" (` + colList("", adminColumns) + `) `)
	if g.kind == kindMSSQL {
		s.sql(`OUTPUT inserted."id" `)
	}
	s.sql("VALUES (").time(r.At).sql(", ").str(r.Actor).sql(", ").str(string(r.Kind)).sql(", ").str(r.Name).
		sql(", ").str(string(r.Action)).sql(", ").str(r.Summary).sql(")")
	if g.kind != kindMSSQL {
		s.sql(` RETURNING "id"`)
	}
	return s.done()
}

// adminRecords selects the records q asks for, newest first.
func (g *sqlgen) adminRecords(q ports.AdminQuery) (query, error) {
	s := g.stmt(256)
	s.sql("SELECT ").top(q.Limit).sql(`"id", ` + colList("", adminColumns) + ` FROM "admin_audit"`)
	where := " WHERE "
	and := func() {
		s.sql(where)
		where = " AND "
	}
	if q.Before > 0 {
		and()
		s.sql(`"id" < `).int(q.Before)
	}
	if q.Kind != "" {
		and()
		s.sql(`"kind" = `).str(string(q.Kind))
	}
	if q.Name != "" {
		and()
		s.sql(`"name" = `).str(q.Name)
	}
	s.sql(` ORDER BY "id" DESC`).limit(q.Limit)
	return s.done()
}

// AppendAdmin implements ports.AdminAudit.
func (s *Accounts) AppendAdmin(ctx context.Context, r ports.AdminRecord) (ports.AdminRecord, error) {
	if err := r.Validate(); err != nil {
		return ports.AdminRecord{}, fmt.Errorf("sqlstore: append admin record: %w", err)
	}
	q, err := s.g.appendAdmin(r)
	if err != nil {
		return ports.AdminRecord{}, fmt.Errorf("sqlstore: append admin record: %w", err)
	}
	err = s.write(ctx, false, func(ctx context.Context, c conn) error {
		rows, err := c.QueryContext(ctx, q.text, q.args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return err
			}
			return errors.New("the insert returned no id")
		}
		if err := rows.Scan(&r.ID); err != nil { // afresh: a group writer may run this twice
			return err
		}
		return rows.Close()
	})
	if err != nil {
		return ports.AdminRecord{}, s.fail("append admin record", err)
	}
	r.At = r.At.UTC()
	return r, nil
}

// AdminRecords implements ports.AdminAudit.
func (s *Accounts) AdminRecords(ctx context.Context, q ports.AdminQuery) ([]ports.AdminRecord, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("sqlstore: read admin records: %w", err)
	}
	if q.Name != "" && !storable(q.Name) {
		return []ports.AdminRecord{}, nil
	}
	sq, err := s.g.adminRecords(q)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: read admin records: %w", err)
	}
	return queryRows(ctx, s.handle, "read admin records", sq, func(rows *sql.Rows) (ports.AdminRecord, error) {
		var (
			r            ports.AdminRecord
			at           dbTime
			kind, action string
		)
		if err := rows.Scan(&r.ID, &at, &r.Actor, &kind, &r.Name, &action, &r.Summary); err != nil {
			return r, err
		}
		r.At, r.Kind, r.Action = at.t, ports.AdminKind(kind), ports.AdminAction(action)
		return r, nil
	})
}
