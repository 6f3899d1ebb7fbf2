package sqlstore

import (
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/sitecallstest"
)

// mssqlSiteCalls returns the site-call mirror of an MS SQL handle without
// a server.
func mssqlSiteCalls(t *testing.T) *SiteCalls { return &SiteCalls{mssqlNotifications(t).handle} }

// TestMSSQLSiteCalls renders every statement of the site-call mirror on MS
// SQL (no server runs here) and checks them as sqlgen_test.go checks the
// others: T-SQL only, the MERGE of a report with its version condition,
// the keyset spelled out, the ordered purge through a CTE.
func TestMSSQLSiteCalls(t *testing.T) {
	s := mssqlSiteCalls(t)
	const ts = `CAST('2025-06-02T09:30:00.123456' AS datetime2(6))`
	base := sitecallstest.BaseTime
	check := func(name, sql string, parts ...string) {
		t.Helper()
		mustContain(t, name, sql, parts...)
		checkTSQL(t, name, query{text: sql})
	}
	op := sitecallstest.NewOperation(base)
	op.LastError = "it's 100%_[down]"
	row, err := toSiteCallRow("site-1", &op, base)
	if err != nil {
		t.Fatal(err)
	}
	rows := []siteCallRow{row}
	check("report", s.writes().reportSiteCalls(s.w, nil, &rows).String(),
		`MERGE INTO "site_calls" WITH (HOLDLOCK) AS t USING (VALUES (N'site-1', N'`+op.ID+`', N'ExternalCall', N'erp', N'postOrder', N'Parked', 5, N'it''s 100%_[down]', CAST(NULL AS datetime2(6)), `,
		`ON t."site" = v."site" AND t."id" = v."id" WHEN MATCHED AND t."version" < v."version" THEN UPDATE SET "kind" = v."kind", `,
		`"reported_at" = v."reported_at", "requested" = CASE WHEN v."status" = N'Parked' THEN t."requested" ELSE N'' END, `,
		`"requested_at" = CASE WHEN v."status" = N'Parked' THEN t."requested_at" ELSE CAST(NULL AS datetime2(6)) END `,
		`WHEN NOT MATCHED THEN INSERT ("site", "id", `)

	var got []siteCallRow
	f := ports.SiteCallFilter{Site: "site-1", Kind: ports.OpCall, Target: "erp", Statuses: []ports.OpStatus{ports.OpParked},
		CreatedFrom: base, UpdatedTo: base, Keyword: "Fa%il"}
	after := &siteCallCursor{CreatedUS: base.UnixMicro(), Site: "s'1", ID: "x"}
	check("query", s.querySiteCallsQuery(&got, f, after, 51).String(),
		`FROM "site_calls" AS "sc" WHERE ("site" = N'site-1') AND ("kind" = N'ExternalCall') AND ("target" = N'erp') AND ("status" IN (N'Parked'))`,
		`AND ("created_at" >= `+ts+`) AND ("updated_at" < `+ts+`)`,
		`AND (("id" COLLATE Latin1_General_100_BIN2 LIKE N'%[fF][aA]\%[iI][lL]%' ESCAPE '\') OR ("target" COLLATE Latin1_General_100_BIN2 LIKE`,
		`OR ("source_script" COLLATE Latin1_General_100_BIN2 LIKE N'%[fF][aA]\%[iI][lL]%' ESCAPE '\')) AND`,
		`("created_at" < `+ts+` OR ("created_at" = `+ts+` AND ("site" < N's''1' OR ("site" = N's''1' AND "id" < N'x'))))`,
		`ORDER BY "created_at" DESC, "site" DESC, "id" DESC OFFSET 0 ROWS FETCH NEXT 51 ROWS ONLY`)
	check("count", s.countSiteCallsQuery(f).String(), `SELECT COUNT_BIG(*) FROM "site_calls" AS "sc" WHERE ("site" = N'site-1')`)
	check("kpis", s.siteCallKPIsQuery(ports.SiteCallKPIRequest{FailedSince: base}).String(),
		`SELECT "site", "status", COUNT_BIG(*) AS "n", MIN("created_at") AS "oldest" FROM "site_calls" WHERE ("status" IN (N'Pending', N'Retrying', N'Parked')) GROUP BY "site", "status"`,
		` UNION ALL (SELECT "site", "status", COUNT_BIG(*), CAST(NULL AS datetime2(6)) FROM "site_calls" WHERE ("status" = N'Failed') AND ("terminal_at" IS NOT NULL) AND ("terminal_at" >= `+ts+`) GROUP BY "site", "status")`)
	check("kpi sites", s.siteCallSitesQuery().String(), `SELECT "site" FROM "site_calls" GROUP BY "site"`)
	check("purge", s.purgeSiteCallsQuery(nil, base, 1000).String(),
		`WITH "old" AS (SELECT TOP (1000) "site", "id" FROM "site_calls" WHERE "status" IN (N'Delivered', N'Failed', N'Discarded') AND "terminal_at" < `+ts+` ORDER BY "terminal_at", "site", "id") DELETE FROM "old"`)
	check("purge commands", s.purgeSiteCommandsQuery(base).String(),
		`DELETE FROM "site_commands" WHERE ("state" <> N'Requested') AND ("finished_at" < `+ts+`)`)

	cmd := siteCommandRow{ID: "c-1", Site: "site-1", OperationID: op.ID, Action: "Retry", Actor: "o'neil", RequestedAt: at(base), State: "Requested"}
	cmds := []siteCommandRow{cmd}
	check("request", s.writes().insertNew(s.w, nil, &cmds, "id").String(),
		`INSERT INTO "site_commands" ("id", "site", "operation_id", "action", "actor", "requested_at", "state", "result", "finished_at") SELECT `,
		`(VALUES (N'c-1', N'site-1', N'`+op.ID+`', N'Retry', N'o''neil', `+ts+`, N'Requested', N'', CAST(NULL AS datetime2(6))))`,
		`WHERE NOT EXISTS (SELECT 1 FROM "site_commands" AS t WITH (UPDLOCK, HOLDLOCK) WHERE t."id" = v."id")`)
	check("mark requested", s.markRequestedQuery(&cmd).String(),
		`UPDATE "site_calls" SET "requested" = N'Retry', "requested_by" = N'o''neil', "requested_at" = `+ts+` WHERE ("site" = N'site-1') AND ("id" = N'`+op.ID+`')`)
	check("clear requested", s.clearRequestedQuery("site-1", op.ID).String(),
		`UPDATE "site_calls" SET "requested" = N'', "requested_by" = N'', "requested_at" = CAST(NULL AS datetime2(6)) WHERE`)
	check("finish", s.finishSiteCommandQuery("c-1", ports.CommandRefused, "not parked", base).String(),
		`UPDATE "site_commands" SET "state" = N'Refused', "result" = N'not parked', "finished_at" = `+ts+` WHERE ("id" = N'c-1') AND ("state" = N'Requested')`)
	var crows []siteCommandRow
	check("pending", s.pendingSiteCommandsQuery(&crows, "site-1", 100).String(),
		`WHERE ("site" = N'site-1') AND ("state" = N'Requested') ORDER BY "requested_at", "id" OFFSET 0 ROWS FETCH NEXT 100 ROWS ONLY`)
	check("history", s.siteCommandsQuery(&crows, "site-1", op.ID).String(),
		`WHERE ("site" = N'site-1') AND ("operation_id" = N'`+op.ID+`') ORDER BY "requested_at", "id"`)
	var one siteCallRow
	check("get", s.getSiteCallQuery(&one, "site-1", op.ID).String(), `WHERE ("site" = N'site-1') AND ("id" = N'`+op.ID+`')`)
	check("health", s.writes().upsert(s.w, nil, &siteHealthRow{Site: "site-1", Node: "n1", ReportedAt: at(base), Health: "{}"}).String(),
		`MERGE INTO "site_health" WITH (HOLDLOCK) AS t USING (VALUES (N'site-1', N'n1', `+ts+`, N'{}')) AS v ("site", "node", "reported_at", "health")`,
		` ON t."site" = v."site" AND t."node" = v."node" WHEN MATCHED THEN UPDATE SET "reported_at" = v."reported_at", "health" = v."health"`)
	check("cursor", s.writes().upsert(s.w, nil, &siteCursorRow{Site: "site-1", Epoch: "e", After: "p"}).String(),
		`MERGE INTO "site_cursors" WITH (HOLDLOCK) AS t USING (VALUES (N'site-1', N'e', N'p')) AS v ("site", "feed_epoch", "feed_after") ON t."site" = v."site"`)
}

