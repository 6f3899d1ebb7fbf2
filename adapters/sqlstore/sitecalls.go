package sqlstore

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/uptrace/bun"

	"github.com/siteline/outbox/ports"
)

// This file is ports.SiteCallStore over four tables (migration
// 0007_site_calls): site_calls, central's mirror of the sites' cached
// operations, keyed by (site, id); site_commands, the operators' commands
// relayed to sites, keyed by id; site_cursors, the reconciliation cursor
// per site; site_health, the latest health of each site node, a JSON
// document keyed by (site, node). The rows are bun models written and read
// through bun's query builders; what differs per dialect is the report's
// conditional upsert (writeDialect.reportSiteCalls: ON CONFLICT ... DO
// UPDATE ... WHERE on SQLite and PostgreSQL, MERGE on MS SQL), the purge's
// ordered delete, the keyset condition (row values but on MS SQL) and the
// keyword predicate (the dialect's contains).

var _ ports.SiteCallStore = (*SiteCalls)(nil)

// SiteCalls is central's mirror of the sites' cached operations, the
// sites' node health, the reconciliation cursors and the commands relayed
// to sites: ports.SiteCallStore.
type SiteCalls struct{ *handle }

// SiteCalls returns the site-call mirror of db.
func (db *DB) SiteCalls() *SiteCalls { return &SiteCalls{db.handle} }

// siteCallRow is a row of site_calls.
type siteCallRow struct {
	bun.BaseModel `bun:"table:site_calls,alias:sc"`

	Site              string  `bun:"site,pk"`
	ID                string  `bun:"id,pk"`
	Kind              string  `bun:"kind"`
	Target            string  `bun:"target"`
	Method            string  `bun:"method"`
	Status            string  `bun:"status"`
	RetryCount        int64   `bun:"retry_count"`
	LastError         string  `bun:"last_error"`
	NextAttemptAt     instant `bun:"next_attempt_at"`
	SourceInstance    string  `bun:"source_instance"`
	SourceScript      string  `bun:"source_script"`
	ExecutionID       string  `bun:"execution_id"`
	ParentExecutionID string  `bun:"parent_execution_id"`
	CreatedAt         instant `bun:"created_at"`
	UpdatedAt         instant `bun:"updated_at"`
	TerminalAt        instant `bun:"terminal_at"`
	Version           int64   `bun:"version"`
	ReportedAt        instant `bun:"reported_at"`
	Requested         string  `bun:"requested"`
	RequestedBy       string  `bun:"requested_by"`
	RequestedAt       instant `bun:"requested_at"`
}

// siteCallReportColumns are the columns a newer report replaces: all but
// the key and the request, which the report keeps while the row is Parked.
var siteCallReportColumns = func() []string {
	var out []string
	for _, c := range modelColumns((*siteCallRow)(nil)) {
		switch c.name {
		case "site", "id", "requested", "requested_by", "requested_at":
		default:
			out = append(out, c.name)
		}
	}
	return out
}()

// siteCommandRow is a row of site_commands.
type siteCommandRow struct {
	bun.BaseModel `bun:"table:site_commands,alias:cmd"`

	ID          string  `bun:"id,pk"`
	Site        string  `bun:"site"`
	OperationID string  `bun:"operation_id"`
	Action      string  `bun:"action"`
	Actor       string  `bun:"actor"`
	RequestedAt instant `bun:"requested_at"`
	State       string  `bun:"state"`
	Result      string  `bun:"result"`
	FinishedAt  instant `bun:"finished_at"`
}

// siteCursorRow is a row of site_cursors.
type siteCursorRow struct {
	bun.BaseModel `bun:"table:site_cursors,alias:cur"`

	Site  string `bun:"site,pk"`
	Epoch string `bun:"feed_epoch"`
	After string `bun:"feed_after"`
}

// siteHealthRow is a row of site_health: Health is the JSON of a
// ports.SiteHealth.
type siteHealthRow struct {
	bun.BaseModel `bun:"table:site_health,alias:sh"`

	Site       string  `bun:"site,pk"`
	Node       string  `bun:"node,pk"`
	ReportedAt instant `bun:"reported_at"`
	Health     string  `bun:"health"`
}

func toSiteCallRow(site string, op *ports.Operation, now time.Time) (siteCallRow, error) {
	if op.Version > math.MaxInt64 {
		return siteCallRow{}, fmt.Errorf("sqlstore: site call %.64q: version %d is too large: %w", op.ID, op.Version, ports.ErrInvalid)
	}
	r := siteCallRow{
		Site: site, ID: op.ID, Kind: string(op.Kind), Target: op.Target, Method: op.Method, Status: string(op.Status),
		RetryCount: int64(op.RetryCount), LastError: op.LastError, NextAttemptAt: at(op.NextAttemptAt),
		SourceInstance: op.SourceInstance, SourceScript: op.SourceScript, ExecutionID: op.ExecutionID,
		ParentExecutionID: op.ParentExecutionID, CreatedAt: at(op.CreatedAt), UpdatedAt: at(op.UpdatedAt),
		TerminalAt: at(op.TerminalAt), Version: int64(op.Version), ReportedAt: at(now),
	}
	return r, noNUL(r.Site, r.ID, r.Target, r.Method, r.LastError, r.SourceInstance, r.SourceScript,
		r.ExecutionID, r.ParentExecutionID)
}

