package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/schema"

	"github.com/siteline/outbox/ports"
)

// analyzer keeps the PostgreSQL planner's picture of the notifications
// table current while the table grows from empty.
//
// The claim must read the partial Pending index in claim order and stop
// after Limit rows. Until the table is analyzed, the planner believes the
// table holds a few dozen Pending rows, and prefers to fetch them all and
// sort them: on a table that filled fast (a fresh install, a backlog
// arriving, a benchmark) every claim then sorts the whole backlog.
// Autovacuum analyzes the table only after its next nap (a minute by
// default), so the store runs ANALYZE itself in the background each time
// the rows it inserted since Open cross a threshold: 1,000, then 4 times
// the previous one. Past a few million rows autovacuum's own thresholds
// (set low by the migration) take over. The table of the keys grows with
// it and is analyzed with it: the lists' joins are planned by its
// statistics.
type analyzer struct {
	db      *sql.DB
	onError func(error)
	total   atomic.Int64
	next    atomic.Int64
	running atomic.Bool
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

const (
	analyzeFirst = 1000
	analyzeLast  = 4_000_000
)

func newAnalyzer(db *sql.DB, onError func(error)) *analyzer {
	ctx, stop := context.WithCancel(context.Background())
	a := &analyzer{db: db, onError: onError, ctx: ctx, stop: stop}
	a.next.Store(analyzeFirst)
	return a
}

// inserted notes n inserted rows and starts an ANALYZE when a threshold is
// crossed and none is running.
func (a *analyzer) inserted(n int) {
	total := a.total.Add(int64(n))
	next := a.next.Load()
	if total < next || next > analyzeLast || !a.running.CompareAndSwap(false, true) {
		return
	}
	a.next.Store(max(next, total) * 4)
	a.wg.Go(func() {
		defer a.running.Store(false)
		ctx, cancel := context.WithTimeout(a.ctx, time.Minute)
		defer cancel()
		if _, err := a.db.ExecContext(ctx, "ANALYZE notifications, notification_keys"); err != nil && a.ctx.Err() == nil {
			a.onError(err)
		}
	})
}

func (a *analyzer) close() {
	a.stop()
	a.wg.Wait()
}

// --- the PostgreSQL dialect --------------------------------------------------

// pgDialect is PostgreSQL's part of the statements (see dialect).
type pgDialect struct{}

func (pgDialect) newBun() schema.Dialect { return pgdialect.New() }

// open: one pool through pgx, and the background ANALYZE while the table
// grows from empty.
func (pgDialect) open(h *handle, cfg Config) error {
	db, custom, err := openPostgres(cfg.DSN)
	if err != nil {
		return err
	}
	h.pgPrepare = !custom
	h.useServerPool(db, cfg)
	h.analyze = newAnalyzer(db, func(err error) {
		h.logger.Warn("sqlstore: background ANALYZE failed", "err", h.redact(err))
	})
	return nil
}

func (pgDialect) writes() writeDialect { return conflictWrites{} }

// subjectIndex: none; the planner reads the trigram index itself.
func (pgDialect) subjectIndex(string) (string, bool) { return "", false }

// validID: the id column is a uuid, so only a UUID can name a row.
func (pgDialect) validID(id string) bool { return isUUID(id) }

// appendTime writes a timestamptz literal in UTC.
func (pgDialect) appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, "NULL::timestamptz"...)
	}
	b = append(b, '\'')
	b = t.UTC().Truncate(time.Microsecond).AppendFormat(b, "2006-01-02 15:04:05.000000")
	return append(b, "+00'::timestamptz"...)
}

func (pgDialect) appendNullText(b []byte) []byte { return append(b, "NULL::text"...) }
func (pgDialect) countAll() string               { return "COUNT(*)" }

func (pgDialect) firstRows(q *bun.SelectQuery, n int64) *bun.SelectQuery {
	return q.ColumnExpr(`1 AS "one"`).Limit(n)
}

func (pgDialect) returned(col string) string { return `"` + col + `"` }

func (pgDialect) from(string) schema.QueryAppender { return bun.Ident("notifications") }

