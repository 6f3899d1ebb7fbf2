package sqlstore

import (
	"context"
	"database/sql"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"
	bundialect "github.com/uptrace/bun/dialect"
	"github.com/uptrace/bun/schema"

	"github.com/siteline/outbox/ports"
)

// dialect is what differs between the databases, one implementation per
// file: sqlite.go, postgres.go, mssql.go. The port methods
// (notifications.go) build their statements with bun's query builders and
// ask the dialect only for what bun does not cover: the representation of
// instants, a few predicates, and the statements written by hand for a
// measured reason (DESIGN.md, "Values in statements"): the claim, the
// batch writes Insert, Record and Append, how the pools are opened.
type dialect interface {
	// newBun returns the bun dialect of a new pool.
	newBun() schema.Dialect
	// open opens the pools of cfg's database into h (through h.use) and
	// starts the background work the database needs.
	open(h *handle, cfg Config) error
	// writes returns the upsert and the insert of a new row of the
	// directory and the accounts.
	writes() writeDialect
	// subjectIndex returns the query of keyword for the trigram index the
	// store reads keyword candidates from, and whether it does: SQLite's
	// FTS5 only (PostgreSQL's planner reads its own index).
	subjectIndex(keyword string) (string, bool)
	// validID reports whether id can name a row (PostgreSQL: a UUID).
	validID(id string) bool
	// appendTime appends the literal of an instant column (see instant);
	// the zero time is a NULL typed as needed.
	appendTime(b []byte, t time.Time) []byte
	// appendNullText appends a NULL of the text columns' type.
	appendNullText(b []byte) []byte
	// countAll is the aggregate that counts rows as a 64-bit integer.
	countAll() string
	// bucket is the expression of the bucket that the instant column col
	// falls in, counting buckets of length size (whole microseconds) from
	// the instant its one placeholder takes; col is not before it.
	bucket(col string, size time.Duration) string
	// firstRows selects the constant 1 from the first n rows of q, in no
	// particular order: LIMIT n, or TOP (n) on MS SQL.
	firstRows(q *bun.SelectQuery, n int64) *bun.SelectQuery
	// returned is the column col of the rows an UPDATE wrote, as its
	// RETURNING or OUTPUT clause names it.
	returned(col string) string
	// from is the table of a read that SQLite must be told the index of
	// (bun.Ident("notifications") elsewhere).
	from(index string) schema.QueryAppender
	// after is the keyset condition of the rows after c, newest first, or
	// oldest first if oldest, on the columns of table (a qualifier such as
	// `"k".`, or "" for the one table read).
	after(q *bun.SelectQuery, table string, c cursor, oldest bool) *bun.SelectQuery
	// keys says how a read of the rows of f uses the table of the
	// notifications' keys (see keysUse).
	keys(f ports.Filter, read filterRead) keysUse
	// subjectContains is the condition of Filter.Subject: the subject holds
	// keyword, ignoring the case of ASCII letters only; keys says that the
	// read has the keys' table as "k" (see keysUse).
	subjectContains(q bun.QueryBuilder, keyword string, keys bool) bun.QueryBuilder
	// contains is the condition that column col holds keyword, ignoring
	// the case of ASCII letters only, LIKE wildcards matching literally:
	// its text with one placeholder, and the placeholder's value.
	contains(col, keyword string) (string, any)
	// ownerHasPrefix is the condition that claimed_by begins with prefix,
	// byte for byte.
	ownerHasPrefix(q *bun.UpdateQuery, prefix string) *bun.UpdateQuery
	// purge is the statement that deletes up to limit terminal rows last
	// updated before cutoff, returning their ids.
	purge(db *bun.DB, cutoff time.Time, limit int) idQuery
	// claim is the claim statement (see claimParts).
	claim(db *bun.DB, req ports.ClaimRequest) *bun.RawQuery
	// insert inserts rows (distinct ids), all or nothing, and returns the
	// ids it inserted.
	insert(ctx context.Context, h *handle, rows []notificationRow) ([]string, error)
	// recordQuery is the statement that writes rows (distinct ids, at most
	// recordChunk) onto the rows owner holds and releases them, returning
	// the ids it updated. It is built before the write (on SQLite, outside
	// the single writer's time) and runs with queryIDs.
	recordQuery(h *handle, owner string, rows []recordRow) (query, error)
	// appendQuery is the INSERT of rows (at most auditChunk), built before
	// the write.
	appendQuery(h *handle, rows []auditRow) (query, error)

	// The migration runner's statements (migrate.go):

	// lockMigrations takes the migration lock on c, a connection of the
	// writer pool, waiting for it, and holds it until release; it closes c
	// when it fails.
	lockMigrations(ctx context.Context, c *sql.Conn) (migrationLock, error)
	// tableExists is the query that counts the tables of the current
	// schema named by its one parameter.
	tableExists() string
	// createMigrationsTable are the statements that create
	// outbox_migrations, its migrated_at an instant column.
	createMigrationsTable() []string
}