func (r *siteCallRow) siteCall() ports.SiteCall {
	return ports.SiteCall{
		Site: r.Site,
		Operation: ports.Operation{
			ID: r.ID, Kind: ports.OpKind(r.Kind), Target: r.Target, Method: r.Method, Status: ports.OpStatus(r.Status),
			RetryCount: int(r.RetryCount), LastError: r.LastError, NextAttemptAt: r.NextAttemptAt.t,
			SourceInstance: r.SourceInstance, SourceScript: r.SourceScript, ExecutionID: r.ExecutionID,
			ParentExecutionID: r.ParentExecutionID, CreatedAt: r.CreatedAt.t, UpdatedAt: r.UpdatedAt.t,
			TerminalAt: r.TerminalAt.t, Version: uint64(r.Version),
		},
		ReportedAt: r.ReportedAt.t, Requested: ports.SiteCommandAction(r.Requested), RequestedBy: r.RequestedBy,
		RequestedAt: r.RequestedAt.t,
	}
}

func (r *siteCommandRow) command() ports.SiteCommand {
	return ports.SiteCommand{ID: r.ID, Site: r.Site, OperationID: r.OperationID, Action: ports.SiteCommandAction(r.Action),
		Actor: r.Actor, RequestedAt: r.RequestedAt.t, State: ports.SiteCommandState(r.State), Result: r.Result,
		FinishedAt: r.FinishedAt.t}
}

// keyText reports whether every text can be a key the mirror holds: valid
// UTF-8 without a NUL byte. Any other text names no row, and is answered
// as absent without asking the database (PostgreSQL refuses it in a
// statement).
func keyText(vs ...string) bool {
	for _, v := range vs {
		if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
			return false
		}
	}
	return true
}

// --- reports -------------------------------------------------------------------

