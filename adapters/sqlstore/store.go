// Package sqlstore implements the store ports over SQLite (modernc.org/sqlite,
// pure Go), PostgreSQL (pgx through database/sql) and MS SQL (go-mssqldb):
// Open returns a DB whose views are Notifications (ports.Store and
// ports.AuditLog), Directory (ports.DirectoryAdmin) and Accounts
// (ports.AccountStore and ports.AdminAudit).
//
// sqlgen.go builds every statement, one generator per dialect, without
// touching a connection: values are inlined as literals quoted by the bun
// dialect, except in PostgreSQL's batch statements, which pass one array
// parameter per column. store.go opens the pools and executes the
// statements. Each database claims rows with its own mechanism: FOR UPDATE
// SKIP LOCKED on PostgreSQL, READPAST/UPDLOCK/ROWLOCK hints on MS SQL, and
// the single writer connection on SQLite. The schema is in the migrations
// package, applied by DB.Migrate. DESIGN.md explains the choices.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

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

// Validate reports the first rule c breaks, wrapping ports.ErrInvalid.
func (c Config) Validate() error {
	switch c.Driver {
	case DriverSQLite, DriverPostgres, DriverMSSQL:
	default:
		return fmt.Errorf("sqlstore config: unknown driver %q (valid: %q, %q, %q): %w",
			c.Driver, DriverSQLite, DriverPostgres, DriverMSSQL, ports.ErrInvalid)
	}
	if strings.TrimSpace(c.DSN) == "" {
		return fmt.Errorf("sqlstore config: empty DSN for driver %q: %w", c.Driver, ports.ErrInvalid)
	}
	if c.MaxOpenConns < 0 {
		return fmt.Errorf("sqlstore config: MaxOpenConns %d is negative (0 picks a default): %w",
			c.MaxOpenConns, ports.ErrInvalid)
	}
	return nil
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
	g      *sqlgen
	// rdb serves reads. wdb serves writes; on SQLite it is a separate pool
	// of one connection (SQLite has a single writer, and queueing writers in
	// Go is cheaper than letting them spin on the file lock), while rdb has
	// several connections that WAL lets read during a write. On PostgreSQL
	// and MS SQL both are the same pool. Statements run on them through
	// database/sql directly: bun.DB would format (inline) the parameters of
	// PostgreSQL's batch statements, and the bun dialect already formatted
	// every other value (see sqlgen.go).
	rdb, wdb *sql.DB
	// group, ckpt and subjects serve SQLite only (see sqlite.go); nil
	// elsewhere.
	group    *groupWriter
	subjects *subjectIndexer
	// insertStmts are SQLite's prepared inserts by row count (insertSQLite).
	stmtMu      sync.Mutex
	insertStmts map[int]*sql.Stmt
	ckpt        *checkpointer
	analyze     *analyzer // PostgreSQL only; nil elsewhere
	// The most keyword candidates read by rowid (SQLite; see subjectRowids):
	// subjectQueryCap and subjectCountCap, other values in tests.
	subjectQueryCap, subjectCountCap int
	logger                           *slog.Logger
	secrets                          []string
}

var (
	_ ports.Store    = (*Notifications)(nil)
	_ ports.AuditLog = (*Notifications)(nil)
)

// Open opens the database of cfg and pings it. It does not migrate; call
// Migrate. A nil logger discards. Errors never carry the DSN's password.
func Open(ctx context.Context, cfg Config, logger *slog.Logger) (*DB, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	g, err := newSQLGen(cfg.Driver)
	if err != nil {
		return nil, err
	}
	s := &handle{driver: cfg.Driver, g: g, subjectQueryCap: subjectQueryCap, subjectCountCap: subjectCountCap,
		logger: logger, secrets: dsnSecrets(cfg.DSN)}
	if err := s.open(cfg); err != nil {
		return nil, s.redact(fmt.Errorf("sqlstore: open %s %s: %w", cfg.Driver, redactDSN(cfg.DSN), err))
	}
	if err := s.ping(ctx); err != nil {
		_ = s.close()
		return nil, s.redact(fmt.Errorf("sqlstore: ping %s %s: %w", cfg.Driver, redactDSN(cfg.DSN), err))
	}
	logger.Info("sqlstore: opened", "driver", cfg.Driver, "dsn", redactDSN(cfg.DSN))
	return &DB{s}, nil
}

