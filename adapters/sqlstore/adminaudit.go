package sqlstore

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/siteline/outbox/ports"
)

// This file is ports.AdminAudit over the table admin_audit (migration
// 0005_admin_audit): one row per admin change, its id given by the database
// (an identity column; SQLite's rowid), increasing with each insert. Reads
// page by id, newest first, through the primary key or the index on (kind,
// name, id).

var _ ports.AdminAudit = (*Accounts)(nil)

// adminRow is a row of admin_audit; the database gives the id.
type adminRow struct {
	bun.BaseModel `bun:"table:admin_audit,alias:admin_audit"`

	ID      int64   `bun:"id,pk,autoincrement"`
	At      instant `bun:"at"`
	Actor   string  `bun:"actor"`
	Kind    string  `bun:"kind"`
	Name    string  `bun:"name"`
	Action  string  `bun:"action"`
	Summary string  `bun:"summary"`
}

// AppendAdmin implements ports.AdminAudit: an insert that returns the id
// (RETURNING; OUTPUT on MS SQL).
func (s *Accounts) AppendAdmin(ctx context.Context, r ports.AdminRecord) (ports.AdminRecord, error) {
	if err := r.Validate(); err != nil {
		return ports.AdminRecord{}, fmt.Errorf("sqlstore: append admin record: %w", err)
	}
	row := &adminRow{At: at(r.At), Actor: r.Actor, Kind: string(r.Kind), Name: r.Name,
		Action: string(r.Action), Summary: r.Summary}
	err := s.write(ctx, false, func(ctx context.Context, c conn) error {
		q := appendAdminQuery(s.w, s.writes(), row).Conn(c)
		var id int64
		if err := q.Scan(ctx, &id); err != nil {
			return err
		}
		r.ID = id // afresh: a group writer may run this twice
		return nil
	})
	if err != nil {
		return ports.AdminRecord{}, s.fail("append admin record", err)
	}
	r.At = r.At.UTC()
	return r, nil
}

// AdminRecords implements ports.AdminAudit: newest first, by id.
func (s *Accounts) AdminRecords(ctx context.Context, q ports.AdminQuery) ([]ports.AdminRecord, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("sqlstore: read admin records: %w", err)
	}
	if q.Name != "" && !storable(q.Name) {
		return []ports.AdminRecord{}, nil
	}
	var rows []adminRow
	if err := adminRecordsQuery(s.r, &rows, q).Scan(ctx); err != nil {
		return nil, s.fail("read admin records", err)
	}
	out := make([]ports.AdminRecord, len(rows))
	for i, r := range rows {
		out[i] = ports.AdminRecord{ID: r.ID, At: r.At.t, Actor: r.Actor, Kind: ports.AdminKind(r.Kind),
			Name: r.Name, Action: ports.AdminAction(r.Action), Summary: r.Summary}
	}
	return out, nil
}

// appendAdminQuery inserts row and returns its id.
func appendAdminQuery(db *bun.DB, w writeDialect, row *adminRow) *bun.InsertQuery {
	return w.returningID(db.NewInsert().Model(row).ExcludeColumn("id"))
}

// adminRecordsQuery selects into rows the records q asks for, newest first.
func adminRecordsQuery(db *bun.DB, rows *[]adminRow, q ports.AdminQuery) *bun.SelectQuery {
	sq := db.NewSelect().Model(rows)
	if q.Before > 0 {
		sq = sq.Where("? < ?", bun.Ident("id"), q.Before)
	}
	if q.Kind != "" {
		sq = sq.Where("? = ?", bun.Ident("kind"), string(q.Kind))
	}
	if q.Name != "" {
		sq = sq.Where("? = ?", bun.Ident("name"), q.Name)
	}
	return sq.OrderExpr("? DESC", bun.Ident("id")).Limit(int64(q.Limit))
}