// ReportSiteCalls implements ports.SiteCallStore: one conditional upsert of
// every row.
func (s *SiteCalls) ReportSiteCalls(ctx context.Context, site string, ops []ports.Operation, now time.Time) (int, error) {
	if site == "" || len(site) > ports.MaxSiteCallNameBytes || !keyText(site) {
		return 0, fmt.Errorf("sqlstore: report site calls: the site is empty, over %d bytes, or not UTF-8 without NUL: %w",
			ports.MaxSiteCallNameBytes, ports.ErrInvalid)
	}
	if len(ops) > ports.MaxSiteCallReport {
		return 0, fmt.Errorf("sqlstore: report site calls: %d rows, over %d: %w", len(ops), ports.MaxSiteCallReport, ports.ErrInvalid)
	}
	if len(ops) == 0 {
		return 0, nil
	}
	// One row per id, the highest version: an upsert may not touch a row
	// twice.
	newest := make(map[string]int, len(ops))
	for i := range ops {
		if err := ports.ValidateSiteCallReport(ops[i]); err != nil {
			return 0, fmt.Errorf("sqlstore: report site calls: %w", err)
		}
		if j, ok := newest[ops[i].ID]; !ok || ops[i].Version > ops[j].Version {
			newest[ops[i].ID] = i
		}
	}
	rows := make([]siteCallRow, 0, len(newest))
	for i := range ops {
		if newest[ops[i].ID] != i {
			continue
		}
		r, err := toSiteCallRow(site, &ops[i], now)
		if err != nil {
			return 0, err
		}
		rows = append(rows, r)
	}
	// In key order, so that two reports of overlapping rows (telemetry and
	// a reconciliation, on two central nodes) lock them in the same order.
	slices.SortFunc(rows, func(a, b siteCallRow) int { return strings.Compare(a.ID, b.ID) })
	var changed int64
	err := s.write(ctx, false, func(ctx context.Context, c conn) error {
		res, err := s.writes().reportSiteCalls(s.w, c, &rows).Exec(ctx)
		if err != nil {
			return err
		}
		changed, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, s.fail(fmt.Sprintf("report %d site calls", len(rows)), err)
	}
	return int(changed), nil
}

// reportSiteCallsConflict is the report of SQLite and PostgreSQL: INSERT
// ... ON CONFLICT DO UPDATE of the reported columns, where the stored
// version is below the reported one; the request stays while the new
// status is Parked.
func reportSiteCallsConflict(db *bun.DB, c bun.IConn, rows *[]siteCallRow) executor {
	q := db.NewInsert().Conn(c).Model(rows).On(`CONFLICT ("site", "id") DO UPDATE`)
	for _, col := range siteCallReportColumns {
		q = q.Set("? = EXCLUDED.?", bun.Ident(col), bun.Ident(col))
	}
	keep := func(col string, empty any) {
		q = q.Set(`? = CASE WHEN EXCLUDED."status" = ? THEN "sc".? ELSE ? END`,
			bun.Ident(col), string(ports.OpParked), bun.Ident(col), empty)
	}
	keep("requested", "")
	keep("requested_by", "")
	keep("requested_at", at(time.Time{}))
	return q.Where(`"sc"."version" < EXCLUDED."version"`)
}

// reportSiteCalls (MS SQL): MERGE ... WITH (HOLDLOCK), the rows as a
// VALUES source.
func (mssqlWrites) reportSiteCalls(db *bun.DB, c bun.IConn, rows *[]siteCallRow) executor {
	t := modelTable(db, rows)
	var set []byte
	for _, col := range siteCallReportColumns {
		set = fmt.Appendf(set, `%q = v.%q, `, col, col)
	}
	for _, col := range []string{"requested", "requested_by", "requested_at"} {
		set = fmt.Appendf(set, `%q = CASE WHEN v."status" = N'Parked' THEN t.%q ELSE `, col, col)
		if col == "requested_at" {
			set = append(set, "CAST(NULL AS datetime2(6)) END"...)
		} else {
			set = append(set, "N'' END, "...)
		}
	}
	return db.NewRaw(`MERGE INTO ? WITH (HOLDLOCK) AS t USING (?) AS v (?) ON t."site" = v."site" AND t."id" = v."id" `+
		`WHEN MATCHED AND t."version" < v."version" THEN UPDATE SET ? WHEN NOT MATCHED THEN INSERT (?) VALUES (?);`,
		t.SQLName, db.NewValues(rows), columns(t, ""), bun.Safe(set), columns(t, ""), columns(t, "v.")).Conn(c)
}

func (conflictWrites) reportSiteCalls(db *bun.DB, c bun.IConn, rows *[]siteCallRow) executor {
	return reportSiteCallsConflict(db, c, rows)
}

// getSiteCallQuery selects the row (site, id) into row.
func (s *SiteCalls) getSiteCallQuery(row *siteCallRow, site, id string) *bun.SelectQuery {
	return s.r.NewSelect().Model(row).Where(`"site" = ?`, site).Where(`"id" = ?`, id)
}

// GetSiteCall implements ports.SiteCallStore.
func (s *SiteCalls) GetSiteCall(ctx context.Context, site, id string) (ports.SiteCall, error) {
	notFound := fmt.Errorf("sqlstore: site call %.64q of %.64q: %w", id, site, ports.ErrNotFound)
	if !keyText(site, id) {
		return ports.SiteCall{}, notFound
	}
	var row siteCallRow
	err := s.getSiteCallQuery(&row, site, id).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return ports.SiteCall{}, notFound
	}
	if err != nil {
		return ports.SiteCall{}, s.fail("get site call", err)
	}
	return row.siteCall(), nil
}

// --- queries -------------------------------------------------------------------

// siteCallCursor is the position after the last row of a page.
type siteCallCursor struct {
	CreatedUS int64  `json:"c"`
	Site      string `json:"s"`
	ID        string `json:"i"`
}

