// Package sqlstore implements five store ports over github.com/uptrace/bun
// for SQLite (modernc.org/sqlite, pure Go), PostgreSQL (pgx through
// database/sql) and MS SQL (go-mssqldb): Open returns a DB whose views are
// Notifications (ports.Store and ports.AuditLog), Directory
// (ports.DirectoryAdmin) and Accounts (ports.AccountStore and
// ports.AdminAudit).
//
// The handle holds one bun.DB per connection pool. The rows of the
// notifications and the audit log are bun models (models.go), read and
// written with bun's query builders (notifications.go); what differs
// between the databases is a dialect, one file each (sqlite.go,
// postgres.go, mssql.go), which also holds the few statements written by
// hand for a measured reason: the claim (FOR UPDATE SKIP LOCKED on
// PostgreSQL, READPAST/UPDLOCK/ROWLOCK hints on MS SQL, the single writer
// connection on SQLite) and the batch writes (PostgreSQL's unnest arrays,
// SQLite's prepared inserts). Values always reach the SQL text through
// bun's placeholders, or as parameters. The schema is in the migrations
// package, applied by DB.Migrate. DESIGN.md explains the choices.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/siteline/outbox/ports"
)

// Driver names accepted by Config.Driver.
const (
	DriverSQLite   = "sqlite"
	DriverPostgres = "postgres"
	DriverMSSQL    = "mssql"
)

// Config says which database to open.
type Config struct {
	// Driver is "sqlite", "postgres" or "mssql".
	Driver string
	// DSN is, for sqlite, a file path or file: URI; for postgres a
	// postgres:// URL; for mssql a sqlserver:// URL.
	DSN string
	// MaxOpenConns caps the connection pool (on SQLite, the reader pool; the
	// writer is always one connection); 0 picks a default per driver.
	MaxOpenConns int
}

// Validate returns a *ports.FieldError (which wraps ports.ErrInvalid) per
// rule c breaks, joined, or nil.
func (c Config) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, &ports.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	const want = "want " + DriverSQLite + ", " + DriverPostgres + " or " + DriverMSSQL
	switch c.Driver {
	case DriverSQLite:
		if strings.TrimSpace(c.DSN) == "" {
			add("DSN", "required when Driver is sqlite (a file path or file: URI)")
		}
	case DriverPostgres, DriverMSSQL:
		if strings.TrimSpace(c.DSN) == "" {
			add("DSN", "required when Driver is %s (it may hold a password: set it in the environment, not in a file)", c.Driver)
		}
	case "":
		add("Driver", "empty (%s)", want)
	default:
		add("Driver", "unknown driver %q (%s)", c.Driver, want)
	}
	if c.DSN != "" {
		switch {
		case c.Driver == DriverPostgres && strings.Contains(c.DSN, "://") &&
			!strings.HasPrefix(c.DSN, "postgres://") && !strings.HasPrefix(c.DSN, "postgresql://"):
			// Only the scheme: the rest may hold a password.
			scheme, _, _ := strings.Cut(c.DSN, "://")
			add("DSN", "driver postgres wants a postgres:// URL, got a %s URL", scheme)
		case c.Driver == DriverMSSQL && !strings.HasPrefix(c.DSN, "sqlserver://"):
			add("DSN", "driver mssql wants a sqlserver:// URL")
		}
	}
	if c.MaxOpenConns < 0 {
		add("MaxOpenConns", "must not be negative, got %d (0 lets the store pick)", c.MaxOpenConns)
	}
	return errors.Join(errs...)
}

// DB is one open database: its pools, its dialect and the background work
// they need. The port implementations are views of it that share its
// handle: Notifications (ports.Store and ports.AuditLog), Directory
// (ports.DirectoryAdmin) and Accounts (ports.AccountStore and
// ports.AdminAudit). A DB is safe for concurrent use; any number of them (one
// per central node) may share one PostgreSQL or MS SQL database.
type DB struct{ *handle }

// Notifications is the notifications table and its audit log: ports.Store
// and ports.AuditLog.
type Notifications struct{ *handle }

// Directory is the notification lists and channel settings:
// ports.DirectoryAdmin.
type Directory struct{ *handle }

// Accounts is the operator accounts, tokens, sessions and the admin audit
// log: ports.AccountStore and ports.AdminAudit.
type Accounts struct{ *handle }

// Notifications returns the notifications and audit half of db.
func (db *DB) Notifications() *Notifications { return &Notifications{db.handle} }

// Directory returns the lists and channel settings of db.
func (db *DB) Directory() *Directory { return &Directory{db.handle} }

