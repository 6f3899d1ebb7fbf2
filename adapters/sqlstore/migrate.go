package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/migrate"

	"github.com/siteline/outbox/migrations"
)

// This file runs the embedded migrations (package migrations). bun/migrate
// discovers them (its file names: NNNN_name.tx.up.sql, .tx.down.sql); the
// store runs them itself, because bun's Migrator records a migration apart
// from the transaction that applied it, takes a lock that fails instead of
// waiting, and formats the statements with its own placeholders.
//
// A run (up or down) holds the migration lock from its first read to its
// last write, on one connection of the writer pool (migrationLock; each
// dialect takes it its own way, see lockMigrations): no other node reads,
// numbers a group or applies a migration meanwhile, and a node that
// started with others waits, then finds the work done. Under the lock, the
// run creates outbox_migrations if the database lacks it and adopts the
// migrations the former runner recorded in outbox_schema_migrations that
// outbox_migrations lacks, then applies (or rolls back) each migration in
// a transaction of its own that runs its statements and writes its record,
// so that a migration is never applied without its record nor recorded
// without being applied.

// migrationsTable keeps the applied migrations, one row each: name (the
// number, "0001"), group_id (the run that applied it, from 1) and
// migrated_at (an instant column, as the store writes them).
const migrationsTable = "outbox_migrations"

// legacyMigrationsTable is the table of the runner before bun/migrate, one
// row per applied version ("0001_init"). The store adopts its rows and,
// rolling a migration back, deletes its row, so that a binary of that
// release never finds a migration recorded that is not there.
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

// migrationRecord is a row of outbox_migrations. The table also has an id
// column the database numbers, which the store neither writes nor reads.
type migrationRecord struct {
	bun.BaseModel `bun:"table:outbox_migrations,alias:outbox_migrations"`

	Name       string  `bun:"name"`
	GroupID    int64   `bun:"group_id"`
	MigratedAt instant `bun:"migrated_at"`
}

// legacyMigration is a row of the runner's table before bun/migrate.
type legacyMigration struct {
	bun.BaseModel `bun:"table:outbox_schema_migrations,alias:outbox_schema_migrations"`

	Version   string  `bun:"version"`
	AppliedAt instant `bun:"applied_at"`
}

// migrationLock is the migration lock of one run, held on one connection
// of the writer pool until release.
type migrationLock interface {
	// step runs fn in a transaction of its own (on SQLite, a savepoint of
	// the run's transaction) and commits it when fn returns nil.
	step(ctx context.Context, fn func(tx *sql.Tx) error) error
	// release releases the lock and returns the connection.
	release() error
}

// sessionLock is the lock of PostgreSQL and MS SQL: a lock owned by the
// session of c, which each step's transaction runs on.
type sessionLock struct {
	c      *sql.Conn
	unlock string
}

// lockSession takes the session lock on c with the statement lock, which
// waits for it, and returns it; unlock is the statement that releases it.
// On failure, c is discarded: the statement may have taken the lock.
func lockSession(ctx context.Context, c *sql.Conn, lock, unlock string) (migrationLock, error) {
	if _, err := c.ExecContext(ctx, lock); err != nil {
		return nil, errors.Join(fmt.Errorf("take the migration lock: %w", err), discardConn(c))
	}
	return &sessionLock{c: c, unlock: unlock}, nil
}

func (l *sessionLock) step(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := l.c.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// release unlocks even when the run's context is done; a connection that
// cannot say it unlocked is discarded, which ends its session and the lock.
func (l *sessionLock) release() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := l.c.ExecContext(ctx, l.unlock); err != nil {
		return errors.Join(fmt.Errorf("release the migration lock: %w", err), discardConn(l.c))
	}
	return l.c.Close()
}

// discardConn closes c's connection instead of returning it to the pool.
func discardConn(c *sql.Conn) error {
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
	return c.Close()
}

// txLock is SQLite's lock: the write lock of a transaction that BEGIN
// IMMEDIATE took (waiting for it up to busy_timeout) and holds for the
// whole run; each step is a savepoint of it.
type txLock struct {
	c  *sql.Conn
	tx *sql.Tx
}

func lockTx(ctx context.Context, c *sql.Conn) (migrationLock, error) {
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("take the migration lock: begin: %w", err), c.Close())
	}
	return &txLock{c: c, tx: tx}, nil
}