func encodeSiteCallCursor(c ports.SiteCall) string {
	b, _ := json.Marshal(siteCallCursor{CreatedUS: c.CreatedAt.UnixMicro(), Site: c.Site, ID: c.ID})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeSiteCallCursor(text string) (siteCallCursor, error) {
	var c siteCallCursor
	raw, err := base64.RawURLEncoding.DecodeString(text)
	if err != nil || json.Unmarshal(raw, &c) != nil || c.ID == "" || !keyText(c.Site, c.ID) {
		return siteCallCursor{}, fmt.Errorf("sqlstore: page cursor %.40q is malformed: %w", text, ports.ErrInvalid)
	}
	return c, nil
}

// checkSiteCallFilter reports a filter no statement can carry.
func checkSiteCallFilter(f ports.SiteCallFilter) error {
	for _, st := range f.Statuses {
		if !st.Valid() {
			return fmt.Errorf("sqlstore: filter status %.40q is unknown: %w", st, ports.ErrInvalid)
		}
	}
	if !keyText(f.Site, string(f.Kind), f.Target, f.Keyword) {
		return fmt.Errorf("sqlstore: filter text holds a NUL byte or is not UTF-8: %w", ports.ErrInvalid)
	}
	return nil
}

// siteCallKeywordColumns are the columns a keyword is looked for in.
var siteCallKeywordColumns = []string{"id", "target", "method", "last_error", "source_instance", "source_script"}

// siteCallKeywordText is those columns joined by spaces: the expression of
// PostgreSQL's trigram index (migration 0007), written as it is there.
const siteCallKeywordText = `("id" || ' ' || "target" || ' ' || "method" || ' ' || "last_error" || ' ' || "source_instance" || ' ' || "source_script")`

// whereSiteCalls adds the conditions of f to q.
func (s *SiteCalls) whereSiteCalls(q bun.QueryBuilder, f ports.SiteCallFilter) bun.QueryBuilder {
	if f.Site != "" {
		q = q.Where(`"site" = ?`, f.Site)
	}
	if f.Kind != "" {
		q = q.Where(`"kind" = ?`, string(f.Kind))
	}
	if f.Target != "" {
		q = q.Where(`"target" = ?`, f.Target)
	}
	if len(f.Statuses) > 0 {
		q = q.Where(`"status" IN (?)`, bun.List(f.Statuses))
	}
	for _, b := range []struct {
		t  time.Time
		op string
	}{{f.CreatedFrom, `"created_at" >= ?`}, {f.CreatedTo, `"created_at" < ?`},
		{f.UpdatedFrom, `"updated_at" >= ?`}, {f.UpdatedTo, `"updated_at" < ?`}, {f.ReportedTo, `"reported_at" < ?`}} {
		if !b.t.IsZero() {
			q = q.Where(b.op, at(b.t))
		}
	}
	if f.Keyword != "" {
		switch match, ok := subjectMatch(f.Keyword); {
		case s.driver == DriverPostgres:
			// Narrows through the trigram index of migration 0007; the
			// columns' own matches below decide.
			q = q.Where(siteCallKeywordText+" ~ ?", asciiFoldRegexp(f.Keyword))
		case s.driver == DriverSQLite && ok:
			// Narrows through the FTS5 trigram index of migration 0008,
			// kept in step by triggers; the matches below decide.
			q = q.Where(`rowid IN (SELECT rowid FROM "site_calls_search" WHERE "site_calls_search" MATCH ?)`, match)
		}
		q = q.WhereGroup(" AND ", func(q bun.QueryBuilder) bun.QueryBuilder {
			for _, col := range siteCallKeywordColumns {
				cond, arg := s.d.contains(col, f.Keyword)
				q = q.WhereOr(cond, arg)
			}
			return q
		})
	}
	return q
}

// querySiteCallsQuery selects up to limit rows of f after the cursor,
// newest first.
func (s *SiteCalls) querySiteCallsQuery(rows *[]siteCallRow, f ports.SiteCallFilter, after *siteCallCursor, limit int) *bun.SelectQuery {
	q := s.r.NewSelect().Model(rows).ApplyQueryBuilder(func(q bun.QueryBuilder) bun.QueryBuilder { return s.whereSiteCalls(q, f) })
	if after != nil {
		created := at(time.UnixMicro(after.CreatedUS).UTC())
		if s.driver == DriverMSSQL { // T-SQL has no row comparison
			q = q.Where(`("created_at" < ? OR ("created_at" = ? AND ("site" < ? OR ("site" = ? AND "id" < ?))))`,
				created, created, after.Site, after.Site, after.ID)
		} else {
			q = q.Where(`("created_at", "site", "id") < (?, ?, ?)`, created, after.Site, after.ID)
		}
	}
	return q.OrderExpr(`"created_at" DESC, "site" DESC, "id" DESC`).Limit(int64(limit))
}

// QuerySiteCalls implements ports.SiteCallStore.
func (s *SiteCalls) QuerySiteCalls(ctx context.Context, f ports.SiteCallFilter, page ports.PageRequest) (ports.SiteCallPage, error) {
	if page.Limit <= 0 {
		return ports.SiteCallPage{}, fmt.Errorf("sqlstore: query site calls: page limit %d must be positive: %w", page.Limit, ports.ErrInvalid)
	}
	if err := checkSiteCallFilter(f); err != nil {
		return ports.SiteCallPage{}, err
	}
	var after *siteCallCursor
	if page.After != "" {
		c, err := decodeSiteCallCursor(page.After)
		if err != nil {
			return ports.SiteCallPage{}, err
		}
		after = &c
	}
	rows := make([]siteCallRow, 0, page.Limit+1)
	if err := s.querySiteCallsQuery(&rows, f, after, page.Limit+1).Scan(ctx); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return ports.SiteCallPage{}, s.fail("query site calls", err)
	}
	p := ports.SiteCallPage{Items: make([]ports.SiteCall, 0, min(len(rows), page.Limit))}
	for i := range rows[:min(len(rows), page.Limit)] {
		p.Items = append(p.Items, rows[i].siteCall())
	}
	if len(rows) > page.Limit {
		p.Next = encodeSiteCallCursor(p.Items[len(p.Items)-1])
	}
	return p, nil
}

