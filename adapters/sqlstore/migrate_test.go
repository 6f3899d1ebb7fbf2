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

	"github.com/siteline/outbox/migrations"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/accountstest"
	"github.com/siteline/outbox/ports/sitecallstest"
	"github.com/siteline/outbox/ports/storetest"
	"github.com/siteline/outbox/ports/waittest"
)

// migration is one embedded up migration split into its statements, as
// the tests read them.
type migration struct {
	version    string // the file name without ".tx.up.sql", e.g. "0001_init"
	statements []string
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

// legacyLock is the migration lock the runner before bun/migrate took, in
// its one transaction (on SQLite, BEGIN IMMEDIATE took it).
var legacyLock = map[string]string{
	DriverPostgres: `SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.outbox_schema_migrations'))`,
	DriverMSSQL: `DECLARE @r int; EXEC @r = sp_getapplock @Resource = N'outbox_schema_migrations', ` +
		`@LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = -1; IF @r < 0 THROW 50000, N'lock', 1;`,
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
	if lock := legacyLock[db.driver]; lock != "" {
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
	// untracked: the notification and its audit record are written as a
	// release before per-target tracking did, without the columns of
	// 0006_target_states.
	untracked bool

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
			Duration: 1500 * time.Microsecond, Error: "smtp: 451", SourceSite: n.SourceSite, Type: n.Type},
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
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	if r.untracked {
		row, err := toRow(&r.n)
		must("toRow", err)
		_, err = db.w.NewInsert().Model(&row).ExcludeColumn("target_states").Exec(ctx)
		must("insert without target_states", err)
		audit, err := toAuditRow(&r.audit)
		must("toAuditRow", err)
		_, err = db.w.NewInsert().Model(&audit).ExcludeColumn("targets", "source_site", "type").Exec(ctx)
		must("insert audit without targets", err)
	} else {
		_, err := db.Notifications().Insert(ctx, []ports.Notification{r.n})
		must("Insert", err)
		must("Append", db.Notifications().Append(ctx, []ports.AuditRecord{r.audit}))
	}
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
	if err != nil || n.Subject != r.n.Subject || !n.CreatedAt.Equal(r.n.CreatedAt) || n.Status != r.n.Status || n.Targets != nil {
		t.Errorf("Get = %+v, %v; want %+v, with nil Targets", n, err, r.n)
	}
	page, err := db.Notifications().Query(ctx, ports.Filter{Subject: "PUMP"}, ports.PageRequest{Limit: 10})
	if err != nil || len(page.Items) != 1 || page.Items[0].Targets != nil {
		t.Errorf("keyword search after the upgrade = %+v, %v; want the one row, with nil Targets", page, err)
	}
	h, err := db.Notifications().History(ctx, r.n.ID)
	if err != nil || len(h) != 1 || h[0].Error != r.audit.Error || h[0].Duration != r.audit.Duration || h[0].Targets != nil {
		t.Errorf("History = %+v, %v; want [%+v], with nil Targets", h, err, r.audit)
	}
	// A failed attempt carries its row's site and type: written with the
	// record, or (a record from before 0009) filled by the migration.
	if len(h) == 1 && (h[0].SourceSite != r.n.SourceSite || h[0].Type != r.n.Type) {
		t.Errorf("the failed attempt's site and type = %q, %q; want %q, %q", h[0].SourceSite, h[0].Type, r.n.SourceSite, r.n.Type)
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

// checkTargetsKept claims the notification of r (as it stands after
// check), records an attempt with target states and appends its audit
// record with targets, and reads both back.
func (r *upgradeRows) checkTargetsKept(t *testing.T, db *DB) {
	t.Helper()
	ctx := t.Context()
	now := r.n.CreatedAt.Add(time.Hour)
	claimed, err := db.Notifications().Claim(ctx, ports.ClaimRequest{Owner: "node/1", Now: now, Lease: time.Minute, Limit: 10})
	if err != nil || len(claimed) != 1 || claimed[0].Targets != nil {
		t.Fatalf("Claim after the upgrade = %+v, %v; want the one row, with nil Targets", claimed, err)
	}
	u := ports.Update{ID: r.n.ID, Status: ports.StatusParked, LastError: "smtp: 550", Targets: storetest.NewTargetStates(now),
		LastAttemptAt: now, UpdatedAt: now}
	if lost, err := db.Notifications().Record(ctx, "node/1", []ports.Update{u}); err != nil || len(lost) != 0 {
		t.Fatalf("Record after the upgrade: lost %v, %v", lost, err)
	}
	want := claimed[0]
	want.Status, want.LastError, want.Targets, want.LastAttemptAt, want.UpdatedAt = u.Status, u.LastError, u.Targets, now, now
	want.ClaimedBy, want.ClaimedUntil = "", time.Time{}
	got, err := db.Notifications().Get(ctx, r.n.ID)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if d := storetest.DiffNotification(want, got); len(d) > 0 {
		t.Errorf("row recorded after the upgrade differs: %v", d)
	}
	rec := r.audit
	rec.At, rec.Outcome, rec.Status = now, ports.OutcomePermanent, ports.StatusParked
	rec.Targets = []ports.AuditTarget{{Target: "b@example.test", Outcome: ports.OutcomePermanent, Error: "smtp: 550"}}
	if err := db.Notifications().Append(ctx, []ports.AuditRecord{rec}); err != nil {
		t.Fatalf("Append after the upgrade: %v", err)
	}
	h, err := db.Notifications().History(ctx, r.n.ID)
	if err != nil || len(h) != 2 || h[0].Targets != nil || !slices.Equal(h[1].Targets, rec.Targets) {
		t.Errorf("History after the upgrade = %+v, %v; want the old record without targets, then %+v", h, err, rec.Targets)
	}
}

// checkSiteCallsKept reports a site call, marks it requested and records
// a node's health, and reads them back.
func checkSiteCallsKept(t *testing.T, db *DB) {
	t.Helper()
	ctx := t.Context()
	sc := db.SiteCalls()
	op := sitecallstest.NewOperation(storetest.BaseTime)
	if n, err := sc.ReportSiteCalls(ctx, "site-1", []ports.Operation{op}, storetest.BaseTime); err != nil || n != 1 {
		t.Fatalf("ReportSiteCalls after the upgrade = %d, %v", n, err)
	}
	cmd := ports.SiteCommand{ID: storetest.NewID(), Site: "site-1", OperationID: op.ID, Action: ports.SiteRetry,
		Actor: "alice", RequestedAt: storetest.BaseTime}
	if err := sc.RequestSiteCommands(ctx, []ports.SiteCommand{cmd}); err != nil {
		t.Fatalf("RequestSiteCommands after the upgrade: %v", err)
	}
	if got, err := sc.GetSiteCall(ctx, "site-1", op.ID); err != nil || got.Version != op.Version || got.Requested != ports.SiteRetry {
		t.Errorf("GetSiteCall after the upgrade = %+v, %v", got, err)
	}
	h := ports.SiteNodeHealth{SiteHealth: ports.SiteHealth{Site: "site-1", Node: "n1", Backlog: 2}, ReportedAt: storetest.BaseTime}
	if err := sc.RecordSiteHealth(ctx, h); err != nil {
		t.Fatalf("RecordSiteHealth after the upgrade: %v", err)
	}
	if got, err := sc.SiteHealth(ctx); err != nil || len(got) != 1 || got[0].Backlog != 2 {
		t.Errorf("SiteHealth after the upgrade = %+v, %v", got, err)
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

// wantNotReapplied checks that each migration was applied when it was
// before: after is the status after a run, before the status before it.
func wantNotReapplied(t *testing.T, before, after []MigrationState) {
	t.Helper()
	for i := range before {
		if !after[i].AppliedAt.Equal(before[i].AppliedAt) {
			t.Errorf("%s applied at %v, then at %v: applied again", before[i].Name, before[i].AppliedAt, after[i].AppliedAt)
		}
	}
}

// checkUpgrade builds a database as the runner before bun/migrate did, up
// to 0005 (before per-target tracking), writes a row of every table, then
// opens it afresh, migrates it with bun/migrate (0006 to 0009 are applied,
// the rest adopted) and reads the rows back: the notification and its
// audit record have nil Targets, and a Record after the upgrade keeps
// them; the site-call mirror works. Then it rolls both groups back (every
// table goes) and applies them again.
func checkUpgrade(t *testing.T, open func() *DB) {
	old := open()
	legacyMigrate(t, old, "0005_admin_audit")
	rows := newUpgradeRows()
	rows.untracked = true
	rows.write(t, old)
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	db := open()
	before := wantStatus(t, db, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0) // adopted, nothing applied
	if err := db.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate of a database made by the former runner: %v", err)
	}
	after := wantStatus(t, db, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2)
	wantNotReapplied(t, before[:5], after[:5])
	rows.check(t, db)
	rows.checkTargetsKept(t, db)
	checkSiteCallsKept(t, db)

	down, err := db.MigrateDown(t.Context())
	if err != nil || !slices.Equal(down, []string{"0011_key_table", "0010_subject_table", "0009_throughput", "0008_site_call_search", "0007_site_calls", "0006_target_states"}) {
		t.Fatalf("MigrateDown = %q, %v; want 0011 to 0006", down, err)
	}
	wantStatus(t, db, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0)
	if _, err := db.SiteCalls().SiteHealth(t.Context()); err == nil {
		t.Errorf("SiteHealth after rolling back 0007: no error, want the table gone")
	}
	down, err = db.MigrateDown(t.Context())
	if err != nil {
		t.Fatalf("MigrateDown: %v", err)
	}
	if want := []string{"0005_admin_audit", "0004_subject_search", "0003_accounts", "0002_directory", "0001_init"}; !slices.Equal(down, want) {
		t.Errorf("MigrateDown = %q, want %q", down, want)
	}
	wantStatus(t, db, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) // the former runner's table is not adopted again
	if n := legacyCount(t, db); n != 0 {
		t.Errorf("after MigrateDown rolled back every migration, %s still records %d of them", legacyMigrationsTable, n)
	}
	if _, err := db.Directory().Lists(t.Context()); err == nil {
		t.Errorf("Lists after rolling back every migration: no error, want the table gone")
	}
	if err := db.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate after MigrateDown: %v", err)
	}
	wantStatus(t, db, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
	fresh := newUpgradeRows()
	fresh.write(t, db)
	fresh.check(t, db)
	fresh.checkTargetsKept(t, db)
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

// checkGroups: a database the former runner left at 0003 gets 0004 to
// 0006 as a group of their own, which MigrateDown rolls back alone.
func checkGroups(t *testing.T, open func() *DB) {
	db := open()
	legacyMigrate(t, db, "0003_accounts")
	wantStatus(t, db, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0)
	if err := db.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	wantStatus(t, db, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2)
	if err := db.Migrate(t.Context()); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	wantStatus(t, db, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2)
	down, err := db.MigrateDown(t.Context())
	if err != nil || !slices.Equal(down, []string{"0011_key_table", "0010_subject_table", "0009_throughput", "0008_site_call_search", "0007_site_calls", "0006_target_states", "0005_admin_audit", "0004_subject_search"}) {
		t.Fatalf("MigrateDown = %q, %v; want 0011 to 0004", down, err)
	}
	wantStatus(t, db, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0)
	if _, err := db.Accounts().AdminRecords(t.Context(), ports.AdminQuery{Limit: 1}); err == nil {
		t.Errorf("AdminRecords after rolling back 0005: no error, want the table gone")
	}
	if _, err := db.Accounts().Accounts(t.Context()); err != nil {
		t.Errorf("Accounts after rolling back 0005 and 0004: %v", err)
	}
	if err := db.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate after MigrateDown: %v", err)
	}
	wantStatus(t, db, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2)
	if _, err := db.Accounts().AdminRecords(t.Context(), ports.AdminQuery{Limit: 1}); err != nil {
		t.Errorf("AdminRecords after migrating up again: %v", err)
	}
}

func TestMigrationGroups(t *testing.T) { onEachDatabase(t, checkGroups) }

// TestMigrateDownEmpty: with nothing applied, MigrateDown rolls back
// nothing.
func TestMigrateDownEmpty(t *testing.T) {
	db := sqliteOpener(t)()
	down, err := db.MigrateDown(t.Context())
	if err != nil || len(down) != 0 {
		t.Fatalf("MigrateDown of an empty database = %q, %v; want nothing", down, err)
	}
	wantStatus(t, db, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
}

// TestMigrationFailureLeavesNoRecord: a migration that fails leaves
// neither its changes nor its record, and its error names the migration
// and the statement.
func TestMigrationFailureLeavesNoRecord(t *testing.T) {
	db := sqliteOpener(t)()
	legacyMigrate(t, db, "0004_subject_search")
	// 0005 adds operator_tokens.account: a column of that name makes it fail.
	if _, err := db.writer().ExecContext(t.Context(), `ALTER TABLE operator_tokens ADD COLUMN account TEXT`); err != nil {
		t.Fatal(err)
	}
	if err := db.Migrate(t.Context()); err == nil || !strings.Contains(err.Error(), "0005_admin_audit statement 1: ") {
		t.Fatalf("Migrate = %v, want 0005_admin_audit statement 1 to fail", err)
	}
	wantStatus(t, db, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0)
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
	mustContain(t, "migration lock", mssqlMigrationLock, `sp_getapplock @Resource = N'outbox_schema_migrations'`,
		`@LockOwner = N'Session'`, `@LockTimeout = -1`)
	checkTSQL(t, "migration lock", query{text: mssqlMigrationLock})
	mustContain(t, "migration unlock", mssqlMigrationUnlock, `sp_releaseapplock @Resource = N'outbox_schema_migrations', @LockOwner = N'Session'`)
	checkTSQL(t, "migration unlock", query{text: mssqlMigrationUnlock})
	db := renderDB(mssqldialect.New())
	q := db.NewRaw(mssqlDialect{}.tableExists(), migrationsTable).String()
	mustContain(t, "table exists", q, `OBJECT_ID(N'outbox_migrations', N'U')`)
	for _, stmt := range (mssqlDialect{}).createMigrationsTable() {
		checkTSQL(t, "create table", query{text: stmt})
	}
	q = db.NewDelete().TableExpr("?", bun.Ident(migrationsTable)).Where("? = ?", bun.Ident("name"), "0001").String()
	mustContain(t, "forget", q, `DELETE FROM "outbox_migrations" WHERE ("name" = N'0001')`)
	q = db.NewDelete().TableExpr("?", bun.Ident(legacyMigrationsTable)).
		Where("? IN (?)", bun.Ident("version"), bun.List([]string{"0001_init", "0001"})).String()
	mustContain(t, "forget the legacy record", q, `DELETE FROM "outbox_schema_migrations" WHERE ("version" IN (N'0001_init', N'0001'))`)
}

// TestMSSQLMigrationTableInstants: outbox_migrations.migrated_at is a
// datetime2(6) written as CAST('...T...' AS datetime2(6)), as the store
// writes every instant. bun's migrate.Migration model made it a DATETIME
// written as '2025-06-02 09:30:00.123', which SQL Server reads as
// year-day-month under DATEFORMAT dmy (the default of British, French,
// German... logins): out of range from the 13th to the 31st of a month,
// a wrong date on other days.
func TestMSSQLMigrationTableInstants(t *testing.T) {
	create := strings.Join(mssqlDialect{}.createMigrationsTable(), "\n")
	mustContain(t, "create table", create, `"migrated_at" datetime2(6) NOT NULL`)
	if strings.Contains(strings.ToUpper(create), " DATETIME ") {
		t.Errorf("outbox_migrations has a DATETIME column:\n%s", create)
	}
	db := renderDB(mssqldialect.New())
	rec := &migrationRecord{Name: "0001", GroupID: 1, MigratedAt: at(storetest.BaseTime)}
	q := db.NewInsert().Model(rec).String()
	mustContain(t, "record", q, `INSERT INTO "outbox_migrations" ("name", "group_id", "migrated_at") VALUES (N'0001', 1, CAST('2025-06-02T09:30:00.123456' AS datetime2(6)))`)
	checkTSQL(t, "record", query{text: q})
	adopt := []migrationRecord{*rec, {Name: "0002", GroupID: 1, MigratedAt: at(storetest.BaseTime)}}
	checkTSQL(t, "adopt", query{text: db.NewInsert().Model(&adopt).String()})
}

// TestMigrateWaitsForTheLockPostgres: while another session holds the
// migration lock of the schema (here a node of the former runner), Migrate
// waits (it neither fails nor goes
// ahead); once the lock is released it applies the migrations.
func TestMigrateWaitsForTheLockPostgres(t *testing.T) {
	t.Parallel()
	db := postgresOpener(t)()
	holder, err := db.writer().BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback() }()
	if _, err := holder.ExecContext(t.Context(), legacyLock[DriverPostgres]); err != nil { // as the former runner took it
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
	wantStatus(t, db, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
}

// legacyCount returns how many migrations outbox_schema_migrations records.
func legacyCount(t *testing.T, db *DB) int {
	t.Helper()
	var n int
	if err := db.reader().QueryRowContext(t.Context(), `SELECT count(*) FROM "outbox_schema_migrations"`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkAdoptsLegacyAfterTheTable: outbox_migrations exists, then a node of
// the previous release migrates the database with the former runner (the
// nodes overlap during an upgrade, or the operator rolled back to it). The
// next Migrate adopts those migrations instead of applying them again.
func checkAdoptsLegacyAfterTheTable(t *testing.T, open func() *DB) {
	db := open()
	if err := db.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.MigrateDown(t.Context()); err != nil { // outbox_migrations stays, empty
		t.Fatal(err)
	}
	legacyMigrate(t, db, "") // the previous release's node migrates
	rows := newUpgradeRows()
	rows.write(t, db)
	before := wantStatus(t, db, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1) // to be adopted
	if err := db.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate of a database the former runner migrated after outbox_migrations was made: %v", err)
	}
	after := wantStatus(t, db, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
	wantNotReapplied(t, before, after)
	rows.check(t, db)

	// Adopted after groups of its own: the former runner's record of a
	// migration outbox_migrations lacks becomes the next group.
	down, err := db.MigrateDown(t.Context())
	if err != nil || len(down) != 11 {
		t.Fatalf("MigrateDown = %q, %v; want all eleven", down, err)
	}
	legacyMigrate(t, db, "0003_accounts")
	if err := db.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, db, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2)
}

func TestAdoptsLegacyRecordsWrittenAfterTheTable(t *testing.T) {
	onEachDatabase(t, checkAdoptsLegacyAfterTheTable)
}

// TestAdoptsLegacyRecordsAfterStatus: `outbox migrate status` run first,
// then the former runner migrates, then Migrate: nothing is applied twice.
func TestAdoptsLegacyRecordsAfterStatus(t *testing.T) {
	db := sqliteOpener(t)()
	wantStatus(t, db, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	legacyMigrate(t, db, "")
	if err := db.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate of a database the former runner migrated after a status: %v", err)
	}
	wantStatus(t, db, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
}

// TestMigrateDownForgetsLegacyRecords: rolling back an adopted migration
// also deletes its record in outbox_schema_migrations, so that a binary of
// the previous release (the usual reason to roll back) does not believe
// the schema is there on a database without tables; it migrates it again.
func TestMigrateDownForgetsLegacyRecords(t *testing.T) {
	db := sqliteOpener(t)()
	legacyMigrate(t, db, "")
	if err := db.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.MigrateDown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := legacyCount(t, db); n != 0 {
		t.Errorf("after MigrateDown rolled back every migration, %s still records %d of them as applied", legacyMigrationsTable, n)
	}
	legacyMigrate(t, db, "") // the previous release starts: its runner applies everything again
	rows := newUpgradeRows()
	rows.write(t, db)
	rows.check(t, db)
}

// checkRacingNodesAgreeOnTheGroup: node B starts migrating while node A is
// half-way through its run (A applied 0001 and 0002). B waits for A's whole
// run, then finds nothing to do: every migration is applied once, in one
// group, which MigrateDown rolls back whole. (When each migration took the
// lock apart, B applied 0003 as group 2 between A's migrations, and
// MigrateDown rolled back 0003 alone, under 0004 and 0005.)
func checkRacingNodesAgreeOnTheGroup(t *testing.T, open func() *DB) {
	a, b := open(), open()
	ma, err := a.newMigrator()
	if err != nil {
		t.Fatal(err)
	}
	paused, resume := make(chan struct{}), make(chan struct{})
	ma.applied = func(name string) {
		if name == "0002_directory" {
			close(paused)
			<-resume
		}
	}
	doneA := make(chan error, 1)
	go func() {
		_, err := ma.up(t.Context())
		doneA <- err
	}()
	select {
	case <-paused:
	case err := <-doneA:
		t.Fatalf("A's run ended before 0002 (%v)", err)
	}
	// B starts while A holds the lock; on PostgreSQL, wait until B waits
	// for it (on SQLite, B's BEGIN IMMEDIATE waits for A's transaction).
	doneB := make(chan error, 1)
	go func() { doneB <- b.Migrate(t.Context()) }()
	if a.driver == DriverPostgres {
		waitForLockWaiter(t, a, doneB)
	}
	close(resume)
	if err := <-doneA; err != nil {
		t.Fatalf("A: %v", err)
	}
	if err := <-doneB; err != nil {
		t.Fatalf("B: %v", err)
	}
	wantStatus(t, a, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
	down, err := a.MigrateDown(t.Context())
	if err != nil || !slices.Equal(down, []string{"0011_key_table", "0010_subject_table", "0009_throughput", "0008_site_call_search", "0007_site_calls", "0006_target_states", "0005_admin_audit", "0004_subject_search", "0003_accounts", "0002_directory", "0001_init"}) {
		t.Errorf("MigrateDown = %q, %v; want the whole group the racing nodes applied", down, err)
	}
}

func TestRacingNodesAgreeOnTheGroup(t *testing.T) { onEachDatabase(t, checkRacingNodesAgreeOnTheGroup) }

// lockWaiters counts the sessions waiting for the migration lock of the
// current schema (an advisory lock on a bigint key shows its high half as
// classid, its low half as objid).
const lockWaiters = `WITH k AS (SELECT hashtext(current_schema() || '.outbox_schema_migrations')::bigint AS key)
	SELECT count(*) FROM pg_locks, k WHERE locktype = 'advisory' AND NOT granted
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND classid::bigint = (k.key >> 32) & 4294967295 AND objid::bigint = k.key & 4294967295`

// waitForLockWaiter waits until a PostgreSQL session waits for an
// advisory lock of db's server, failing if done reports first.
func waitForLockWaiter(t *testing.T, db *DB, done <-chan error) {
	t.Helper()
	waittest.For(t, 30*time.Second, "a node to wait for the migration lock", func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("the waiting node returned %v while the lock was held", err)
		default:
		}
		var n int
		if err := db.reader().QueryRowContext(t.Context(), lockWaiters).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0, fmt.Sprintf("%d sessions waiting", n)
	})
}

// TestMigrationStatusWritesNothing: MigrationStatus only reads (a
// read-only role can run `outbox migrate status`): on a new database it
// creates no table, and on one the former runner made it shows what the
// next run adopts without adopting it.
func TestMigrationStatusWritesNothing(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		db := sqliteOpener(t)()
		if legacy {
			legacyMigrate(t, db, "0003_accounts")
		}
		var before, after int
		count := `SELECT count(*) FROM sqlite_master`
		if err := db.reader().QueryRowContext(t.Context(), count).Scan(&before); err != nil {
			t.Fatal(err)
		}
		if legacy {
			wantStatus(t, db, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0)
		} else {
			wantStatus(t, db, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
		}
		if err := db.reader().QueryRowContext(t.Context(), count).Scan(&after); err != nil {
			t.Fatal(err)
		}
		if after != before {
			t.Errorf("legacy=%v: MigrationStatus changed the schema: %d objects, then %d", legacy, before, after)
		}
	}
}
