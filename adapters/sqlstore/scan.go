package sqlstore

import (
	"database/sql"
	"database/sql/driver"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/uptrace/bun/schema"
)

// The column types of the models: how an instant and a nullable text are
// written as literals for each dialect, bound as SQLite parameters, and
// scanned from any dialect's representation.

// instant is a time column: NULL for the zero time, else the dialect's
// representation (see the dialect's appendTime): integer Unix
// microseconds on SQLite, timestamptz on PostgreSQL, datetime2(6) in UTC on
// MS SQL. It scans from any of them; the result is in UTC.
type instant struct{ t time.Time }

func at(t time.Time) instant { return instant{t} }

// AppendQuery implements schema.QueryAppender: bun writes the instant as
// the literal of the dialect it formats for.
func (i instant) AppendQuery(gen schema.QueryGen, b []byte) ([]byte, error) {
	return dialectNamed(gen.Dialect().Name()).appendTime(b, i.t), nil
}

// Value implements driver.Valuer for the one statement that binds instants
// as parameters, SQLite's prepared insert: integer Unix microseconds, or
// NULL.
func (i instant) Value() (driver.Value, error) {
	if i.t.IsZero() {
		return nil, nil
	}
	return i.t.UnixMicro(), nil
}

// Scan implements sql.Scanner.
func (i *instant) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		i.t = time.Time{}
	case int64:
		i.t = time.UnixMicro(v).UTC()
	case time.Time:
		i.t = v.UTC()
	case []byte:
		return i.parse(string(v))
	case string:
		return i.parse(v)
	default:
		return fmt.Errorf("sqlstore: cannot scan %T as an instant", src)
	}
	return nil
}

func (i *instant) parse(s string) error {
	if us, err := strconv.ParseInt(s, 10, 64); err == nil {
		i.t = time.UnixMicro(us).UTC()
		return nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			i.t = t.UTC()
			return nil
		}
	}
	return fmt.Errorf("sqlstore: cannot parse %q as an instant", s)
}

// nullText is a text column that holds NULL for the empty text (TypeData,
// ResolvedTargets, ClaimedBy, the JSON of targets).
type nullText string

// AppendQuery implements schema.QueryAppender: a NULL of the column's text
// type for the empty text (typed, so that a VALUES list of NULLs still
// has the type), else the dialect's string literal.
func (v nullText) AppendQuery(gen schema.QueryGen, b []byte) ([]byte, error) {
	if v == "" {
		return dialectNamed(gen.Dialect().Name()).appendNullText(b), nil
	}
	return gen.Dialect().AppendString(b, string(v)), nil
}

// Value implements driver.Valuer (SQLite's prepared insert).
func (v nullText) Value() (driver.Value, error) {
	if v == "" {
		return nil, nil
	}
	return string(v), nil
}

// Scan implements sql.Scanner.
func (v *nullText) Scan(src any) error {
	switch s := src.(type) {
	case nil:
		*v = ""
	case string:
		*v = nullText(s)
	case []byte:
		*v = nullText(s)
	default:
		return fmt.Errorf("sqlstore: cannot scan %T as text", src)
	}
	return nil
}

// scanModel scans rows whose columns are cols, in their order, appending
// one T per row to into. The destinations are the fields of one T, found
// once per call (see modelColumns): the claim, the one hot read, scans this
// way, which costs less than bun's scan of a model by column name.
func scanModel[T any](rows *sql.Rows, cols []column, into []T) ([]T, error) {
	var r T
	dest := make([]any, len(cols))
	v := reflect.ValueOf(&r).Elem()
	for i, c := range cols {
		dest[i] = v.Field(c.field).Addr().Interface()
	}
	for rows.Next() {
		// Every destination is set by each Scan (NULL included).
		if err := rows.Scan(dest...); err != nil {
			return into, err
		}
		into = append(into, r)
	}
	return into, rows.Err()
}