func (pgDialect) after(q *bun.SelectQuery, table string, c cursor, oldest bool) *bun.SelectQuery {
	if oldest {
		return q.Where(`(`+table+`"created_at", `+table+`"id") > (?, ?)`, at(c.createdAt), c.id)
	}
	return q.Where(`(`+table+`"created_at", `+table+`"id") < (?, ?)`, at(c.createdAt), c.id)
}

// subjectContains is a case-sensitive regular expression that spells each
// ASCII letter in both cases: 13 times cheaper per row than folding the
// subject with translate() for a LIKE. It matches in notification_keys,
// whose pg_trgm index serves it (migrations 0004, 0010 and 0011): on the
// joined keys' subject, or else as a semi-join that PostgreSQL plans from the
// index's matches for a rare keyword, or probing the keys' primary key for
// each row of the list's order for a common one (DESIGN.md, "Keyword
// search").
func (pgDialect) subjectContains(q bun.QueryBuilder, keyword string, keys bool) bun.QueryBuilder {
	if keys {
		return q.Where(`"k"."subject" ~ ?`, asciiFoldRegexp(keyword))
	}
	return q.Where(`"id" IN (SELECT "id" FROM "notification_keys" WHERE "subject" ~ ?)`, asciiFoldRegexp(keyword))
}

// keys: a list or type filter joins the keys, where their indexes are; so
// does a list ordered by creation time that no status and no site narrows.
// A list of one status, or of a site, reads the notifications' (status,
// created_at, id) or (source_site, created_at, id) index in its order (the
// site's also under statuses); a list of several statuses reads each one's
// range of the status index. A count that names only keys reads them
// alone.
func (pgDialect) keys(f ports.Filter, read filterRead) keysUse {
	statuses := len(f.Statuses) > 0 || !f.StuckBefore.IsZero()
	onRow := statuses || !f.UpdatedFrom.IsZero() || !f.UpdatedTo.IsZero() || f.SourceSite != ""
	switch {
	case read == readCount && !onRow:
		return keysOnly
	case f.List != "" || f.Type != "":
		return joinKeys
	case read != readList:
		return noKeys
	case statuses && !(len(f.Statuses) == 1 && f.StuckBefore.IsZero()):
		return eachStatus
	case !statuses && f.SourceSite == "":
		return joinKeys
	}
	return noKeys
}

// ownerHasPrefix is a LIKE with the prefix's wildcards escaped: claimed_by
// is of the "C" collation, which compares bytes.
func (pgDialect) ownerHasPrefix(q *bun.UpdateQuery, prefix string) *bun.UpdateQuery {
	return q.Where(`"claimed_by" LIKE ? ESCAPE '\'`, likeLiteral(prefix)+"%")
}

func (pgDialect) purge(db *bun.DB, cutoff time.Time, limit int) idQuery {
	return purgeReturning(db, cutoff, limit)
}

// claim selects each part FOR UPDATE SKIP LOCKED in a CTE, so that
// concurrent claimers skip each other's rows instead of waiting, then
// UPDATE ... WHERE id = ANY(ARRAY(the first Limit of the union)) RETURNING
// the rows: the array makes the primary key the way into the table,
// whatever the planner believes of the CTE sizes.
func (pgDialect) claim(db *bun.DB, req ports.ClaimRequest) *bun.RawQuery {
	var r rawSQL
	claimCTEs(&r, req, false, "", " FOR UPDATE SKIP LOCKED")
	r.sql(` UPDATE "notifications" AS n SET "claimed_by" = `).arg(req.Owner).
		sql(`, "claimed_until" = `).arg(at(req.Now.Add(req.Lease))).
		sql(` WHERE n."id" = ANY (ARRAY(SELECT "id" FROM (`)
	claimUnion(&r)
	r.sql(`) AS u ORDER BY "priority" DESC, "created_at", "id" LIMIT `).arg(req.Limit).
		sql(`)) RETURNING ` + quoted("n.", notificationColumns))
	return r.query(db)
}

// PostgreSQL's batch statements (Insert, Record, Append) pass one array
// per column to unnest: their text is the same for every batch, so pgx
// prepares it once per connection and sends the arrays in binary (parsing
// and planning a 1,000-row VALUES list cost PostgreSQL about a fifth of its
// time). They run on database/sql directly, past bun's formatter.

