package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/migrate"

	"github.com/siteline/outbox/migrations"
)

// This file runs the embedded migrations (package migrations) through
// github.com/uptrace/bun/migrate: bun discovers the files, splits them at
// their "--bun:split" lines, runs each in a transaction of its own (the
// files are named .tx.up.sql / .tx.down.sql) and keeps the applied ones, in
// groups, in its table. Two things bun's Migrator does not do are done here,
// in the hooks bun calls inside each migration's transaction:
//
//   - the lock: the transaction first takes the schema's migration lock and
//     waits for it (a transaction-scoped advisory lock on PostgreSQL, an
//     application lock owned by the transaction on MS SQL; on SQLite the
//     write lock BEGIN IMMEDIATE took), then checks that the migration is
//     still to do. A node that started with others and finds it done by one
//     of them skips it. bun's own lock (a row in a table) fails instead of
//     waiting.
//   - the record: the migration is recorded (or, going down, forgotten) by
//     the same transaction that applied it, so that a migration is never
//     applied without its record nor recorded without being applied. bun's
//     Migrator records a migration apart from running it, so the store runs
//     the discovered migrations itself (migrationRunner.up and down).
//
// A database made before bun/migrate recorded its migrations in
// outbox_schema_migrations: when bun's table is created, they are copied
// into it (adoptLegacy), so that nothing is applied twice.

// migrationsTable is bun/migrate's table of applied migrations.
const migrationsTable = "outbox_migrations"

// legacyMigrationsTable is the table of the runner before bun/migrate, one
// row per applied version ("0001_init"). It is read once, when bun's table
// is created, and left as it is.
const legacyMigrationsTable = "outbox_schema_migrations"

// migrationLockName names the migration lock on PostgreSQL (with the
// schema) and MS SQL: the name the runner before bun/migrate used, so that
// a node of either kind waits for the other.
const migrationLockName = legacyMigrationsTable

// MigrationState is one embedded migration and whether the database has it.
type MigrationState struct {
	// Name is the migration's file name without its suffix, e.g. "0001_init".
	Name string
	// Applied reports whether the database has the migration.
	Applied bool
	// AppliedAt is when it was applied (UTC); zero when not applied.
	AppliedAt time.Time
	// Group is the run that applied it, counted from 1; MigrateDown rolls
	// back the migrations of the last group. 0 when not applied.
	Group int64
}

// migrationDialect is what the migration runner writes differently per
// dialect: the statement that takes the lock in the current transaction
// ("" when BEGIN took it), and the query that counts the tables of the
// current schema named by its one parameter.
type migrationDialect struct {
	lock, tableExists string
}

// migrationSQL returns the migration statements of driver.
func migrationSQL(driver string) migrationDialect {
	switch driver {
	case DriverPostgres:
		// Keyed by schema, so that schemas migrate apart.
		return migrationDialect{
			lock: `SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.` + migrationLockName + `'))`,
			tableExists: `SELECT count(*) FROM information_schema.tables ` +
				`WHERE table_schema = current_schema() AND table_name = ?`,
		}
	case DriverMSSQL:
		return migrationDialect{
			lock: `DECLARE @r int; EXEC @r = sp_getapplock @Resource = N'` + migrationLockName +
				`', @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = -1; ` +
				`IF @r < 0 THROW 50000, N'sqlstore: could not take the migration lock', 1;`,
			tableExists: `SELECT CASE WHEN OBJECT_ID(?, N'U') IS NULL THEN 0 ELSE 1 END`,
		}
	}
	// SQLite: the writer's transactions begin IMMEDIATE, which takes the
	// database's write lock and waits for it (busy_timeout).
	return migrationDialect{tableExists: `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`}
}

// migrationDirection tells the hooks whether a migration goes up or down.
type migrationDirection int

const (
	migratingUp migrationDirection = iota + 1
	migratingDown
)

type migrationDirectionKey struct{}

// errMigrationDone reports that another node applied (or rolled back) a
// migration while this one waited for the lock: the migration is skipped.
var errMigrationDone = errors.New("done meanwhile by another node")

// migrationRunner is bun/migrate's view of one database.
type migrationRunner struct {
	m   *migrate.Migrator
	sql migrationDialect
}

// newMigrationRunner discovers the embedded migrations of the store's
// dialect and returns a runner over its writer pool.
func (s *handle) newMigrationRunner() (*migrationRunner, error) {
	fsys, err := migrations.FS(s.driver)
	if err != nil {
		return nil, err
	}
	ms := migrate.NewMigrations()
	if err := ms.Discover(fsys); err != nil {
		return nil, fmt.Errorf("discover migrations: %w", err)
	}
	r := &migrationRunner{sql: migrationSQL(s.driver)}
	r.m = migrate.NewMigrator(s.w, ms,
		migrate.WithTableName(migrationsTable),
		migrate.BeforeMigration(r.before),
		migrate.AfterMigration(r.after))
	return r, nil
}

