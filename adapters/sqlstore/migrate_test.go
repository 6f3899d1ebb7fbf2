package sqlstore

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mssqldialect"
	"github.com/uptrace/bun/migrate"

	"github.com/siteline/outbox/migrations"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/accountstest"
	"github.com/siteline/outbox/ports/storetest"
	"github.com/siteline/outbox/ports/waittest"
)

// migration is one embedded up migration split into its statements, as
// the tests read them.
type migration struct {
	version    string // the file name without ".tx.up.sql", e.g. "0001_init"
	statements []string
}

// splitMarker separates the statements of a migration file.
const splitMarker = "--bun:split"

// splitStatements cuts a migration file at its split markers and drops the
// pieces that hold only comments and blank lines.
func splitStatements(text string) []string {
	var out []string
	for _, piece := range strings.Split(text, "\n"+splitMarker) {
		piece = strings.TrimPrefix(piece, splitMarker)
		code := false
		for _, line := range strings.Split(piece, "\n") {
			line = strings.TrimSpace(line)
			if line != "" && !strings.HasPrefix(line, "--") {
				code = true
				break
			}
		}
		if code {
			out = append(out, strings.TrimSpace(piece))
		}
	}
	return out
}

// loadMigrations reads the up migrations of dialect in version order.
func loadMigrations(dialect string) ([]migration, error) {
	fsys, err := migrations.FS(dialect)
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(fsys, "*.tx.up.sql")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	out := make([]migration, 0, len(names))
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		stmts := splitStatements(string(b))
		if len(stmts) == 0 {
			return nil, fmt.Errorf("%s migration %s holds no statement", dialect, name)
		}
		out = append(out, migration{version: strings.TrimSuffix(name, ".tx.up.sql"), statements: stmts})
	}
	return out, nil
}

