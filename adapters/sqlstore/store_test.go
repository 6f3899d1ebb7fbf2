package sqlstore

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/storetest"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // substring of the error; "" for valid
	}{
		{"sqlite", Config{Driver: "sqlite", DSN: "/tmp/x.db"}, ""},
		{"postgres", Config{Driver: "postgres", DSN: "postgres://h/db", MaxOpenConns: 4}, ""},
		{"mssql", Config{Driver: "mssql", DSN: "sqlserver://h"}, ""},
		{"postgres key=value", Config{Driver: "postgres", DSN: "host=h dbname=db"}, ""},
		{"unknown driver names the valid ones", Config{Driver: "mysql", DSN: "x"}, `Driver: unknown driver "mysql" (want sqlite, postgres or mssql)`},
		{"empty driver", Config{DSN: "x"}, `Driver: empty (want sqlite, postgres or mssql)`},
		{"empty DSN", Config{Driver: "postgres"}, `DSN: required when Driver is postgres`},
		{"blank DSN", Config{Driver: "sqlite", DSN: "  "}, `DSN: required when Driver is sqlite`},
		{"postgres wants its URL", Config{Driver: "postgres", DSN: "mysql://u:hunter2@h/db"}, `DSN: driver postgres wants a postgres:// URL, got a mysql URL`},
		{"mssql wants its URL", Config{Driver: "mssql", DSN: "postgres://h/db"}, `DSN: driver mssql wants a sqlserver:// URL`},
		{"negative pool", Config{Driver: "sqlite", DSN: "x", MaxOpenConns: -1}, "MaxOpenConns: must not be negative, got -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("Validate() = %v: the DSN's password in the error", err)
			}
			if !errors.Is(err, ports.ErrInvalid) {
				t.Errorf("Validate() = %v, want it to wrap ports.ErrInvalid", err)
			}
		})
	}
}

func TestRedactDSN(t *testing.T) {
	for _, tc := range []struct{ dsn, secret string }{
		{"postgres://app:s3cr%2Ft@db.example:5432/outbox?sslmode=require", "s3cr/t"},
		{"postgres://app@db.example/outbox?password=hunter2", "hunter2"},
		{"host=db user=app password='pa ss' dbname=outbox", "pa ss"},
		{"sqlserver://sa:Str0ng!Pass@mssql.example:1433?database=outbox", "Str0ng!Pass"},
		{"server=mssql;user id=sa;password=Str0ng!Pass;database=outbox", "Str0ng!Pass"},
	} {
		got := redactDSN(tc.dsn)
		if strings.Contains(got, tc.secret) {
			t.Errorf("redactDSN(%q) = %q still holds the password", tc.dsn, got)
		}
		for _, form := range dsnSecrets(tc.dsn) {
			if strings.Contains(got, form) {
				t.Errorf("redactDSN(%q) = %q still holds %q", tc.dsn, got, form)
			}
		}
	}
}

func TestOpenErrorsHideThePassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, cfg := range []Config{
		// Nothing listens on port 1; the ping fails fast.
		{Driver: DriverPostgres, DSN: "postgres://app:Sup3rS3cret@127.0.0.1:1/outbox?sslmode=disable&connect_timeout=2"},
		{Driver: DriverPostgres, DSN: "postgres://app:Sup3rS3cret@127.0.0.1:1/outbox?sslmode=bogus"},
		{Driver: DriverMSSQL, DSN: "sqlserver://sa:Sup3rS3cret@127.0.0.1:1?database=outbox&dial+timeout=2"},
	} {
		s, err := Open(ctx, cfg, nil)
		if err == nil {
			_ = s.Close()
			t.Fatalf("Open(%s) succeeded against a closed port", redactDSN(cfg.DSN))
		}
		if strings.Contains(err.Error(), "Sup3rS3cret") {
			t.Errorf("Open error leaks the password: %v", err)
		}
	}
}

func TestOpenValidates(t *testing.T) {
	_, err := Open(context.Background(), Config{Driver: "oracle", DSN: "x"}, nil)
	if !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Open with an unknown driver = %v, want ErrInvalid", err)
	}
}