// idQuery is a statement that returns ids.
type idQuery interface {
	bun.Query
	Conn(c bun.IConn) idQuery
	Scan(ctx context.Context, dest ...any) error
	String() string
}

// dialectFor returns the dialect of a driver name.
func dialectFor(driver string) (dialect, error) {
	switch driver {
	case DriverSQLite:
		return sqliteDialect{}, nil
	case DriverPostgres:
		return pgDialect{}, nil
	case DriverMSSQL:
		return mssqlDialect{}, nil
	}
	return nil, fmt.Errorf("sqlstore: unknown driver %q: %w", driver, ports.ErrInvalid)
}

// dialectNamed returns the dialect bun formats a query for (instant and
// nullText ask it for their literals).
func dialectNamed(name bundialect.Name) dialect {
	switch name {
	case bundialect.PG:
		return pgDialect{}
	case bundialect.MSSQL:
		return mssqlDialect{}
	}
	return sqliteDialect{}
}

// Statements by hand are written with bun's placeholders: rawSQL collects
// the text and its arguments, and bun (NewRaw) formats each argument as a
// literal of the dialect.
type rawSQL struct {
	b    strings.Builder
	args []any
}

func (r *rawSQL) sql(text string) *rawSQL {
	r.b.WriteString(text)
	return r
}

// arg appends a placeholder for v.
func (r *rawSQL) arg(v any) *rawSQL {
	r.b.WriteByte('?')
	r.args = append(r.args, v)
	return r
}

func (r *rawSQL) query(db *bun.DB) *bun.RawQuery { return db.NewRaw(r.b.String(), r.args...) }

// rawIDs adapts a RawQuery to idQuery.
type rawIDs struct{ *bun.RawQuery }

func (q rawIDs) Conn(c bun.IConn) idQuery { return rawIDs{q.RawQuery.Conn(c)} }

// deleteIDs adapts a DeleteQuery to idQuery.
type deleteIDs struct{ *bun.DeleteQuery }

func (q deleteIDs) Conn(c bun.IConn) idQuery { return deleteIDs{q.DeleteQuery.Conn(c)} }

// quoted returns the columns as a list of quoted identifiers, each prefixed
// with prefix (a table alias and a dot, or "").
func quoted(prefix string, cols []string) string {
	var b strings.Builder
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(prefix)
		b.WriteByte('"')
		b.WriteString(c)
		b.WriteByte('"')
	}
	return b.String()
}

var (
	dueStatuses  = []string{string(ports.StatusPending), string(ports.StatusRetrying)}
	kpiStatuses  = []string{string(ports.StatusPending), string(ports.StatusRetrying), string(ports.StatusParked)}
	termStatuses = []string{string(ports.StatusDelivered), string(ports.StatusParked), string(ports.StatusDiscarded)}
)

// --- the claim -----------------------------------------------------------------

// claimPart is one part of a claim: the rows of one status that are due,
// each part read from a partial index in an order that yields its rows in
// claim order or lets the index bound them (see the migrations).
type claimPart struct {
	status string
	// due is the condition on next_attempt_at ("" when every row of the
	// status is due); when it ends in "= ", the claim instant follows.
	due   string
	index string // the partial index (named on SQLite)
}