// lock takes the migration lock in the transaction tx.
func (r *migrationRunner) lock(ctx context.Context, tx bun.IConn) error {
	if r.sql.lock == "" {
		return nil
	}
	if _, err := tx.ExecContext(ctx, r.sql.lock); err != nil {
		return fmt.Errorf("take the migration lock: %w", err)
	}
	return nil
}

// before runs first in each migration's transaction: it takes the lock and
// checks that the migration is still to do.
func (r *migrationRunner) before(ctx context.Context, tx bun.IConn, m *migrate.Migration) error {
	if err := r.lock(ctx, tx); err != nil {
		return err
	}
	n, err := r.m.DB().NewSelect().Conn(tx).TableExpr("?", bun.Ident(migrationsTable)).
		Where("? = ?", bun.Ident("name"), m.Name).Count(ctx)
	if err != nil {
		return fmt.Errorf("read %s: %w", migrationsTable, err)
	}
	if applied := n > 0; applied == (ctx.Value(migrationDirectionKey{}) == migratingUp) {
		return errMigrationDone
	}
	return nil
}

// after runs last in each migration's transaction: it records the
// migration applied, or forgets it.
func (r *migrationRunner) after(ctx context.Context, tx bun.IConn, m *migrate.Migration) error {
	db := r.m.DB()
	if ctx.Value(migrationDirectionKey{}) == migratingDown {
		_, err := db.NewDelete().Conn(tx).TableExpr("?", bun.Ident(migrationsTable)).
			Where("? = ?", bun.Ident("name"), m.Name).Exec(ctx)
		if err != nil {
			return fmt.Errorf("forget %s in %s: %w", m.Name, migrationsTable, err)
		}
		return nil
	}
	mark := &migrate.Migration{Name: m.Name, GroupID: m.GroupID, MigratedAt: time.Now().UTC()}
	if _, err := db.NewInsert().Conn(tx).Model(mark).ModelTableExpr("?", bun.Ident(migrationsTable)).Exec(ctx); err != nil {
		return fmt.Errorf("record %s in %s: %w", m.Name, migrationsTable, err)
	}
	return nil
}

// prepare creates bun's table when the database lacks it, adopting the
// migrations recorded by the runner before bun/migrate, in one transaction
// under the lock.
func (r *migrationRunner) prepare(ctx context.Context) error {
	return r.m.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if err := r.lock(ctx, tx); err != nil {
			return err
		}
		exists, err := r.tableExists(ctx, tx, migrationsTable)
		if err != nil || exists {
			return err
		}
		if _, err := tx.NewCreateTable().Model((*migrate.Migration)(nil)).
			ModelTableExpr("?", bun.Ident(migrationsTable)).Exec(ctx); err != nil {
			return fmt.Errorf("create %s: %w", migrationsTable, err)
		}
		if _, err := tx.NewCreateIndex().Unique().TableExpr("?", bun.Ident(migrationsTable)).
			Index(migrationsTable + "_name_key").Column("name").Exec(ctx); err != nil {
			return fmt.Errorf("index %s: %w", migrationsTable, err)
		}
		return r.adoptLegacy(ctx, tx)
	})
}

// tableExists reports whether the current schema has table.
func (r *migrationRunner) tableExists(ctx context.Context, tx bun.Tx, table string) (bool, error) {
	var n int
	if err := tx.NewRaw(r.sql.tableExists, table).Scan(ctx, &n); err != nil {
		return false, fmt.Errorf("look for %s: %w", table, err)
	}
	return n > 0, nil
}

// legacyMigration is a row of the runner's table before bun/migrate.
type legacyMigration struct {
	bun.BaseModel `bun:"table:outbox_schema_migrations,alias:outbox_schema_migrations"`

	Version   string  `bun:"version"`
	AppliedAt instant `bun:"applied_at"`
}

// adoptLegacy records in bun's table, as group 1, the migrations the
// runner before bun/migrate applied: "0001_init" becomes bun's "0001" (bun
// keeps the number as the name, and the rest as a comment it does not
// store).
func (r *migrationRunner) adoptLegacy(ctx context.Context, tx bun.Tx) error {
	exists, err := r.tableExists(ctx, tx, legacyMigrationsTable)
	if err != nil || !exists {
		return err
	}
	var old []legacyMigration
	if err := tx.NewSelect().Model(&old).Order("version").Scan(ctx); err != nil {
		return fmt.Errorf("read %s: %w", legacyMigrationsTable, err)
	}
	if len(old) == 0 {
		return nil
	}
	marks := make([]migrate.Migration, len(old))
	for i, o := range old {
		name, _, _ := strings.Cut(o.Version, "_")
		at := o.AppliedAt.t
		if at.IsZero() {
			at = time.Now().UTC()
		}
		marks[i] = migrate.Migration{Name: name, GroupID: 1, MigratedAt: at}
	}
	if _, err := tx.NewInsert().Model(&marks).ModelTableExpr("?", bun.Ident(migrationsTable)).Exec(ctx); err != nil {
		return fmt.Errorf("adopt %s: %w", legacyMigrationsTable, err)
	}
	return nil
}

