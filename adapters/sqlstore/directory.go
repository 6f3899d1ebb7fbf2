package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/siteline/outbox/ports"
)

// This file is the directory: ports.DirectoryAdmin over two small tables
// (migration 0002_directory). notification_lists holds one row per list, its
// targets a JSON array; notification_channels one row per channel type, its
// settings a JSON object and its retry policy in columns. List and
// ChannelSettings read one row by primary key: the core calls them once per
// claimed batch and once per list of an ingested batch, and a primary-key
// lookup is cheaper than keeping a cache coherent across central nodes.

var _ ports.DirectoryAdmin = (*Directory)(nil)

// The directory tables' columns, in the order the statements write and scan
// them.
var (
	listColumns = []string{"name", "type", "targets", "updated_at"}
	// channelColumns: the retry intervals are whole milliseconds.
	channelColumns = []string{
		"type", "settings", "retry_backoff", "retry_max_retries",
		"retry_interval_ms", "retry_max_interval_ms", "rate_limit", "updated_at",
	}
	// The columns List and ChannelSettings read: all but updated_at.
	listReadColumns    = listColumns[:3]
	channelReadColumns = channelColumns[:7]
)

// float appends a float64 literal that reads back as the same value: the
// shortest decimal that round-trips, in E notation (an approximate-number
// literal in every dialect). NaN and infinities are refused before.
func (s *stmt) float(v float64) *stmt {
	s.b = strconv.AppendFloat(s.b, v, 'e', -1, 64)
	return s
}

// upsert writes one row of table, inserting it or replacing the row with the
// same key (the first column): INSERT ... ON CONFLICT DO UPDATE on SQLite and
// PostgreSQL, MERGE ... WITH (HOLDLOCK) on MS SQL (the hint makes the match
// and the insert one atomic step against concurrent upserts of the key).
// values appends the parenthesised row.
func (g *sqlgen) upsert(table string, cols []string, values func(s *stmt)) (query, error) {
	s := g.stmt(256)
	all := colList("", cols)
	set := func(from string) {
		for i, c := range cols[1:] {
			if i > 0 {
				s.sql(", ")
			}
			s.sql(`"` + c + `" = ` + from + `."` + c + `"`)
		}
	}
	if g.kind == kindMSSQL {
		s.sql(`MERGE INTO "` + table + `" WITH (HOLDLOCK) AS t USING (VALUES `)
		values(s)
		s.sql(`) AS v (` + all + `) ON t."` + cols[0] + `" = v."` + cols[0] + `" WHEN MATCHED THEN UPDATE SET `)
		set("v")
		s.sql(` WHEN NOT MATCHED THEN INSERT (` + all + `) VALUES (` + colList("v.", cols) + `);`)
		return s.done()
	}
	s.sql(`INSERT INTO "` + table + `" (` + all + `) VALUES `)
	values(s)
	s.sql(` ON CONFLICT ("` + cols[0] + `") DO UPDATE SET `)
	set("excluded")
	return s.done()
}

// putList creates or replaces the list l, stamped with now.
func (g *sqlgen) putList(l ports.List, now time.Time) (query, error) {
	targets := l.Targets
	if targets == nil {
		targets = []string{}
	}
	enc, err := json.Marshal(targets)
	if err != nil {
		return query{}, fmt.Errorf("sqlstore: encode the targets of list %q: %w", l.Name, err)
	}
	return g.upsert("notification_lists", listColumns, func(s *stmt) {
		s.sql("(").str(l.Name).sql(", ").str(l.Type).sql(", ").str(string(enc)).sql(", ").time(now).sql(")")
	})
}

// putChannel creates or replaces the settings c, stamped with now.
func (g *sqlgen) putChannel(c ports.ChannelSettings, now time.Time) (query, error) {
	settings := c.Settings
	if settings == nil {
		settings = map[string]string{}
	}
	enc, err := json.Marshal(settings)
	if err != nil {
		return query{}, fmt.Errorf("sqlstore: encode the settings of channel %q: %w", c.Type, err)
	}
	r := c.Retry
	return g.upsert("notification_channels", channelColumns, func(s *stmt) {
		s.sql("(").str(c.Type).sql(", ").str(string(enc)).sql(", ").str(string(r.Backoff)).
			sql(", ").int(int64(r.MaxRetries)).sql(", ").int(r.Interval.Milliseconds()).
			sql(", ").int(r.MaxInterval.Milliseconds()).sql(", ").float(c.RateLimit).
			sql(", ").time(now).sql(")")
	})
}