func TestSQLiteInMemory(t *testing.T) {
	s, err := Open(context.Background(), Config{Driver: DriverSQLite, DSN: ":memory:"}, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	n := storetest.NewNotification(storetest.BaseTime)
	if _, err := s.Notifications().Insert(context.Background(), []ports.Notification{n}); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	if _, err := s.Notifications().Get(context.Background(), n.ID); err != nil {
		t.Fatalf("Get after Insert on one connection: %v", err)
	}
}

// migrationCount returns how many migrations the table records.
func migrationCount(t *testing.T, s *DB) int {
	t.Helper()
	var n int
	if err := s.writer().QueryRowContext(context.Background(), `SELECT COUNT(*) FROM "`+migrationsTable+`"`).Scan(&n); err != nil {
		t.Fatalf("count migrations: %v", err)
	}
	return n
}

func wantMigrations(t *testing.T, s *DB) {
	t.Helper()
	steps, err := loadMigrations(s.driver)
	if err != nil {
		t.Fatal(err)
	}
	if got := migrationCount(t, s); got != len(steps) {
		t.Errorf("%s records %d migrations, want %d (each once)", migrationsTable, got, len(steps))
	}
}

func TestMigrateTwiceSQLite(t *testing.T) {
	s := newSQLiteStore(t) // migrated once
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	wantMigrations(t, s)
}

func TestMigrateTwicePostgres(t *testing.T) {
	s := newPostgresStore(t, postgresDSN(t))
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	wantMigrations(t, s)
}

// TestMigrateConcurrentPostgres starts several stores on one fresh schema at
// once, as several central nodes would: every Migrate succeeds and the
// schema is applied once.
func TestMigrateConcurrentPostgres(t *testing.T) {
	dsn := newPostgresSchema(t, postgresDSN(t))
	const nodes = 4
	stores := make([]*DB, nodes)
	for i := range stores {
		s, err := Open(context.Background(), Config{Driver: DriverPostgres, DSN: dsn}, nil)
		if err != nil {
			t.Fatalf("open node %d: %v", i, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[i] = s
	}
	var wg sync.WaitGroup
	errs := make([]error, nodes)
	start := make(chan struct{})
	for i, s := range stores {
		wg.Go(func() {
			<-start
			errs[i] = s.Migrate(context.Background())
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("node %d: Migrate: %v", i, err)
		}
	}
	wantMigrations(t, stores[0])
	n := storetest.NewNotification(storetest.BaseTime)
	if _, err := stores[1].Notifications().Insert(context.Background(), []ports.Notification{n}); err != nil {
		t.Fatalf("Insert after concurrent migrations: %v", err)
	}
}

// TestMigrateConcurrentSQLite runs Migrate from two stores on one file.
func TestMigrateConcurrentSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	var stores []*DB
	for range 2 {
		s, err := Open(context.Background(), Config{Driver: DriverSQLite, DSN: path}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores = append(stores, s)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(stores))
	for i, s := range stores {
		wg.Go(func() { errs[i] = s.Migrate(context.Background()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("store %d: Migrate: %v", i, err)
		}
	}
	wantMigrations(t, stores[0])
}

// eachStore runs fn on SQLite and, when configured, PostgreSQL.
func eachStore(t *testing.T, fn func(t *testing.T, s *DB)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, newSQLiteStore(t)) })
	t.Run("postgres", func(t *testing.T) { fn(t, newPostgresStore(t, postgresDSN(t))) })
}

func TestInvalidInput(t *testing.T) {
	eachStore(t, func(t *testing.T, s *DB) {
		ctx := context.Background()
		nul := storetest.NewNotification(storetest.BaseTime)
		nul.Subject = "a\x00b"
		noStatus := storetest.NewNotification(storetest.BaseTime)
		noStatus.Status = ports.StatusForwarding
		noCreated := storetest.NewNotification(storetest.BaseTime)
		noCreated.CreatedAt = time.Time{}
		for name, n := range map[string]ports.Notification{"NUL byte": nul, "non-central status": noStatus, "no CreatedAt": noCreated} {
			if _, err := s.Notifications().Insert(ctx, []ports.Notification{storetest.NewNotification(storetest.BaseTime), n}); !errors.Is(err, ports.ErrInvalid) {
				t.Errorf("Insert with %s = %v, want ErrInvalid", name, err)
			}
		}
		if c, err := s.Notifications().Count(ctx, ports.Filter{}); err != nil || c != 0 {
			t.Errorf("Count after refused inserts = %d, %v; want 0 (all or nothing)", c, err)
		}
		if _, err := s.Notifications().Query(ctx, ports.Filter{Statuses: []ports.Status{"Bogus"}}, ports.PageRequest{Limit: 10}); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("Query with an unknown status = %v, want ErrInvalid", err)
		}
		if _, err := s.Notifications().Claim(ctx, ports.ClaimRequest{Owner: "a", Now: storetest.BaseTime, Lease: time.Minute}); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("Claim with Limit 0 = %v, want ErrInvalid", err)
		}
		if _, err := s.Notifications().Purge(ctx, storetest.BaseTime, 0); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("Purge with limit 0 = %v, want ErrInvalid", err)
		}
		// Text with SQL quoting and placeholder characters round-trips.
		odd := storetest.NewNotification(storetest.BaseTime)
		odd.Subject = `it's ? a $1 ?0 "test" -- ;`
		odd.Body = `\'; DROP TABLE notifications; --`
		if _, err := s.Notifications().Insert(ctx, []ports.Notification{odd}); err != nil {
			t.Fatalf("Insert of quoting characters: %v", err)
		}
		got, err := s.Notifications().Get(ctx, odd.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Subject != odd.Subject || got.Body != odd.Body {
			t.Errorf("round trip: subject %q body %q", got.Subject, got.Body)
		}
		page, err := s.Notifications().Query(ctx, ports.Filter{Subject: "? A $1"}, ports.PageRequest{Limit: 10})
		if err != nil || len(page.Items) != 1 {
			t.Errorf("Query by subject with placeholders = %d items, %v; want 1", len(page.Items), err)
		}
	})
}

// TestNonUUIDIDs checks the ids no row can have (the id is a uuid column on
// PostgreSQL) behave as unknown ids, not as errors.
func TestNonUUIDIDs(t *testing.T) {
	eachStore(t, func(t *testing.T, s *DB) {
		ctx := context.Background()
		if _, err := s.Notifications().Get(ctx, "not-a-uuid"); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("Get(not-a-uuid) = %v, want ErrNotFound", err)
		}
		st, err := s.Notifications().Statuses(ctx, "", []string{"not-a-uuid"})
		if err != nil || len(st) != 0 {
			t.Errorf("Statuses(not-a-uuid) = %v, %v; want empty", st, err)
		}
		lost, err := s.Notifications().Record(ctx, "a", []ports.Update{{ID: "not-a-uuid", Status: ports.StatusDelivered, UpdatedAt: storetest.BaseTime}})
		if err != nil || len(lost) != 1 {
			t.Errorf("Record(not-a-uuid) = %v, %v; want it lost", lost, err)
		}
		h, err := s.Notifications().History(ctx, "not-a-uuid")
		if err != nil || h == nil || len(h) != 0 {
			t.Errorf("History(not-a-uuid) = %v, %v; want an empty slice", h, err)
		}
		moved, err := s.Notifications().Transition(ctx, ports.TransitionRequest{
			Selection: ports.Selection{IDs: []string{"not-a-uuid"}},
			From:      ports.StatusParked, To: ports.StatusPending, Now: storetest.BaseTime,
		})
		if err != nil || len(moved) != 0 {
			t.Errorf("Transition(not-a-uuid) = %v, %v; want nothing moved", moved, err)
		}
	})
}