// Accounts returns the operator accounts of db.
func (db *DB) Accounts() *Accounts { return &Accounts{db.handle} }

// handle is what the views of one DB share.
type handle struct {
	driver string
	d      dialect
	// r serves reads. w serves writes; on SQLite it is a separate pool of
	// one connection (SQLite has a single writer, and queueing writers in
	// Go is cheaper than letting them spin on the file lock), while r has
	// several connections that WAL lets read during a write. On PostgreSQL
	// and MS SQL both are the same pool. bun's queries run on them; the
	// hand-written batch statements of PostgreSQL and SQLite run on their
	// database/sql pools (r.DB, w.DB) or a transaction of w.DB, past bun's
	// formatter (see conn).
	r, w *bun.DB
	// pgPrepare has pgx prepare and cache PostgreSQL's batch statements
	// (off when the DSN chose its own exec mode, e.g. for a pooler that
	// cannot keep prepared statements).
	pgPrepare bool
	// group, ckpt and subjects serve SQLite only (see sqlite.go); nil
	// elsewhere.
	group    *groupWriter
	subjects *subjectIndexer
	// insertStmts are SQLite's prepared inserts by row count
	// (sqliteDialect.insert).
	stmtMu      sync.Mutex
	insertStmts map[int]*sql.Stmt
	ckpt        *checkpointer
	analyze     *analyzer // PostgreSQL only; nil elsewhere
	pgCopy      pgCopier  // PostgreSQL's COPY into notifications (pgcopy.go)
	dir         dirCache  // the directory's recent answers (dircache.go)
	// The most keyword candidates read by rowid (SQLite; see subjectRowids):
	// subjectQueryCap and subjectCountCap, other values in tests.
	subjectQueryCap, subjectCountCap int
	logger                           *slog.Logger
	secrets                          []string
}

// Open opens the database of cfg and pings it. It does not migrate; call
// Migrate. A nil logger discards. Errors never carry the DSN's password.
func Open(ctx context.Context, cfg Config, logger *slog.Logger) (*DB, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sqlstore config: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	d, err := dialectFor(cfg.Driver)
	if err != nil {
		return nil, err
	}
	s := &handle{driver: cfg.Driver, d: d, subjectQueryCap: subjectQueryCap, subjectCountCap: subjectCountCap,
		logger: logger, secrets: dsnSecrets(cfg.DSN)}
	if err := d.open(s, cfg); err != nil {
		return nil, s.redact(fmt.Errorf("sqlstore: open %s %s: %w", cfg.Driver, redactDSN(cfg.DSN), err))
	}
	if err := s.ping(ctx); err != nil {
		_ = s.close()
		return nil, s.redact(fmt.Errorf("sqlstore: ping %s %s: %w", cfg.Driver, redactDSN(cfg.DSN), err))
	}
	logger.Info("sqlstore: opened", "driver", cfg.Driver, "dsn", redactDSN(cfg.DSN))
	return &DB{s}, nil
}