// pgUnnest returns "unnest($1::t1[], $2::t2[], ...)" for cols.
func pgUnnest(cols []column) string { return pgUnnestFrom(cols, 1) }

// pgUnnestFrom is pgUnnest with parameters numbered from first.
func pgUnnestFrom(cols []column, first int) string {
	var b strings.Builder
	b.WriteString("unnest(")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(first+i) + "::" + c.pgType + "[]")
	}
	b.WriteString(")")
	return b.String()
}

// pgArrays returns one array per column of rows' model cols, in order, for
// pgUnnest: NULL elements for the zero instant and the empty nullable text.
func pgArrays[T any](cols []column, rows []T) []any {
	arrays := make([]any, len(cols))
	for j, c := range cols {
		at := func(i int) reflect.Value { return reflect.ValueOf(&rows[i]).Elem().Field(c.field) }
		switch c.kind {
		case textColumn:
			a := make([]string, len(rows))
			for i := range rows {
				a[i] = at(i).String()
			}
			if c.pgType == "uuid" {
				arrays[j] = uuidTexts(a) // see pgArgs
			} else {
				arrays[j] = a
			}
		case intColumn:
			a := make([]int64, len(rows))
			for i := range rows {
				a[i] = at(i).Int()
			}
			arrays[j] = a
		case nullTextColumn:
			a := make([]*string, len(rows))
			for i := range rows {
				if v := at(i).String(); v != "" {
					a[i] = &v
				}
			}
			arrays[j] = a
		case instantColumn:
			a := make([]*time.Time, len(rows))
			for i := range rows {
				if t := at(i).Addr().Interface().(*instant).t; !t.IsZero() {
					u := t.UTC().Truncate(time.Microsecond)
					a[i] = &u
				}
			}
			arrays[j] = a
		}
	}
	return arrays
}

// uuidTexts is the array of a uuid column, as pgArrays gives it: texts
// until pgArgs decides how they are sent.
type uuidTexts []string

// uuidArray returns the bytes of ids, or false if one is not a UUID.
func uuidArray(ids uuidTexts) ([][16]byte, bool) {
	out := make([][16]byte, len(ids))
	for i, id := range ids {
		u, ok := uuidBytes(id)
		if !ok {
			return nil, false
		}
		out[i] = u
	}
	return out, true
}

var (
	// pgInsertText inserts the rows of one array per column, skipping ids
	// that exist.
	pgInsertText = `INSERT INTO "notifications" (` + quoted("", notificationColumns) + `) SELECT * FROM ` +
		pgUnnest(notificationModel) + ` ON CONFLICT ("id") DO NOTHING RETURNING "id"`
	// pgRecordText is UPDATE ... FROM unnest(one array per column) joined on
	// id, guarded by claimed_by = owner. The owner rides in v as a column
	// (array_fill repeats it server-side) so that the guard is a join
	// clause, not a filter on n: with the filter, the planner trusts its
	// statistics of claimed_by (all NULL right after a fill), expects one
	// row of n and rescans v for each real one. And id = ANY($1) makes the
	// primary key the way into n.
	pgRecordText = `UPDATE "notifications" AS n SET ` + recordSet + `, "claimed_by" = NULL, "claimed_until" = NULL FROM ` +
		strings.TrimSuffix(pgUnnest(recordModel), ")") + ", array_fill($" + strconv.Itoa(len(recordModel)+1) +
		"::text, ARRAY[cardinality($1::uuid[])])) AS v (" + quoted("", recordColumns) +
		`, "owner") WHERE n."id" = ANY($1::uuid[]) AND n."id" = v."id" AND n."claimed_by" = v."owner" RETURNING n."id"`
	// pgAppendText inserts the audit records of one array per column.
	pgAppendText = `INSERT INTO "notification_audit" (` + quoted("", auditColumns) + `) SELECT * FROM ` + pgUnnest(auditModel)
	// pgRecordAuditedText is pgRecordText, and the INSERT of those audit
	// records (one array per column, after the update's arguments) whose
	// notification the update returned, in one statement: PostgreSQL runs
	// every data-modifying WITH to completion, in the statement's one
	// snapshot and transaction. The records are inserted in the order
	// given (their identities are History's order among records of one
	// instant), whatever join the planner picks.
	pgRecordAuditedText = `WITH u AS (` + pgRecordText + `), a AS (INSERT INTO "notification_audit" (` +
		quoted("", auditColumns) + `) SELECT ` + quoted("r.", auditColumns) + ` FROM ` +
		pgUnnestFrom(auditModel, len(recordModel)+2) + ` WITH ORDINALITY AS r (` + quoted("", auditColumns) +
		`, "ord") WHERE r."notification_id" IN (SELECT "id" FROM u) ORDER BY r."ord") SELECT "id" FROM u`
)

