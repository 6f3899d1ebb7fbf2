package sqlstore

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun/dialect/mssqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"github.com/uptrace/bun/schema"

	"github.com/siteline/outbox/ports"
)

// This file builds every statement the store issues. Values are inlined as
// literals quoted by the bun dialect (bun's own way of formatting queries),
// except in the batch statements of PostgreSQL (Insert, Record, Append),
// which pass each column as one array parameter to unnest: one short text
// that PostgreSQL parses and plans in constant time whatever the batch size.
// Nothing here touches a connection, so the statements of every dialect can
// be built and checked without a server (see sqlgen_test.go); store.go only
// executes them.
//
// Identifiers are written with double quotes, the quote character bun uses
// for all three dialects (MS SQL needs QUOTED_IDENTIFIER ON, its default for
// every modern client, go-mssqldb included).

// dialectKind says which SQL dialect a generator writes.
type dialectKind int

const (
	kindSQLite dialectKind = iota
	kindPostgres
	kindMSSQL
)

// sqlgen writes the statements of one dialect.
type sqlgen struct {
	kind dialectKind
	d    schema.Dialect
	// pgPrepare has pgx prepare and cache PostgreSQL's parameterised
	// statements (off when the DSN chose its own exec mode, e.g. for a
	// pooler that cannot keep prepared statements).
	pgPrepare bool
}

func newSQLGen(driver string) (*sqlgen, error) {
	switch driver {
	case DriverSQLite:
		return &sqlgen{kind: kindSQLite, d: sqlitedialect.New()}, nil
	case DriverPostgres:
		return &sqlgen{kind: kindPostgres, d: pgdialect.New(), pgPrepare: true}, nil
	case DriverMSSQL:
		return &sqlgen{kind: kindMSSQL, d: mssqldialect.New()}, nil
	}
	return nil, fmt.Errorf("sqlstore: unknown driver %q: %w", driver, ports.ErrInvalid)
}

// The notifications columns in the order every statement writes and scans
// them (see notificationScanner).
var notificationColumns = []string{
	"id", "type", "list", "subject", "body", "type_data", "priority",
	"status", "retry_count", "last_error", "resolved_targets",
	"source_site", "source_instance", "source_script", "execution_id", "parent_execution_id",
	"site_enqueued_at", "created_at", "updated_at", "last_attempt_at", "next_attempt_at",
	"delivered_at", "expires_at", "claimed_by", "claimed_until",
}

var auditColumns = []string{
	"notification_id", "at", "kind", "actor", "outcome", "status", "duration_us", "error",
}

// colList returns the quoted columns joined by ", ", each prefixed with
// prefix (a table alias and a dot, or "").
func colList(prefix string, cols []string) string {
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
	allCols      = colList("", notificationColumns)
	allColsN     = colList("n.", notificationColumns)
	allColsV     = colList("v.", notificationColumns)
	allColsIns   = colList("inserted.", notificationColumns)
	auditCols    = colList("", auditColumns)
	dueStatuses  = []string{string(ports.StatusPending), string(ports.StatusRetrying)}
	kpiStatuses  = []string{string(ports.StatusPending), string(ports.StatusRetrying), string(ports.StatusParked)}
	termStatuses = []string{string(ports.StatusDelivered), string(ports.StatusParked), string(ports.StatusDiscarded)}
)

// query is one statement ready to run: its text, and the parameters of a
// PostgreSQL batch statement (none elsewhere).
type query struct {
	text string
	args []any
}

// stmt accumulates one statement. The first invalid value (a string holding
// a NUL byte, which no dialect stores) is remembered and reported by done.
type stmt struct {
	g    *sqlgen
	b    []byte
	args []any
	err  error
}

func (g *sqlgen) stmt(capacity int) *stmt {
	return &stmt{g: g, b: make([]byte, 0, capacity)}
}

func (s *stmt) sql(text string) *stmt {
	s.b = append(s.b, text...)
	return s
}

// check remembers an error when v holds a NUL byte, and returns v without
// them.
func (s *stmt) check(v string) string {
	if strings.IndexByte(v, 0) < 0 {
		return v
	}
	if s.err == nil {
		s.err = fmt.Errorf("sqlstore: text %.40q holds a NUL byte: %w", v, ports.ErrInvalid)
	}
	return strings.ReplaceAll(v, "\x00", "")
}

// str appends a string literal quoted by the dialect (N'...' on MS SQL).
func (s *stmt) str(v string) *stmt {
	s.b = s.g.d.AppendString(s.b, s.check(v))
	return s
}

// param appends a PostgreSQL parameter ($n) carrying v, cast to pgType.
func (s *stmt) param(v any, pgType string) *stmt {
	s.args = append(s.args, v)
	s.b = append(s.b, '$')
	s.b = strconv.AppendInt(s.b, int64(len(s.args)), 10)
	s.b = append(s.b, "::"...)
	s.b = append(s.b, pgType...)
	return s
}

// nullStr appends a string literal, or a NULL of the column's text type when
// v is empty.
func (s *stmt) nullStr(v string) *stmt {
	if v == "" {
		return s.sql(s.g.nullText())
	}
	return s.str(v)
}

func (s *stmt) int(v int64) *stmt {
	s.b = strconv.AppendInt(s.b, v, 10)
	return s
}

// time appends an instant in the dialect's column representation: a typed
// timestamp literal on PostgreSQL and MS SQL, integer Unix microseconds on
// SQLite. The zero time is a (typed) NULL.
func (s *stmt) time(t time.Time) *stmt {
	s.b = s.g.appendTime(s.b, t)
	return s
}

// strs appends a parenthesised list of string literals.
func (s *stmt) strs(vs []string) *stmt {
	s.b = append(s.b, '(')
	for i, v := range vs {
		if i > 0 {
			s.b = append(s.b, ", "...)
		}
		s.str(v)
	}
	s.b = append(s.b, ')')
	return s
}

