package sqlstore

import (
	"context"
	"database/sql"
	"reflect"
	"strconv"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"
)

// This file holds what the directory, the accounts and the admin audit
// share on bun's query builders besides the handle's pools and instant: a
// float column type, and the writes whose statements differ per dialect
// (writeDialect; MS SQL's in writes_mssql.go).

// eFloat is a float64 written as the shortest decimal that reads back as
// the same value, in E notation: an approximate-number literal in every
// dialect (bun writes plain decimals, which MS SQL reads as a decimal of at
// most 38 digits). NaN and infinities are refused before.
type eFloat float64

// AppendQuery implements schema.QueryAppender.
func (f eFloat) AppendQuery(_ schema.QueryGen, b []byte) ([]byte, error) {
	return strconv.AppendFloat(b, float64(f), 'e', -1, 64), nil
}

// writeDialect is what the directory, the accounts and the admin audit
// write differently per dialect. model is a pointer to a row struct whose
// key field carries bun's pk tag.
type writeDialect interface {
	// upsert inserts the row, or replaces the row with the same key.
	upsert(db *bun.DB, c bun.IConn, model any) executor
	// insertNew inserts the row unless a row has the same value in one of
	// the unique columns; it then affects no row.
	insertNew(db *bun.DB, c bun.IConn, model any, unique ...string) executor
	// returningID has q return the "id" column the database gave the row.
	returningID(q *bun.InsertQuery) *bun.InsertQuery
	// reportSiteCalls inserts rows (distinct keys) into site_calls, or
	// replaces a stored row whose version is below the reported one,
	// keeping its request while the reported status is Parked (sitecalls.go).
	reportSiteCalls(db *bun.DB, c bun.IConn, rows *[]siteCallRow) executor
}

// executor is a statement ready to run.
type executor interface {
	Exec(ctx context.Context, dest ...any) (sql.Result, error)
	String() string
}

// writes returns the writes of the store's dialect.
func (s *handle) writes() writeDialect { return s.d.writes() }

// conflictWrites are the writes of SQLite and PostgreSQL: INSERT ... ON
// CONFLICT and RETURNING.
type conflictWrites struct{}

func (conflictWrites) upsert(db *bun.DB, c bun.IConn, model any) executor {
	var keys []byte
	for i, pk := range modelTable(db, model).PKs {
		if i > 0 {
			keys = append(keys, ", "...)
		}
		keys = append(keys, pk.SQLName...)
	}
	// With no SET, bun sets every other column from EXCLUDED.
	return db.NewInsert().Conn(c).Model(model).On("CONFLICT (?) DO UPDATE", bun.Safe(keys))
}

func (conflictWrites) insertNew(db *bun.DB, c bun.IConn, model any, _ ...string) executor {
	return db.NewInsert().Conn(c).Model(model).On("CONFLICT DO NOTHING")
}

func (conflictWrites) returningID(q *bun.InsertQuery) *bun.InsertQuery {
	return q.Returning("?", bun.Ident("id"))
}

// modelTable returns bun's table of model, a pointer to a row struct or
// to a slice of them.
func modelTable(db *bun.DB, model any) *schema.Table {
	t := reflect.TypeOf(model).Elem()
	if t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	return db.Table(t)
}
