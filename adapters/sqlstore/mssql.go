package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mssqldialect"
	"github.com/uptrace/bun/schema"

	"github.com/siteline/outbox/ports"
)

// mssqlDialect is MS SQL's part of the statements (see dialect). Values are
// literals that bun formats (N'...'), never parameters: MS SQL caps a
// request at 2,100 of them. No MS SQL server runs here: sqlgen_test.go
// renders these statements and checks them.
type mssqlDialect struct{}

func (mssqlDialect) newBun() schema.Dialect { return bunMSSQL{mssqldialect.New()} }

// open: one pool through go-mssqldb.
func (mssqlDialect) open(h *handle, cfg Config) error {
	db, err := sql.Open("sqlserver", cfg.DSN)
	if err != nil {
		return err
	}
	h.useServerPool(db, cfg)
	return nil
}

func (mssqlDialect) writes() writeDialect { return mssqlWrites{} }

// subjectIndex: none (see DESIGN.md, "Keyword search").
func (mssqlDialect) subjectIndex(string) (string, bool) { return "", false }

// bunMSSQL is bun's MS SQL dialect without its Init, which asks the server
// for its version when the bun.DB is made (without a context, before Open's
// ping, and only to discard the answer).
type bunMSSQL struct{ *mssqldialect.Dialect }

// Init implements schema.Dialect: nothing to discover.
func (bunMSSQL) Init(*sql.DB)            {}
func (mssqlDialect) validID(string) bool { return true }

// appendTime writes a datetime2(6) in UTC; the NULL is typed, so that a
// VALUES list of NULLs still converts to the column.
func (mssqlDialect) appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, "CAST(NULL AS datetime2(6))"...)
	}
	b = append(b, "CAST('"...)
	b = t.UTC().Truncate(time.Microsecond).AppendFormat(b, "2006-01-02T15:04:05.000000")
	return append(b, "' AS datetime2(6))"...)
}

func (mssqlDialect) appendNullText(b []byte) []byte {
	return append(b, "CAST(NULL AS nvarchar(max))"...)
}
func (mssqlDialect) countAll() string { return "COUNT_BIG(*)" }

// firstRows is SELECT TOP (n), which takes any n rows, where bun would
// render a Limit as an ORDER BY of a constant with OFFSET ... FETCH.
func (mssqlDialect) firstRows(q *bun.SelectQuery, n int64) *bun.SelectQuery {
	return q.ColumnExpr(`TOP (?) 1 AS "one"`, n)
}

func (mssqlDialect) returned(col string) string { return `inserted."` + col + `"` }

func (mssqlDialect) from(string) schema.QueryAppender { return bun.Ident("notifications") }

// after spells the row comparison out: T-SQL has none.
func (mssqlDialect) after(q *bun.SelectQuery, table string, c cursor, oldest bool) *bun.SelectQuery {
	created, id := table+`"created_at"`, table+`"id"`
	if oldest {
		return q.Where(`(`+created+` > ? OR (`+created+` = ? AND `+id+` > ?))`, at(c.createdAt), at(c.createdAt), c.id)
	}
	return q.Where(`(`+created+` < ? OR (`+created+` = ? AND `+id+` < ?))`, at(c.createdAt), at(c.createdAt), c.id)
}

// keys: MS SQL keeps every index on the notifications (an update enters
// only the indexes whose columns it changes).
func (mssqlDialect) keys(ports.Filter, filterRead) keysUse { return noKeys }

// subjectContains compares code points (the binary collation) with each
// ASCII letter of the pattern spelled in both cases ([aA]).
func (mssqlDialect) subjectContains(q bun.QueryBuilder, keyword string, _ bool) bun.QueryBuilder {
	return q.Where(`"subject" COLLATE Latin1_General_100_BIN2 LIKE ? ESCAPE '\'`, "%"+likeEscapeFold(keyword)+"%")
}

// ownerHasPrefix is a LIKE in the binary collation (the column's own may
// ignore case), the prefix's wildcards, brackets and escape escaped.
func (mssqlDialect) ownerHasPrefix(q *bun.UpdateQuery, prefix string) *bun.UpdateQuery {
	return q.Where(`"claimed_by" COLLATE Latin1_General_100_BIN2 LIKE ? ESCAPE '\'`, likeLiteral(prefix)+"%")
}

// purge is DELETE TOP (n) ... OUTPUT deleted.id: bun's DeleteQuery has
// neither on MS SQL.
func (mssqlDialect) purge(db *bun.DB, cutoff time.Time, limit int) idQuery {
	return rawIDs{db.NewRaw(`DELETE TOP (?) FROM "notifications" OUTPUT deleted."id" WHERE "status" IN (?) AND ("updated_at" < ? OR "updated_at" IS NULL)`,
		limit, bun.List(termStatuses), at(cutoff))}
}

// claim selects each part with SELECT TOP (n) ... WITH (READPAST, UPDLOCK,
// ROWLOCK), so that concurrent claimers skip each other's rows, keeps the
// first Limit of their union in a CTE and updates them, returning the rows
// with OUTPUT inserted.*.
func (mssqlDialect) claim(db *bun.DB, req ports.ClaimRequest) *bun.RawQuery {
	var r rawSQL
	claimCTEs(&r, req, true, " WITH (READPAST, UPDLOCK, ROWLOCK)", "")
	r.sql(`, chosen AS (SELECT TOP (`).arg(req.Limit).sql(`) "id" FROM (`)
	claimUnion(&r)
	r.sql(`) AS u ORDER BY "priority" DESC, "created_at", "id") UPDATE n SET "claimed_by" = `).arg(req.Owner).
		sql(`, "claimed_until" = `).arg(at(req.Now.Add(req.Lease))).
		sql(` OUTPUT ` + quoted("inserted.", notificationColumns) +
			` FROM "notifications" AS n INNER JOIN chosen ON n."id" = chosen."id"`)
	return r.query(db)
}

