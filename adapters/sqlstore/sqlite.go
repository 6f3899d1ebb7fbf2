package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"github.com/uptrace/bun/schema"

	"github.com/siteline/outbox/ports"
)

// SQLite has one writer at a time, and each commit appends every page it
// dirtied to the WAL. Two helpers make its writes cheaper:
//
//   - groupWriter runs the writes of concurrent callers (Insert, Record,
//     Append) in one transaction: pages they share (the table's tail, index
//     tails) are written once per commit instead of once per caller. Each
//     caller stays all or nothing (see run).
//   - checkpointer copies the WAL back into the database file from a
//     connection of its own, off the writer's path (an automatic checkpoint
//     would run inside a writer's commit).
//
// subjectIndexer keeps the trigram index of subjects (migration 0004;
// DESIGN.md, "Keyword search") close behind the table, off the inserts' path.

// groupRequest is one caller's share of a group transaction.
type groupRequest struct {
	ctx  context.Context
	fn   func(ctx context.Context, c conn) error
	err  error
	done chan struct{}
}

// groupWriter runs grouped writes on the writer pool from one goroutine.
type groupWriter struct {
	db       *sql.DB
	requests chan *groupRequest
	stop     context.CancelFunc
	ctx      context.Context
	wg       sync.WaitGroup
}

// maxGroup caps the callers one group transaction serves.
const maxGroup = 32

func newGroupWriter(db *sql.DB) *groupWriter {
	ctx, stop := context.WithCancel(context.Background())
	w := &groupWriter{db: db, requests: make(chan *groupRequest), stop: stop, ctx: ctx}
	w.wg.Go(w.loop)
	return w
}

// do runs fn in a group transaction and returns its error. fn's writes are
// committed exactly when do returns nil. fn may run more than once (see run):
// it must start its results afresh on each run. do waits for the group even when
// ctx ends meanwhile, so that the caller never misses an outcome; a request
// whose ctx has ended before its group starts is not run.
func (w *groupWriter) do(ctx context.Context, fn func(ctx context.Context, c conn) error) error {
	r := &groupRequest{ctx: ctx, fn: fn, done: make(chan struct{})}
	select {
	case w.requests <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-w.ctx.Done():
		return errors.New("store closed")
	}
	<-r.done
	return r.err
}

func (w *groupWriter) loop() {
	for {
		var group []*groupRequest
		select {
		case r := <-w.requests:
			group = append(group, r)
		case <-w.ctx.Done():
			return
		}
	more:
		for len(group) < maxGroup {
			select {
			case r := <-w.requests:
				group = append(group, r)
			default:
				break more
			}
		}
		w.run(group)
	}
}