// claimParts are the parts of a claim: Pending rows are due at once;
// Retrying rows once next_attempt_at has come, and those without one at
// once (the zero time is before any instant). Each condition is a plain
// index range, so that not-yet-due retries cost nothing to skip.
var claimParts = []claimPart{
	{status: string(ports.StatusPending), index: "notifications_claim_pending_idx"},
	{status: string(ports.StatusRetrying), due: `"next_attempt_at" <= `, index: "notifications_claim_retrying_idx"},
	{status: string(ports.StatusRetrying), due: `"next_attempt_at" IS NULL`, index: "notifications_claim_retrying_idx"},
}

// claimSelect appends the SELECT of one part of a claim: up to n rows of
// the part that are unleased at now, in claim order. top caps the rows with
// TOP (n) after SELECT (MS SQL) instead of LIMIT; hint follows the table
// (MS SQL's table hint, SQLite's INDEXED BY) and lock the ORDER BY
// (PostgreSQL's locking clause).
func claimSelect(r *rawSQL, p claimPart, now time.Time, n int, top bool, hint, lock string) {
	r.sql("SELECT ")
	if top {
		r.sql("TOP (").arg(n).sql(") ")
	}
	r.sql(`"id", "priority", "created_at" FROM "notifications"` + hint)
	r.sql(` WHERE "status" = `).arg(p.status)
	if p.due != "" {
		r.sql(" AND " + p.due)
		if strings.HasSuffix(p.due, "= ") {
			r.arg(at(now))
		}
	}
	r.sql(` AND ("claimed_until" IS NULL OR "claimed_until" <= `).arg(at(now)).
		sql(`) ORDER BY "priority" DESC, "created_at", "id"`)
	if !top {
		r.sql(" LIMIT ").arg(n)
	}
	r.sql(lock)
}

// claimCTEs appends "WITH c0 AS (part 0), c1 AS (part 1), ..." (see
// claimSelect).
func claimCTEs(r *rawSQL, req ports.ClaimRequest, top bool, hint, lock string) {
	r.sql("WITH ")
	for i, p := range claimParts {
		if i > 0 {
			r.sql(", ")
		}
		r.sql("c" + strconv.Itoa(i) + " AS (")
		claimSelect(r, p, req.Now, req.Limit, top, hint, lock)
		r.sql(")")
	}
}

// claimUnion appends "SELECT * FROM c0 UNION ALL SELECT * FROM c1 ...".
func claimUnion(r *rawSQL) {
	for i := range claimParts {
		if i > 0 {
			r.sql(" UNION ALL ")
		}
		r.sql("SELECT * FROM c" + strconv.Itoa(i))
	}
}

// recordSet assigns the columns of recordRow but the id from the joined
// rows v.
var recordSet = func() string {
	var b strings.Builder
	for i, c := range recordColumns[1:] {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`"` + c + `" = v."` + c + `"`)
	}
	return b.String()
}()

// purgeReturning is the purge of SQLite and PostgreSQL: DELETE ... WHERE id
// IN (SELECT ... LIMIT n) RETURNING id. The conditions stand in the outer
// WHERE too: PostgreSQL re-checks only those on a row another transaction
// changed meanwhile (an operator Retry of a Parked row), so without them it
// would delete a row that is no longer terminal.
func purgeReturning(db *bun.DB, cutoff time.Time, limit int) idQuery {
	terminal := func(q bun.QueryBuilder) bun.QueryBuilder {
		return q.Where(`"status" IN (?)`, bun.List(termStatuses)).
			Where(`("updated_at" < ? OR "updated_at" IS NULL)`, at(cutoff))
	}
	sub := db.NewSelect().TableExpr(`"notifications"`).Column("id").ApplyQueryBuilder(terminal).Limit(int64(limit))
	q := db.NewDelete().TableExpr(`"notifications"`).Where(`"id" IN (?)`, sub).
		ApplyQueryBuilder(terminal).Returning(`"id"`)
	return deleteIDs{q}
}