// selectRows selects cols of table, only the row whose key (the first
// column) is key when one is given.
func (g *sqlgen) selectRows(table string, cols []string, key *string) (query, error) {
	s := g.stmt(256)
	s.sql(`SELECT ` + colList("", cols) + ` FROM "` + table + `"`)
	if key != nil {
		s.sql(` WHERE "` + cols[0] + `" = `).str(*key)
	}
	return s.done()
}

// deleteRow deletes the row of table whose key column is key.
func (g *sqlgen) deleteRow(table, keyColumn, key string) (query, error) {
	s := g.stmt(128)
	s.sql(`DELETE FROM "` + table + `" WHERE "` + keyColumn + `" = `).str(key)
	return s.done()
}

// storable reports whether key can name a row. Stored names and types are
// UTF-8 without NUL bytes or surrounding spaces (ports.List.Validate):
// PostgreSQL refuses other text in a statement, and MS SQL compares with
// trailing spaces ignored ('ops ' = 'ops'), so such a key is answered as
// absent without asking the database.
func storable(key string) bool {
	return utf8.ValidString(key) && strings.IndexByte(key, 0) < 0 && strings.TrimSpace(key) == key
}

// --- lists -------------------------------------------------------------------

// List implements ports.Directory: one primary-key lookup.
func (s *Directory) List(ctx context.Context, name string) (ports.List, error) {
	ls, err := s.lists(ctx, &name)
	if err != nil {
		return ports.List{}, err
	}
	if len(ls) == 0 {
		return ports.List{}, fmt.Errorf("sqlstore: list %q: %w", name, ports.ErrNotFound)
	}
	return ls[0], nil
}

// Lists implements ports.DirectoryAdmin.
func (s *Directory) Lists(ctx context.Context) ([]ports.List, error) {
	ls, err := s.lists(ctx, nil)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ls, func(a, b ports.List) int { return cmp.Compare(a.Name, b.Name) })
	return ls, nil
}

// lists reads the list named name, or every list when name is nil.
func (s *handle) lists(ctx context.Context, name *string) ([]ports.List, error) {
	what := "read lists"
	if name != nil {
		what = fmt.Sprintf("read list %q", *name)
		if !storable(*name) {
			return nil, nil
		}
	}
	q, err := s.g.selectRows("notification_lists", listReadColumns, name)
	if err != nil {
		return nil, err
	}
	return queryRows(ctx, s, what, q, func(rows *sql.Rows) (ports.List, error) {
		var (
			l       ports.List
			targets []byte
		)
		if err := rows.Scan(&l.Name, &l.Type, &targets); err != nil {
			return l, err
		}
		if err := json.Unmarshal(targets, &l.Targets); err != nil {
			return l, fmt.Errorf("decode the targets of list %q: %w", l.Name, err)
		}
		return l, nil
	})
}

// queryRows runs q on the reader and scans every row it answers with scan.
func queryRows[T any](ctx context.Context, s *handle, what string, q query, scan func(*sql.Rows) (T, error)) ([]T, error) {
	rows, err := s.reader().QueryContext(ctx, q.text, q.args...)
	if err != nil {
		return nil, s.fail(what, err)
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, s.fail(what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(what, err)
	}
	return out, nil
}

// PutList implements ports.DirectoryAdmin: an upsert, after l passed
// ports.List.Validate.
func (s *Directory) PutList(ctx context.Context, l ports.List) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("sqlstore: put list %q: %w", l.Name, err)
	}
	q, err := s.g.putList(l, time.Now())
	if err != nil {
		return err
	}
	if err := s.write(ctx, false, func(ctx context.Context, c conn) error { return exec(ctx, c, q) }); err != nil {
		return s.fail(fmt.Sprintf("put list %q", l.Name), err)
	}
	return nil
}