// run executes group in one transaction. When a request fails, the
// transaction is rolled back and each request runs again alone, in a
// transaction of its own: a failure never touches another caller's writes,
// and no caller is told of a failure while its rows were committed (as
// could happen after an error that makes SQLite end the transaction
// itself, were the others to go on).
func (w *groupWriter) run(group []*groupRequest) {
	live := group[:0:0]
	for _, r := range group {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			close(r.done)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	defer func() {
		for _, r := range live {
			close(r.done)
		}
	}()
	if len(live) > 1 && w.together(live) == nil {
		return
	}
	for _, r := range live {
		r.err = w.together([]*groupRequest{r})
	}
}

// together runs the requests in one transaction and commits it when all
// succeed. It returns the first error, having rolled back.
func (w *groupWriter) together(rs []*groupRequest) error {
	// The transaction outlives any one caller's context; the store's
	// context ends it at Close.
	ctx := w.ctx
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	for _, r := range rs {
		if err := r.fn(ctx, tx); err != nil {
			return errors.Join(err, tx.Rollback())
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func (w *groupWriter) close() {
	w.stop()
	w.wg.Wait()
}

// checkpointer runs passive WAL checkpoints on a connection of its own.
type checkpointer struct {
	db   *sql.DB
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// checkpointEvery is the cadence of background checkpoints. The writer
// keeps an automatic checkpoint at a high mark as a backstop.
const checkpointEvery = 100 * time.Millisecond

func newCheckpointer(db *sql.DB, onError func(error)) *checkpointer {
	ctx, stop := context.WithCancel(context.Background())
	c := &checkpointer{db: db, stop: stop}
	c.wg.Go(func() {
		t := time.NewTicker(checkpointEvery)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			_, err := db.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)")
			if err != nil && ctx.Err() == nil && !failing {
				onError(err)
			}
			failing = err != nil
		}
	})
	return c
}

func (c *checkpointer) close() error {
	c.stop()
	c.wg.Wait()
	return c.db.Close()
}

// subjectIndexer indexes the subjects of newly inserted notifications in the
// background: once rows arrive, it waits subjectIndexEvery for more to join
// them and then indexes every row above the index's mark, in one group
// transaction (Store.indexSubjects). FTS5 pays for each statement that writes
// to it (it writes its pending terms out as a segment, and merges segments):
// indexing within each insert transaction cost ingest two to three times as
// much. Keyword searches read the rows above the mark themselves, so that
// the lag costs time only.
type subjectIndexer struct {
	kick chan struct{}
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// subjectIndexEvery is the most the index lags behind the table while rows
// arrive (at 50,000 rows a second, 12,500 rows for a keyword to read apart).
const subjectIndexEvery = 250 * time.Millisecond

// newSubjectIndexer starts the indexer; index indexes the rows above the
// mark. onError hears the first failure of a run of them.
func newSubjectIndexer(index func(ctx context.Context) error, onError func(error)) *subjectIndexer {
	ctx, stop := context.WithCancel(context.Background())
	x := &subjectIndexer{kick: make(chan struct{}, 1), stop: stop}
	x.wg.Go(func() {
		wait := time.NewTimer(subjectIndexEvery)
		defer wait.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-x.kick:
			}
			wait.Reset(subjectIndexEvery)
			select {
			case <-ctx.Done():
				return
			case <-wait.C:
			}
			err := index(ctx)
			if err != nil && ctx.Err() == nil && !failing {
				onError(err)
			}
			failing = err != nil
			if failing {
				x.inserted() // the rows are still waiting: try again
			}
		}
	})
	return x
}

// inserted tells the indexer that rows were inserted.
func (x *subjectIndexer) inserted() {
	select {
	case x.kick <- struct{}{}:
	default: // a run is due already
	}
}

func (x *subjectIndexer) close() {
	x.stop()
	x.wg.Wait()
}

// --- the SQLite dialect ------------------------------------------------------

// sqliteDialect is SQLite's part of the statements (see dialect).
type sqliteDialect struct{}

func (sqliteDialect) newBun() schema.Dialect { return sqlitedialect.New() }

// open: a writer pool of one connection (SQLite has one writer; queueing
// in Go beats spinning on the file lock) with its group writer, a reader
// pool, and a connection for the background WAL checkpoints; an in-memory
// database is one connection for everything.
func (sqliteDialect) open(h *handle, cfg Config) error {
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
		h.use(db, db)
		h.group = newGroupWriter(db)
		h.startSubjectIndexer()
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
	h.use(w, r)
	h.group = newGroupWriter(w)
	h.startSubjectIndexer()
	h.ckpt = newCheckpointer(c, func(err error) {
		h.logger.Warn("sqlstore: background WAL checkpoint failed", "err", h.redact(err))
	})
	return nil
}

func (sqliteDialect) writes() writeDialect { return conflictWrites{} }

// subjectIndex: the FTS5 trigram query of keyword (see subjectMatch).
func (sqliteDialect) subjectIndex(keyword string) (string, bool) {
	if keyword == "" {
		return "", false
	}
	return subjectMatch(keyword)
}
func (sqliteDialect) validID(string) bool { return true }

// appendTime writes integer Unix microseconds.
func (sqliteDialect) appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, "NULL"...)
	}
	return strconv.AppendInt(b, t.UnixMicro(), 10)
}

func (sqliteDialect) appendNullText(b []byte) []byte { return append(b, "NULL"...) }
func (sqliteDialect) countAll() string               { return "COUNT(*)" }

func (sqliteDialect) firstRows(q *bun.SelectQuery, n int64) *bun.SelectQuery {
	return q.ColumnExpr(`1 AS "one"`).Limit(n)
}

func (sqliteDialect) returned(col string) string { return `"` + col + `"` }

