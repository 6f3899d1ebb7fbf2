package sqlstore

import (
	"context"
	"database/sql"
	"reflect"
	"strconv"
	"time"

	"github.com/uptrace/bun"
	bundialect "github.com/uptrace/bun/dialect"
	"github.com/uptrace/bun/schema"
)

// This file holds what the directory, the accounts and the admin audit
// share to run on bun's query builders: a bun.DB over the store's pools,
// the column types whose literals differ per dialect, and the writes whose
// statements differ per dialect (writeDialect; MS SQL's in writes_mssql.go).

// builderDialect is a bun dialect whose Init asks the server nothing.
// bun.NewDB calls Init, which on MS SQL queries the server's version (and
// only logs it); the store wraps its pools in a bun.DB per call.
type builderDialect struct{ schema.Dialect }

// Init implements schema.Dialect: nothing to do.
func (builderDialect) Init(*sql.DB) {}

// queries returns a bun.DB over sqldb in the store's dialect: it builds
// statements and runs them on sqldb, or on the connection given with Conn.
func (s *handle) queries(sqldb *sql.DB) *bun.DB {
	return bun.NewDB(sqldb, builderDialect{s.g.d})
}

// bunConn is c, a pool or a transaction of database/sql, as bun runs
// statements on it.
func bunConn(c conn) bun.IConn { return c.(bun.IConn) }

// colTime is an instant in a column of the dialect's representation:
// integer Unix microseconds on SQLite, timestamptz on PostgreSQL,
// datetime2(6) in UTC on MS SQL; the zero time is NULL. It reads any of
// them back in UTC.
type colTime time.Time

// AppendQuery implements schema.QueryAppender.
func (t colTime) AppendQuery(gen schema.QueryGen, b []byte) ([]byte, error) {
	tm := time.Time(t).UTC().Truncate(time.Microsecond)
	switch gen.Dialect().Name() {
	case bundialect.PG:
		if tm.IsZero() {
			return append(b, "NULL::timestamptz"...), nil
		}
		b = append(b, '\'')
		b = tm.AppendFormat(b, "2006-01-02 15:04:05.000000")
		return append(b, "+00'::timestamptz"...), nil
	case bundialect.MSSQL:
		if tm.IsZero() {
			return append(b, "CAST(NULL AS datetime2(6))"...), nil
		}
		b = append(b, "CAST('"...)
		b = tm.AppendFormat(b, "2006-01-02T15:04:05.000000")
		return append(b, "' AS datetime2(6))"...), nil
	}
	if tm.IsZero() {
		return append(b, "NULL"...), nil
	}
	return strconv.AppendInt(b, tm.UnixMicro(), 10), nil
}

// Scan implements sql.Scanner.
func (t *colTime) Scan(src any) error {
	var d dbTime
	err := d.Scan(src)
	*t = colTime(d.t)
	return err
}

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
}

// executor is a statement ready to run.
type executor interface {
	Exec(ctx context.Context, dest ...any) (sql.Result, error)
	String() string
}

// writes returns the writes of the store's dialect.
func (s *handle) writes() writeDialect { return writesOf(s.g.d) }

// writesOf returns the writes of dialect d.
func writesOf(d schema.Dialect) writeDialect {
	if d.Name() == bundialect.MSSQL {
		return mssqlWrites{}
	}
	return conflictWrites{}
}

// conflictWrites are the writes of SQLite and PostgreSQL: INSERT ... ON
// CONFLICT and RETURNING.
type conflictWrites struct{}

func (conflictWrites) upsert(db *bun.DB, c bun.IConn, model any) executor {
	key := modelTable(db, model).PKs[0].SQLName
	// With no SET, bun sets every other column from EXCLUDED.
	return db.NewInsert().Conn(c).Model(model).On("CONFLICT (?) DO UPDATE", bun.Safe(key))
}

func (conflictWrites) insertNew(db *bun.DB, c bun.IConn, model any, _ ...string) executor {
	return db.NewInsert().Conn(c).Model(model).On("CONFLICT DO NOTHING")
}

func (conflictWrites) returningID(q *bun.InsertQuery) *bun.InsertQuery {
	return q.Returning("?", bun.Ident("id"))
}

// modelTable returns bun's table of model, a pointer to a row struct.
func modelTable(db *bun.DB, model any) *schema.Table {
	return db.Table(reflect.TypeOf(model).Elem())
}