func (s *stmt) done() (query, error) {
	if s.err != nil {
		return query{}, s.err
	}
	q := query{text: string(s.b), args: s.args}
	if len(s.args) > 0 && s.g.pgPrepare {
		// A parameterised statement has the same text for every batch: let
		// pgx prepare it once per connection and send its arrays in binary.
		// (Statements with inlined values run unprepared, pgx's exec mode.)
		q.args = append([]any{pgx.QueryExecModeCacheStatement}, s.args...)
	}
	return q, nil
}

func (g *sqlgen) nullText() string {
	switch g.kind {
	case kindPostgres:
		return "NULL::text"
	case kindMSSQL:
		return "CAST(NULL AS nvarchar(max))"
	}
	return "NULL"
}

// toMicros is the SQLite representation of an instant.
func toMicros(t time.Time) int64 { return t.UnixMicro() }

func (g *sqlgen) appendTime(b []byte, t time.Time) []byte {
	switch g.kind {
	case kindPostgres:
		if t.IsZero() {
			return append(b, "NULL::timestamptz"...)
		}
		b = append(b, '\'')
		b = t.UTC().Truncate(time.Microsecond).AppendFormat(b, "2006-01-02 15:04:05.000000")
		return append(b, "+00'::timestamptz"...)
	case kindMSSQL:
		if t.IsZero() {
			return append(b, "CAST(NULL AS datetime2(6))"...)
		}
		b = append(b, "CAST('"...)
		b = t.UTC().Truncate(time.Microsecond).AppendFormat(b, "2006-01-02T15:04:05.000000")
		return append(b, "' AS datetime2(6))"...)
	default:
		if t.IsZero() {
			return append(b, "NULL"...)
		}
		return strconv.AppendInt(b, toMicros(t), 10)
	}
}

// limit appends the row cap of a SELECT: LIMIT on SQLite and PostgreSQL.
// MS SQL writes TOP (n) after SELECT instead (see top).
func (s *stmt) limit(n int) *stmt {
	if s.g.kind == kindMSSQL {
		return s
	}
	return s.sql(" LIMIT ").int(int64(n))
}

// top appends "TOP (n) " on MS SQL and nothing elsewhere.
func (s *stmt) top(n int) *stmt {
	if s.g.kind != kindMSSQL {
		return s
	}
	return s.sql("TOP (").int(int64(n)).sql(") ")
}

// returning appends the RETURNING clause (SQLite, PostgreSQL); MS SQL writes
// OUTPUT at its own place in the statement (see output).
func (s *stmt) returning(cols string) *stmt {
	if s.g.kind == kindMSSQL {
		return s
	}
	return s.sql(" RETURNING ").sql(cols)
}

// output appends " OUTPUT <cols>" on MS SQL and nothing elsewhere.
func (s *stmt) output(cols string) *stmt {
	if s.g.kind != kindMSSQL {
		return s
	}
	return s.sql(" OUTPUT ").sql(cols)
}

func jsonStrings(v []string) (string, bool, error) {
	if v == nil {
		return "", false, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", false, fmt.Errorf("sqlstore: encode resolved targets: %w", err)
	}
	return string(b), true, nil
}

// --- notifications -----------------------------------------------------------

// insertChunk is the number of rows one INSERT statement carries.
const insertChunk = 500

// insert writes ns (distinct ids) insert-if-not-exists and returns the ids
// it inserted: ON CONFLICT DO NOTHING RETURNING on SQLite and PostgreSQL,
// INSERT ... OUTPUT ... SELECT ... WHERE NOT EXISTS on MS SQL.
func (g *sqlgen) insert(ns []ports.Notification) (query, error) {
	if g.kind == kindPostgres {
		return g.insertPG(ns)
	}
	s := g.stmt(256 + len(ns)*(512))
	s.sql(`INSERT INTO "notifications" (`).sql(allCols).sql(")")
	if g.kind == kindMSSQL {
		s.sql(` OUTPUT inserted."id" SELECT `).sql(allColsV).sql(" FROM (")
	}
	s.sql(" VALUES ")
	for i := range ns {
		if i > 0 {
			s.sql(", ")
		}
		if err := g.notificationValues(s, &ns[i]); err != nil {
			return query{}, err
		}
	}
	switch g.kind {
	case kindMSSQL:
		s.sql(") AS v (").sql(allCols).sql(`) WHERE NOT EXISTS (SELECT 1 FROM "notifications" AS n WITH (UPDLOCK, HOLDLOCK) WHERE n."id" = v."id")`)
	default:
		s.sql(` ON CONFLICT ("id") DO NOTHING RETURNING "id"`)
	}
	return s.done()
}

// sqliteInsertText is SQLite's insert-if-not-exists of rows rows with ?
// parameters. The store prepares it once per size (see Store.insertSQLite).
func sqliteInsertText(rows int) string {
	row := "(?" + strings.Repeat(", ?", len(notificationColumns)-1) + ")"
	var b strings.Builder
	b.WriteString(`INSERT INTO "notifications" (` + allCols + `) VALUES `)
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	b.WriteString(` ON CONFLICT ("id") DO NOTHING RETURNING "id"`)
	return b.String()
}