// legacyMigrate builds the schema of db as the runner before bun/migrate
// did, up to and including the migration named last: one transaction that
// creates outbox_schema_migrations, runs each migration's statements and
// records its version.
func legacyMigrate(t *testing.T, db *DB, last string) {
	t.Helper()
	steps, err := loadMigrations(db.driver)
	if err != nil {
		t.Fatal(err)
	}
	create := map[string]string{
		DriverSQLite:   `CREATE TABLE IF NOT EXISTS "outbox_schema_migrations" ("version" TEXT PRIMARY KEY, "applied_at" TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`,
		DriverPostgres: `CREATE TABLE IF NOT EXISTS "outbox_schema_migrations" ("version" text PRIMARY KEY, "applied_at" timestamptz NOT NULL DEFAULT now())`,
	}[db.driver]
	tx, err := db.writer().BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if lock := migrationSQL(db.driver).lock; lock != "" {
		if _, err := tx.ExecContext(t.Context(), lock); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.ExecContext(t.Context(), create); err != nil {
		t.Fatal(err)
	}
	for _, m := range steps {
		for i, stmt := range m.statements {
			if _, err := tx.ExecContext(t.Context(), stmt); err != nil {
				t.Fatalf("%s statement %d: %v", m.version, i+1, err)
			}
		}
		if _, err := tx.ExecContext(t.Context(), `INSERT INTO "outbox_schema_migrations" ("version") VALUES ('`+m.version+`')`); err != nil {
			t.Fatal(err)
		}
		if m.version == last {
			break
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// upgradeRows is one row of every table, written before the upgrade.
type upgradeRows struct {
	n       ports.Notification
	audit   ports.AuditRecord
	list    ports.List
	channel ports.ChannelSettings
	account ports.Account
	token   ports.StoredToken
	session ports.StoredSession
	admin   ports.AdminRecord
}

func newUpgradeRows() upgradeRows {
	at := storetest.BaseTime
	n := storetest.NewNotification(at)
	n.Subject = "pump 7 stopped"
	return upgradeRows{
		n: n,
		audit: ports.AuditRecord{NotificationID: n.ID, At: at.Add(time.Second), Kind: ports.AuditAttempted,
			Actor: ports.ActorSystem, Outcome: ports.OutcomeTransient, Status: ports.StatusRetrying,
			Duration: 1500 * time.Microsecond, Error: "smtp: 451"},
		list: ports.List{Name: "ops", Type: "email", Targets: []string{"a@example.com", "b@example.com"}},
		channel: ports.ChannelSettings{Type: "email", Settings: map[string]string{"host": "smtp.example.com"},
			Retry: ports.RetrySettings{Backoff: ports.BackoffExponential, MaxRetries: 5, Interval: time.Second,
				MaxInterval: time.Minute}, RateLimit: 2.5},
		account: accountstest.NewAccount("alice@example.com", ports.RoleAdmin, at),
		token:   accountstest.NewBoundToken("tok-1", "alice/cli", "alice@example.com", at, at.Add(time.Hour)),
		session: accountstest.NewSession("secret", "alice@example.com", at, at.Add(time.Hour)),
		admin: ports.AdminRecord{At: at, Actor: "alice@example.com", Kind: ports.AdminKindList, Name: "ops",
			Action: ports.AdminCreated, Summary: "type email"},
	}
}

// write puts the rows through db's ports.
func (r *upgradeRows) write(t *testing.T, db *DB) {
	t.Helper()
	ctx := t.Context()
	if _, err := db.Notifications().Insert(ctx, []ports.Notification{r.n}); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("Append", db.Notifications().Append(ctx, []ports.AuditRecord{r.audit}))
	must("PutList", db.Directory().PutList(ctx, r.list))
	must("PutChannel", db.Directory().PutChannel(ctx, r.channel))
	must("PutAccount", db.Accounts().PutAccount(ctx, r.account))
	must("PutToken", db.Accounts().PutToken(ctx, r.token))
	must("PutSession", db.Accounts().PutSession(ctx, r.session))
	rec, err := db.Accounts().AppendAdmin(ctx, r.admin)
	must("AppendAdmin", err)
	r.admin = rec
}

// check reads the rows back through db's ports.
func (r *upgradeRows) check(t *testing.T, db *DB) {
	t.Helper()
	ctx := t.Context()
	n, err := db.Notifications().Get(ctx, r.n.ID)
	if err != nil || n.Subject != r.n.Subject || !n.CreatedAt.Equal(r.n.CreatedAt) || n.Status != r.n.Status {
		t.Errorf("Get = %+v, %v; want %+v", n, err, r.n)
	}
	page, err := db.Notifications().Query(ctx, ports.Filter{Subject: "PUMP"}, ports.PageRequest{Limit: 10})
	if err != nil || len(page.Items) != 1 {
		t.Errorf("keyword search after the upgrade = %+v, %v; want the one row", page, err)
	}
	h, err := db.Notifications().History(ctx, r.n.ID)
	if err != nil || len(h) != 1 || h[0].Error != r.audit.Error || h[0].Duration != r.audit.Duration {
		t.Errorf("History = %+v, %v; want [%+v]", h, err, r.audit)
	}
	l, err := db.Directory().List(ctx, r.list.Name)
	if err != nil || !slices.Equal(l.Targets, r.list.Targets) || l.Type != r.list.Type {
		t.Errorf("List = %+v, %v; want %+v", l, err, r.list)
	}
	c, err := db.Directory().ChannelSettings(ctx, r.channel.Type)
	if err != nil || c.Retry != r.channel.Retry || c.RateLimit != r.channel.RateLimit || c.Settings["host"] != r.channel.Settings["host"] {
		t.Errorf("ChannelSettings = %+v, %v; want %+v", c, err, r.channel)
	}
	a, err := db.Accounts().Account(ctx, r.account.Name)
	if err != nil {
		t.Errorf("Account: %v", err)
	} else if d := accountstest.DiffAccount(r.account, a); len(d) > 0 {
		t.Errorf("Account differs: %v", d)
	}
	tok, err := db.Accounts().Token(ctx, r.token.ID)
	if err != nil {
		t.Errorf("Token: %v", err)
	} else if d := accountstest.DiffToken(r.token, tok); len(d) > 0 {
		t.Errorf("Token differs: %v", d)
	}
	x, err := db.Accounts().Session(ctx, r.session.ID)
	if err != nil {
		t.Errorf("Session: %v", err)
	} else if d := accountstest.DiffSession(r.session, x); len(d) > 0 {
		t.Errorf("Session differs: %v", d)
	}
	recs, err := db.Accounts().AdminRecords(ctx, ports.AdminQuery{Limit: 10})
	if err != nil || len(recs) != 1 || recs[0].ID != r.admin.ID || recs[0].Summary != r.admin.Summary {
		t.Errorf("AdminRecords = %+v, %v; want [%+v]", recs, err, r.admin)
	}
}

// wantStatus checks the names, states and groups MigrationStatus reports:
// groups[i] is the group of the i-th migration, 0 for not applied.
func wantStatus(t *testing.T, db *DB, groups ...int64) []MigrationState {
	t.Helper()
	st, err := db.MigrationStatus(t.Context())
	if err != nil {
		t.Fatalf("MigrationStatus: %v", err)
	}
	steps, err := loadMigrations(db.driver)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != len(steps) || len(groups) != len(steps) {
		t.Fatalf("MigrationStatus = %+v, want %d migrations", st, len(steps))
	}
	for i, s := range st {
		if s.Name != steps[i].version || s.Applied != (groups[i] > 0) || s.Group != groups[i] ||
			s.AppliedAt.IsZero() == s.Applied {
			t.Errorf("migration %d = %+v, want %s in group %d", i, s, steps[i].version, groups[i])
		}
	}
	return st
}

// checkUpgrade builds a database as the runner before bun/migrate did,
// writes a row of every table, then opens it afresh, migrates it with
// bun/migrate and reads the rows back; rolls the adopted group back (every
// table goes) and applies it again.
func checkUpgrade(t *testing.T, open func() *DB) {
	old := open()
	legacyMigrate(t, old, "")
	rows := newUpgradeRows()
	rows.write(t, old)
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	db := open()
	before := wantStatus(t, db, 1, 1, 1, 1, 1) // adopted, nothing applied
	if err := db.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate of a database made by the former runner: %v", err)
	}
	after := wantStatus(t, db, 1, 1, 1, 1, 1)
	for i := range before {
		if !after[i].AppliedAt.Equal(before[i].AppliedAt) {
			t.Errorf("%s applied at %v, then at %v: applied again", before[i].Name, before[i].AppliedAt, after[i].AppliedAt)
		}
	}
	rows.check(t, db)

	down, err := db.MigrateDown(t.Context())
	if err != nil {
		t.Fatalf("MigrateDown: %v", err)
	}
	if want := []string{"0005_admin_audit", "0004_subject_search", "0003_accounts", "0002_directory", "0001_init"}; !slices.Equal(down, want) {
		t.Errorf("MigrateDown = %q, want %q", down, want)
	}
	wantStatus(t, db, 0, 0, 0, 0, 0) // the former runner's table is not adopted again
	if _, err := db.Directory().Lists(t.Context()); err == nil {
		t.Errorf("Lists after rolling back every migration: no error, want the table gone")
	}
	if err := db.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate after MigrateDown: %v", err)
	}
	wantStatus(t, db, 1, 1, 1, 1, 1)
	fresh := newUpgradeRows()
	fresh.write(t, db)
	fresh.check(t, db)
}

func TestUpgradeFromLegacyRunner(t *testing.T) { onEachDatabase(t, checkUpgrade) }

// onEachDatabase runs check on SQLite and on PostgreSQL (when a server is
// given), each on a database of its own.
func onEachDatabase(t *testing.T, check func(t *testing.T, open func() *DB)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		check(t, sqliteOpener(t))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		check(t, postgresOpener(t))
	})
}

