package sqlstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/storetest"
	"github.com/siteline/outbox/ports/waittest"
)

// openPGSchema opens and migrates a store on a fresh schema with cfg's
// other settings; it returns the store and the schema's DSN.
func openPGSchema(t *testing.T, cfg Config, logger *slog.Logger) (*DB, string) {
	t.Helper()
	cfg.Driver, cfg.DSN = DriverPostgres, newPostgresSchema(t, postgresDSN(t))
	s, err := Open(context.Background(), cfg, logger)
	if err != nil {
		t.Fatalf("open postgres: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate postgres: %v", err)
	}
	return s, cfg.DSN
}

// syncBuffer is a log sink for several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// copyState returns whether the column types are read, and whether COPY is
// off now.
func copyState(p *pgCopier) (read, off bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.oids != nil, time.Now().Before(p.offUntil)
}

// TestPostgresCopyRefusedFallsBack: under row-level security PostgreSQL
// refuses COPY FROM (0A000) to a role that is subject to it, while INSERT
// works: Insert stores the batch with the statement, turns COPY off for a
// while and says so once in the log; after that while it tries COPY again,
// and uses it again once the server takes it.
func TestPostgresCopyRefusedFallsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner, dsn := openPGSchema(t, Config{}, nil)
	schema := ""
	if err := owner.writer().QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	role := "r" + schema // unique as the schema; dropped once the schema is
	t.Cleanup(func() {
		// Registered after the schema's cleanup, so it runs before it:
		// revoke what the role holds there first.
		if _, err := owner.writer().ExecContext(context.Background(), `DROP OWNED BY `+role); err != nil {
			t.Errorf("drop owned by %s: %v", role, err)
		}
		if _, err := owner.writer().ExecContext(context.Background(), `DROP ROLE `+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	for _, q := range []string{
		`CREATE ROLE ` + role + ` NOLOGIN NOSUPERUSER NOBYPASSRLS`,
		`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + role,
		`GRANT ALL ON ALL TABLES IN SCHEMA ` + schema + ` TO ` + role,
		`GRANT ALL ON ALL SEQUENCES IN SCHEMA ` + schema + ` TO ` + role,
		`ALTER TABLE notifications ENABLE ROW LEVEL SECURITY`,
		`CREATE POLICY every_row ON notifications USING (true) WITH CHECK (true)`,
	} {
		if _, err := owner.writer().ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("options", "-c role="+role)
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // pgx reads no + as a space
	var log syncBuffer
	rdb, err := Open(ctx, Config{Driver: DriverPostgres, DSN: u.String()}, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatalf("open as %s: %v", role, err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	s := rdb.Notifications()
	now := time.Now().UTC()
	insert := func(what string) {
		t.Helper()
		n := storetest.NewNotification(now)
		ids, err := s.Insert(ctx, []ports.Notification{n})
		if err != nil || len(ids) != 1 {
			t.Fatalf("Insert %s: %v, %v", what, ids, err)
		}
		if _, err := owner.Notifications().Get(ctx, n.ID); err != nil {
			t.Fatalf("Get after Insert %s: %v", what, err)
		}
	}
	offLines := func() int { return strings.Count(log.String(), "instead of COPY") }

	insert("under row-level security")
	if _, off := copyState(&s.pgCopy); !off || offLines() != 1 {
		t.Fatalf("after the refused COPY: off %v, %d log lines; want off and 1 line\n%s", off, offLines(), log.String())
	}
	if !strings.Contains(log.String(), "0A000") {
		t.Errorf("the log does not name the refusal:\n%s", log.String())
	}
	insert("while COPY is off")
	// The while is over: COPY is tried again, refused again, not logged again.
	s.pgCopy.mu.Lock()
	s.pgCopy.offUntil = time.Now()
	s.pgCopy.mu.Unlock()
	insert("after the while, still refused")
	if _, off := copyState(&s.pgCopy); !off || offLines() != 1 {
		t.Fatalf("after COPY was refused again: off %v, %d log lines; want off and still 1 line", off, offLines())
	}
	if _, err := owner.writer().ExecContext(ctx, `ALTER TABLE notifications DISABLE ROW LEVEL SECURITY`); err != nil {
		t.Fatal(err)
	}
	s.pgCopy.mu.Lock()
	s.pgCopy.offUntil = time.Now()
	s.pgCopy.mu.Unlock()
	insert("once the server takes COPY")
	last := storetest.NewNotification(now)
	row, err := toRow(&last)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.copyInsert(ctx, []notificationRow{row}); err != nil {
		t.Fatalf("COPY once the server takes it: %v", err)
	}
}

// TestPostgresCopyBackAfterSchemaFixed: an Insert before the table was
// migrated (a column missing) fails; once the table is right, COPY is used
// again without a restart.
func TestPostgresCopyBackAfterSchemaFixed(t *testing.T) {
	t.Parallel()
	db := newPostgresStore(t, postgresDSN(t))
	s := db.Notifications()
	ctx := context.Background()
	now := time.Now().UTC()
	if _, err := db.writer().ExecContext(ctx, `ALTER TABLE notifications RENAME COLUMN target_states TO ts_old`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Insert(ctx, []ports.Notification{storetest.NewNotification(now)}); err == nil {
		t.Fatal("Insert without the column target_states: no error")
	}
	if _, err := db.writer().ExecContext(ctx, `ALTER TABLE notifications RENAME COLUMN ts_old TO target_states`); err != nil {
		t.Fatal(err)
	}
	n := storetest.NewNotification(now)
	if ids, err := s.Insert(ctx, []ports.Notification{n}); err != nil || len(ids) != 1 {
		t.Fatalf("Insert once the table is right: %v, %v", ids, err)
	}
	if read, off := copyState(&s.pgCopy); !read || off {
		t.Fatalf("once the table is right: types read %v, COPY off %v; want read and on", read, off)
	}
}

// TestPostgresCopyTypesReadWaitsOnItsContext: while one Insert's first
// read of the column types waits (here for a connection), another Insert
// waits only as long as its own context allows.
func TestPostgresCopyTypesReadWaitsOnItsContext(t *testing.T) {
	t.Parallel()
	db, _ := openPGSchema(t, Config{MaxOpenConns: 1}, nil)
	s := db.Notifications()
	ctx := context.Background()
	held, err := db.writer().Conn(ctx) // the pool's only connection
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := s.Insert(ctx, []ports.Notification{storetest.NewNotification(time.Now())})
		first <- err
	}()
	waittest.For(t, 30*time.Second, "the first Insert waits for a connection", func() (bool, string) {
		st := db.writer().Stats()
		return st.WaitCount >= 1, fmt.Sprintf("%d waits", st.WaitCount)
	})
	second := make(chan error, 1)
	go func() {
		c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := s.Insert(c, []ports.Notification{storetest.NewNotification(time.Now())})
		second <- err
	}()
	returned := false
	select {
	case err := <-second:
		returned = true
		if err == nil {
			t.Errorf("the second Insert succeeded without a connection")
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the second Insert outwaited its context by 30 s")
	}
	_ = held.Close()
	if err := <-first; err != nil {
		t.Fatalf("the first Insert: %v", err)
	}
	if !returned {
		<-second
	}
}

// TestPostgresCopyServerRefusals: the effect of each kind of refusal of a
// COPY the server sends: a value the column refuses (class 22: invalid
// UTF-8) leaves the error to the statement and COPY on; a column of
// another size (22P03) or gone (class 42) since the types were read makes
// the store read them again.
func TestPostgresCopyServerRefusals(t *testing.T) {
	t.Parallel()
	db := newPostgresStore(t, postgresDSN(t))
	s := db.Notifications()
	ctx := context.Background()
	now := time.Now().UTC()
	rowOf := func(n ports.Notification) notificationRow {
		t.Helper()
		r, err := toRow(&n)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if _, err := s.Insert(ctx, []ports.Notification{storetest.NewNotification(now)}); err != nil {
		t.Fatal(err)
	}

	bad := storetest.NewNotification(now)
	bad.Subject = "level \xff high"
	if _, err := s.copyInsert(ctx, []notificationRow{rowOf(bad)}); !errors.Is(err, errNoCopy) {
		t.Fatalf("COPY of invalid UTF-8: %v, want errNoCopy", err)
	}
	if read, off := copyState(&s.pgCopy); !read || off {
		t.Fatalf("after a refused value: types read %v, COPY off %v; want read and on", read, off)
	}
	if _, err := s.Insert(ctx, []ports.Notification{bad}); err == nil || errors.Is(err, errNoCopy) ||
		!strings.Contains(err.Error(), "22021") {
		t.Fatalf("Insert of invalid UTF-8: %v, want the statement's 22021", err)
	}
	if _, err := s.Get(ctx, bad.ID); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Get of the refused row: %v, want ErrNotFound", err)
	}

	for _, change := range []string{
		`ALTER TABLE notifications ALTER COLUMN retry_count TYPE bigint`,  // 22P03
		`ALTER TABLE notifications RENAME COLUMN source_script TO script`, // 42703
	} {
		if _, err := db.writer().ExecContext(ctx, change); err != nil {
			t.Fatal(err)
		}
		if _, err := s.copyInsert(ctx, []notificationRow{rowOf(storetest.NewNotification(now))}); !errors.Is(err, errNoCopy) {
			t.Fatalf("COPY after %s: %v, want errNoCopy", change, err)
		}
		if read, _ := copyState(&s.pgCopy); read {
			t.Fatalf("after %s: the old column types are kept", change)
		}
		if _, err := s.Insert(ctx, []ports.Notification{storetest.NewNotification(now)}); err != nil &&
			!strings.Contains(change, "RENAME") {
			t.Fatalf("Insert after %s: %v", change, err)
		}
	}
}

// TestPostgresInsertOverlappingBatches: two Inserts of the same ids in
// opposite orders, at once, both succeed (no deadlock), store each id
// once and answer each in its caller's order.
func TestPostgresInsertOverlappingBatches(t *testing.T) {
	t.Parallel()
	s := newPostgresStore(t, postgresDSN(t)).Notifications()
	ctx := context.Background()
	now := time.Now().UTC()
	for round := range 30 {
		ns := make([]ports.Notification, 200)
		for i := range ns {
			ns[i] = storetest.NewNotification(now)
		}
		rev := slices.Clone(ns)
		slices.Reverse(rev)
		var wg sync.WaitGroup
		start := make(chan struct{})
		ids := make([][]string, 2)
		errs := make([]error, 2)
		for k, batch := range [][]ports.Notification{ns, rev} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ids[k], errs[k] = s.Insert(ctx, batch)
			}()
		}
		close(start)
		wg.Wait()
		for k, err := range errs {
			if err != nil {
				t.Fatalf("round %d, Insert %d: %v", round, k, err)
			}
		}
		seen := map[string]int{}
		for k, batch := range [][]ports.Notification{ns, rev} {
			var order []string
			for _, n := range batch {
				order = append(order, n.ID)
			}
			pos := -1
			for _, id := range ids[k] {
				seen[id]++
				i := slices.Index(order, id)
				if i <= pos {
					t.Fatalf("round %d, Insert %d: ids not in the caller's order", round, k)
				}
				pos = i
			}
		}
		if len(seen) != len(ns) {
			t.Fatalf("round %d: %d ids stored, want %d", round, len(seen), len(ns))
		}
		for id, c := range seen {
			if c != 1 {
				t.Fatalf("round %d: %s answered %d times", round, id, c)
			}
		}
	}

	// A resend among new rows: the new ones, in the caller's order.
	old := storetest.NewNotification(now)
	if _, err := s.Insert(ctx, []ports.Notification{old}); err != nil {
		t.Fatal(err)
	}
	batch := []ports.Notification{storetest.NewNotification(now), old, storetest.NewNotification(now),
		storetest.NewNotification(now)}
	slices.SortFunc(batch, func(a, b ports.Notification) int { return -strings.Compare(a.ID, b.ID) })
	var want []string
	for _, n := range batch {
		if n.ID != old.ID {
			want = append(want, n.ID)
		}
	}
	got, err := s.Insert(ctx, batch)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Insert of a resend among new rows: %v, %v; want %v", got, err, want)
	}

	// One id twice, in two cases: one row, answered once.
	twice := storetest.NewNotification(now)
	upper := twice
	upper.ID = strings.ToUpper(twice.ID)
	got, err = s.Insert(ctx, []ports.Notification{upper, twice})
	if err != nil || !slices.Equal(got, []string{twice.ID}) {
		t.Fatalf("Insert of one id in two cases: %v, %v; want [%s]", got, err, twice.ID)
	}
}