// appendSQLiteArgs appends the parameters of n for sqliteInsertText, in the
// order of notificationColumns (as notificationValues writes them inline).
func (g *sqlgen) appendSQLiteArgs(args []any, n *ports.Notification) ([]any, error) {
	s := g.stmt(0)
	str := func(v string) any { return s.check(v) }
	tm := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return toMicros(t)
	}
	targets, ok, err := jsonStrings(n.ResolvedTargets)
	if err != nil {
		return args, err
	}
	var typeData, resolved, claimedBy any
	if len(n.TypeData) > 0 {
		typeData = s.check(string(n.TypeData))
	}
	if ok {
		resolved = s.check(targets)
	}
	if n.ClaimedBy != "" {
		claimedBy = s.check(n.ClaimedBy)
	}
	args = append(args, str(n.ID), str(n.Type), str(n.List), str(n.Subject), str(n.Body), typeData,
		int64(n.Priority), str(string(n.Status)), int64(n.RetryCount), str(n.LastError), resolved,
		str(n.SourceSite), str(n.SourceInstance), str(n.SourceScript), str(n.ExecutionID), str(n.ParentExecutionID),
		tm(n.SiteEnqueuedAt), tm(n.CreatedAt), tm(n.UpdatedAt), tm(n.LastAttemptAt), tm(n.NextAttemptAt),
		tm(n.DeliveredAt), tm(n.ExpiresAt), claimedBy, tm(n.ClaimedUntil))
	return args, s.err
}

func (g *sqlgen) notificationValues(s *stmt, n *ports.Notification) error {
	targets, ok, err := jsonStrings(n.ResolvedTargets)
	if err != nil {
		return err
	}
	s.sql("(").str(n.ID).sql(", ").str(n.Type).sql(", ").str(n.List).sql(", ").
		str(n.Subject).sql(", ").str(n.Body).sql(", ")
	if len(n.TypeData) == 0 {
		s.sql(g.nullText())
	} else {
		s.str(string(n.TypeData))
	}
	s.sql(", ").int(int64(n.Priority)).sql(", ").str(string(n.Status)).sql(", ").
		int(int64(n.RetryCount)).sql(", ").str(n.LastError).sql(", ")
	if ok {
		s.str(targets)
	} else {
		s.sql(g.nullText())
	}
	s.sql(", ").str(n.SourceSite).sql(", ").str(n.SourceInstance).sql(", ").str(n.SourceScript).
		sql(", ").str(n.ExecutionID).sql(", ").str(n.ParentExecutionID).
		sql(", ").time(n.SiteEnqueuedAt).sql(", ").time(n.CreatedAt).sql(", ").time(n.UpdatedAt).
		sql(", ").time(n.LastAttemptAt).sql(", ").time(n.NextAttemptAt).sql(", ").time(n.DeliveredAt).
		sql(", ").time(n.ExpiresAt).sql(", ").nullStr(n.ClaimedBy).sql(", ").time(n.ClaimedUntil).sql(")")
	return nil
}

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

// claimSelect appends the SELECT of one part of a claim: up to limit rows
// of the part that are unleased at now, in claim order. hint is the MS SQL
// table hint, lock the PostgreSQL locking clause.
func (g *sqlgen) claimSelect(s *stmt, p claimPart, now time.Time, limit int, hint, lock string) {
	s.sql("SELECT ").top(limit).sql(`"id", "priority", "created_at" FROM "notifications"`).sql(hint)
	if g.kind == kindSQLite {
		// Without statistics SQLite prefers an equality index on status
		// and sorts; name the partial index.
		s.sql(` INDEXED BY "`).sql(p.index).sql(`"`)
	}
	s.sql(` WHERE "status" = `).str(p.status)
	if p.due != "" {
		s.sql(" AND ").sql(p.due)
		if strings.HasSuffix(p.due, "= ") {
			s.time(now)
		}
	}
	s.sql(` AND ("claimed_until" IS NULL OR "claimed_until" <= `).time(now).
		sql(`) ORDER BY "priority" DESC, "created_at", "id"`).limit(limit).sql(lock)
}

// claim leases up to req.Limit due, unleased rows in claim order and returns
// them (unordered; the caller sorts). Each part of claimParts proposes its
// first Limit rows; the first Limit of their union in claim order are
// leased.
//
//   - PostgreSQL: each part is SELECT ... FOR UPDATE SKIP LOCKED, so that
//     concurrent claimers skip each other's rows instead of waiting, and
//     UPDATE ... WHERE id = ANY(the chosen ids) RETURNING the rows.
//   - MS SQL: each part is SELECT TOP (n) ... WITH (READPAST, UPDLOCK,
//     ROWLOCK), and UPDATE ... OUTPUT inserted.* joined on the chosen ids.
//   - SQLite: UPDATE ... WHERE id IN (the chosen ids) RETURNING, on the single
//     writer connection, which serialises claims.
func (g *sqlgen) claim(req ports.ClaimRequest) (query, error) {
	until := req.Now.Add(req.Lease)
	n := req.Limit
	s := g.stmt(2048)
	set := func() {
		s.sql(`"claimed_by" = `).str(req.Owner).sql(`, "claimed_until" = `).time(until)
	}
	// ctes appends "WITH c0 AS (part 0), c1 AS (part 1), ...".
	ctes := func(hint, lock string) {
		s.sql("WITH ")
		for i, p := range claimParts {
			if i > 0 {
				s.sql(", ")
			}
			s.sql("c").int(int64(i)).sql(" AS (")
			g.claimSelect(s, p, req.Now, n, hint, lock)
			s.sql(")")
		}
	}
	// union appends "SELECT * FROM c0 UNION ALL SELECT * FROM c1 ...".
	union := func() {
		for i := range claimParts {
			if i > 0 {
				s.sql(" UNION ALL ")
			}
			s.sql("SELECT * FROM c").int(int64(i))
		}
	}
	switch g.kind {
	case kindPostgres:
		ctes("", " FOR UPDATE SKIP LOCKED")
		s.sql(` UPDATE "notifications" AS n SET `)
		set()
		// The chosen ids as an array: the planner then reaches n by its
		// primary key, never by a scan joined to them.
		s.sql(` WHERE n."id" = ANY (ARRAY(SELECT "id" FROM (`)
		union()
		s.sql(`) AS u ORDER BY "priority" DESC, "created_at", "id"`).limit(n).sql(`)) RETURNING `).sql(allColsN)
	case kindMSSQL:
		ctes(" WITH (READPAST, UPDLOCK, ROWLOCK)", "")
		s.sql(`, chosen AS (SELECT `).top(n).sql(`"id" FROM (`)
		union()
		s.sql(`) AS u ORDER BY "priority" DESC, "created_at", "id") UPDATE n SET `)
		set()
		s.output(allColsIns).sql(` FROM "notifications" AS n INNER JOIN chosen ON n."id" = chosen."id"`)
	default:
		s.sql(`UPDATE "notifications" SET `)
		set()
		s.sql(` WHERE "id" IN (SELECT "id" FROM (`)
		for i, p := range claimParts {
			if i > 0 {
				s.sql(" UNION ALL ")
			}
			s.sql("SELECT * FROM (")
			g.claimSelect(s, p, req.Now, n, "", "")
			s.sql(")")
		}
		s.sql(`) ORDER BY "priority" DESC, "created_at", "id"`).limit(n).sql(`)`).returning(allCols)
	}
	return s.done()
}