// countSiteCallsQuery counts the rows of f.
func (s *SiteCalls) countSiteCallsQuery(f ports.SiteCallFilter) *bun.SelectQuery {
	return s.r.NewSelect().Model((*siteCallRow)(nil)).ColumnExpr(s.d.countAll()).
		ApplyQueryBuilder(func(q bun.QueryBuilder) bun.QueryBuilder { return s.whereSiteCalls(q, f) })
}

// CountSiteCalls implements ports.SiteCallStore.
func (s *SiteCalls) CountSiteCalls(ctx context.Context, f ports.SiteCallFilter) (int64, error) {
	if err := checkSiteCallFilter(f); err != nil {
		return 0, err
	}
	var n int64
	if err := s.countSiteCallsQuery(f).Scan(ctx, &n); err != nil {
		return 0, s.fail("count site calls", err)
	}
	return n, nil
}

// siteKPIRow is a row of siteCallKPIsQuery.
type siteKPIRow struct {
	Site   string  `bun:"site"`
	Status string  `bun:"status"`
	N      int64   `bun:"n"`
	Oldest instant `bun:"oldest"`
}

var siteBuffered = []string{string(ports.OpPending), string(ports.OpRetrying), string(ports.OpParked)}

// reading is a statement that reads into its destinations.
type reading interface {
	Scan(ctx context.Context, dest ...any) error
	String() string
}

// siteCallKPIsQuery selects, per site: one row per buffered status (the
// count and the oldest created_at), and one row of the Failed rows since
// req.FailedSince.
func (s *SiteCalls) siteCallKPIsQuery(req ports.SiteCallKPIRequest) *bun.SelectQuery {
	count := bun.Safe(s.d.countAll())
	buffered := s.r.NewSelect().TableExpr(`"site_calls"`).
		ColumnExpr(`"site", "status", ? AS "n", MIN("created_at") AS "oldest"`, count).
		Where(`"status" IN (?)`, bun.List(siteBuffered)).GroupExpr(`"site", "status"`)
	failed := s.r.NewSelect().TableExpr(`"site_calls"`).
		ColumnExpr(`"site", "status", ?, ?`, count, at(time.Time{})).
		Where(`"status" = ?`, string(ports.OpFailed)).Where(`"terminal_at" IS NOT NULL`)
	if !req.FailedSince.IsZero() {
		failed = failed.Where(`"terminal_at" >= ?`, at(req.FailedSince))
	}
	return buffered.UnionAll(failed.GroupExpr(`"site", "status"`))
}

// siteCallSitesQuery selects the sites that have a row. SQLite and
// PostgreSQL skip from one site to the next through the primary key (a
// recursive MIN, one index probe per site: 1.5 ms for 30 sites over
// 1,000,000 rows, where a GROUP BY reads them all, 80 ms); T-SQL allows
// no subquery in a recursive member, so MS SQL groups.
func (s *SiteCalls) siteCallSitesQuery() reading {
	if s.driver == DriverMSSQL {
		return s.r.NewSelect().TableExpr(`"site_calls"`).Column("site").GroupExpr(`"site"`)
	}
	return s.r.NewRaw(`WITH RECURSIVE "s" ("site") AS (SELECT MIN("site") FROM "site_calls" UNION ALL ` +
		`SELECT (SELECT MIN(c."site") FROM "site_calls" AS c WHERE c."site" > "s"."site") FROM "s" WHERE "s"."site" IS NOT NULL) ` +
		`SELECT "site" FROM "s" WHERE "site" IS NOT NULL`)
}

// SiteCallKPIs implements ports.SiteCallStore.
func (s *SiteCalls) SiteCallKPIs(ctx context.Context, req ports.SiteCallKPIRequest) ([]ports.SiteCallKPI, error) {
	var rows []siteKPIRow
	if err := s.siteCallKPIsQuery(req).Scan(ctx, &rows); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, s.fail("site call kpis", err)
	}
	var names []string
	if err := s.siteCallSitesQuery().Scan(ctx, &names); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, s.fail("site call kpis", err)
	}
	sites := make(map[string]*ports.SiteCallKPI, len(names))
	for _, site := range names {
		sites[site] = &ports.SiteCallKPI{Site: site}
	}
	for _, r := range rows {
		k := sites[r.Site]
		if k == nil {
			k = &ports.SiteCallKPI{Site: r.Site}
			sites[r.Site] = k
		}
		switch ports.OpStatus(r.Status) {
		case ports.OpPending:
			k.Pending += r.N
		case ports.OpRetrying:
			k.Retrying += r.N
		case ports.OpParked:
			k.Parked += r.N
		case ports.OpFailed:
			k.Failed += r.N
			continue
		default:
			continue
		}
		if t := r.Oldest.t; !t.IsZero() && (k.OldestBufferedAt.IsZero() || t.Before(k.OldestBufferedAt)) {
			k.OldestBufferedAt = t
		}
	}
	out := make([]ports.SiteCallKPI, 0, len(sites))
	for _, k := range sites {
		out = append(out, *k)
	}
	slices.SortFunc(out, func(a, b ports.SiteCallKPI) int { return strings.Compare(a.Site, b.Site) })
	return out, nil
}