// insertQuery is INSERT ... OUTPUT inserted.id SELECT ... FROM (VALUES
// ...) WHERE NOT EXISTS under UPDLOCK, HOLDLOCK: MS SQL has no ON
// CONFLICT, and a derived VALUES table no 1,000-row cap.
func (mssqlDialect) insertQuery(db *bun.DB, rows []notificationRow) *bun.RawQuery {
	cols := quoted("", notificationColumns)
	return db.NewRaw(`INSERT INTO "notifications" (`+cols+`) OUTPUT inserted."id" SELECT `+quoted("v.", notificationColumns)+
		` FROM (?) AS v (`+cols+`) WHERE NOT EXISTS (SELECT 1 FROM "notifications" AS n WITH (UPDLOCK, HOLDLOCK) WHERE n."id" = v."id")`,
		db.NewValues(&rows))
}

func (d mssqlDialect) insert(ctx context.Context, h *handle, rows []notificationRow) ([]string, error) {
	var qs []query
	err := chunks(rows, insertChunk, func(part []notificationRow) error {
		q, err := sqlText(h, d.insertQuery(h.w, part), 1024+len(part)*768)
		qs = append(qs, q)
		return err
	})
	if err != nil {
		return nil, err
	}
	return h.writeIDs(ctx, qs, len(rows))
}

// recordQuery is UPDATE ... OUTPUT inserted.id FROM the table joined to a
// VALUES list on id, guarded by claimed_by = owner.
func (mssqlDialect) recordQuery(h *handle, owner string, rows []recordRow) (query, error) {
	return sqlText(h, h.w.NewRaw(`UPDATE n SET `+recordSet+`, "claimed_by" = NULL, "claimed_until" = NULL OUTPUT inserted."id" FROM "notifications" AS n INNER JOIN (?) AS v (`+
		quoted("", recordColumns)+`) ON n."id" = v."id" WHERE n."claimed_by" = ?`, h.w.NewValues(&rows), owner), 512+len(rows)*320)
}

// appendQuery: a plain INSERT VALUES, whose 1,000-row cap auditChunk
// respects.
func (mssqlDialect) appendQuery(h *handle, rows []auditRow) (query, error) {
	return insertAudit(h, rows)
}

// likeEscapeFold is likeEscape for a LIKE that compares code points (MS SQL's
// binary collation): each ASCII letter becomes the bracket of its two cases.
func likeEscapeFold(text string) string {
	// string([]byte{c}), not string(c): a byte of a multi-byte character
	// must stay that byte.
	return foldASCII(text, func(b *strings.Builder, c byte) { b.WriteString(likeEscape(string([]byte{c}))) })
}

// --- migrations ------------------------------------------------------------------

// mssqlMigrationLock and mssqlMigrationUnlock take and release an
// application lock owned by the session, which waits without limit
// (@LockTimeout = -1). The runner before bun/migrate took the same
// resource owned by its transaction: the two wait for each other.
const (
	mssqlMigrationLock = `DECLARE @r int; EXEC @r = sp_getapplock @Resource = N'` + migrationLockName +
		`', @LockMode = N'Exclusive', @LockOwner = N'Session', @LockTimeout = -1; ` +
		`IF @r < 0 THROW 50000, N'sqlstore: could not take the migration lock', 1;`
	mssqlMigrationUnlock = `EXEC sp_releaseapplock @Resource = N'` + migrationLockName + `', @LockOwner = N'Session';`
)

func (mssqlDialect) lockMigrations(ctx context.Context, c *sql.Conn) (migrationLock, error) {
	return lockSession(ctx, c, mssqlMigrationLock, mssqlMigrationUnlock)
}

func (mssqlDialect) tableExists() string {
	return `SELECT CASE WHEN OBJECT_ID(?, N'U') IS NULL THEN 0 ELSE 1 END`
}

// createMigrationsTable: migrated_at is a datetime2(6), written as the
// store writes every instant (CAST('...T...' AS datetime2(6))), which no
// DATEFORMAT or language setting reads otherwise.
func (mssqlDialect) createMigrationsTable() []string {
	return []string{
		`CREATE TABLE "outbox_migrations" ("id" bigint IDENTITY(1,1) NOT NULL PRIMARY KEY, ` +
			`"name" nvarchar(255) NOT NULL, "group_id" bigint NOT NULL, "migrated_at" datetime2(6) NOT NULL)`,
		`CREATE UNIQUE INDEX "outbox_migrations_name_key" ON "outbox_migrations" ("name")`,
	}
}

// contains is subjectContains's LIKE on col.
func (mssqlDialect) contains(col, keyword string) (string, any) {
	return `"` + col + `" COLLATE Latin1_General_100_BIN2 LIKE ? ESCAPE '\'`, "%" + likeEscapeFold(keyword) + "%"
}

// bucket: DATEDIFF_BIG counts the microsecond boundaries crossed, exact on
// datetime2(6); bigint division floors the non-negative difference.
func (mssqlDialect) bucket(col string, size time.Duration) string {
	return fmt.Sprintf(`(DATEDIFF_BIG(microsecond, ?, %s) / %d)`, col, size.Microseconds())
}