// from names the index: SQLite, which has no statistics, otherwise prefers
// an equality index on status and sorts (the claim), or reads the whole
// table through the site index to have its groups in order (the KPIs).
func (sqliteDialect) from(index string) schema.QueryAppender {
	return bun.Safe(`"notifications" INDEXED BY "` + index + `"`)
}

func (sqliteDialect) after(q *bun.SelectQuery, table string, c cursor, oldest bool) *bun.SelectQuery {
	return pgDialect{}.after(q, table, c, oldest) // the same row comparison
}

// keys: SQLite keeps every index on the notifications (an update enters
// only the indexes whose columns it changes).
func (sqliteDialect) keys(ports.Filter, filterRead) keysUse { return noKeys }

// subjectContains: SQLite's LIKE ignores the case of ASCII letters only.
func (sqliteDialect) subjectContains(q bun.QueryBuilder, keyword string, _ bool) bun.QueryBuilder {
	return q.Where(`"subject" LIKE ? ESCAPE '\'`, "%"+likeEscape(keyword)+"%")
}

// ownerHasPrefix compares the first bytes as a BLOB: SQLite's LIKE ignores
// the case of ASCII letters.
func (sqliteDialect) ownerHasPrefix(q *bun.UpdateQuery, prefix string) *bun.UpdateQuery {
	return q.Where(`substr(CAST("claimed_by" AS BLOB), 1, ?) = CAST(? AS BLOB)`, len(prefix), prefix)
}

func (sqliteDialect) purge(db *bun.DB, cutoff time.Time, limit int) idQuery {
	return purgeReturning(db, cutoff, limit)
}

// claim is UPDATE ... WHERE id IN (the first Limit of the parts' union)
// RETURNING, on the single writer connection, which serialises claims.
// Each part names its partial index.
func (d sqliteDialect) claim(db *bun.DB, req ports.ClaimRequest) *bun.RawQuery {
	var r rawSQL
	r.sql(`UPDATE "notifications" SET "claimed_by" = `).arg(req.Owner).
		sql(`, "claimed_until" = `).arg(at(req.Now.Add(req.Lease))).
		sql(` WHERE "id" IN (SELECT "id" FROM (`)
	for i, p := range claimParts {
		if i > 0 {
			r.sql(" UNION ALL ")
		}
		r.sql("SELECT * FROM (")
		claimSelect(&r, p, req.Now, req.Limit, false, ` INDEXED BY "`+p.index+`"`, "")
		r.sql(")")
	}
	r.sql(`) ORDER BY "priority" DESC, "created_at", "id" LIMIT `).arg(req.Limit).
		sql(`) RETURNING ` + quoted("", notificationColumns))
	return r.query(db)
}

// sqliteInsertSizes are the row counts of SQLite's prepared inserts: a batch
// is cut into pieces of these sizes (100 = 64 + 32 + 4).
var sqliteInsertSizes = []int{128, 64, 32, 16, 8, 4, 2, 1}

// sqliteInsertText is SQLite's insert-if-not-exists of rows rows with ?
// parameters (the driver's, not bun's: the statement is prepared once per
// size and bound; see sqliteDialect.insert).
func sqliteInsertText(rows int) string {
	row := "(?" + strings.Repeat(", ?", len(notificationColumns)-1) + ")"
	var b strings.Builder
	b.WriteString(`INSERT INTO "notifications" (` + quoted("", notificationColumns) + `) VALUES `)
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	b.WriteString(` ON CONFLICT ("id") DO NOTHING RETURNING "id"`)
	return b.String()
}

// appendSQLiteArgs appends the parameters of r for sqliteInsertText, one per
// column of the model in its order: instants as integer Unix microseconds,
// the empty text of a nullable column and the zero instant as NULL.
func appendSQLiteArgs(args []any, r *notificationRow) []any {
	v := reflect.ValueOf(r).Elem()
	for _, c := range notificationModel {
		f := v.Field(c.field)
		switch c.kind {
		case textColumn:
			args = append(args, f.String())
		case intColumn:
			args = append(args, f.Int())
		case nullTextColumn:
			if s := f.String(); s != "" {
				args = append(args, s)
			} else {
				args = append(args, nil)
			}
		case instantColumn:
			if t := f.Addr().Interface().(*instant).t; !t.IsZero() {
				args = append(args, t.UnixMicro())
			} else {
				args = append(args, nil)
			}
		}
	}
	return args
}