func (l *txLock) step(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if _, err := l.tx.ExecContext(ctx, `SAVEPOINT outbox_migration`); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	if err := fn(l.tx); err != nil {
		_, rerr := l.tx.ExecContext(context.WithoutCancel(ctx), `ROLLBACK TO outbox_migration; RELEASE outbox_migration`)
		return errors.Join(err, rerr)
	}
	if _, err := l.tx.ExecContext(ctx, `RELEASE outbox_migration`); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	return nil
}

// release commits the steps that succeeded.
func (l *txLock) release() error {
	err := l.tx.Commit()
	if err != nil {
		err = fmt.Errorf("commit: %w", err)
	}
	return errors.Join(err, l.c.Close())
}

// migrationFile is one embedded migration.
type migrationFile struct {
	number string // bun/migrate's name of it, "0001"
	name   string // its file name without the suffix, "0001_init"
}

// migrator runs the migrations of one store.
type migrator struct {
	h     *handle
	fsys  fs.FS
	files []migrationFile // in order
	// applied, when set, is called after each migration a run applied or
	// rolled back, still holding the lock (tests pause a run with it).
	applied func(name string)
}

// newMigrator discovers the embedded migrations of the store's dialect.
func (s *handle) newMigrator() (*migrator, error) {
	fsys, err := migrations.FS(s.driver)
	if err != nil {
		return nil, err
	}
	ms := migrate.NewMigrations()
	if err := ms.Discover(fsys); err != nil {
		return nil, fmt.Errorf("discover migrations: %w", err)
	}
	m := &migrator{h: s, fsys: fsys}
	for _, d := range ms.Sorted() {
		f := migrationFile{number: d.Name, name: d.Name}
		if d.Comment != "" {
			f.name += "_" + d.Comment
		}
		if d.Up == nil || d.Down == nil {
			return nil, fmt.Errorf("migration %s lacks its up or its down file", f.name)
		}
		m.files = append(m.files, f)
	}
	return m, nil
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

// run runs the statements of f's file of direction ("up" or "down") in tx,
// as they are written: through database/sql, never bun's formatter.
func (m *migrator) run(ctx context.Context, tx *sql.Tx, f migrationFile, direction string) error {
	text, err := fs.ReadFile(m.fsys, f.name+".tx."+direction+".sql")
	if err != nil {
		return fmt.Errorf("%s %s: %w", f.name, direction, err)
	}
	for i, stmt := range splitStatements(string(text)) {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			what := f.name
			if direction == "down" {
				what += " down"
			}
			return fmt.Errorf("%s statement %d: %w", what, i+1, err)
		}
	}
	return nil
}

// migrationBook is what a database records of its migrations.
type migrationBook struct {
	tableExists, legacyExists bool
	// records are the rows of outbox_migrations by name ("0001").
	records map[string]migrationRecord
	// adopt are the migrations outbox_schema_migrations records and
	// outbox_migrations lacks, as the rows adopting them writes: the group
	// after the last.
	adopt []migrationRecord
	last  int64 // the last group in outbox_migrations; 0 when none
}

// read reads the book of the database through c, writing nothing.
func (m *migrator) read(ctx context.Context, c bun.IConn) (migrationBook, error) {
	b := migrationBook{records: map[string]migrationRecord{}}
	var err error
	if b.tableExists, err = m.tableExists(ctx, c, migrationsTable); err != nil {
		return b, err
	}
	if b.tableExists {
		var recs []migrationRecord
		if err := m.h.w.NewSelect().Conn(c).Model(&recs).Scan(ctx); err != nil {
			return b, fmt.Errorf("read %s: %w", migrationsTable, err)
		}
		for _, r := range recs {
			b.records[r.Name] = r
			b.last = max(b.last, r.GroupID)
		}
	}
	if b.legacyExists, err = m.tableExists(ctx, c, legacyMigrationsTable); err != nil || !b.legacyExists {
		return b, err
	}
	var old []legacyMigration
	if err := m.h.w.NewSelect().Conn(c).Model(&old).Order("version").Scan(ctx); err != nil {
		return b, fmt.Errorf("read %s: %w", legacyMigrationsTable, err)
	}
	for _, o := range old {
		name, _, _ := strings.Cut(o.Version, "_")
		if _, ok := b.records[name]; ok || slices.ContainsFunc(b.adopt, func(r migrationRecord) bool { return r.Name == name }) {
			continue
		}
		at := o.AppliedAt
		if at.t.IsZero() {
			at = instant{time.Now().UTC()}
		}
		b.adopt = append(b.adopt, migrationRecord{Name: name, GroupID: b.last + 1, MigratedAt: at})
	}
	return b, nil
}