// pgArgs returns the arguments of a batch statement: pgx prepares and
// caches the statement unless the DSN chose its own exec mode (e.g. for a
// pooler that cannot keep prepared statements).
//
// A uuid column's array (uuidTexts) goes as bytes when the statement is
// prepared: pgx has no binary form of a string for a uuid, so it would try
// one, fail (formatting the whole array into its error, a tenth of a
// dispatcher's CPU) and send the array as text for the server to parse.
// Unprepared, pgx knows no parameter's type and can send only texts; an
// array holding an id that is no UUID stays text too, for PostgreSQL to
// refuse as before.
func (h *handle) pgArgs(args []any) []any {
	out := make([]any, 0, len(args)+1)
	if h.pgPrepare {
		out = append(out, pgx.QueryExecModeCacheStatement)
	}
	for _, a := range args {
		if ids, ok := a.(uuidTexts); ok {
			a = []string(ids)
			if h.pgPrepare {
				if u, ok := uuidArray(ids); ok {
					a = u
				}
			}
		}
		out = append(out, a)
	}
	return out
}

// insert tries one COPY of the batch (pgcopy.go), and runs the
// insert-if-not-exists statement when the COPY cannot store it. Either
// writes the rows in the order of their ids: two Inserts of overlapping
// batches then wait on each other's rows in one order, never in a cycle
// (a deadlock, 40P01). The ids come back in the caller's order.
func (pgDialect) insert(ctx context.Context, h *handle, rows []notificationRow) ([]string, error) {
	order := make([]string, len(rows)) // the caller's order, as RETURNING spells the ids
	for i := range rows {
		order[i] = strings.ToLower(rows[i].ID)
	}
	sortByID(rows)
	ids, err := h.copyInsert(ctx, rows)
	if errors.Is(err, errNoCopy) {
		var qs []query
		_ = chunks(rows, insertChunk, func(part []notificationRow) error {
			qs = append(qs, query{text: pgInsertText, args: h.pgArgs(pgArrays(notificationModel, part))})
			return nil
		})
		ids, err = h.writeIDs(ctx, qs, len(rows))
		if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && strings.HasPrefix(pe.Code, "42") {
			// The table is not what the store read (a column renamed
			// or gone): read its types again at the next Insert.
			h.pgCopy.forget()
		}
	}
	if err != nil {
		return nil, err
	}
	if h.analyze != nil {
		h.analyze.inserted(len(ids))
	}
	if len(ids) == len(order) {
		return order, nil // all of them (the batch holds each id once)
	}
	stored := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		stored[id] = struct{}{}
	}
	out := make([]string, 0, len(ids))
	for _, id := range order {
		if _, ok := stored[id]; ok {
			out = append(out, id)
			delete(stored, id) // an id twice in the batch, in two cases, is one row
		}
	}
	return out, nil
}

// sortByID sorts rows by id (compareUUIDText). It sorts the ids with
// their places, then moves each row once along the permutation's cycles:
// sorting the rows themselves copied two of them at each comparison.
func sortByID(rows []notificationRow) {
	sorted := true // time-ordered ids (UUIDv7) come sorted: no work
	for i := 1; i < len(rows) && sorted; i++ {
		sorted = compareUUIDText(rows[i-1].ID, rows[i].ID) <= 0
	}
	if sorted {
		return
	}
	type key struct {
		id string
		at int
	}
	keys := make([]key, len(rows))
	for i := range rows {
		keys[i] = key{rows[i].ID, i}
	}
	slices.SortFunc(keys, func(a, b key) int { return compareUUIDText(a.id, b.id) })
	// Row keys[k].at goes to place k: follow each cycle from its first place.
	for start := range keys {
		if keys[start].at < 0 || keys[start].at == start {
			continue
		}
		hold := rows[start]
		k := start
		for {
			from := keys[k].at
			keys[k].at = -1
			if from == start {
				rows[k] = hold
				break
			}
			rows[k] = rows[from]
			k = from
		}
	}
}