// insert inserts rows through statements prepared once per size on the
// single writer connection. SQLite's one writer then never parses a
// statement of hundreds of literals: that parsing cost it about a third of
// an insert.
func (sqliteDialect) insert(ctx context.Context, h *handle, rows []notificationRow) ([]string, error) {
	n := len(notificationColumns)
	args := make([]any, 0, len(rows)*n)
	for i := range rows {
		args = appendSQLiteArgs(args, &rows[i])
	}
	type piece struct {
		st   *sql.Stmt
		args []any
	}
	var pieces []piece
	for rest, off := len(rows), 0; rest > 0; {
		for _, k := range sqliteInsertSizes {
			if k > rest {
				continue
			}
			st, err := h.sqliteInsertStmt(ctx, k)
			if err != nil {
				return nil, fmt.Errorf("prepare: %w", err)
			}
			pieces = append(pieces, piece{st, args[off*n : (off+k)*n]})
			off, rest = off+k, rest-k
			break
		}
	}
	var inserted []string
	err := h.write(ctx, len(pieces) > 1, func(ctx context.Context, c conn) error {
		inserted = make([]string, 0, len(rows))
		tx, _ := c.(*sql.Tx)
		for _, p := range pieces {
			st := p.st
			if tx != nil {
				st = tx.StmtContext(ctx, p.st) // prepared on the one writer connection: reused
			}
			rs, err := st.QueryContext(ctx, p.args...)
			if err != nil {
				return err
			}
			for rs.Next() {
				var id string
				if err := rs.Scan(&id); err != nil {
					rs.Close()
					return err
				}
				inserted = append(inserted, id)
			}
			if err := errors.Join(rs.Err(), rs.Close()); err != nil {
				return err
			}
		}
		return nil
	})
	if len(inserted) > 0 {
		h.subjects.inserted()
	}
	return inserted, err
}

// recordQuery is UPDATE ... FROM a VALUES list joined on id, guarded by
// claimed_by = owner.
func (sqliteDialect) recordQuery(h *handle, owner string, rows []recordRow) (query, error) {
	var r rawSQL
	r.sql(`WITH v (` + quoted("", recordColumns) + `) AS (`).arg(h.w.NewValues(&rows)).
		sql(`) UPDATE "notifications" SET ` + recordSet + `, "claimed_by" = NULL, "claimed_until" = NULL FROM v WHERE "notifications"."id" = v."id" AND "notifications"."claimed_by" = `).
		arg(owner).sql(` RETURNING "id"`)
	return sqlText(h, r.query(h.w), 512+len(rows)*256)
}

func (sqliteDialect) appendQuery(h *handle, rows []auditRow) (query, error) {
	return insertAudit(h, rows)
}

// --- keyword search (SQLite) -------------------------------------------------

// SQLite finds the rows whose subject may hold a keyword through an FTS5
// trigram index of the subjects (migration 0004; DESIGN.md, "Keyword
// search"). The index holds the rows up to a mark (the one row of
// notifications_subject_state); the store's background indexer adds the rows
// above it, and keyword searches read those rows themselves.
const (
	// sqliteSubjectIndexTail indexes the subjects of the rows above the mark.
	sqliteSubjectIndexTail = `INSERT INTO "notifications_subject" (rowid, "subject") SELECT rowid, "subject" FROM "notifications" WHERE rowid > (SELECT "indexed" FROM "notifications_subject_state")`
	// sqliteSubjectIndexMark moves the mark to the last row.
	sqliteSubjectIndexMark = `UPDATE "notifications_subject_state" SET "indexed" = (SELECT coalesce(max(rowid), 0) FROM "notifications") WHERE "indexed" <> (SELECT coalesce(max(rowid), 0) FROM "notifications")`
	// sqliteSubjectTail selects the rows above the mark.
	sqliteSubjectTail = `SELECT rowid FROM "notifications" WHERE rowid > (SELECT "indexed" FROM "notifications_subject_state")`
)