// applied returns the record of f, adopted or not, and whether there is
// one.
func (b *migrationBook) applied(f migrationFile) (migrationRecord, bool) {
	if r, ok := b.records[f.number]; ok {
		return r, true
	}
	for _, r := range b.adopt {
		if r.Name == f.number {
			return r, true
		}
	}
	return migrationRecord{}, false
}

// tableExists reports whether the current schema has table.
func (m *migrator) tableExists(ctx context.Context, c bun.IConn, table string) (bool, error) {
	var n int
	if err := m.h.w.NewRaw(m.h.d.tableExists(), table).Conn(c).Scan(ctx, &n); err != nil {
		return false, fmt.Errorf("look for %s: %w", table, err)
	}
	return n > 0, nil
}

// prepare reads the book under the lock, creating outbox_migrations if
// the database lacks it and adopting what outbox_schema_migrations
// records that it lacks.
func (m *migrator) prepare(ctx context.Context, tx *sql.Tx) (migrationBook, error) {
	b, err := m.read(ctx, tx)
	if err != nil {
		return b, err
	}
	if !b.tableExists {
		for _, stmt := range m.h.d.createMigrationsTable() {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return b, fmt.Errorf("create %s: %w", migrationsTable, err)
			}
		}
		b.tableExists = true
	}
	if len(b.adopt) == 0 {
		return b, nil
	}
	if _, err := m.h.w.NewInsert().Conn(tx).Model(&b.adopt).Exec(ctx); err != nil {
		return b, fmt.Errorf("adopt %s: %w", legacyMigrationsTable, err)
	}
	names := make([]string, len(b.adopt))
	for i, r := range b.adopt {
		b.records[r.Name] = r
		b.last = max(b.last, r.GroupID)
		names[i] = r.Name
	}
	m.h.logger.Info("sqlstore: adopted the migrations of the former runner", "driver", m.h.driver,
		"from", legacyMigrationsTable, "migrations", names, "group", b.last)
	b.adopt = nil
	return b, nil
}

// locked runs fn holding the migration lock.
func (m *migrator) locked(ctx context.Context, fn func(l migrationLock) error) error {
	c, err := m.h.writer().Conn(ctx)
	if err != nil {
		return fmt.Errorf("take the migration lock: %w", err)
	}
	l, err := m.h.d.lockMigrations(ctx, c)
	if err != nil {
		return err
	}
	err = fn(l)
	return errors.Join(err, l.release())
}

// each runs, holding the lock, the migrations todo picks from the book
// the run prepared, in the order it gives, each in a step of its own that
// runs its statements of direction ("up" or "down") and then note (which
// records it, or forgets it); it returns the names of those it ran.
func (m *migrator) each(ctx context.Context, direction string, todo func(b *migrationBook) []migrationFile,
	note func(tx *sql.Tx, b *migrationBook, f migrationFile) error) ([]string, error) {
	var done []string
	err := m.locked(ctx, func(l migrationLock) error {
		var b migrationBook
		if err := l.step(ctx, func(tx *sql.Tx) (err error) {
			b, err = m.prepare(ctx, tx)
			return err
		}); err != nil {
			return err
		}
		for _, f := range todo(&b) {
			err := l.step(ctx, func(tx *sql.Tx) error {
				if err := m.run(ctx, tx, f, direction); err != nil {
					return err
				}
				return note(tx, &b, f)
			})
			if err != nil {
				return err
			}
			done = append(done, f.name)
			if m.applied != nil {
				m.applied(f.name)
			}
		}
		return nil
	})
	return done, err
}

// up applies the migrations the database lacks, in order, as one group
// (the last plus one), and returns the names of those it applied.
func (m *migrator) up(ctx context.Context) ([]string, error) {
	var group int64
	todo := func(b *migrationBook) []migrationFile {
		group = b.last + 1
		var out []migrationFile
		for _, f := range m.files {
			if _, ok := b.records[f.number]; !ok {
				out = append(out, f)
			}
		}
		return out
	}
	return m.each(ctx, "up", todo, func(tx *sql.Tx, _ *migrationBook, f migrationFile) error {
		rec := &migrationRecord{Name: f.number, GroupID: group, MigratedAt: instant{time.Now().UTC()}}
		if _, err := m.h.w.NewInsert().Conn(tx).Model(rec).Exec(ctx); err != nil {
			return fmt.Errorf("%s: record in %s: %w", f.name, migrationsTable, err)
		}
		return nil
	})
}