// checkGroups: a database the former runner left at 0003 gets 0004 and
// 0005 as a group of their own, which MigrateDown rolls back alone.
func checkGroups(t *testing.T, open func() *DB) {
	db := open()
	legacyMigrate(t, db, "0003_accounts")
	wantStatus(t, db, 1, 1, 1, 0, 0)
	if err := db.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	wantStatus(t, db, 1, 1, 1, 2, 2)
	if err := db.Migrate(t.Context()); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	wantStatus(t, db, 1, 1, 1, 2, 2)
	down, err := db.MigrateDown(t.Context())
	if err != nil || !slices.Equal(down, []string{"0005_admin_audit", "0004_subject_search"}) {
		t.Fatalf("MigrateDown = %q, %v; want 0005 and 0004", down, err)
	}
	wantStatus(t, db, 1, 1, 1, 0, 0)
	if _, err := db.Accounts().AdminRecords(t.Context(), ports.AdminQuery{Limit: 1}); err == nil {
		t.Errorf("AdminRecords after rolling back 0005: no error, want the table gone")
	}
	if _, err := db.Accounts().Accounts(t.Context()); err != nil {
		t.Errorf("Accounts after rolling back 0005 and 0004: %v", err)
	}
	if err := db.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate after MigrateDown: %v", err)
	}
	wantStatus(t, db, 1, 1, 1, 2, 2)
	if _, err := db.Accounts().AdminRecords(t.Context(), ports.AdminQuery{Limit: 1}); err != nil {
		t.Errorf("AdminRecords after migrating up again: %v", err)
	}
}