// The columns Record writes, in the order of its VALUES rows.
var recordColumns = []string{
	"id", "status", "retry_count", "last_error", "resolved_targets",
	"last_attempt_at", "next_attempt_at", "delivered_at", "updated_at",
}

// record writes updates (distinct ids) onto the rows owner still holds and
// releases them, in one statement that returns the ids it updated: UPDATE
// ... FROM a VALUES list joined on id, guarded by claimed_by = owner.
func (g *sqlgen) record(owner string, updates []ports.Update) (query, error) {
	if g.kind == kindPostgres {
		return g.recordPG(owner, updates)
	}
	s := g.stmt(256 + len(updates)*256)
	set := func(prefix string) {
		for i, c := range recordColumns[1:] {
			if i > 0 {
				s.sql(", ")
			}
			s.sql(`"`).sql(c).sql(`" = `).sql(prefix).sql(`"`).sql(c).sql(`"`)
		}
		s.sql(`, "claimed_by" = NULL, "claimed_until" = `).time(time.Time{})
	}
	values := func() error {
		for i := range updates {
			u := &updates[i]
			if i > 0 {
				s.sql(", ")
			}
			targets, ok, err := jsonStrings(u.ResolvedTargets)
			if err != nil {
				return err
			}
			s.sql("(").str(u.ID).sql(", ").str(string(u.Status)).sql(", ").int(int64(u.RetryCount)).
				sql(", ").str(u.LastError).sql(", ")
			if ok {
				s.str(targets)
			} else {
				s.sql(g.nullText())
			}
			s.sql(", ").time(u.LastAttemptAt).sql(", ").time(u.NextAttemptAt).sql(", ").
				time(u.DeliveredAt).sql(", ").time(u.UpdatedAt).sql(")")
		}
		return nil
	}
	cols := colList("", recordColumns)
	switch g.kind {
	case kindMSSQL:
		s.sql(`UPDATE n SET `)
		set("v.")
		s.sql(` OUTPUT inserted."id" FROM "notifications" AS n INNER JOIN (VALUES `)
		if err := values(); err != nil {
			return query{}, err
		}
		s.sql(") AS v (").sql(cols).sql(`) ON n."id" = v."id" WHERE n."claimed_by" = `).str(owner)
	default:
		s.sql("WITH v (").sql(cols).sql(") AS (VALUES ")
		if err := values(); err != nil {
			return query{}, err
		}
		s.sql(`) UPDATE "notifications" SET `)
		set("v.")
		s.sql(` FROM v WHERE "notifications"."id" = v."id" AND "notifications"."claimed_by" = `).str(owner).
			sql(` RETURNING "id"`)
	}
	return s.done()
}

// release drops owner's leases on ids.
func (g *sqlgen) release(owner string, ids []string) (query, error) {
	s := g.stmt(128 + len(ids)*40)
	s.sql(`UPDATE "notifications" SET "claimed_by" = NULL, "claimed_until" = `).time(time.Time{}).
		sql(` WHERE "id" IN `).strs(ids).sql(` AND "claimed_by" = `).str(owner)
	return s.done()
}

// releaseNode drops the leases that the owners of node other than keep hold
// on Pending and Retrying rows (see ports.Store.ReleaseNode). An owner of
// node begins with ports.LeaseOwnerPrefix(node), compared byte for byte:
// the prefix is a LIKE pattern with its wildcards escaped on PostgreSQL
// (claimed_by is of the "C" collation) and on MS SQL (in the binary
// collation: the column's own may ignore case); SQLite's LIKE ignores the
// case of ASCII letters, so there the first bytes of claimed_by are compared
// as a BLOB.
func (g *sqlgen) releaseNode(node, keep string) (query, error) {
	prefix := ports.LeaseOwnerPrefix(node)
	s := g.stmt(256)
	s.sql(`UPDATE "notifications" SET "claimed_by" = NULL, "claimed_until" = `).time(time.Time{}).
		sql(` WHERE "status" IN `).strs(dueStatuses)
	switch g.kind {
	case kindPostgres:
		s.sql(` AND "claimed_by" LIKE `).str(likeLiteral(prefix) + "%").sql(` ESCAPE '\'`)
	case kindMSSQL:
		s.sql(` AND "claimed_by" COLLATE Latin1_General_100_BIN2 LIKE `).str(likeLiteral(prefix) + "%").sql(` ESCAPE '\'`)
	default:
		s.sql(` AND substr(CAST("claimed_by" AS BLOB), 1, `).int(int64(len(prefix))).
			sql(`) = CAST(`).str(prefix).sql(` AS BLOB)`)
	}
	if keep != "" {
		s.sql(` AND "claimed_by" <> `).str(keep)
	}
	return s.done()
}