// sqlText formats q for h's dialect into a buffer of size bytes, the
// text's expected length (a batch statement is long; growing it from
// nothing cost a copy per doubling).
func sqlText(h *handle, q bun.Query, size int) (query, error) {
	b, err := q.AppendQuery(h.w.QueryGen(), make([]byte, 0, size))
	return query{text: string(b)}, err
}

// insertAudit is Append's INSERT but on PostgreSQL: bun's, of the model.
func insertAudit(h *handle, rows []auditRow) (query, error) {
	return sqlText(h, h.w.NewInsert().Model(&rows), 256+len(rows)*160)
}

// --- keyword search --------------------------------------------------------------

// likeEscape escapes the LIKE wildcards of text (and the escape character
// itself, and MS SQL's bracket class) with a backslash, and folds ASCII
// letters to lower case.
func likeEscape(text string) string { return likeEscapeCase(text, true) }

// likeLiteral is likeEscape without the folding: the pattern of text itself,
// for a LIKE ... ESCAPE '\' that compares letter case.
func likeLiteral(text string) string { return likeEscapeCase(text, false) }

func likeEscapeCase(text string, fold bool) string {
	var b strings.Builder
	b.Grow(len(text) + 8)
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case c == '%' || c == '_' || c == '\\' || c == '[':
			b.WriteByte('\\')
			b.WriteByte(c)
		case fold && 'A' <= c && c <= 'Z':
			b.WriteByte(c + 'a' - 'A')
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// foldASCII writes each ASCII letter of text as the bracket of its two
// cases ([pP]) and every other byte as other writes it.
func foldASCII(text string, other func(b *strings.Builder, c byte)) string {
	var b strings.Builder
	b.Grow(len(text) * 3)
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case 'a' <= c && c <= 'z':
			b.WriteString("[" + string(c) + string(c-'a'+'A') + "]")
		case 'A' <= c && c <= 'Z':
			b.WriteString("[" + string(c-'A'+'a') + string(c) + "]")
		default:
			other(&b, c)
		}
	}
	return b.String()
}

// candidates are the only rows a list or a count reads on SQLite's keyword
// path (see Notifications.subjectRowids): the rows of rowids, or, when
// rowids is nil, the rows the trigram index finds for match and those above
// its mark.
type candidates struct {
	rowids []int64
	match  string
}

// --- paging ------------------------------------------------------------------------

// cursor is the position after the last row of a page.
type cursor struct {
	createdAt time.Time
	id        string
}

func encodeCursor(c cursor) string {
	raw := strconv.FormatInt(c.createdAt.UnixMicro(), 10) + "|" + c.id
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func decodeCursor(text string) (cursor, error) {
	bad := func(why string) (cursor, error) {
		return cursor{}, fmt.Errorf("sqlstore: page cursor %.40q %s: %w", text, why, ports.ErrInvalid)
	}
	raw, err := base64.RawURLEncoding.DecodeString(text)
	if err != nil {
		return bad("is not base64url")
	}
	micros, id, ok := strings.Cut(string(raw), "|")
	if !ok || id == "" {
		return bad("lacks an id")
	}
	us, err := strconv.ParseInt(micros, 10, 64)
	if err != nil {
		return bad("has no valid instant")
	}
	if strings.IndexByte(id, 0) >= 0 {
		return bad("holds a NUL byte")
	}
	return cursor{createdAt: time.UnixMicro(us).UTC(), id: id}, nil
}

// isUUID reports whether id is a UUID in the 8-4-4-4-12 hex text form
// (either case), the only form the store's ids take and the one PostgreSQL
// stores as uuid.
func isUUID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := id[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// uuidBytes returns the 16 bytes of id, a UUID in the hyphenated form
// isUUID accepts, and false for anything else.
func uuidBytes(id string) (u [16]byte, ok bool) {
	if !isUUID(id) {
		return u, false
	}
	for i, k := 0, 0; i < len(id); i++ {
		if id[i] == '-' {
			continue
		}
		u[k/2] |= unhex(id[i]) << (4 * (1 - k%2))
		k++
	}
	return u, true
}

// unhex is the value of the hex digit c (isUUID checked it is one).
func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