// compareUUIDText orders two uuids in text form as PostgreSQL orders the
// uuids (their bytes): the text compared with hex letters in one case.
func compareUUIDText(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'F' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'F' {
			y += 'a' - 'A'
		}
		if x != y {
			return int(x) - int(y)
		}
	}
	return len(a) - len(b)
}

func (pgDialect) recordQuery(h *handle, owner string, rows []recordRow) (query, error) {
	return query{text: pgRecordText, args: h.pgArgs(append(pgArrays(recordModel, rows), owner))}, nil
}

// recordAuditedQuery is recordQuery that also inserts, of audits, the
// records of the rows it updates (see pgRecordAuditedText).
func (pgDialect) recordAuditedQuery(h *handle, owner string, rows []recordRow, audits []auditRow) query {
	args := append(pgArrays(recordModel, rows), owner)
	return query{text: pgRecordAuditedText, args: h.pgArgs(append(args, pgArrays(auditModel, audits)...))}
}

func (pgDialect) appendQuery(h *handle, rows []auditRow) (query, error) {
	return query{text: pgAppendText, args: h.pgArgs(pgArrays(auditModel, rows))}, nil
}

// asciiFoldRegexp returns the PostgreSQL regular expression (an ARE) that
// finds text anywhere in a string, ignoring the case of ASCII letters only:
// an ASCII letter becomes the bracket of its two cases, any other ASCII
// character but a digit is escaped with a backslash (in an ARE, a backslash
// before a character that is not alphanumeric makes it literal), and every
// other character stands for itself. A case-sensitive match (~) of such a
// pattern depends on no locale.
func asciiFoldRegexp(text string) string {
	return foldASCII(text, func(b *strings.Builder, c byte) {
		if '0' <= c && c <= '9' || c >= utf8.RuneSelf {
			b.WriteByte(c)
			return
		}
		b.WriteByte('\\')
		b.WriteByte(c)
	})
}

// --- migrations ------------------------------------------------------------------

// pgMigrationLockKey keys the migration lock by schema, so that schemas
// migrate apart. The runner before bun/migrate took the same key with
// pg_advisory_xact_lock: the two wait for each other.
const pgMigrationLockKey = `hashtext(current_schema() || '.` + migrationLockName + `')`

// lockMigrations takes a session-level advisory lock on c.
func (pgDialect) lockMigrations(ctx context.Context, c *sql.Conn) (migrationLock, error) {
	return lockSession(ctx, c, `SELECT pg_advisory_lock(`+pgMigrationLockKey+`)`,
		`SELECT pg_advisory_unlock(`+pgMigrationLockKey+`)`)
}

func (pgDialect) tableExists() string {
	return `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = ?`
}

func (pgDialect) createMigrationsTable() []string {
	return []string{
		`CREATE TABLE "outbox_migrations" ("id" bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, ` +
			`"name" text NOT NULL, "group_id" bigint NOT NULL, "migrated_at" timestamptz NOT NULL)`,
		`CREATE UNIQUE INDEX "outbox_migrations_name_key" ON "outbox_migrations" ("name")`,
	}
}

// contains is subjectContains's regular expression on col.
func (pgDialect) contains(col, keyword string) (string, any) {
	return `"` + col + `" ~ ?`, asciiFoldRegexp(keyword)
}

// bucket: the interval's seconds as a double (date_part; EXTRACT's numeric
// costs a third of the query at 200,000 rows), which holds microseconds
// exactly for spans of decades: a bucket's last microsecond still divides
// below its end.
func (pgDialect) bucket(col string, size time.Duration) string {
	return fmt.Sprintf(`CAST(floor(date_part('epoch', %s - ?) / %s) AS bigint)`, col,
		strconv.FormatFloat(size.Seconds(), 'f', -1, 64))
}
