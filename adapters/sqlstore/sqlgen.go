package sqlstore

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun/dialect/mssqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"github.com/uptrace/bun/schema"

	"github.com/siteline/outbox/ports"
)

// This file is what is left of the text builder that wrote every statement:
// the helpers that directory.go, accounts.go, adminaudit.go and migrate.go
// still build their statements with (values inlined as literals quoted by
// the bun dialect). The notifications and the audit log no longer use it
// (notifications.go, dialect.go and a file per dialect).

// dialectKind says which SQL dialect a generator writes.
type dialectKind int

const (
	kindSQLite dialectKind = iota
	kindPostgres
	kindMSSQL
)

// sqlgen writes the statements of one dialect.
type sqlgen struct {
	kind dialectKind
	d    schema.Dialect
}

func newSQLGen(driver string) (*sqlgen, error) {
	switch driver {
	case DriverSQLite:
		return &sqlgen{kind: kindSQLite, d: sqlitedialect.New()}, nil
	case DriverPostgres:
		return &sqlgen{kind: kindPostgres, d: pgdialect.New()}, nil
	case DriverMSSQL:
		return &sqlgen{kind: kindMSSQL, d: mssqldialect.New()}, nil
	}
	return nil, fmt.Errorf("sqlstore: unknown driver %q: %w", driver, ports.ErrInvalid)
}

// colList returns the quoted columns joined by ", ", each prefixed with
// prefix (a table alias and a dot, or "").
func colList(prefix string, cols []string) string { return quoted(prefix, cols) }

// stmt accumulates one statement. The first invalid value (a string holding
// a NUL byte, which no dialect stores) is remembered and reported by done.
type stmt struct {
	g   *sqlgen
	b   []byte
	err error
}

func (g *sqlgen) stmt(capacity int) *stmt {
	return &stmt{g: g, b: make([]byte, 0, capacity)}
}

func (s *stmt) sql(text string) *stmt {
	s.b = append(s.b, text...)
	return s
}

// check remembers an error when v holds a NUL byte, and returns v without
// them.
func (s *stmt) check(v string) string {
	if strings.IndexByte(v, 0) < 0 {
		return v
	}
	if s.err == nil {
		s.err = fmt.Errorf("sqlstore: text %.40q holds a NUL byte: %w", v, ports.ErrInvalid)
	}
	return strings.ReplaceAll(v, "\x00", "")
}

// str appends a string literal quoted by the dialect (N'...' on MS SQL).
func (s *stmt) str(v string) *stmt {
	s.b = s.g.d.AppendString(s.b, s.check(v))
	return s
}

func (s *stmt) int(v int64) *stmt {
	s.b = strconv.AppendInt(s.b, v, 10)
	return s
}

// time appends an instant in the dialect's column representation: a typed
// timestamp literal on PostgreSQL and MS SQL, integer Unix microseconds on
// SQLite. The zero time is a (typed) NULL.
func (s *stmt) time(t time.Time) *stmt {
	s.b = s.g.appendTime(s.b, t)
	return s
}

func (s *stmt) done() (query, error) {
	if s.err != nil {
		return query{}, s.err
	}
	return query{text: string(s.b)}, nil
}

// appendTime appends the literal of an instant (see the dialect's).
func (g *sqlgen) appendTime(b []byte, t time.Time) []byte {
	return dialectNamed(g.d.Name()).appendTime(b, t)
}

// limit appends the row cap of a SELECT: LIMIT on SQLite and PostgreSQL.
// MS SQL writes TOP (n) after SELECT instead (see top).
func (s *stmt) limit(n int) *stmt {
	if s.g.kind == kindMSSQL {
		return s
	}
	return s.sql(" LIMIT ").int(int64(n))
}

// top appends "TOP (n) " on MS SQL and nothing elsewhere.
func (s *stmt) top(n int) *stmt {
	if s.g.kind != kindMSSQL {
		return s
	}
	return s.sql("TOP (").int(int64(n)).sql(") ")
}