// TestConcurrentInsertsSQLite runs concurrent inserts through the group
// writer and checks every caller's rows landed and were reported.
func TestConcurrentInsertsSQLite(t *testing.T) {
	s := newSQLiteStore(t)
	ctx := context.Background()
	const callers, rows = 8, 50
	var wg sync.WaitGroup
	ids := make([][]string, callers)
	for c := range callers {
		wg.Go(func() {
			var batch []ports.Notification
			for i := range rows {
				batch = append(batch, storetest.NewNotification(storetest.BaseTime.Add(time.Duration(c*rows+i)*time.Microsecond)))
			}
			got, err := s.Notifications().Insert(ctx, batch)
			if err != nil {
				t.Errorf("caller %d: %v", c, err)
			}
			ids[c] = got
		})
	}
	wg.Wait()
	total := 0
	for _, got := range ids {
		total += len(got)
	}
	if n, err := s.Notifications().Count(ctx, ports.Filter{}); err != nil || n != int64(total) || total != callers*rows {
		t.Errorf("Count = %d, %v; inserted %d; want %d", n, err, total, callers*rows)
	}
}

// TestGroupWriterIsolatesFailures checks that when a caller of a group
// transaction fails, its writes are rolled back and the others' kept.
func TestGroupWriterIsolatesFailures(t *testing.T) {
	s := newSQLiteStore(t)
	ctx := context.Background()
	good := storetest.NewNotification(storetest.BaseTime)
	bad := storetest.NewNotification(storetest.BaseTime)
	errBoom := errors.New("boom")
	var wg sync.WaitGroup
	var goodErr, badErr error
	// Hold the group writer busy so that both requests join one group.
	hold := make(chan struct{})
	started := make(chan struct{})
	wg.Go(func() {
		_ = s.group.do(ctx, func(ctx context.Context, c conn) error {
			close(started)
			<-hold
			return nil
		})
	})
	<-started
	wg.Go(func() {
		badErr = s.group.do(ctx, func(ctx context.Context, c conn) error {
			if err := insertRows(ctx, s, c, []ports.Notification{bad}); err != nil {
				return err
			}
			return errBoom
		})
	})
	wg.Go(func() {
		_, goodErr = s.Notifications().Insert(ctx, []ports.Notification{good})
	})
	// Both requests are queued behind the held one; release it. Whether they
	// share a group or not, the outcome must be the same.
	close(hold)
	wg.Wait()
	if !errors.Is(badErr, errBoom) || goodErr != nil {
		t.Fatalf("bad = %v (want boom), good = %v (want nil)", badErr, goodErr)
	}
	if _, err := s.Notifications().Get(ctx, bad.ID); !errors.Is(err, ports.ErrNotFound) {
		t.Errorf("the failing caller's row is stored: %v", err)
	}
	if _, err := s.Notifications().Get(ctx, good.ID); err != nil {
		t.Errorf("the other caller's row is missing: %v", err)
	}
}