// --- purge -----------------------------------------------------------------------

var siteTerminal = []string{string(ports.OpDelivered), string(ports.OpFailed), string(ports.OpDiscarded)}

// purgeSiteCallsQuery deletes up to limit terminal rows that ended before
// cutoff, oldest first. The conditions stand in the outer statement too,
// as in purgeReturning.
func (s *SiteCalls) purgeSiteCallsQuery(c bun.IConn, cutoff time.Time, limit int) schemaQuery {
	old := func(q bun.QueryBuilder) bun.QueryBuilder {
		return q.Where(`"status" IN (?)`, bun.List(siteTerminal)).Where(`"terminal_at" < ?`, at(cutoff))
	}
	if s.driver == DriverMSSQL {
		// DELETE TOP (n) takes any n rows: delete through a CTE of the
		// first n in order (TOP, which keeps the CTE updatable).
		return s.w.NewRaw(`WITH "old" AS (SELECT TOP (?) "site", "id" FROM "site_calls" WHERE "status" IN (?) `+
			`AND "terminal_at" < ? ORDER BY "terminal_at", "site", "id") DELETE FROM "old"`,
			limit, bun.List(siteTerminal), at(cutoff)).Conn(c)
	}
	sub := s.w.NewSelect().TableExpr(`"site_calls"`).Column("site", "id").ApplyQueryBuilder(old).
		OrderExpr(`"terminal_at", "site", "id"`).Limit(int64(limit))
	return s.w.NewDelete().Conn(c).TableExpr(`"site_calls"`).Where(`("site", "id") IN (?)`, sub).ApplyQueryBuilder(old)
}

// purgeSiteCommandsQuery deletes the commands finished before cutoff.
func (s *SiteCalls) purgeSiteCommandsQuery(cutoff time.Time) *bun.DeleteQuery {
	return s.w.NewDelete().TableExpr(`"site_commands"`).Where(`"state" <> ?`, string(ports.CommandRequested)).
		Where(`"finished_at" < ?`, at(cutoff))
}

// schemaQuery is a statement that runs for its effect.
type schemaQuery interface {
	Exec(ctx context.Context, dest ...any) (sql.Result, error)
	String() string
}

// PurgeSiteCalls implements ports.SiteCallStore.
func (s *SiteCalls) PurgeSiteCalls(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	if limit < 1 {
		return 0, fmt.Errorf("sqlstore: purge site calls: limit %d must be positive: %w", limit, ports.ErrInvalid)
	}
	var n int64
	err := s.write(ctx, true, func(ctx context.Context, c conn) error {
		res, err := s.purgeSiteCallsQuery(c, cutoff, limit).Exec(ctx)
		if err == nil {
			n, err = res.RowsAffected()
		}
		if err != nil {
			return err
		}
		_, err = s.purgeSiteCommandsQuery(cutoff).Conn(c).Exec(ctx)
		return err
	})
	if err != nil {
		return 0, s.fail("purge site calls", err)
	}
	return int(n), nil
}

// --- cursors and health ------------------------------------------------------------

// SiteCursor implements ports.SiteCallStore.
func (s *SiteCalls) SiteCursor(ctx context.Context, site string) (ports.SiteCursor, error) {
	if !keyText(site) {
		return ports.SiteCursor{}, nil
	}
	var row siteCursorRow
	err := s.r.NewSelect().Model(&row).Where(`"site" = ?`, site).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return ports.SiteCursor{}, nil
	}
	if err != nil {
		return ports.SiteCursor{}, s.fail("read site cursor", err)
	}
	return ports.SiteCursor{Epoch: row.Epoch, After: row.After}, nil
}

// SetSiteCursor implements ports.SiteCallStore: an upsert.
func (s *SiteCalls) SetSiteCursor(ctx context.Context, site string, c ports.SiteCursor) error {
	if err := ports.ValidateSiteCursor(site, c); err != nil {
		return fmt.Errorf("sqlstore: set site cursor: %w", err)
	}
	if err := noNUL(site, c.Epoch, c.After); err != nil {
		return err
	}
	row := &siteCursorRow{Site: site, Epoch: c.Epoch, After: c.After}
	if err := s.write(ctx, false, func(ctx context.Context, c conn) error { return s.upsert(ctx, c, row) }); err != nil {
		return s.fail("set site cursor", err)
	}
	return nil
}