// get selects one row by id.
func (g *sqlgen) get(id string) (query, error) {
	s := g.stmt(512)
	s.sql(`SELECT `).sql(allCols).sql(` FROM "notifications" WHERE "id" = `).str(id)
	return s.done()
}

// statuses selects the id and status of the known rows among ids, only of
// source site site when it is not empty.
func (g *sqlgen) statuses(site string, ids []string) (query, error) {
	s := g.stmt(96 + len(ids)*40)
	s.sql(`SELECT "id", "status" FROM "notifications" WHERE "id" IN `).strs(ids)
	if site != "" {
		s.sql(` AND "source_site" = `).str(site)
	}
	return s.done()
}

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

// where appends the conditions of f, each preceded by " AND ", so that the
// caller starts the clause with "WHERE 1 = 1" or a condition of its own.
func (g *sqlgen) where(s *stmt, f ports.Filter) error {
	if len(f.Statuses) > 0 {
		names := make([]string, len(f.Statuses))
		for i, st := range f.Statuses {
			if !st.Valid() {
				return fmt.Errorf("sqlstore: filter status %q is not a central status: %w", st, ports.ErrInvalid)
			}
			names[i] = string(st)
		}
		s.sql(` AND "status" IN `).strs(names)
	}
	if f.Type != "" {
		s.sql(` AND "type" = `).str(f.Type)
	}
	if f.SourceSite != "" {
		s.sql(` AND "source_site" = `).str(f.SourceSite)
	}
	if f.List != "" {
		s.sql(` AND "list" = `).str(f.List)
	}
	if !f.CreatedFrom.IsZero() {
		s.sql(` AND "created_at" >= `).time(f.CreatedFrom)
	}
	if !f.CreatedTo.IsZero() {
		s.sql(` AND "created_at" < `).time(f.CreatedTo)
	}
	if !f.UpdatedFrom.IsZero() {
		s.sql(` AND "updated_at" >= `).time(f.UpdatedFrom)
	}
	if !f.UpdatedTo.IsZero() {
		s.sql(` AND "updated_at" < `).time(f.UpdatedTo)
	}
	if !f.StuckBefore.IsZero() {
		s.sql(` AND "status" IN `).strs(dueStatuses).sql(` AND "created_at" < `).time(f.StuckBefore)
	}
	if f.Subject != "" {
		// The port ignores the case of ASCII letters only: É and é differ.
		switch g.kind {
		case kindPostgres:
			// A regular expression that spells each ASCII letter in both
			// cases: 13 times cheaper per row than folding the subject with
			// translate() for a LIKE, and the pg_trgm index of migration 0004
			// serves it (see DESIGN.md, "Keyword search").
			s.sql(` AND "subject" ~ `).str(asciiFoldRegexp(f.Subject))
		case kindMSSQL:
			// The binary collation compares code points, and the pattern
			// spells each ASCII letter in both cases ([aA]).
			s.sql(` AND "subject" COLLATE Latin1_General_100_BIN2 LIKE `).
				str("%" + likeEscapeFold(f.Subject) + "%").sql(` ESCAPE '\'`)
		default:
			// SQLite's LIKE ignores the case of ASCII letters only.
			s.sql(` AND "subject" LIKE `).str("%" + likeEscape(f.Subject) + "%").sql(` ESCAPE '\'`)
		}
	}
	return nil
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

// likeEscapeFold is likeEscape for a LIKE that compares code points (MS SQL's
// binary collation): each ASCII letter becomes the bracket of its two cases.
func likeEscapeFold(text string) string {
	// string([]byte{c}), not string(c): a byte of a multi-byte character
	// must stay that byte.
	return foldASCII(text, func(b *strings.Builder, c byte) { b.WriteString(likeEscape(string([]byte{c}))) })
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
func (g *sqlgen) subjectCandidates(keyword, match string, limit int) (query, error) {
	s := g.stmt(256 + len(match) + len(keyword))
	s.sql(`SELECT rowid FROM "notifications_subject" WHERE "notifications_subject" MATCH `).str(match).
		sql(" UNION ALL ").sql(sqliteSubjectTail).sql(` AND "subject" LIKE `).str("%" + likeEscape(keyword) + "%").
		sql(` ESCAPE '\'`).limit(limit)
	return s.done()
}

// subjectCandidateCount counts, up to limit, subjectCandidates.
func (g *sqlgen) subjectCandidateCount(keyword, match string, limit int) (query, error) {
	q, err := g.subjectCandidates(keyword, match, limit)
	if err != nil {
		return query{}, err
	}
	q.text = "SELECT COUNT(*) FROM (" + q.text + ")"
	return q, nil
}

// candidates are the only rows a list or a count reads on SQLite's keyword
// path (see Store.subjectRowids): the rows of rowids, or, when rowids is
// nil, the rows the trigram index finds for match and those above its mark.
type candidates struct {
	rowids []int64
	match  string
}

// fromNotifications appends the FROM clause of a list or a count, and opens
// its WHERE clause. With candidates (nil but on SQLite's keyword path), the
// rows are read by rowid (NOT INDEXED leaves SQLite no other way in) and
// only those rows are filtered.
func (g *sqlgen) fromNotifications(s *stmt, c *candidates) {
	switch {
	case c == nil:
		s.sql(` FROM "notifications" WHERE 1 = 1`)
	case c.rowids != nil:
		s.sql(` FROM "notifications" NOT INDEXED WHERE rowid IN (`)
		for i, id := range c.rowids {
			if i > 0 {
				s.sql(", ")
			}
			s.int(id)
		}
		s.sql(")")
	default:
		s.sql(` FROM "notifications" NOT INDEXED WHERE rowid IN (SELECT rowid FROM "notifications_subject" WHERE "notifications_subject" MATCH `).
			str(c.match).sql(" UNION ALL ").sql(sqliteSubjectTail).sql(")")
	}
}

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

// query selects up to limit rows of f after the cursor, newest first
// (created_at DESC, id DESC), by keyset; among the candidates only, when
// not nil (see fromNotifications).
func (g *sqlgen) query(f ports.Filter, after *cursor, limit int, c *candidates) (query, error) {
	s := g.stmt(1024)
	if c != nil {
		s.b = slices.Grow(s.b, len(c.rowids)*12)
	}
	s.sql("SELECT ").top(limit).sql(allCols)
	g.fromNotifications(s, c)
	if err := g.where(s, f); err != nil {
		return query{}, err
	}
	if after != nil {
		if g.kind == kindMSSQL {
			s.sql(` AND ("created_at" < `).time(after.createdAt).
				sql(` OR ("created_at" = `).time(after.createdAt).sql(` AND "id" < `).str(after.id).sql("))")
		} else {
			s.sql(` AND ("created_at", "id") < (`).time(after.createdAt).sql(", ").str(after.id).sql(")")
		}
	}
	s.sql(` ORDER BY "created_at" DESC, "id" DESC`).limit(limit)
	return s.done()
}

// count counts the rows of f; among the candidates only, when not nil (see
// fromNotifications).
func (g *sqlgen) count(f ports.Filter, c *candidates) (query, error) {
	s := g.stmt(512)
	if g.kind == kindMSSQL {
		s.sql(`SELECT COUNT_BIG(*)`)
	} else {
		s.sql(`SELECT COUNT(*)`)
	}
	g.fromNotifications(s, c)
	if err := g.where(s, f); err != nil {
		return query{}, err
	}
	return s.done()
}

// kpis selects, per source site, two kinds of rows:
//
//   - kind 0, one per (status, site) among Pending, Retrying and Parked: the
//     row count, the count created before StuckBefore, the oldest created_at
//     (served by the (status, created_at, id) index, which carries
//     source_site, on PostgreSQL and MS SQL; by a partial (status,
//     source_site, created_at) index on SQLite);
//   - kind 1, one per site: the count delivered since DeliveredSince (served
//     by the delivered_at index).
//
// Columns: kind, source_site, status, n, stuck, oldest.
func (g *sqlgen) kpis(req ports.KPIRequest) (query, error) {
	count := "COUNT(*)"
	if g.kind == kindMSSQL {
		count = "COUNT_BIG(*)"
	}
	s := g.stmt(1024)
	s.sql(`SELECT 0 AS kind, "source_site", "status", `).sql(count).sql(` AS n, `)
	if req.StuckBefore.IsZero() {
		s.sql(`0`)
	} else {
		s.sql(`SUM(CASE WHEN "created_at" < `).time(req.StuckBefore).sql(` THEN 1 ELSE 0 END)`)
	}
	s.sql(` AS stuck, MIN("created_at") AS oldest FROM "notifications"`)
	if g.kind == kindSQLite {
		// SQLite groups by sorting unless an index yields the groups in
		// order; this one does, and holds only these statuses.
		s.sql(` INDEXED BY "notifications_kpi_idx"`)
	}
	s.sql(` WHERE "status" IN `).strs(kpiStatuses).sql(` GROUP BY "status", "source_site"`)
	s.sql(` UNION ALL SELECT 1, "source_site", `).str("").sql(`, `).sql(count).sql(`, 0, `).time(time.Time{}).
		sql(` FROM "notifications"`)
	if g.kind == kindSQLite {
		// Without it SQLite reads the whole table through the site index,
		// to have the groups in order; the recent deliveries are few.
		s.sql(` INDEXED BY "notifications_delivered_idx"`)
	}
	s.sql(` WHERE "delivered_at" IS NOT NULL AND "delivered_at" >= `)
	if req.DeliveredSince.IsZero() {
		// Every delivered row has delivered_at set.
		s.sql(`"delivered_at"`)
	} else {
		s.time(req.DeliveredSince)
	}
	s.sql(` GROUP BY "source_site"`)
	return s.done()
}

// transition moves the selected rows from req.From to req.To and returns
// their ids.
func (g *sqlgen) transition(req ports.TransitionRequest) (query, error) {
	s := g.stmt(512 + len(req.Selection.IDs)*40)
	s.sql(`UPDATE "notifications" SET "status" = `).str(string(req.To)).
		sql(`, "updated_at" = `).time(req.Now).
		sql(`, "claimed_by" = NULL, "claimed_until" = `).time(time.Time{})
	if req.Reset {
		s.sql(`, "retry_count" = 0, "next_attempt_at" = `).time(time.Time{}).sql(`, "last_error" = `).str("")
	}
	s.output(`inserted."id"`)
	s.sql(` WHERE "status" = `).str(string(req.From))
	if len(req.Selection.IDs) > 0 {
		s.sql(` AND "id" IN `).strs(req.Selection.IDs)
	} else if err := g.where(s, req.Selection.Filter); err != nil {
		return query{}, err
	}
	s.returning(`"id"`)
	return s.done()
}

// purge deletes up to limit terminal rows last updated before cutoff (a row
// without UpdatedAt counts as updated at the zero time, before any cutoff)
// and returns their ids: DELETE TOP (n) ... OUTPUT deleted.id on MS SQL,
// DELETE ... WHERE id IN (SELECT ... LIMIT n) RETURNING id elsewhere.
func (g *sqlgen) purge(cutoff time.Time, limit int) (query, error) {
	s := g.stmt(512)
	if g.kind == kindMSSQL {
		s.sql(`DELETE `).top(limit).sql(`FROM "notifications" OUTPUT deleted."id" WHERE "status" IN `).strs(termStatuses).
			sql(` AND ("updated_at" < `).time(cutoff).sql(` OR "updated_at" IS NULL)`)
		return s.done()
	}
	// The conditions stand in the outer WHERE too: PostgreSQL re-checks only
	// those on a row another transaction changed meanwhile (an operator
	// Retry of a Parked row), so without them it would delete a row that is
	// no longer terminal.
	s.sql(`DELETE FROM "notifications" WHERE "id" IN (SELECT "id" FROM "notifications" WHERE "status" IN `).strs(termStatuses).
		sql(` AND ("updated_at" < `).time(cutoff).sql(` OR "updated_at" IS NULL)`).limit(limit).
		sql(`) AND "status" IN `).strs(termStatuses).
		sql(` AND ("updated_at" < `).time(cutoff).sql(` OR "updated_at" IS NULL) RETURNING "id"`)
	return s.done()
}

// --- audit -------------------------------------------------------------------

// appendAudit inserts records.
func (g *sqlgen) appendAudit(records []ports.AuditRecord) (query, error) {
	if g.kind == kindPostgres {
		return g.appendAuditPG(records)
	}
	s := g.stmt(128 + len(records)*160)
	s.sql(`INSERT INTO "notification_audit" (`).sql(auditCols).sql(")")
	if g.kind == kindMSSQL {
		// A derived VALUES table has no 1,000-row cap, unlike INSERT VALUES.
		s.sql(" SELECT * FROM (")
	}
	s.sql(" VALUES ")
	for i := range records {
		r := &records[i]
		if i > 0 {
			s.sql(", ")
		}
		s.sql("(").str(r.NotificationID).sql(", ").time(r.At).sql(", ").str(string(r.Kind)).
			sql(", ").str(r.Actor).sql(", ").str(string(r.Outcome)).sql(", ").str(string(r.Status)).
			sql(", ").int(r.Duration.Microseconds()).sql(", ").str(r.Error).sql(")")
	}
	if g.kind == kindMSSQL {
		s.sql(") AS v (").sql(auditCols).sql(")")
	}
	return s.done()
}

// history selects the records of one notification, oldest first, then in
// append order.
func (g *sqlgen) history(id string) (query, error) {
	s := g.stmt(256)
	s.sql(`SELECT `).sql(auditCols).sql(` FROM "notification_audit" WHERE "notification_id" = `).str(id).
		sql(` ORDER BY "at", "id"`)
	return s.done()
}

// forget deletes the records of ids.
func (g *sqlgen) forget(ids []string) (query, error) {
	s := g.stmt(64 + len(ids)*40)
	s.sql(`DELETE FROM "notification_audit" WHERE "notification_id" IN `).strs(ids)
	return s.done()
}

// --- PostgreSQL batch statements ---------------------------------------------

// pgTime is an instant as a PostgreSQL array element: nil (NULL) when zero,
// else UTC truncated to the microsecond.
func pgTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC().Truncate(time.Microsecond)
	return &u
}

// unnest appends "unnest($1::t1[], $2::t2[], ...)" for the columns.
func (s *stmt) unnest(cols ...pgColumn) *stmt {
	s.sql("unnest(")
	for i, c := range cols {
		if i > 0 {
			s.sql(", ")
		}
		s.param(c.values, c.pgType)
	}
	return s.sql(")")
}

// pgColumn is one array parameter of an unnest.
type pgColumn struct {
	values any
	pgType string
}

// insertPG is insert on PostgreSQL: INSERT ... SELECT FROM unnest(one array
// per column) ON CONFLICT (id) DO NOTHING RETURNING id.
func (g *sqlgen) insertPG(ns []ports.Notification) (query, error) {
	n := len(ns)
	s := g.stmt(1024)
	var (
		ids, types, lists, subjects, bodies  = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		typeData, targets, claimedBy         = make([]*string, n), make([]*string, n), make([]*string, n)
		priority, retryCount                 = make([]int64, n), make([]int64, n)
		status, lastError                    = make([]string, n), make([]string, n)
		site, instance, script, exec, parent = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		enqueued, created, updated, lastAt   = make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
		next, delivered, expires, until      = make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
	)
	for i := range ns {
		r := &ns[i]
		ids[i], types[i], lists[i] = s.check(r.ID), s.check(r.Type), s.check(r.List)
		subjects[i], bodies[i] = s.check(r.Subject), s.check(r.Body)
		if len(r.TypeData) > 0 {
			v := s.check(string(r.TypeData))
			typeData[i] = &v
		}
		t, ok, err := jsonStrings(r.ResolvedTargets)
		if err != nil {
			return query{}, err
		}
		if ok {
			v := s.check(t)
			targets[i] = &v
		}
		if r.ClaimedBy != "" {
			v := s.check(r.ClaimedBy)
			claimedBy[i] = &v
		}
		priority[i], retryCount[i] = int64(r.Priority), int64(r.RetryCount)
		status[i], lastError[i] = s.check(string(r.Status)), s.check(r.LastError)
		site[i], instance[i], script[i] = s.check(r.SourceSite), s.check(r.SourceInstance), s.check(r.SourceScript)
		exec[i], parent[i] = s.check(r.ExecutionID), s.check(r.ParentExecutionID)
		enqueued[i], created[i], updated[i], lastAt[i] = pgTime(r.SiteEnqueuedAt), pgTime(r.CreatedAt), pgTime(r.UpdatedAt), pgTime(r.LastAttemptAt)
		next[i], delivered[i], expires[i], until[i] = pgTime(r.NextAttemptAt), pgTime(r.DeliveredAt), pgTime(r.ExpiresAt), pgTime(r.ClaimedUntil)
	}
	const text, ts = "text[]", "timestamptz[]"
	s.sql(`INSERT INTO "notifications" (`).sql(allCols).sql(") SELECT * FROM ").unnest(
		pgColumn{ids, "uuid[]"}, pgColumn{types, text}, pgColumn{lists, text}, pgColumn{subjects, text},
		pgColumn{bodies, text}, pgColumn{typeData, text}, pgColumn{priority, "bigint[]"},
		pgColumn{status, text}, pgColumn{retryCount, "bigint[]"}, pgColumn{lastError, text}, pgColumn{targets, text},
		pgColumn{site, text}, pgColumn{instance, text}, pgColumn{script, text}, pgColumn{exec, text}, pgColumn{parent, text},
		pgColumn{enqueued, ts}, pgColumn{created, ts}, pgColumn{updated, ts}, pgColumn{lastAt, ts}, pgColumn{next, ts},
		pgColumn{delivered, ts}, pgColumn{expires, ts}, pgColumn{claimedBy, text}, pgColumn{until, ts},
	).sql(` ON CONFLICT ("id") DO NOTHING RETURNING "id"`)
	return s.done()
}

// recordPG is record on PostgreSQL: UPDATE ... FROM unnest(one array per
// column) joined on id, guarded by claimed_by = owner, RETURNING the ids.
func (g *sqlgen) recordPG(owner string, updates []ports.Update) (query, error) {
	n := len(updates)
	s := g.stmt(1024)
	var (
		ids, status, lastError             = make([]string, n), make([]string, n), make([]string, n)
		retryCount                         = make([]int64, n)
		targets                            = make([]*string, n)
		lastAt, next, delivered, updatedAt = make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
	)
	for i := range updates {
		u := &updates[i]
		ids[i], status[i], lastError[i] = s.check(u.ID), s.check(string(u.Status)), s.check(u.LastError)
		retryCount[i] = int64(u.RetryCount)
		t, ok, err := jsonStrings(u.ResolvedTargets)
		if err != nil {
			return query{}, err
		}
		if ok {
			v := s.check(t)
			targets[i] = &v
		}
		lastAt[i], next[i], delivered[i], updatedAt[i] = pgTime(u.LastAttemptAt), pgTime(u.NextAttemptAt), pgTime(u.DeliveredAt), pgTime(u.UpdatedAt)
	}
	const text, ts = "text[]", "timestamptz[]"
	s.sql(`UPDATE "notifications" AS n SET `)
	for i, c := range recordColumns[1:] {
		if i > 0 {
			s.sql(", ")
		}
		s.sql(`"`).sql(c).sql(`" = v."`).sql(c).sql(`"`)
	}
	s.sql(`, "claimed_by" = NULL, "claimed_until" = NULL FROM `).unnest(
		pgColumn{ids, "uuid[]"}, pgColumn{status, text}, pgColumn{retryCount, "bigint[]"}, pgColumn{lastError, text},
		pgColumn{targets, text}, pgColumn{lastAt, ts}, pgColumn{next, ts}, pgColumn{delivered, ts}, pgColumn{updatedAt, ts},
	)
	// The owner rides in v as a column (array_fill repeats it server-side)
	// so that the guard is a join clause, not a filter on n: with the filter,
	// the planner trusts its statistics of claimed_by (all NULL right after
	// a fill), expects one row of n and rescans v for each real one. And
	// id = ANY($1) makes the primary key the way into n.
	s.b = s.b[:len(s.b)-1] // reopen unnest( ... ) for the owner column
	s.sql(", array_fill(").param(owner, "text").sql(", ARRAY[cardinality($1::uuid[])]))").
		sql(" AS v (").sql(colList("", recordColumns)).sql(`, "owner") WHERE n."id" = ANY($1::uuid[]) AND n."id" = v."id" AND n."claimed_by" = v."owner" RETURNING n."id"`)
	return s.done()
}

// appendAuditPG is appendAudit on PostgreSQL: INSERT ... SELECT FROM
// unnest(one array per column).
func (g *sqlgen) appendAuditPG(records []ports.AuditRecord) (query, error) {
	n := len(records)
	s := g.stmt(512)
	var (
		ids, kinds, actors, outcomes, status, errs = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		at                                         = make([]*time.Time, n)
		durations                                  = make([]int64, n)
	)
	for i := range records {
		r := &records[i]
		ids[i], kinds[i], actors[i] = s.check(r.NotificationID), s.check(string(r.Kind)), s.check(r.Actor)
		outcomes[i], status[i], errs[i] = s.check(string(r.Outcome)), s.check(string(r.Status)), s.check(r.Error)
		at[i] = pgTime(r.At)
		durations[i] = r.Duration.Microseconds()
	}
	const text = "text[]"
	s.sql(`INSERT INTO "notification_audit" (`).sql(auditCols).sql(") SELECT * FROM ").unnest(
		pgColumn{ids, "uuid[]"}, pgColumn{at, "timestamptz[]"}, pgColumn{kinds, text}, pgColumn{actors, text},
		pgColumn{outcomes, text}, pgColumn{status, text}, pgColumn{durations, "bigint[]"}, pgColumn{errs, text},
	)
	return s.done()
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

// validID reports whether id can name a row: on PostgreSQL, whose id
// column is a uuid, only a UUID can; elsewhere any text.
func (g *sqlgen) validID(id string) bool {
	return g.kind != kindPostgres || isUUID(id)
}

// validIDs returns the ids that can name a row (ids itself when all can).
func (g *sqlgen) validIDs(ids []string) []string {
	for i, id := range ids {
		if !g.validID(id) {
			out := append([]string(nil), ids[:i]...)
			for _, id := range ids[i+1:] {
				if g.validID(id) {
					out = append(out, id)
				}
			}
			return out
		}
	}
	return ids
}