func TestMigrationGroups(t *testing.T) { onEachDatabase(t, checkGroups) }

// TestMigrateSkipsWhatAnotherNodeApplied: a node that read the status
// before another node applied the migrations skips each of them once it
// holds the lock, instead of applying it again.
func TestMigrateSkipsWhatAnotherNodeApplied(t *testing.T) {
	open := sqliteOpener(t)
	a, b := open(), open()
	r, err := b.newMigrationRunner()
	if err != nil {
		t.Fatal(err)
	}
	stale, err := r.status(t.Context())
	if err != nil || len(stale.Unapplied()) != len(stale) {
		t.Fatalf("status of an empty database = %v, %v; want every migration to do", stale, err)
	}
	if err := a.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	applied, err := r.upFrom(t.Context(), stale)
	if err != nil || len(applied) != 0 {
		t.Fatalf("up after another node migrated = %q, %v; want nothing applied, no error", applied, err)
	}
	wantStatus(t, b, 1, 1, 1, 1, 1)
}

// TestMigrateDownEmpty: with nothing applied, MigrateDown rolls back
// nothing.
func TestMigrateDownEmpty(t *testing.T) {
	db := sqliteOpener(t)()
	down, err := db.MigrateDown(t.Context())
	if err != nil || len(down) != 0 {
		t.Fatalf("MigrateDown of an empty database = %q, %v; want nothing", down, err)
	}
	wantStatus(t, db, 0, 0, 0, 0, 0)
}