// RecordSiteHealth implements ports.SiteCallStore: an upsert of the JSON
// of h.
func (s *SiteCalls) RecordSiteHealth(ctx context.Context, h ports.SiteNodeHealth) error {
	if err := ports.ValidateSiteHealth(h.SiteHealth); err != nil {
		return fmt.Errorf("sqlstore: record site health: %w", err)
	}
	if err := noNUL(h.Site, h.Node); err != nil {
		return err
	}
	doc, err := json.Marshal(h.SiteHealth)
	if err != nil {
		return fmt.Errorf("sqlstore: record site health: %w", err)
	}
	row := &siteHealthRow{Site: h.Site, Node: h.Node, ReportedAt: at(h.ReportedAt), Health: string(doc)}
	if err := s.write(ctx, false, func(ctx context.Context, c conn) error { return s.upsert(ctx, c, row) }); err != nil {
		return s.fail("record site health", err)
	}
	return nil
}

// SiteHealth implements ports.SiteCallStore.
func (s *SiteCalls) SiteHealth(ctx context.Context) ([]ports.SiteNodeHealth, error) {
	var rows []siteHealthRow
	if err := s.r.NewSelect().Model(&rows).Scan(ctx); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, s.fail("read site health", err)
	}
	out := make([]ports.SiteNodeHealth, len(rows))
	for i, r := range rows {
		if err := json.Unmarshal([]byte(r.Health), &out[i].SiteHealth); err != nil {
			return nil, s.fail("read site health", fmt.Errorf("decode the health of a node of %.64q: %w", r.Site, err))
		}
		out[i].Site, out[i].Node, out[i].ReportedAt = r.Site, r.Node, r.ReportedAt.t
	}
	slices.SortFunc(out, func(a, b ports.SiteNodeHealth) int {
		if c := strings.Compare(a.Site, b.Site); c != 0 {
			return c
		}
		return strings.Compare(a.Node, b.Node)
	})
	return out, nil
}

// --- commands ----------------------------------------------------------------------

// errStored is the conflict of a command id already stored.
var errStored = fmt.Errorf("a command id is already stored: %w", ports.ErrConflict)

// markRequestedQuery marks the row a command names as requested.
func (s *SiteCalls) markRequestedQuery(c *siteCommandRow) *bun.UpdateQuery {
	return s.w.NewUpdate().Table("site_calls").Set(`"requested" = ?`, c.Action).Set(`"requested_by" = ?`, c.Actor).
		Set(`"requested_at" = ?`, c.RequestedAt).Where(`"site" = ?`, c.Site).Where(`"id" = ?`, c.OperationID)
}

// clearRequestedQuery clears the request of the row (site, id).
func (s *SiteCalls) clearRequestedQuery(site, id string) *bun.UpdateQuery {
	return s.w.NewUpdate().Table("site_calls").Set(`"requested" = ?`, "").Set(`"requested_by" = ?`, "").
		Set(`"requested_at" = ?`, at(time.Time{})).Where(`"site" = ?`, site).Where(`"id" = ?`, id)
}