// down rolls back the migrations of the last group, newest first, and
// returns the names of those it rolled back. It forgets each in both
// tables.
func (m *migrator) down(ctx context.Context) ([]string, error) {
	todo := func(b *migrationBook) []migrationFile {
		var out []migrationFile
		for _, f := range slices.Backward(m.files) {
			if r, ok := b.records[f.number]; ok && r.GroupID == b.last {
				out = append(out, f)
			}
		}
		return out
	}
	return m.each(ctx, "down", todo, func(tx *sql.Tx, b *migrationBook, f migrationFile) error {
		_, err := m.h.w.NewDelete().Conn(tx).TableExpr("?", bun.Ident(migrationsTable)).
			Where("? = ?", bun.Ident("name"), f.number).Exec(ctx)
		if err != nil {
			return fmt.Errorf("%s: forget in %s: %w", f.name, migrationsTable, err)
		}
		if !b.legacyExists {
			return nil
		}
		_, err = m.h.w.NewDelete().Conn(tx).TableExpr("?", bun.Ident(legacyMigrationsTable)).
			Where("? IN (?)", bun.Ident("version"), bun.List([]string{f.name, f.number})).Exec(ctx)
		if err != nil {
			return fmt.Errorf("%s: forget in %s: %w", f.name, legacyMigrationsTable, err)
		}
		return nil
	})
}

// status returns every embedded migration with its state, in order, read
// without the lock and without writing: the migrations a run would adopt
// show as the group after the last.
func (m *migrator) status(ctx context.Context) ([]MigrationState, error) {
	b, err := m.read(ctx, m.h.reader())
	if err != nil {
		return nil, err
	}
	out := make([]MigrationState, len(m.files))
	for i, f := range m.files {
		out[i] = MigrationState{Name: f.name}
		if r, ok := b.applied(f); ok {
			out[i].Applied, out[i].Group = true, r.GroupID
			out[i].AppliedAt = r.MigratedAt.t.UTC()
		}
	}
	return out, nil
}

// Migrate applies the embedded migrations of the store's dialect that the
// database lacks, in order, as one group, holding the migration lock for
// the whole run; each migration runs in a transaction of its own that
// applies and records it. When several nodes start at once, one applies
// the migrations and the others wait, then find nothing to do. DDL is
// transactional on all three databases, so a failed migration leaves no
// trace (those before it stay applied). Running it again is a no-op.
func (s *DB) Migrate(ctx context.Context) error {
	m, err := s.newMigrator()
	if err != nil {
		return s.fail("migrate", err)
	}
	applied, err := m.up(ctx)
	if len(applied) > 0 {
		s.logger.Info("sqlstore: migrated", "driver", s.driver, "applied", applied)
	}
	if err != nil {
		return s.fail("migrate", err)
	}
	return nil
}

// MigrateDown rolls back the last group of migrations (those one Migrate
// applied, or those adopted from the former runner), newest first, each
// in a transaction of its own, holding the migration lock for the whole
// run, and returns their names: none when no migration is applied.
func (s *DB) MigrateDown(ctx context.Context) ([]string, error) {
	m, err := s.newMigrator()
	if err != nil {
		return nil, s.fail("migrate down", err)
	}
	rolledBack, err := m.down(ctx)
	if len(rolledBack) > 0 {
		s.logger.Info("sqlstore: rolled back", "driver", s.driver, "migrations", rolledBack)
	}
	if err != nil {
		return rolledBack, s.fail("migrate down", err)
	}
	return rolledBack, nil
}

// MigrationStatus returns every embedded migration of the store's dialect,
// in order, and whether the database has it. It only reads: migrations
// the former runner recorded that the next Migrate or MigrateDown will
// adopt show as applied, in the group after the last.
func (s *DB) MigrationStatus(ctx context.Context) ([]MigrationState, error) {
	m, err := s.newMigrator()
	if err != nil {
		return nil, s.fail("migration status", err)
	}
	st, err := m.status(ctx)
	if err != nil {
		return nil, s.fail("migration status", err)
	}
	return st, nil
}