// DeleteList implements ports.DirectoryAdmin.
func (s *Directory) DeleteList(ctx context.Context, name string) error {
	return s.deleteKey(ctx, "notification_lists", "name", name, "list")
}

// --- channels ----------------------------------------------------------------

// ChannelSettings implements ports.Directory: one primary-key lookup.
func (s *Directory) ChannelSettings(ctx context.Context, typ string) (ports.ChannelSettings, error) {
	cs, err := s.channels(ctx, &typ)
	if err != nil {
		return ports.ChannelSettings{}, err
	}
	if len(cs) == 0 {
		return ports.ChannelSettings{}, fmt.Errorf("sqlstore: channel settings for type %q: %w", typ, ports.ErrNotFound)
	}
	return cs[0], nil
}

// Channels implements ports.DirectoryAdmin.
func (s *Directory) Channels(ctx context.Context) ([]ports.ChannelSettings, error) {
	cs, err := s.channels(ctx, nil)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(cs, func(a, b ports.ChannelSettings) int { return cmp.Compare(a.Type, b.Type) })
	return cs, nil
}

// channels reads the settings of channel type typ, or of every type when
// typ is nil.
func (s *handle) channels(ctx context.Context, typ *string) ([]ports.ChannelSettings, error) {
	what := "read channel settings"
	if typ != nil {
		what = fmt.Sprintf("read channel settings for type %q", *typ)
		if !storable(*typ) {
			return nil, nil
		}
	}
	q, err := s.g.selectRows("notification_channels", channelReadColumns, typ)
	if err != nil {
		return nil, err
	}
	return queryRows(ctx, s, what, q, func(rows *sql.Rows) (ports.ChannelSettings, error) {
		var (
			c                             ports.ChannelSettings
			settings                      []byte
			backoff                       string
			maxRetries, interval, maxIntv int64
		)
		if err := rows.Scan(&c.Type, &settings, &backoff, &maxRetries, &interval, &maxIntv, &c.RateLimit); err != nil {
			return c, err
		}
		if err := json.Unmarshal(settings, &c.Settings); err != nil {
			return c, fmt.Errorf("decode the settings of channel %q: %w", c.Type, err)
		}
		c.Retry = ports.RetrySettings{
			Backoff:     ports.Backoff(backoff),
			MaxRetries:  int(maxRetries),
			Interval:    time.Duration(interval) * time.Millisecond,
			MaxInterval: time.Duration(maxIntv) * time.Millisecond,
		}
		return c, nil
	})
}

// PutChannel implements ports.DirectoryAdmin: an upsert, after c passed
// ports.ChannelSettings.Validate.
func (s *Directory) PutChannel(ctx context.Context, c ports.ChannelSettings) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("sqlstore: put channel settings for type %q: %w", c.Type, err)
	}
	q, err := s.g.putChannel(c, time.Now())
	if err != nil {
		return err
	}
	if err := s.write(ctx, false, func(ctx context.Context, cn conn) error { return exec(ctx, cn, q) }); err != nil {
		return s.fail(fmt.Sprintf("put channel settings for type %q", c.Type), err)
	}
	return nil
}

// DeleteChannel implements ports.DirectoryAdmin.
func (s *Directory) DeleteChannel(ctx context.Context, typ string) error {
	return s.deleteKey(ctx, "notification_channels", "type", typ, "channel settings for type")
}

// deleteKey deletes the row of table whose keyColumn is key, or reports
// ErrNotFound naming it as what.
func (s *handle) deleteKey(ctx context.Context, table, keyColumn, key, what string) error {
	notFound := fmt.Errorf("sqlstore: delete %s %q: %w", what, key, ports.ErrNotFound)
	if !storable(key) {
		return notFound
	}
	q, err := s.g.deleteRow(table, keyColumn, key)
	if err != nil {
		return err
	}
	var deleted int64
	err = s.write(ctx, false, func(ctx context.Context, c conn) error {
		res, err := c.ExecContext(ctx, q.text, q.args...)
		if err != nil {
			return err
		}
		deleted, err = res.RowsAffected() // afresh: a group writer may run this twice
		return err
	})
	if err != nil {
		return s.fail(fmt.Sprintf("delete %s %q", what, key), err)
	}
	if deleted == 0 {
		return notFound
	}
	return nil
}