func (s *handle) open(cfg Config) error {
	switch cfg.Driver {
	case DriverSQLite:
		readers := cfg.MaxOpenConns
		if readers == 0 {
			readers = max(4, runtime.GOMAXPROCS(0))
		}
		if sqliteInMemory(cfg.DSN) {
			// Every connection to :memory: is a database of its own: one pool,
			// one connection.
			db, err := sql.Open("sqlite", sqliteDSN(cfg.DSN, sqliteWriter))
			if err != nil {
				return err
			}
			db.SetMaxOpenConns(1)
			s.wdb = db
			s.rdb = s.wdb
			s.group = newGroupWriter(s.wdb)
			s.startSubjectIndexer()
			return nil
		}
		w, err := sql.Open("sqlite", sqliteDSN(cfg.DSN, sqliteWriter))
		if err != nil {
			return err
		}
		w.SetMaxOpenConns(1)
		w.SetMaxIdleConns(1)
		w.SetConnMaxLifetime(0)
		w.SetConnMaxIdleTime(0)
		r, err := sql.Open("sqlite", sqliteDSN(cfg.DSN, sqliteReader))
		if err != nil {
			_ = w.Close()
			return err
		}
		r.SetMaxOpenConns(readers)
		r.SetMaxIdleConns(readers)
		c, err := sql.Open("sqlite", sqliteDSN(cfg.DSN, sqliteCheckpointer))
		if err != nil {
			_ = w.Close()
			_ = r.Close()
			return err
		}
		c.SetMaxOpenConns(1)
		s.wdb = w
		s.rdb = r
		s.group = newGroupWriter(s.wdb)
		s.startSubjectIndexer()
		s.ckpt = newCheckpointer(c, func(err error) {
			s.logger.Warn("sqlstore: background WAL checkpoint failed", "err", s.redact(err))
		})
	case DriverPostgres:
		db, custom, err := openPostgres(cfg.DSN)
		if err != nil {
			return err
		}
		s.g.pgPrepare = !custom
		s.useServerPool(db, cfg)
		s.analyze = newAnalyzer(s.wdb, func(err error) {
			s.logger.Warn("sqlstore: background ANALYZE failed", "err", s.redact(err))
		})
	case DriverMSSQL:
		db, err := sql.Open("sqlserver", cfg.DSN)
		if err != nil {
			return err
		}
		s.useServerPool(db, cfg)
	}
	return nil
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
	s.wdb = db
	s.rdb = db
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
	if err := s.wdb.PingContext(ctx); err != nil {
		return err
	}
	if s.rdb != s.wdb {
		return s.rdb.PingContext(ctx)
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
	if s.rdb != nil && s.rdb != s.wdb {
		errs = append(errs, s.rdb.Close())
	}
	if s.wdb != nil {
		errs = append(errs, s.wdb.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return s.redact(fmt.Errorf("sqlstore: close: %w", err))
	}
	return nil
}

// --- execution helpers -------------------------------------------------------

// conn is what statements run on: a pool (*sql.DB) or a transaction
// (*sql.Tx). Statements run through database/sql directly, not through
// bun.DB, which would inline (format) the parameters of PostgreSQL's batch
// statements into their text.
type conn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func (s *handle) reader() *sql.DB { return s.rdb }
func (s *handle) writer() *sql.DB { return s.wdb }

// fail wraps err with what failed, keeping the DSN's secrets out.
func (s *handle) fail(what string, err error) error {
	return s.redact(fmt.Errorf("sqlstore %s: %s: %w", s.driver, what, err))
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

// queryNotifications runs q and scans the notification rows it returns.
func queryNotifications(ctx context.Context, c conn, q query, sizeHint int) ([]ports.Notification, error) {
	rows, err := c.QueryContext(ctx, q.text, q.args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ns := make([]ports.Notification, 0, sizeHint)
	var sc notificationScanner
	for rows.Next() {
		n, err := sc.scan(rows)
		if err != nil {
			return nil, err
		}
		ns = append(ns, n)
	}
	return ns, rows.Err()
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

// idChunk bounds the ids of one IN list.
const idChunk = 1000

// --- ports.Store --------------------------------------------------------------

// Insert implements ports.Store: insert-if-not-exists of each notification,
// all or nothing, returning the ids it inserted.
func (s *Notifications) Insert(ctx context.Context, ns []ports.Notification) ([]string, error) {
	if len(ns) == 0 {
		return nil, nil
	}
	seen := make(map[string]struct{}, len(ns))
	batch := make([]ports.Notification, 0, len(ns))
	for i := range ns {
		n := &ns[i]
		if err := checkNotification(s.g, n); err != nil {
			return nil, err
		}
		if _, dup := seen[n.ID]; dup {
			continue
		}
		seen[n.ID] = struct{}{}
		batch = append(batch, *n)
	}
	if s.g.kind == kindSQLite {
		inserted, err := s.insertSQLite(ctx, batch)
		if len(inserted) > 0 {
			s.subjects.inserted()
		}
		return inserted, err
	}
	qs, err := build(batch, insertChunk, s.g.insert)
	if err != nil {
		return nil, err
	}
	inserted, err := s.writeIDs(ctx, qs, len(batch))
	if err != nil {
		return nil, s.fail(fmt.Sprintf("insert %d notifications", len(batch)), err)
	}
	if s.analyze != nil {
		s.analyze.inserted(len(inserted))
	}
	return inserted, nil
}

// sqliteInsertSizes are the row counts of SQLite's prepared inserts: a batch
// is cut into pieces of these sizes (100 = 64 + 32 + 4).
var sqliteInsertSizes = []int{128, 64, 32, 16, 8, 4, 2, 1}

// insertSQLite inserts batch through statements prepared once per size on
// the single writer connection. SQLite's one writer then never parses a
// statement of hundreds of literals: that parsing cost it about a third of
// an insert.
func (s *handle) insertSQLite(ctx context.Context, batch []ports.Notification) ([]string, error) {
	args := make([]any, 0, len(batch)*len(notificationColumns))
	for i := range batch {
		var err error
		if args, err = s.g.appendSQLiteArgs(args, &batch[i]); err != nil {
			return nil, err
		}
	}
	type piece struct {
		st   *sql.Stmt
		args []any
	}
	var pieces []piece
	for rest, off := len(batch), 0; rest > 0; {
		for _, k := range sqliteInsertSizes {
			if k > rest {
				continue
			}
			st, err := s.sqliteInsertStmt(ctx, k)
			if err != nil {
				return nil, s.fail(fmt.Sprintf("insert %d notifications: prepare", len(batch)), err)
			}
			n := len(notificationColumns)
			pieces = append(pieces, piece{st, args[off*n : (off+k)*n]})
			off, rest = off+k, rest-k
			break
		}
	}
	var inserted []string
	err := s.write(ctx, len(pieces) > 1, func(ctx context.Context, c conn) error {
		inserted = make([]string, 0, len(batch))
		tx, _ := c.(*sql.Tx)
		for _, p := range pieces {
			st := p.st
			if tx != nil {
				st = tx.StmtContext(ctx, p.st) // prepared on the one writer connection: reused
			}
			rows, err := st.QueryContext(ctx, p.args...)
			if err != nil {
				return err
			}
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				inserted = append(inserted, id)
			}
			if err := errors.Join(rows.Err(), rows.Close()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, s.fail(fmt.Sprintf("insert %d notifications", len(batch)), err)
	}
	return inserted, nil
}

// sqliteInsertStmt returns the prepared insert of k rows, preparing it on the
// writer pool at first use (outside any transaction: it waits for the
// writer connection to be free, once per size).
func (s *handle) sqliteInsertStmt(ctx context.Context, k int) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if st, ok := s.insertStmts[k]; ok {
		return st, nil
	}
	st, err := s.writer().PrepareContext(ctx, sqliteInsertText(k))
	if err != nil {
		return nil, err
	}
	if s.insertStmts == nil {
		s.insertStmts = make(map[int]*sql.Stmt)
	}
	s.insertStmts[k] = st
	return st, nil
}

func checkNotification(g *sqlgen, n *ports.Notification) error {
	switch {
	case n.ID == "":
		return fmt.Errorf("sqlstore: insert: notification without an id: %w", ports.ErrInvalid)
	case !g.validID(n.ID):
		return fmt.Errorf("sqlstore: insert: id %.40q is not a UUID: %w", n.ID, ports.ErrInvalid)
	case !n.Status.Valid():
		return fmt.Errorf("sqlstore: insert %s: status %q is not a central status: %w", n.ID, n.Status, ports.ErrInvalid)
	case n.CreatedAt.IsZero():
		return fmt.Errorf("sqlstore: insert %s: CreatedAt is unset: %w", n.ID, ports.ErrInvalid)
	case len(n.TypeData) > 0 && !json.Valid(n.TypeData):
		return fmt.Errorf("sqlstore: insert %s: TypeData is not valid JSON: %w", n.ID, ports.ErrInvalid)
	}
	return nil
}

// Claim implements ports.Store.
func (s *Notifications) Claim(ctx context.Context, req ports.ClaimRequest) ([]ports.Notification, error) {
	switch {
	case req.Limit <= 0:
		return nil, fmt.Errorf("sqlstore: claim: Limit %d must be positive: %w", req.Limit, ports.ErrInvalid)
	case req.Owner == "":
		return nil, fmt.Errorf("sqlstore: claim: empty Owner: %w", ports.ErrInvalid)
	case req.Lease <= 0:
		return nil, fmt.Errorf("sqlstore: claim: Lease %s must be positive: %w", req.Lease, ports.ErrInvalid)
	case req.Now.IsZero():
		return nil, fmt.Errorf("sqlstore: claim: Now is unset: %w", ports.ErrInvalid)
	}
	q, err := s.g.claim(req)
	if err != nil {
		return nil, err
	}
	ns, err := queryNotifications(ctx, s.writer(), q, req.Limit)
	if err != nil {
		return nil, s.fail(fmt.Sprintf("claim %d for %s", req.Limit, req.Owner), err)
	}
	slices.SortFunc(ns, claimOrder)
	return ns, nil
}

// claimOrder orders by Priority descending, then CreatedAt, then ID.
func claimOrder(a, b ports.Notification) int {
	switch {
	case a.Priority != b.Priority:
		if a.Priority > b.Priority {
			return -1
		}
		return 1
	case !a.CreatedAt.Equal(b.CreatedAt):
		return a.CreatedAt.Compare(b.CreatedAt)
	}
	return strings.Compare(a.ID, b.ID)
}

// recordChunk is the number of updates one Record statement carries.
const recordChunk = 500

// Record implements ports.Store: one statement (one transaction beyond
// recordChunk updates) writes every update whose row owner still holds.
func (s *Notifications) Record(ctx context.Context, owner string, updates []ports.Update) ([]string, error) {
	if len(updates) == 0 {
		return nil, nil
	}
	if owner == "" {
		return nil, fmt.Errorf("sqlstore: record: empty owner: %w", ports.ErrInvalid)
	}
	// The last update of an id wins. An id that cannot name a row (see
	// validID) names no row owner holds: it is lost without a statement.
	last := make(map[string]int, len(updates))
	invalid := false
	for i := range updates {
		u := &updates[i]
		if u.ID == "" {
			return nil, fmt.Errorf("sqlstore: record: update without an id: %w", ports.ErrInvalid)
		}
		if !u.Status.Valid() {
			return nil, fmt.Errorf("sqlstore: record %s: status %q is not a central status: %w", u.ID, u.Status, ports.ErrInvalid)
		}
		last[u.ID] = i
		invalid = invalid || !s.g.validID(u.ID)
	}
	var lost []string
	batch := updates
	if len(last) != len(updates) || invalid {
		batch = make([]ports.Update, 0, len(last))
		for i := range updates {
			switch id := updates[i].ID; {
			case last[id] != i:
			case !s.g.validID(id):
				lost = append(lost, id)
			default:
				batch = append(batch, updates[i])
			}
		}
	}
	if len(batch) == 0 {
		return lost, nil
	}
	qs, err := build(batch, recordChunk, func(part []ports.Update) (query, error) { return s.g.record(owner, part) })
	if err != nil {
		return nil, err
	}
	applied, err := s.writeIDs(ctx, qs, len(batch))
	if err != nil {
		return nil, s.fail(fmt.Sprintf("record %d updates for %s", len(batch), owner), err)
	}
	if len(applied) == len(batch) {
		return lost, nil
	}
	// PostgreSQL returns uuids in lower case; compare ids without case.
	done := make(map[string]struct{}, len(applied))
	for _, id := range applied {
		done[strings.ToLower(id)] = struct{}{}
	}
	for i := range batch {
		if _, ok := done[strings.ToLower(batch[i].ID)]; !ok {
			lost = append(lost, batch[i].ID)
		}
	}
	return lost, nil
}

// Release implements ports.Store.
func (s *Notifications) Release(ctx context.Context, owner string, ids []string) error {
	ids = s.g.validIDs(ids)
	err := chunks(ids, idChunk, func(part []string) error {
		q, err := s.g.release(owner, part)
		if err != nil {
			return err
		}
		return exec(ctx, s.writer(), q)
	})
	if err != nil {
		return s.fail(fmt.Sprintf("release %d rows of %s", len(ids), owner), err)
	}
	return nil
}

// ReleaseNode implements ports.Store: one statement.
func (s *Notifications) ReleaseNode(ctx context.Context, node, keep string) (int, error) {
	if node == "" || strings.Contains(node, "/") {
		return 0, fmt.Errorf("sqlstore: release the leases of node %q: a node id is not empty and holds no '/': %w", node, ports.ErrInvalid)
	}
	q, err := s.g.releaseNode(node, keep)
	if err != nil {
		return 0, err
	}
	res, err := s.writer().ExecContext(ctx, q.text, q.args...)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		return 0, s.fail(fmt.Sprintf("release the leases of node %q", node), err)
	}
	return int(n), nil
}

// Get implements ports.Store.
func (s *Notifications) Get(ctx context.Context, id string) (ports.Notification, error) {
	q, err := s.g.get(id)
	if err != nil || !s.g.validID(id) {
		return ports.Notification{}, fmt.Errorf("sqlstore: get %.40q: %w", id, ports.ErrNotFound)
	}
	ns, err := queryNotifications(ctx, s.reader(), q, 1)
	if err != nil {
		return ports.Notification{}, s.fail("get "+id, err)
	}
	if len(ns) == 0 {
		return ports.Notification{}, fmt.Errorf("sqlstore: notification %s: %w", id, ports.ErrNotFound)
	}
	return ns[0], nil
}

// Statuses implements ports.Store.
func (s *Notifications) Statuses(ctx context.Context, site string, ids []string) (map[string]ports.Status, error) {
	out := make(map[string]ports.Status, len(ids))
	ids = s.g.validIDs(ids)
	err := chunks(ids, idChunk, func(part []string) error {
		q, err := s.g.statuses(site, part)
		if err != nil {
			return err
		}
		rows, err := s.reader().QueryContext(ctx, q.text, q.args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, st string
			if err := rows.Scan(&id, &st); err != nil {
				return err
			}
			out[id] = ports.Status(st)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, s.fail(fmt.Sprintf("statuses of %d ids", len(ids)), err)
	}
	return out, nil
}

// Query implements ports.Store.
func (s *Notifications) Query(ctx context.Context, f ports.Filter, page ports.PageRequest) (ports.Page, error) {
	if page.Limit <= 0 {
		return ports.Page{}, fmt.Errorf("sqlstore: query: page Limit %d must be positive: %w", page.Limit, ports.ErrInvalid)
	}
	var after *cursor
	if page.After != "" {
		c, err := decodeCursor(page.After)
		if err != nil {
			return ports.Page{}, err
		}
		if !s.g.validID(c.id) {
			return ports.Page{}, fmt.Errorf("sqlstore: page cursor %.40q names no row: %w", page.After, ports.ErrInvalid)
		}
		after = &c
	}
	c, err := s.subjectRowids(ctx, f.Subject)
	if err != nil {
		return ports.Page{}, err
	}
	if c != nil && len(c.rowids) == 0 {
		return ports.Page{Items: []ports.Notification{}}, nil // no subject holds the keyword
	}
	q, err := s.g.query(f, after, page.Limit+1, c)
	if err != nil {
		return ports.Page{}, err
	}
	ns, err := queryNotifications(ctx, s.reader(), q, page.Limit+1)
	if err != nil {
		return ports.Page{}, s.fail("query", err)
	}
	var p ports.Page
	if len(ns) > page.Limit {
		ns = ns[:page.Limit]
		lastRow := ns[len(ns)-1]
		p.Next = encodeCursor(cursor{createdAt: lastRow.CreatedAt, id: lastRow.ID})
	}
	p.Items = ns
	return p, nil
}

// Count implements ports.Store.
func (s *Notifications) Count(ctx context.Context, f ports.Filter) (int64, error) {
	c, found, err := s.subjectCount(ctx, f.Subject)
	if err != nil {
		return 0, err
	}
	if c != nil && found == 0 {
		return 0, nil // no subject holds the keyword
	}
	q, err := s.g.count(f, c)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := s.reader().QueryRowContext(ctx, q.text, q.args...).Scan(&n); err != nil {
		return 0, s.fail("count", err)
	}
	return n, nil
}

// The most keyword candidates that Query and Count read by rowid on SQLite
// (see subjectRowids); beyond them they scan. Reading a candidate costs
// about 4 µs at 1,000,000 rows, and a keyword with n matches fills a
// newest-first page of 50 after reading about 50/n of the table (the whole
// of it: 0.4 s): past 2,000 matches the scan is as fast. A count reads
// every matching row either way, so its candidates pay up to a tenth of the
// table.
const (
	subjectQueryCap = 2_000
	subjectCountCap = 100_000
)

// subjectRowids returns the candidates of a list filtered by keyword, on
// SQLite: the rowids of the rows whose subject may contain keyword, found
// through the trigram index of migration 0004, and of the rows not yet
// indexed whose subject does (see subjectIndexer). They are a superset of
// the matching rows, which the list filters with the same LIKE as without
// them.
// It returns nil, and the list scans as before, when the index cannot
// answer (not SQLite; no keyword, or one shorter than three characters or
// not valid UTF-8: see subjectMatch) or
// when more than the store's cap may match: a common keyword fills a
// newest-first page sooner than its candidates are read and sorted. No
// candidate at all means that no row matches.
func (s *handle) subjectRowids(ctx context.Context, keyword string) (*candidates, error) {
	match, ok := s.subjectIndexed(keyword)
	if !ok {
		return nil, nil
	}
	q, err := s.g.subjectCandidates(keyword, match, s.subjectQueryCap+1)
	if err != nil {
		return nil, err
	}
	rows, err := s.reader().QueryContext(ctx, q.text, q.args...)
	if err != nil {
		return nil, s.fail("keyword candidates", err)
	}
	defer rows.Close()
	ids := make([]int64, 0, 64)
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, s.fail("keyword candidates", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("keyword candidates", err)
	}
	if len(ids) > s.subjectQueryCap {
		return nil, nil
	}
	return &candidates{rowids: ids}, nil
}

// subjectCount is subjectRowids for a count: it counts the candidates (up
// to the store's count cap) and returns, when they are within it, the index
// query that finds them again in the count, and their number.
func (s *handle) subjectCount(ctx context.Context, keyword string) (*candidates, int64, error) {
	match, ok := s.subjectIndexed(keyword)
	if !ok {
		return nil, 0, nil
	}
	q, err := s.g.subjectCandidateCount(keyword, match, s.subjectCountCap+1)
	if err != nil {
		return nil, 0, err
	}
	var n int64
	if err := s.reader().QueryRowContext(ctx, q.text, q.args...).Scan(&n); err != nil {
		return nil, 0, s.fail("count keyword candidates", err)
	}
	if n > int64(s.subjectCountCap) {
		return nil, 0, nil
	}
	return &candidates{match: match}, n, nil
}

// subjectIndexed returns the trigram index query of keyword, and whether the
// store may use it: on SQLite, for a keyword of three characters or more.
func (s *handle) subjectIndexed(keyword string) (string, bool) {
	if s.g.kind != kindSQLite || keyword == "" {
		return "", false
	}
	return subjectMatch(keyword)
}

// KPIs implements ports.Store.
func (s *Notifications) KPIs(ctx context.Context, req ports.KPIRequest) (ports.KPIs, error) {
	q, err := s.g.kpis(req)
	if err != nil {
		return ports.KPIs{}, err
	}
	rows, err := s.reader().QueryContext(ctx, q.text, q.args...)
	if err != nil {
		return ports.KPIs{}, s.fail("kpis", err)
	}
	defer rows.Close()
	sites := map[string]*ports.KPICounts{}
	var out ports.KPIs
	for rows.Next() {
		var (
			kind         int
			site, status string
			n, stuck     int64
			oldest       dbTime
		)
		if err := rows.Scan(&kind, &site, &status, &n, &stuck, &oldest); err != nil {
			return ports.KPIs{}, s.fail("kpis: scan", err)
		}
		siteCounts := sites[site]
		if siteCounts == nil {
			siteCounts = &ports.KPICounts{}
			sites[site] = siteCounts
		}
		for _, c := range []*ports.KPICounts{&out.Global, siteCounts} {
			if kind == 1 {
				c.Delivered += n
				continue
			}
			switch ports.Status(status) {
			case ports.StatusParked:
				c.Parked += n
			case ports.StatusPending, ports.StatusRetrying:
				c.QueueDepth += n
				c.Stuck += stuck
				if t := oldest.t; !t.IsZero() && (c.OldestPendingAt.IsZero() || t.Before(c.OldestPendingAt)) {
					c.OldestPendingAt = t
				}
			}
		}
	}
	if err := rows.Err(); err != nil {
		return ports.KPIs{}, s.fail("kpis", err)
	}
	out.Sites = make([]ports.SiteKPICounts, 0, len(sites))
	for site, c := range sites {
		out.Sites = append(out.Sites, ports.SiteKPICounts{Site: site, KPICounts: *c})
	}
	slices.SortFunc(out.Sites, func(a, b ports.SiteKPICounts) int { return strings.Compare(a.Site, b.Site) })
	return out, nil
}

// Transition implements ports.Store.
func (s *Notifications) Transition(ctx context.Context, req ports.TransitionRequest) ([]string, error) {
	if !req.From.Valid() || !req.To.Valid() {
		return nil, fmt.Errorf("sqlstore: transition %q to %q: not central statuses: %w", req.From, req.To, ports.ErrInvalid)
	}
	if req.Now.IsZero() {
		return nil, fmt.Errorf("sqlstore: transition: Now is unset: %w", ports.ErrInvalid)
	}
	if len(req.Selection.IDs) > 0 {
		req.Selection.IDs = s.g.validIDs(req.Selection.IDs)
		if len(req.Selection.IDs) == 0 {
			return nil, nil // no row has those ids
		}
	}
	var moved []string
	var err error
	if ids := req.Selection.IDs; len(ids) > idChunk {
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			return chunks(ids, idChunk, func(part []string) error {
				r := req
				r.Selection = ports.Selection{IDs: part}
				q, err := s.g.transition(r)
				if err != nil {
					return err
				}
				moved, err = queryIDs(ctx, tx, q, moved)
				return err
			})
		})
	} else {
		var q query
		if q, err = s.g.transition(req); err != nil {
			return nil, err
		}
		moved, err = queryIDs(ctx, s.writer(), q, nil)
	}
	if err != nil {
		return nil, s.fail(fmt.Sprintf("transition %s to %s", req.From, req.To), err)
	}
	return moved, nil
}

// Purge implements ports.Store.
func (s *Notifications) Purge(ctx context.Context, cutoff time.Time, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("sqlstore: purge: limit %d must be positive: %w", limit, ports.ErrInvalid)
	}
	q, err := s.g.purge(cutoff, limit)
	if err != nil {
		return nil, err
	}
	deleted, err := queryIDs(ctx, s.writer(), q, nil)
	if err != nil {
		return nil, s.fail("purge", err)
	}
	return deleted, nil
}

// --- ports.AuditLog -----------------------------------------------------------

// auditChunk is the number of records one INSERT carries.
const auditChunk = 1000

// Append implements ports.AuditLog: all records or none.
func (s *Notifications) Append(ctx context.Context, records []ports.AuditRecord) error {
	if len(records) == 0 {
		return nil
	}
	for i := range records {
		r := &records[i]
		if r.NotificationID == "" || r.Kind == "" || r.At.IsZero() {
			return fmt.Errorf("sqlstore: append audit: record %d lacks a notification id, kind or time: %w", i, ports.ErrInvalid)
		}
		if !s.g.validID(r.NotificationID) {
			return fmt.Errorf("sqlstore: append audit: notification id %.40q is not a UUID: %w", r.NotificationID, ports.ErrInvalid)
		}
	}
	qs, err := build(records, auditChunk, s.g.appendAudit)
	if err != nil {
		return err
	}
	err = s.write(ctx, len(qs) > 1, func(ctx context.Context, c conn) error {
		for _, q := range qs {
			if err := exec(ctx, c, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return s.fail(fmt.Sprintf("append %d audit records", len(records)), err)
	}
	return nil
}

// History implements ports.AuditLog.
func (s *Notifications) History(ctx context.Context, notificationID string) ([]ports.AuditRecord, error) {
	out := []ports.AuditRecord{}
	q, err := s.g.history(notificationID)
	if err != nil || !s.g.validID(notificationID) {
		return out, nil // no stored id is like that
	}
	rows, err := s.reader().QueryContext(ctx, q.text, q.args...)
	if err != nil {
		return nil, s.fail("history of "+notificationID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			r                             ports.AuditRecord
			at                            dbTime
			kind, outcome, status, errTxt string
			us                            int64
		)
		if err := rows.Scan(&r.NotificationID, &at, &kind, &r.Actor, &outcome, &status, &us, &errTxt); err != nil {
			return nil, s.fail("history of "+notificationID, err)
		}
		r.At = at.t
		r.Kind = ports.AuditKind(kind)
		r.Outcome = ports.Outcome(outcome)
		r.Status = ports.Status(status)
		r.Duration = time.Duration(us) * time.Microsecond
		r.Error = errTxt
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("history of "+notificationID, err)
	}
	return out, nil
}

// Forget implements ports.AuditLog.
func (s *Notifications) Forget(ctx context.Context, notificationIDs []string) error {
	notificationIDs = s.g.validIDs(notificationIDs)
	err := chunks(notificationIDs, idChunk, func(part []string) error {
		q, err := s.g.forget(part)
		if err != nil {
			return err
		}
		return exec(ctx, s.writer(), q)
	})
	if err != nil {
		return s.fail(fmt.Sprintf("forget %d notifications", len(notificationIDs)), err)
	}
	return nil
}
