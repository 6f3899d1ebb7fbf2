package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/siteline/outbox/migrations"
)

// migrationsTable records the applied migrations, one row per version.
const migrationsTable = "outbox_schema_migrations"

// migration is one embedded up migration split into its statements.
type migration struct {
	version    string // the file name without ".up.sql", e.g. "0001_init"
	statements []string
}

// splitMarker separates the statements of a migration file (the marker bun's
// migrate package uses, so the files also run under bun/migrate).
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
	names, err := fs.Glob(fsys, "*.up.sql")
	if err != nil {
		return nil, fmt.Errorf("list %s migrations: %w", dialect, err)
	}
	slices.Sort(names)
	out := make([]migration, 0, len(names))
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read %s migration %s: %w", dialect, name, err)
		}
		stmts := splitStatements(string(b))
		if len(stmts) == 0 {
			return nil, fmt.Errorf("%s migration %s holds no statement", dialect, name)
		}
		out = append(out, migration{version: strings.TrimSuffix(path.Base(name), ".up.sql"), statements: stmts})
	}
	return out, nil
}

// migrationLock returns the statement that takes the schema lock inside the
// migration transaction, held until it ends: a transaction-scoped advisory
// lock on PostgreSQL (keyed by schema, so that schemas migrate apart), an
// application lock on MS SQL. On SQLite the write lock BEGIN IMMEDIATE took
// is the lock.
func (g *sqlgen) migrationLock() string {
	switch g.kind {
	case kindPostgres:
		return `SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.` + migrationsTable + `'))`
	case kindMSSQL:
		return `DECLARE @r int; EXEC @r = sp_getapplock @Resource = N'` + migrationsTable +
			`', @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = -1; ` +
			`IF @r < 0 THROW 50000, N'sqlstore: could not take the migration lock', 1;`
	}
	return ""
}

// createMigrationsTable returns the statement that creates the migrations
// table when it does not exist.
func (g *sqlgen) createMigrationsTable() string {
	switch g.kind {
	case kindPostgres:
		return `CREATE TABLE IF NOT EXISTS "` + migrationsTable + `" ("version" text PRIMARY KEY, "applied_at" timestamptz NOT NULL DEFAULT now())`
	case kindMSSQL:
		return `IF OBJECT_ID(N'` + migrationsTable + `', N'U') IS NULL CREATE TABLE "` + migrationsTable +
			`" ("version" nvarchar(200) NOT NULL PRIMARY KEY, "applied_at" datetime2(6) NOT NULL DEFAULT SYSUTCDATETIME())`
	}
	return `CREATE TABLE IF NOT EXISTS "` + migrationsTable + `" ("version" TEXT PRIMARY KEY, "applied_at" TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`
}

func (g *sqlgen) appliedMigrations() string {
	return `SELECT "version" FROM "` + migrationsTable + `"`
}

func (g *sqlgen) markMigration(version string) (query, error) {
	s := g.stmt(128)
	s.sql(`INSERT INTO "` + migrationsTable + `" ("version") VALUES (`).str(version).sql(")")
	return s.done()
}

// Migrate applies the embedded migrations of the store's dialect that the
// database lacks, each with its record in the migrations table, all in one
// transaction under a schema lock: when several nodes start at once, one
// applies them and the others wait, then find nothing left to do. DDL is
// transactional on all three databases, so a failed migration leaves no
// trace. Running it again is a no-op.
func (s *DB) Migrate(ctx context.Context) error {
	steps, err := loadMigrations(s.driver)
	if err != nil {
		return fmt.Errorf("sqlstore: migrate: %w", err)
	}
	var applied []string
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if lock := s.g.migrationLock(); lock != "" {
			if _, err := tx.ExecContext(ctx, lock); err != nil {
				return fmt.Errorf("take the migration lock: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, s.g.createMigrationsTable()); err != nil {
			return fmt.Errorf("create %s: %w", migrationsTable, err)
		}
		done, err := queryIDs(ctx, tx, query{text: s.g.appliedMigrations()}, nil)
		if err != nil {
			return fmt.Errorf("read %s: %w", migrationsTable, err)
		}
		for _, m := range steps {
			if slices.Contains(done, m.version) {
				continue
			}
			for i, stmt := range m.statements {
				if _, err := tx.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("%s statement %d: %w", m.version, i+1, err)
				}
			}
			mark, err := s.g.markMigration(m.version)
			if err != nil {
				return err
			}
			if err := exec(ctx, tx, mark); err != nil {
				return fmt.Errorf("record %s: %w", m.version, err)
			}
			applied = append(applied, m.version)
		}
		return nil
	})
	if err != nil {
		return s.fail("migrate", err)
	}
	if len(applied) > 0 {
		s.logger.Info("sqlstore: migrated", "driver", s.driver, "applied", applied)
	}
	return nil
}