// RequestSiteCommands implements ports.SiteCallStore: in one transaction,
// an insert of the new commands (a command id already stored inserts
// nothing, and rolls everything back) and an update per named row.
func (s *SiteCalls) RequestSiteCommands(ctx context.Context, cmds []ports.SiteCommand) error {
	if len(cmds) == 0 {
		return nil
	}
	seen := make(map[string]bool, len(cmds))
	rows := make([]siteCommandRow, len(cmds))
	for i, c := range cmds {
		if err := ports.ValidateSiteCommand(c); err != nil {
			return fmt.Errorf("sqlstore: request site commands: %w", err)
		}
		if seen[c.ID] {
			return fmt.Errorf("sqlstore: request site commands: command %.64q is given twice: %w", c.ID, ports.ErrConflict)
		}
		seen[c.ID] = true
		rows[i] = siteCommandRow{ID: c.ID, Site: c.Site, OperationID: c.OperationID, Action: string(c.Action),
			Actor: c.Actor, RequestedAt: at(c.RequestedAt), State: string(ports.CommandRequested)}
		if err := noNUL(c.ID, c.Site, c.OperationID, c.Actor); err != nil {
			return err
		}
	}
	err := s.write(ctx, true, func(ctx context.Context, c conn) error {
		return chunks(rows, auditChunk, func(part []siteCommandRow) error {
			res, err := s.writes().insertNew(s.w, c, &part, "id").Exec(ctx)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n != int64(len(part)) {
				return errors.Join(err, errStored)
			}
			for i := range part {
				if _, err := s.markRequestedQuery(&part[i]).Conn(c).Exec(ctx); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return s.fail(fmt.Sprintf("request %d site commands", len(rows)), err)
	}
	return nil
}

// pendingSiteCommandsQuery selects up to limit requested commands of site,
// oldest first.
func (s *SiteCalls) pendingSiteCommandsQuery(rows *[]siteCommandRow, site string, limit int) *bun.SelectQuery {
	return s.r.NewSelect().Model(rows).Where(`"site" = ?`, site).Where(`"state" = ?`, string(ports.CommandRequested)).
		OrderExpr(`"requested_at", "id"`).Limit(int64(limit))
}

// PendingSiteCommands implements ports.SiteCallStore.
func (s *SiteCalls) PendingSiteCommands(ctx context.Context, site string, limit int) ([]ports.SiteCommand, error) {
	if limit < 1 {
		return nil, fmt.Errorf("sqlstore: pending site commands: limit %d must be positive: %w", limit, ports.ErrInvalid)
	}
	return s.commands(ctx, "pending site commands", keyText(site), func(rows *[]siteCommandRow) *bun.SelectQuery {
		return s.pendingSiteCommandsQuery(rows, site, limit)
	})
}

// siteCommandsQuery selects the commands of one operation, oldest first.
func (s *SiteCalls) siteCommandsQuery(rows *[]siteCommandRow, site, operationID string) *bun.SelectQuery {
	return s.r.NewSelect().Model(rows).Where(`"site" = ?`, site).Where(`"operation_id" = ?`, operationID).
		OrderExpr(`"requested_at", "id"`)
}

// SiteCommands implements ports.SiteCallStore.
func (s *SiteCalls) SiteCommands(ctx context.Context, site, operationID string) ([]ports.SiteCommand, error) {
	return s.commands(ctx, "site commands", keyText(site, operationID), func(rows *[]siteCommandRow) *bun.SelectQuery {
		return s.siteCommandsQuery(rows, site, operationID)
	})
}

// commands runs the select q makes, when keys can name rows.
func (s *SiteCalls) commands(ctx context.Context, what string, keys bool, q func(*[]siteCommandRow) *bun.SelectQuery) ([]ports.SiteCommand, error) {
	out := []ports.SiteCommand{}
	if !keys {
		return out, nil
	}
	var rows []siteCommandRow
	if err := q(&rows).Scan(ctx); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, s.fail(what, err)
	}
	for i := range rows {
		out = append(out, rows[i].command())
	}
	return out, nil
}

// finishSiteCommandQuery records the answer to a command still requested.
func (s *SiteCalls) finishSiteCommandQuery(id string, state ports.SiteCommandState, result string, now time.Time) *bun.UpdateQuery {
	return s.w.NewUpdate().Table("site_commands").Set(`"state" = ?`, string(state)).Set(`"result" = ?`, result).
		Set(`"finished_at" = ?`, at(now)).Where(`"id" = ?`, id).Where(`"state" = ?`, string(ports.CommandRequested))
}

// FinishSiteCommand implements ports.SiteCallStore: in one transaction,
// the command is read, answered on condition it is still requested, and,
// when refused, its row's request cleared.
func (s *SiteCalls) FinishSiteCommand(ctx context.Context, site, id string, state ports.SiteCommandState, result string, now time.Time) error {
	if state != ports.CommandApplied && state != ports.CommandRefused {
		return fmt.Errorf("sqlstore: finish site command %.64q: state %.40q is not an answer: %w", id, state, ports.ErrInvalid)
	}
	if len(result) > ports.MaxSiteCallErrorBytes || !keyText(result) {
		return fmt.Errorf("sqlstore: finish site command %.64q: the result is over %d bytes, holds a NUL byte or is not UTF-8: %w",
			id, ports.MaxSiteCallErrorBytes, ports.ErrInvalid)
	}
	if !keyText(site, id) {
		return fmt.Errorf("sqlstore: finish site command %.64q: %w", id, ports.ErrNotFound)
	}
	err := s.write(ctx, true, func(ctx context.Context, c conn) error {
		var row siteCommandRow
		err := s.w.NewSelect().Conn(c).Model(&row).Where(`"id" = ?`, id).Scan(ctx)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return ports.ErrNotFound
		case err != nil:
			return err
		case row.Site != site:
			return fmt.Errorf("another site's: %w", ports.ErrConflict)
		case row.State != string(ports.CommandRequested):
			return fmt.Errorf("already %s: %w", row.State, ports.ErrConflict)
		}
		res, err := s.finishSiteCommandQuery(id, state, result, now).Conn(c).Exec(ctx)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return errors.Join(err, fmt.Errorf("answered meanwhile: %w", ports.ErrConflict))
		}
		if state == ports.CommandRefused {
			_, err = s.clearRequestedQuery(row.Site, row.OperationID).Conn(c).Exec(ctx)
		}
		return err
	})
	if err != nil {
		return s.fail(fmt.Sprintf("finish site command %.64q", id), err)
	}
	return nil
}