// TestSiteCallReportSQLitePostgres pins the conditional upsert of the other
// dialects (which the contract suite runs for real): the version condition
// and the request kept while Parked.
func TestSiteCallReportSQLitePostgres(t *testing.T) {
	op := sitecallstest.NewOperation(sitecallstest.BaseTime)
	row, err := toSiteCallRow("site-1", &op, sitecallstest.BaseTime.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	rows := []siteCallRow{row}
	for _, d := range []dialect{sqliteDialect{}, pgDialect{}} {
		db := renderDB(d.newBun())
		sql := d.writes().reportSiteCalls(db, nil, &rows).String()
		mustContain(t, d.newBun().Name().String()+" report", sql,
			`INSERT INTO "site_calls" AS "sc" ("site", "id", `,
			` ON CONFLICT ("site", "id") DO UPDATE SET "kind" = EXCLUDED."kind", `,
			`"requested" = CASE WHEN EXCLUDED."status" = 'Parked' THEN "sc"."requested" ELSE '' END`,
			` WHERE ("sc"."version" < EXCLUDED."version")`)
		if strings.Contains(sql, `"site" = EXCLUDED."site"`) {
			t.Errorf("report sets the key:\n%s", sql)
		}
	}
	pg := &SiteCalls{&handle{driver: DriverPostgres, d: pgDialect{}}}
	pg.use(renderDB(pgDialect{}.newBun()).DB, renderDB(pgDialect{}.newBun()).DB)
	var rs []siteCallRow
	mustContain(t, "postgres keyword", pg.querySiteCallsQuery(&rs, ports.SiteCallFilter{Keyword: "erp"}, nil, 10).String(),
		siteCallKeywordText+` ~ '[eE][rR][pP]'`)
}

// TestSiteCallKeywordIndexPostgres: the keyword condition PostgreSQL's
// QuerySiteCalls writes is the expression of the trigram index of
// migration 0007, so the planner can read the candidates through it.
func TestSiteCallKeywordIndexPostgres(t *testing.T) {
	t.Parallel()
	db := newPostgresStore(t, postgresDSN(t))
	s := db.SiteCalls()
	var rows []siteCallRow
	q := s.querySiteCallsQuery(&rows, ports.SiteCallFilter{Keyword: "pump"}, nil, 10).String()
	conn, err := db.writer().Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), `SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	var plan []string
	rs, err := conn.QueryContext(t.Context(), "EXPLAIN "+q)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for rs.Next() {
		var line string
		if err := rs.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if !strings.Contains(strings.Join(plan, "\n"), "site_calls_keyword_trgm_idx") {
		t.Errorf("the keyword query does not use site_calls_keyword_trgm_idx:\n%s", strings.Join(plan, "\n"))
	}
}

// TestSiteCallKeywordIndexSQLite: on SQLite a keyword of three characters
// or more reads its candidates from the FTS5 trigram index of migration
// 0008 (a shorter one cannot: it scans), and the index follows the rows:
// a purged row leaves it.
func TestSiteCallKeywordIndexSQLite(t *testing.T) {
	t.Parallel()
	db := newSQLiteStore(t)
	s := db.SiteCalls()
	plan := func(keyword string) string {
		var rows []siteCallRow
		q := s.querySiteCallsQuery(&rows, ports.SiteCallFilter{Keyword: keyword}, nil, 10).String()
		return strings.Join(sqlitePlan(t, db, q), "\n")
	}
	if p := plan("pump"); !strings.Contains(p, "site_calls_search") {
		t.Errorf("a keyword of four characters does not read the index:\n%s", p)
	}
	if p := plan("pu"); strings.Contains(p, "site_calls_search") {
		t.Errorf("a keyword of two characters reads the index, which holds no shorter entry:\n%s", p)
	}

	op := sitecallstest.NewOperation(sitecallstest.BaseTime)
	op.Status, op.TerminalAt, op.LastError = ports.OpDelivered, op.UpdatedAt, "pump station timeout"
	if _, err := s.ReportSiteCalls(t.Context(), "site-a", []ports.Operation{op}, sitecallstest.BaseTime); err != nil {
		t.Fatal(err)
	}
	indexed := func() int {
		var n int
		if err := db.reader().QueryRowContext(t.Context(), `SELECT count(*) FROM site_calls_search WHERE site_calls_search MATCH '"pum" AND "ump"'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := indexed(); n != 1 {
		t.Fatalf("the index holds %d rows with the keyword, want 1", n)
	}
	if n, err := s.PurgeSiteCalls(t.Context(), op.UpdatedAt.Add(time.Hour), 10); err != nil || n != 1 {
		t.Fatalf("PurgeSiteCalls = %d, %v", n, err)
	}
	if n := indexed(); n != 0 {
		t.Errorf("the index still holds %d purged rows", n)
	}
}