func TestCloseTwiceIsHarmless(t *testing.T) {
	s, err := Open(context.Background(), Config{Driver: DriverSQLite, DSN: filepath.Join(t.TempDir(), "x.db")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_ = s.Close()
	if _, err := s.Notifications().Insert(context.Background(), []ports.Notification{storetest.NewNotification(storetest.BaseTime)}); err == nil {
		t.Error("Insert after Close succeeded")
	}
}

// TestPostgresDSNExecMode runs the batch statements with the exec mode a DSN
// chooses (simple protocol, as behind a transaction-pooling PgBouncer).
func TestPostgresDSNExecMode(t *testing.T) {
	dsn := newPostgresSchema(t, postgresDSN(t)) + "&default_query_exec_mode=simple_protocol"
	s, err := Open(context.Background(), Config{Driver: DriverPostgres, DSN: dsn}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if s.pgPrepare {
		t.Error("a DSN with its own default_query_exec_mode still prepares the batch statements")
	}
	n := storetest.NewNotification(storetest.BaseTime)
	n.ResolvedTargets = []string{"a@example.test"}
	if got, err := s.Notifications().Insert(ctx, []ports.Notification{n}); err != nil || len(got) != 1 {
		t.Fatalf("Insert = %v, %v", got, err)
	}
	now := storetest.BaseTime.Add(time.Hour)
	claimed, err := s.Notifications().Claim(ctx, ports.ClaimRequest{Owner: "a", Now: now, Lease: time.Minute, Limit: 10})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("Claim = %d rows, %v", len(claimed), err)
	}
	lost, err := s.Notifications().Record(ctx, "a", []ports.Update{{ID: n.ID, Status: ports.StatusDelivered, DeliveredAt: now, UpdatedAt: now}})
	if err != nil || len(lost) != 0 {
		t.Fatalf("Record = %v, %v", lost, err)
	}
	if err := s.Notifications().Append(ctx, []ports.AuditRecord{{NotificationID: n.ID, At: now, Kind: ports.AuditDelivered, Actor: ports.ActorSystem}}); err != nil {
		t.Fatal(err)
	}
	if h, err := s.Notifications().History(ctx, n.ID); err != nil || len(h) != 1 {
		t.Fatalf("History = %v, %v", h, err)
	}
}

func TestSQLiteDSN(t *testing.T) {
	got := sqliteDSN("/data/outbox.db", sqliteWriter)
	for _, want := range []string{"/data/outbox.db?", "journal_mode(WAL)", "synchronous(NORMAL)", "busy_timeout(", "_txlock=immediate"} {
		if !strings.Contains(got, want) {
			t.Errorf("writer DSN %q lacks %q", got, want)
		}
	}
	if got := sqliteDSN("/data/outbox.db", sqliteReader); strings.Contains(got, "_txlock") {
		t.Errorf("reader DSN %q takes the write lock at BEGIN", got)
	}
	// The DSN's own settings win, and a query string is extended.
	got = sqliteDSN("file:/data/outbox.db?_pragma=synchronous(FULL)&_pragma=busy_timeout(50)", sqliteWriter)
	if strings.Contains(got, "NORMAL") || strings.Count(got, "busy_timeout") != 1 || !strings.Contains(got, "&_pragma=journal_mode(WAL)") {
		t.Errorf("DSN with its own settings became %q", got)
	}
}

// TestSQLitePlansUseIndexes guards the planner hints of SQLite (which has no
// statistics): the KPIs and the claim must search indexes, never scan the
// table, or they cost seconds at a million rows.
func TestSQLitePlansUseIndexes(t *testing.T) {
	s := newSQLiteStore(t)
	now := storetest.BaseTime
	kpis := s.Notifications().kpisQuery(ports.KPIRequest{StuckBefore: now.Add(-10 * time.Minute), DeliveredSince: now.Add(-time.Minute)}).String()
	claim := s.d.claim(s.w, ports.ClaimRequest{Owner: "node", Now: now, Lease: time.Minute, Limit: 100}).String()
	for name, q := range map[string]string{"kpis": kpis, "claim": claim} {
		plan := sqlitePlan(t, s, q)
		for _, line := range plan {
			// The claim walks the partial index of Pending rows in claim
			// order and stops at its limit: that scan is the point.
			if strings.HasPrefix(line, "SCAN notifications") && !strings.Contains(line, "notifications_claim_pending_idx") {
				t.Errorf("%s scans the table: %q in plan %q", name, line, plan)
			}
		}
	}
}

// TestPostgresPurgeSparesARowMovedMeanwhile: an operator moves a Parked row
// back to Pending while a purge is deciding to delete it. PostgreSQL re-checks
// only the outer WHERE of a row that changed under it, so the purge must carry
// its conditions there, or it deletes a row that is no longer terminal.
func TestPostgresPurgeSparesARowMovedMeanwhile(t *testing.T) {
	s := newPostgresStore(t, postgresDSN(t))
	ctx := context.Background()
	old := storetest.BaseTime
	n := storetest.NewNotification(old)
	n.Status = ports.StatusParked
	if _, err := s.Notifications().Insert(ctx, []ports.Notification{n}); err != nil {
		t.Fatal(err)
	}
	tx, err := s.writer().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	// The operator's Retry, holding the row; updated_at kept old so that only
	// the status tells the purge to keep it.
	if _, err := tx.ExecContext(ctx, `UPDATE notifications SET status = 'Pending' WHERE id = $1`, n.ID); err != nil {
		t.Fatal(err)
	}
	type result struct {
		ids []string
		err error
	}
	purged := make(chan result, 1)
	go func() {
		ids, err := s.Notifications().Purge(ctx, old.Add(24*time.Hour), 10)
		purged <- result{ids, err}
	}()
	// Wait until the purge waits for the row lock (a condition, not a time).
	deadline := time.Now().Add(time.Minute)
	for {
		var waiting int
		if err := s.reader().QueryRowContext(ctx,
			`SELECT count(*) FROM pg_locks WHERE NOT granted AND pid <> pg_backend_pid()`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case r := <-purged:
			t.Fatalf("the purge finished without waiting for the row lock: %v, %v", r.ids, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the purge never waited for the row lock")
		}
		runtime.Gosched()
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-purged
	if r.err != nil || len(r.ids) != 0 {
		t.Fatalf("purge deleted %v (%v); the row had become Pending", r.ids, r.err)
	}
	got, err := s.Notifications().Get(ctx, n.ID)
	if err != nil || got.Status != ports.StatusPending {
		t.Fatalf("the row moved to Pending is gone or changed: %+v, %v", got.Status, err)
	}
}

// insertRows inserts ns on c with bun's plain INSERT (a write inside a
// group transaction).
func insertRows(ctx context.Context, s *DB, c conn, ns []ports.Notification) error {
	rows := make([]notificationRow, len(ns))
	for i := range ns {
		var err error
		if rows[i], err = toRow(&ns[i]); err != nil {
			return err
		}
	}
	_, err := s.w.NewInsert().Model(&rows).Conn(c).Exec(ctx)
	return err
}

// TestSQLitePagesStartAtTheCursor: past a cursor, a page of a list with a
// Created from (oldest first) or Created before (newest first) bound
// searches the index from the cursor, not from that bound (SQLite, without
// statistics, takes the filter's bound and reads every earlier page again);
// a cursor that does not imply the bound keeps it.
func TestSQLitePagesStartAtTheCursor(t *testing.T) {
	s := newSQLiteStore(t)
	now := storetest.BaseTime
	c := &cursor{createdAt: now, id: "0190f2c4-0000-7000-8000-000000000000"}
	n := s.Notifications()
	parked := []ports.Status{ports.StatusParked}
	for name, tc := range map[string]struct {
		q    string
		want string
	}{
		"oldest from":        {n.listQuery(ports.Filter{CreatedFrom: now.Add(-time.Hour)}, c, 51, nil, true).String(), "(created_at,id)>(?,?)"},
		"oldest from, list":  {n.listQuery(ports.Filter{List: "ops", CreatedFrom: now.Add(-time.Hour)}, c, 51, nil, true).String(), "(created_at,id)>(?,?)"},
		"oldest from and to": {n.listQuery(ports.Filter{CreatedFrom: now.Add(-time.Hour), CreatedTo: now.Add(time.Hour)}, c, 51, nil, true).String(), "(created_at,id)>(?,?)"},
		"newest to":          {n.listQuery(ports.Filter{CreatedTo: now.Add(time.Hour)}, c, 51, nil, false).String(), "(created_at,id)<(?,?)"},
		"newest to, status":  {n.listQuery(ports.Filter{Statuses: parked, CreatedTo: now.Add(time.Hour)}, c, 51, nil, false).String(), "(created_at,id)<(?,?)"},
	} {
		plan := sqlitePlan(t, s, tc.q)
		if !strings.Contains(strings.Join(plan, "\n"), tc.want) {
			t.Errorf("%s: the plan %q does not search from the cursor %s", name, plan, tc.want)
		}
	}
	// A cursor before Created from, or not before Created before, does not
	// imply the bound: it stays.
	for name, tc := range map[string]struct{ q, want string }{
		"oldest, cursor before from":  {n.listQuery(ports.Filter{CreatedFrom: now.Add(time.Hour)}, c, 51, nil, true).String(), `"created_at" >= `},
		"oldest, from without cursor": {n.listQuery(ports.Filter{CreatedFrom: now}, nil, 51, nil, true).String(), `"created_at" >= `},
		"newest, cursor at to":        {n.listQuery(ports.Filter{CreatedTo: now.Add(time.Nanosecond)}, c, 51, nil, false).String(), `"created_at" < `},
		"newest, cursor past the to":  {n.listQuery(ports.Filter{CreatedTo: now.Add(-time.Hour)}, c, 51, nil, false).String(), `"created_at" < `},
	} {
		if !strings.Contains(tc.q, tc.want) {
			t.Errorf("%s: the filter's bound was left out:\n%s", name, tc.q)
		}
	}
}

// sqlitePlan is SQLite's EXPLAIN QUERY PLAN of q, one line a step.
func sqlitePlan(t *testing.T, s *DB, q string) []string {
	t.Helper()
	rows, err := s.reader().QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}