// status prepares the table and returns every embedded migration with its
// state, in order.
func (r *migrationRunner) status(ctx context.Context) (migrate.MigrationSlice, error) {
	if err := r.prepare(ctx); err != nil {
		return nil, err
	}
	ms, err := r.m.MigrationsWithStatus(ctx)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", migrationsTable, err)
	}
	return ms, nil
}

// migrationName is the file name of m without its suffix, as the runner
// before bun/migrate recorded it: "0001_init".
func migrationName(m *migrate.Migration) string {
	if m.Comment == "" {
		return m.Name
	}
	return m.Name + "_" + m.Comment
}

// up applies the migrations the database lacks, in order, as one group,
// and returns the names of those it applied.
func (r *migrationRunner) up(ctx context.Context) ([]string, error) {
	ms, err := r.status(ctx)
	if err != nil {
		return nil, err
	}
	return r.upFrom(ctx, ms)
}

// upFrom applies the migrations that ms, the status read before, says are
// missing, skipping those another node applied since.
func (r *migrationRunner) upFrom(ctx context.Context, ms migrate.MigrationSlice) ([]string, error) {
	group := ms.LastGroupID() + 1
	ctx = context.WithValue(ctx, migrationDirectionKey{}, migratingUp)
	var applied []string
	for _, m := range ms.Unapplied() {
		if m.Up == nil {
			return applied, fmt.Errorf("%s has no up migration", migrationName(&m))
		}
		m.GroupID = group
		err := m.Up(ctx, r.m, &m)
		if errors.Is(err, errMigrationDone) {
			continue
		}
		if err != nil {
			return applied, fmt.Errorf("%s: up: %w", migrationName(&m), err)
		}
		applied = append(applied, migrationName(&m))
	}
	return applied, nil
}

// down rolls back the migrations of the last group, newest first, and
// returns the names of those it rolled back.
func (r *migrationRunner) down(ctx context.Context) ([]string, error) {
	ms, err := r.status(ctx)
	if err != nil {
		return nil, err
	}
	last := ms.LastGroup().Migrations
	ctx = context.WithValue(ctx, migrationDirectionKey{}, migratingDown)
	var rolledBack []string
	for i := len(last) - 1; i >= 0; i-- {
		m := &last[i]
		if m.Down == nil {
			return rolledBack, fmt.Errorf("%s has no down migration", migrationName(m))
		}
		err := m.Down(ctx, r.m, m)
		if errors.Is(err, errMigrationDone) {
			continue
		}
		if err != nil {
			return rolledBack, fmt.Errorf("%s: down: %w", migrationName(m), err)
		}
		rolledBack = append(rolledBack, migrationName(m))
	}
	return rolledBack, nil
}

// Migrate applies the embedded migrations of the store's dialect that the
// database lacks, in order, each in a transaction of its own that takes
// the migration lock, applies it and records it: when several nodes start
// at once, one applies each migration and the others wait, then skip it.
// DDL is transactional on all three databases, so a failed migration
// leaves no trace. Running it again is a no-op.
func (s *DB) Migrate(ctx context.Context) error {
	r, err := s.newMigrationRunner()
	if err != nil {
		return s.fail("migrate", err)
	}
	applied, err := r.up(ctx)
	if len(applied) > 0 {
		s.logger.Info("sqlstore: migrated", "driver", s.driver, "applied", applied)
	}
	if err != nil {
		return s.fail("migrate", err)
	}
	return nil
}

// MigrateDown rolls back the last group of migrations (those one Migrate
// applied), newest first, each in a transaction of its own under the
// migration lock, and returns their names: none when no migration is
// applied.
func (s *DB) MigrateDown(ctx context.Context) ([]string, error) {
	r, err := s.newMigrationRunner()
	if err != nil {
		return nil, s.fail("migrate down", err)
	}
	rolledBack, err := r.down(ctx)
	if len(rolledBack) > 0 {
		s.logger.Info("sqlstore: rolled back", "driver", s.driver, "migrations", rolledBack)
	}
	if err != nil {
		return rolledBack, s.fail("migrate down", err)
	}
	return rolledBack, nil
}

// MigrationStatus returns every embedded migration of the store's dialect,
// in order, and whether the database has it. Like Migrate, it first creates
// bun/migrate's table if the database lacks it, recording the migrations
// the runner before bun/migrate applied.
func (s *DB) MigrationStatus(ctx context.Context) ([]MigrationState, error) {
	r, err := s.newMigrationRunner()
	if err != nil {
		return nil, s.fail("migration status", err)
	}
	ms, err := r.status(ctx)
	if err != nil {
		return nil, s.fail("migration status", err)
	}
	out := make([]MigrationState, len(ms))
	for i := range ms {
		m := &ms[i]
		out[i] = MigrationState{Name: migrationName(m), Applied: m.IsApplied(), Group: m.GroupID}
		if m.IsApplied() {
			out[i].AppliedAt = m.MigratedAt.UTC()
		}
	}
	return out, nil
}