// TestMigrationFailureLeavesNoRecord: a migration that fails leaves
// neither its changes nor its record.
func TestMigrationFailureLeavesNoRecord(t *testing.T) {
	db := sqliteOpener(t)()
	legacyMigrate(t, db, "0004_subject_search")
	// 0005 adds operator_tokens.account: a column of that name makes it fail.
	if _, err := db.writer().ExecContext(t.Context(), `ALTER TABLE operator_tokens ADD COLUMN account TEXT`); err != nil {
		t.Fatal(err)
	}
	if err := db.Migrate(t.Context()); err == nil || !strings.Contains(err.Error(), "0005_admin_audit") {
		t.Fatalf("Migrate = %v, want 0005_admin_audit to fail", err)
	}
	wantStatus(t, db, 1, 1, 1, 1, 0)
	var n int
	if err := db.reader().QueryRowContext(t.Context(), `SELECT count(*) FROM sqlite_master WHERE name = 'admin_audit'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("admin_audit after the failed migration: %d tables, %v; want none", n, err)
	}
}

// sqliteOpener returns a function that opens (without migrating) one
// SQLite file in t's temp dir, closed at the end of t.
func sqliteOpener(t *testing.T) func() *DB {
	path := filepath.Join(t.TempDir(), "outbox.db")
	return opener(t, Config{Driver: DriverSQLite, DSN: path})
}

// postgresOpener is sqliteOpener on a fresh PostgreSQL schema.
func postgresOpener(t *testing.T) func() *DB {
	return opener(t, Config{Driver: DriverPostgres, DSN: newPostgresSchema(t, postgresDSN(t))})
}

func opener(t *testing.T, cfg Config) func() *DB {
	return func() *DB {
		t.Helper()
		db, err := Open(context.Background(), cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
}

// TestMigrationSQLMSSQL renders the MS SQL statements of the runner
// without a server.
func TestMigrationSQLMSSQL(t *testing.T) {
	ms := migrationSQL(DriverMSSQL)
	mustContain(t, "migration lock", ms.lock, `sp_getapplock @Resource = N'outbox_schema_migrations'`, `@LockOwner = N'Transaction'`, `@LockTimeout = -1`)
	checkTSQL(t, "migration lock", query{text: ms.lock})
	db := renderDB(mssqldialect.New())
	q := db.NewRaw(ms.tableExists, migrationsTable).String()
	mustContain(t, "table exists", q, `OBJECT_ID(N'outbox_migrations', N'U')`)
	q = db.NewCreateTable().Model((*migrate.Migration)(nil)).ModelTableExpr("?", bun.Ident(migrationsTable)).String()
	mustContain(t, "create table", q, `CREATE TABLE "outbox_migrations"`)
	checkTSQL(t, "create table", query{text: q})
	mark := &migrate.Migration{Name: "0001", GroupID: 1, MigratedAt: storetest.BaseTime}
	q = db.NewInsert().Model(mark).ModelTableExpr("?", bun.Ident(migrationsTable)).String()
	mustContain(t, "record", q, `INSERT INTO "outbox_migrations"`, `N'0001'`)
	q = db.NewDelete().TableExpr("?", bun.Ident(migrationsTable)).Where("? = ?", bun.Ident("name"), "0001").String()
	mustContain(t, "forget", q, `DELETE FROM "outbox_migrations" WHERE ("name" = N'0001')`)
}

// TestMigrateWaitsForTheLockPostgres: while another session holds the
// migration lock of the schema, Migrate waits (it neither fails nor goes
// ahead); once the lock is released it applies the migrations.
func TestMigrateWaitsForTheLockPostgres(t *testing.T) {
	t.Parallel()
	db := postgresOpener(t)()
	holder, err := db.writer().BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback() }()
	if _, err := holder.ExecContext(t.Context(), migrationSQL(DriverPostgres).lock); err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := holder.QueryRowContext(t.Context(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- db.Migrate(t.Context()) }()

	// Wait until a session waits for the lock the holder holds.
	waiting := `SELECT count(*) FROM pg_locks w JOIN pg_locks h ON h.locktype = 'advisory' AND h.granted
		AND h.pid = $1 AND w.classid = h.classid AND w.objid = h.objid AND w.objsubid = h.objsubid
		WHERE w.locktype = 'advisory' AND NOT w.granted`
	waittest.For(t, 30*time.Second, "Migrate to wait for the migration lock", func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("Migrate returned %v while another session held the lock", err)
		default:
		}
		var n int
		if err := db.reader().QueryRowContext(t.Context(), waiting, pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0, fmt.Sprintf("%d sessions waiting", n)
	})
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Migrate after the lock was released: %v", err)
	}
	wantStatus(t, db, 1, 1, 1, 1, 1)
}
