package sqlstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/uptrace/bun"

	"github.com/siteline/outbox/ports"
)

// This file is the directory: ports.DirectoryAdmin over two small tables
// (migration 0002_directory). notification_lists holds one row per list, its
// targets a JSON array; notification_channels one row per channel type, its
// settings a JSON object and its retry policy in columns. List and
// ChannelSettings read one row by primary key, and their answers are kept
// for a second (dircache.go): the core asks once per claimed batch and once
// per list of an ingested batch, and at the default batch of 100 those
// lookups were most of a batch's statements. A write through this store
// drops the kept answers at once; other nodes' writes show within the
// second.
//
// The rows are bun models; statements are bun's query builders, and the
// upsert is the dialect's (writeDialect in bunquery.go).

var _ ports.DirectoryAdmin = (*Directory)(nil)

// listRow is a row of notification_lists: targets a JSON array of strings.
type listRow struct {
	bun.BaseModel `bun:"table:notification_lists,alias:notification_lists"`

	Name      string  `bun:"name,pk"`
	Type      string  `bun:"type"`
	Targets   string  `bun:"targets"`
	UpdatedAt instant `bun:"updated_at"`
}

// channelRow is a row of notification_channels: settings a JSON object of
// strings; the retry intervals are whole milliseconds.
type channelRow struct {
	bun.BaseModel `bun:"table:notification_channels,alias:notification_channels"`

	Type               string  `bun:"type,pk"`
	Settings           string  `bun:"settings"`
	RetryBackoff       string  `bun:"retry_backoff"`
	RetryMaxRetries    int64   `bun:"retry_max_retries"`
	RetryIntervalMS    int64   `bun:"retry_interval_ms"`
	RetryMaxIntervalMS int64   `bun:"retry_max_interval_ms"`
	RateLimit          eFloat  `bun:"rate_limit"`
	UpdatedAt          instant `bun:"updated_at"`
}

// selectRows reads the rows of model's table (a pointer to a slice of
// rows) into it, only the row whose key column is key when one is given.
func (s *handle) selectRows(ctx context.Context, model any, keyColumn string, key *string) error {
	return selectRowsQuery(s.r, model, keyColumn, key).Scan(ctx)
}

func selectRowsQuery(db *bun.DB, model any, keyColumn string, key *string) *bun.SelectQuery {
	q := db.NewSelect().Model(model)
	if key != nil {
		q = q.Where("? = ?", bun.Ident(keyColumn), *key)
	}
	return q
}

// deleteRows deletes the rows of table whose column is value, on c, and
// returns how many.
func (s *handle) deleteRows(ctx context.Context, c conn, table, column, value string) (int64, error) {
	res, err := deleteRowsQuery(s.w, table, column, value).Conn(c).Exec(ctx)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func deleteRowsQuery(db *bun.DB, table, column, value string) *bun.DeleteQuery {
	return db.NewDelete().TableExpr("?", bun.Ident(table)).Where("? = ?", bun.Ident(column), value)
}

// upsert writes the row model (a pointer to a row struct) on c, inserting
// it or replacing the row with the same key.
func (s *handle) upsert(ctx context.Context, c conn, model any) error {
	_, err := s.writes().upsert(s.w, c, model).Exec(ctx)
	return err
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

// List implements ports.Directory: one primary-key lookup, or the answer
// of one made less than directoryFresh ago (dircache.go).
func (s *Directory) List(ctx context.Context, name string) (ports.List, error) {
	l, found, err := cachedRead(&s.dir, &s.dir.lists, name, copyList, func() (ports.List, bool, error) {
		ls, err := s.lists(ctx, &name)
		if err != nil || len(ls) == 0 {
			return ports.List{}, false, err
		}
		return ls[0], true, nil
	})
	if err == nil && !found {
		err = fmt.Errorf("sqlstore: list %q: %w", name, ports.ErrNotFound)
	}
	return l, err
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
	var rows []listRow
	if err := s.selectRows(ctx, &rows, "name", name); err != nil {
		return nil, s.fail(what, err)
	}
	out := make([]ports.List, len(rows))
	for i, r := range rows {
		out[i] = ports.List{Name: r.Name, Type: r.Type}
		if err := json.Unmarshal([]byte(r.Targets), &out[i].Targets); err != nil {
			return nil, s.fail(what, fmt.Errorf("decode the targets of list %q: %w", r.Name, err))
		}
	}
	return out, nil
}

// PutList implements ports.DirectoryAdmin: an upsert, after l passed
// ports.List.Validate.
func (s *Directory) PutList(ctx context.Context, l ports.List) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("sqlstore: put list %q: %w", l.Name, err)
	}
	targets := l.Targets
	if targets == nil {
		targets = []string{}
	}
	enc, err := json.Marshal(targets)
	if err != nil {
		return fmt.Errorf("sqlstore: encode the targets of list %q: %w", l.Name, err)
	}
	row := &listRow{Name: l.Name, Type: l.Type, Targets: string(enc), UpdatedAt: at(time.Now())}
	defer s.dir.changed()
	if err := s.write(ctx, false, func(ctx context.Context, c conn) error { return s.upsert(ctx, c, row) }); err != nil {
		return s.fail(fmt.Sprintf("put list %q", l.Name), err)
	}
	return nil
}