// useServerPool sizes the one pool of a database server (PostgreSQL, MS SQL)
// and serves both reads and writes from it.
func (s *handle) useServerPool(db *sql.DB, cfg Config) {
	conns := cfg.MaxOpenConns
	if conns == 0 {
		conns = max(8, 4*runtime.GOMAXPROCS(0))
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	s.use(db, db)
}

// use makes w the writer pool and r the reader pool (the same pool but on
// SQLite), each one bun.DB.
func (s *handle) use(w, r *sql.DB) {
	s.w = bun.NewDB(w, s.d.newBun())
	s.r = s.w
	if r != w {
		s.r = bun.NewDB(r, s.d.newBun())
	}
}

// startSubjectIndexer starts SQLite's background indexing of subjects.
func (s *handle) startSubjectIndexer() {
	s.subjects = newSubjectIndexer(s.indexSubjects, func(err error) {
		s.logger.Warn("sqlstore: background indexing of subjects failed", "err", s.redact(err))
	})
}

// indexSubjects adds the rows above the mark of SQLite's trigram index of
// subjects to it and moves the mark to the last row, in one group
// transaction (see subjectIndexer).
func (s *handle) indexSubjects(ctx context.Context) error {
	err := s.group.do(ctx, func(ctx context.Context, c conn) error {
		if _, err := c.ExecContext(ctx, sqliteSubjectIndexTail); err != nil {
			return err
		}
		_, err := c.ExecContext(ctx, sqliteSubjectIndexMark)
		return err
	})
	if err != nil {
		return s.fail("index subjects", err)
	}
	return nil
}

// Ping checks that the database answers (central's readiness check).
func (s *DB) Ping(ctx context.Context) error { return s.ping(ctx) }

func (s *handle) ping(ctx context.Context) error {
	if err := s.w.PingContext(ctx); err != nil {
		return err
	}
	if s.r != s.w {
		return s.r.PingContext(ctx)
	}
	return nil
}

// Close stops the background work and closes the connection pools.
func (s *DB) Close() error { return s.close() }

func (s *handle) close() error {
	var errs []error
	if s.subjects != nil {
		s.subjects.close() // before the group writer, which it writes through
	}
	if s.group != nil {
		s.group.close()
	}
	s.stmtMu.Lock()
	for _, st := range s.insertStmts {
		errs = append(errs, st.Close())
	}
	s.insertStmts = nil
	s.stmtMu.Unlock()
	if s.ckpt != nil {
		errs = append(errs, s.ckpt.close())
	}
	if s.analyze != nil {
		s.analyze.close()
	}
	if s.r != nil && s.r != s.w {
		errs = append(errs, s.r.Close())
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return s.redact(fmt.Errorf("sqlstore: close: %w", err))
	}
	return nil
}

// --- execution helpers -------------------------------------------------------

// conn is what a write runs on: a pool's *sql.DB or a transaction
// (*sql.Tx), never a *bun.DB, whose ExecContext and QueryContext would
// format (inline) the parameters of PostgreSQL's batch statements into
// their text. bun's queries take it with Conn.
type conn = bun.IConn

// reader and writer are the database/sql pools under r and w.
func (s *handle) reader() *sql.DB { return s.r.DB }
func (s *handle) writer() *sql.DB { return s.w.DB }

// fail wraps err with what failed, keeping the DSN's secrets out.
func (s *handle) fail(what string, err error) error {
	return s.redact(fmt.Errorf("sqlstore %s: %s: %w", s.driver, what, err))
}

// query is one statement ready to run: its text, and the parameters of a
// PostgreSQL batch statement (none elsewhere).
type query struct {
	text string
	args []any
}

// queryIDs runs q and collects the single text column it returns.
func queryIDs(ctx context.Context, c conn, q query, into []string) ([]string, error) {
	rows, err := c.QueryContext(ctx, q.text, q.args...)
	if err != nil {
		return into, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return into, err
		}
		into = append(into, id)
	}
	return into, rows.Err()
}

// exec runs q for its effect.
func exec(ctx context.Context, c conn, q query) error {
	_, err := c.ExecContext(ctx, q.text, q.args...)
	return err
}

// inTx runs fn in one write transaction (BEGIN IMMEDIATE on SQLite).
func (s *handle) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.writer().BeginTx(ctx, nil)
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

// write runs fn, all or nothing, with the context and connection fn must
// use: on SQLite in a group transaction shared with concurrent writers; on
// the other databases in a transaction of its own when multi says fn issues
// several statements, else on the pool (one statement is atomic).
func (s *handle) write(ctx context.Context, multi bool, fn func(ctx context.Context, c conn) error) error {
	switch {
	case s.group != nil:
		return s.group.do(ctx, fn)
	case multi:
		return s.inTx(ctx, func(tx *sql.Tx) error { return fn(ctx, tx) })
	}
	return fn(ctx, s.writer())
}

// writeIDs runs qs, all or nothing (see write), and collects the ids they
// return.
func (s *handle) writeIDs(ctx context.Context, qs []query, sizeHint int) ([]string, error) {
	var ids []string
	err := s.write(ctx, len(qs) > 1, func(ctx context.Context, c conn) (err error) {
		ids = make([]string, 0, sizeHint) // afresh: a group writer may run this twice
		for _, q := range qs {
			if ids, err = queryIDs(ctx, c, q, ids); err != nil {
				return err
			}
		}
		return nil
	})
	return ids, err
}

// build builds one statement per piece of up to size elements of v, before
// any runs (on SQLite, outside the single writer's time).
func build[T any](v []T, size int, stmt func([]T) (query, error)) ([]query, error) {
	qs := make([]query, 0, (len(v)+size-1)/size)
	err := chunks(v, size, func(part []T) error {
		q, err := stmt(part)
		qs = append(qs, q)
		return err
	})
	return qs, err
}

// chunks calls fn with consecutive pieces of up to size elements of v.
func chunks[T any](v []T, size int, fn func([]T) error) error {
	for len(v) > 0 {
		n := min(size, len(v))
		if err := fn(v[:n]); err != nil {
			return err
		}
		v = v[n:]
	}
	return nil
}