// subjectMatch returns the FTS5 query that finds, in the trigram index, every
// row whose subject contains text ignoring ASCII case (and more: the
// tokenizer folds the case of every letter, and a row holding each trigram
// somewhere need not hold them in a row): each distinct trigram of text as a
// quoted string, ANDed. ok is false when the index cannot answer: text has
// fewer than three characters, so no trigram, or is not valid UTF-8, which
// the tokenizer would read otherwise than LIKE does.
func subjectMatch(text string) (match string, ok bool) {
	if !utf8.ValidString(text) || utf8.RuneCountInString(text) < 3 {
		return "", false
	}
	// Byte offsets of the characters, and of the end.
	var at []int
	for i := range text {
		at = append(at, i)
	}
	at = append(at, len(text))
	var b strings.Builder
	seen := make(map[string]bool, len(at))
	for i := 0; i+3 < len(at); i++ {
		tri := text[at[i]:at[i+3]]
		// A trigram dropped is a condition dropped: the set stays a superset
		// whatever the tokenizer's folding makes of these.
		key := strings.ToLower(tri)
		if seen[key] {
			continue
		}
		seen[key] = true
		if b.Len() > 0 {
			b.WriteString(" AND ")
		}
		b.WriteByte('"')
		b.WriteString(strings.ReplaceAll(tri, `"`, `""`))
		b.WriteByte('"')
	}
	return b.String(), true
}

// subjectCandidates selects the rowids of up to limit rows whose subject
// may contain keyword: the rows the trigram index finds for match (its
// subjectMatch), and the rows above its mark whose subject does contain it.
func subjectCandidates(db *bun.DB, keyword, match string, limit int) *bun.RawQuery {
	return db.NewRaw(`SELECT rowid FROM "notifications_subject" WHERE "notifications_subject" MATCH ? UNION ALL `+
		sqliteSubjectTail+` AND "subject" LIKE ? ESCAPE '\' LIMIT ?`, match, "%"+likeEscape(keyword)+"%", limit)
}

// subjectCandidateCount counts, up to limit, subjectCandidates.
func subjectCandidateCount(db *bun.DB, keyword, match string, limit int) *bun.RawQuery {
	return db.NewRaw(`SELECT COUNT(*) FROM (?)`, subjectCandidates(db, keyword, match, limit))
}

// fromCandidates makes q read the candidates only, by rowid (NOT INDEXED
// leaves SQLite no other way in).
func fromCandidates(q *bun.SelectQuery, c *candidates) *bun.SelectQuery {
	q = q.ModelTableExpr(`"notifications" AS "n" NOT INDEXED`)
	if c.rowids != nil {
		return q.Where("rowid IN (?)", bun.List(c.rowids))
	}
	return q.Where(`rowid IN (SELECT rowid FROM "notifications_subject" WHERE "notifications_subject" MATCH ? UNION ALL `+
		sqliteSubjectTail+`)`, c.match)
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

// --- migrations ------------------------------------------------------------------

// lockMigrations: the writer's transactions begin IMMEDIATE, which takes
// the database's write lock and waits for it (busy_timeout); the run holds
// that transaction, each migration a savepoint of it.
func (sqliteDialect) lockMigrations(ctx context.Context, c *sql.Conn) (migrationLock, error) {
	return lockTx(ctx, c)
}

func (sqliteDialect) tableExists() string {
	return `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`
}

func (sqliteDialect) createMigrationsTable() []string {
	return []string{
		`CREATE TABLE "outbox_migrations" ("id" INTEGER PRIMARY KEY, "name" TEXT NOT NULL, ` +
			`"group_id" INTEGER NOT NULL, "migrated_at" INTEGER NOT NULL)`,
		`CREATE UNIQUE INDEX "outbox_migrations_name_key" ON "outbox_migrations" ("name")`,
	}
}

// contains: SQLite's LIKE ignores the case of ASCII letters only.
func (sqliteDialect) contains(col, keyword string) (string, any) {
	return `"` + col + `" LIKE ? ESCAPE '\'`, "%" + likeEscape(keyword) + "%"
}

// bucket: instants are integer microseconds; integer division floors the
// non-negative difference.
func (sqliteDialect) bucket(col string, size time.Duration) string {
	return fmt.Sprintf(`((%s - ?) / %d)`, col, size.Microseconds())
}