// DeleteList implements ports.DirectoryAdmin.
func (s *Directory) DeleteList(ctx context.Context, name string) error {
	defer s.dir.changed()
	return s.deleteKey(ctx, "notification_lists", "name", name, "list")
}

// --- channels ----------------------------------------------------------------

// ChannelSettings implements ports.Directory: one primary-key lookup, or
// the answer of one made less than directoryFresh ago (dircache.go).
func (s *Directory) ChannelSettings(ctx context.Context, typ string) (ports.ChannelSettings, error) {
	c, found, err := cachedRead(&s.dir, &s.dir.channels, typ, copyChannel, func() (ports.ChannelSettings, bool, error) {
		cs, err := s.channels(ctx, &typ)
		if err != nil || len(cs) == 0 {
			return ports.ChannelSettings{}, false, err
		}
		return cs[0], true, nil
	})
	if err == nil && !found {
		err = fmt.Errorf("sqlstore: channel settings for type %q: %w", typ, ports.ErrNotFound)
	}
	return c, err
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
	var rows []channelRow
	if err := s.selectRows(ctx, &rows, "type", typ); err != nil {
		return nil, s.fail(what, err)
	}
	out := make([]ports.ChannelSettings, len(rows))
	for i, r := range rows {
		c := ports.ChannelSettings{
			Type: r.Type,
			Retry: ports.RetrySettings{
				Backoff:     ports.Backoff(r.RetryBackoff),
				MaxRetries:  int(r.RetryMaxRetries),
				Interval:    time.Duration(r.RetryIntervalMS) * time.Millisecond,
				MaxInterval: time.Duration(r.RetryMaxIntervalMS) * time.Millisecond,
			},
			RateLimit: float64(r.RateLimit),
		}
		if err := json.Unmarshal([]byte(r.Settings), &c.Settings); err != nil {
			return nil, s.fail(what, fmt.Errorf("decode the settings of channel %q: %w", r.Type, err))
		}
		out[i] = c
	}
	return out, nil
}

// PutChannel implements ports.DirectoryAdmin: an upsert, after c passed
// ports.ChannelSettings.Validate.
func (s *Directory) PutChannel(ctx context.Context, c ports.ChannelSettings) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("sqlstore: put channel settings for type %q: %w", c.Type, err)
	}
	settings := c.Settings
	if settings == nil {
		settings = map[string]string{}
	}
	enc, err := json.Marshal(settings)
	if err != nil {
		return fmt.Errorf("sqlstore: encode the settings of channel %q: %w", c.Type, err)
	}
	row := &channelRow{
		Type: c.Type, Settings: string(enc), RetryBackoff: string(c.Retry.Backoff),
		RetryMaxRetries: int64(c.Retry.MaxRetries), RetryIntervalMS: c.Retry.Interval.Milliseconds(),
		RetryMaxIntervalMS: c.Retry.MaxInterval.Milliseconds(), RateLimit: eFloat(c.RateLimit),
		UpdatedAt: at(time.Now()),
	}
	defer s.dir.changed()
	if err := s.write(ctx, false, func(ctx context.Context, cn conn) error { return s.upsert(ctx, cn, row) }); err != nil {
		return s.fail(fmt.Sprintf("put channel settings for type %q", c.Type), err)
	}
	return nil
}

// DeleteChannel implements ports.DirectoryAdmin.
func (s *Directory) DeleteChannel(ctx context.Context, typ string) error {
	defer s.dir.changed()
	return s.deleteKey(ctx, "notification_channels", "type", typ, "channel settings for type")
}

// deleteKey deletes the row of table whose keyColumn is key, or reports
// ErrNotFound naming it as what.
func (s *handle) deleteKey(ctx context.Context, table, keyColumn, key, what string) error {
	notFound := fmt.Errorf("sqlstore: delete %s %q: %w", what, key, ports.ErrNotFound)
	if !storable(key) {
		return notFound
	}
	var deleted int64
	err := s.write(ctx, false, func(ctx context.Context, c conn) (err error) {
		deleted, err = s.deleteRows(ctx, c, table, keyColumn, key) // afresh: a group writer may run this twice
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
