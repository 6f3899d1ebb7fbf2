package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/storetest"
)

// No MS SQL server runs in CI, so these tests render every statement the
// store issues on MS SQL (bun's queries formatted by the mssql dialect) and
// check what can be checked without a server: the locking hints, OUTPUT
// instead of RETURNING, TOP or OFFSET/FETCH instead of LIMIT, N'...'
// literals, double-quoted identifiers, no parameters (MS SQL caps a request
// at 2,100), no construct of another dialect, balanced parentheses outside
// literals.

// noServer is a connector without a database: the queries of a handle on it
// render but never run.
type noServer struct{}

func (noServer) Connect(context.Context) (driver.Conn, error) { return nil, errors.New("no server") }
func (noServer) Driver() driver.Driver                        { return nil }

// mssqlNotifications returns the notifications of an MS SQL handle
// without a server.
func mssqlNotifications(t *testing.T) *Notifications {
	t.Helper()
	h := &handle{driver: DriverMSSQL, d: mssqlDialect{}}
	db := sql.OpenDB(noServer{})
	h.use(db, db)
	t.Cleanup(func() { _ = db.Close() })
	return &Notifications{h}
}

// render checks q as T-SQL and returns its text.
func render(t *testing.T, name string, q interface{ String() string }) string {
	t.Helper()
	return checkTSQL(t, name, query{text: q.String()})
}

// stripLiterals removes the string literals of a T-SQL statement, so that
// checks on its syntax ignore the data.
func stripLiterals(sql string) string {
	var b strings.Builder
	in := false
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case in && c == '\'' && i+1 < len(sql) && sql[i+1] == '\'':
			i++ // doubled quote inside a literal
		case c == '\'':
			in = !in
			b.WriteString("''")
		case !in:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// foreign lists constructs of the other dialects that T-SQL lacks.
var foreign = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\bLIMIT\b`),
	regexp.MustCompile(`(?i)\bRETURNING\b`),
	regexp.MustCompile(`(?i)\bON CONFLICT\b`),
	regexp.MustCompile(`(?i)\bFOR UPDATE\b`),
	regexp.MustCompile(`(?i)\bSKIP LOCKED\b`),
	regexp.MustCompile(`(?i)\bILIKE\b`),
	regexp.MustCompile(`(?i)\bINDEXED BY\b`),
	regexp.MustCompile(`(?i)\btimestamptz\b`),
	regexp.MustCompile(`(?i)\bunnest\b`),
	regexp.MustCompile(`::`),
	regexp.MustCompile(`\$\d`),
	regexp.MustCompile("`"),
	regexp.MustCompile(`\?`), // an unformatted bun placeholder
}

// checkTSQL reports what in q is not T-SQL as the store writes it.
func checkTSQL(t *testing.T, name string, q query) string {
	t.Helper()
	if len(q.args) != 0 {
		t.Errorf("%s: %d parameters, want the values inlined", name, len(q.args))
	}
	code := stripLiterals(q.text)
	for _, re := range foreign {
		if loc := re.FindStringIndex(code); loc != nil {
			t.Errorf("%s: %q is not T-SQL in:\n%s", name, code[loc[0]:loc[1]], q.text)
		}
	}
	depth := 0
	for _, c := range code {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
			if depth < 0 {
				t.Fatalf("%s: unbalanced ')' in:\n%s", name, q.text)
			}
		}
	}
	if depth != 0 {
		t.Errorf("%s: %d unclosed '(' in:\n%s", name, depth, q.text)
	}
	// Identifiers are quoted with the dialect's quote, never brackets.
	if strings.ContainsAny(code, "[]") {
		t.Errorf("%s: bracket-quoted identifier in:\n%s", name, q.text)
	}
	// Every string literal is Unicode (N'...') except the LIKE escape
	// character and the datetime2 texts inside CAST(... AS datetime2(6)).
	lits := regexp.MustCompile(`(N?)'((?:[^']|'')*)'`).FindAllStringSubmatchIndex(q.text, -1)
	for _, m := range lits {
		prefix := q.text[m[2]:m[3]]
		body := q.text[m[4]:m[5]]
		before := q.text[:m[0]]
		switch {
		case prefix == "N":
		case body == `\` && strings.HasSuffix(before, "ESCAPE "):
		case strings.HasSuffix(before, "CAST("):
			if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}$`).MatchString(body) {
				t.Errorf("%s: instant literal %q is not ISO 8601 with microseconds", name, body)
			}
		default:
			t.Errorf("%s: literal '%s' lacks the N prefix", name, body)
		}
	}
	return q.text
}

func mustContain(t *testing.T, name, sql string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(sql, p) {
			t.Errorf("%s: missing %q in:\n%s", name, p, sql)
		}
	}
}

func buildT(t *testing.T, name string, q query, err error) string {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return checkTSQL(t, name, q)
}

func TestMSSQLClaim(t *testing.T) {
	s := mssqlNotifications(t)
	sql := render(t, "claim", s.d.claim(s.w, ports.ClaimRequest{Owner: "node-'a'", Now: storetest.BaseTime, Lease: time.Minute, Limit: 250}))
	mustContain(t, "claim", sql,
		`WITH (READPAST, UPDLOCK, ROWLOCK)`,
		`SELECT TOP (250) "id", "priority", "created_at" FROM "notifications" WITH (READPAST, UPDLOCK, ROWLOCK) WHERE "status" = N'Pending'`,
		`WHERE "status" = N'Retrying' AND "next_attempt_at" <= CAST('2025-06-02T09:30:00.123456' AS datetime2(6)) AND ("claimed_until"`,
		`WHERE "status" = N'Retrying' AND "next_attempt_at" IS NULL AND ("claimed_until"`,
		`("claimed_until" IS NULL OR "claimed_until" <= CAST('2025-06-02T09:30:00.123456' AS datetime2(6)))`,
		`ORDER BY "priority" DESC, "created_at", "id"`,
		`chosen AS (SELECT TOP (250) "id" FROM (SELECT * FROM c0 UNION ALL SELECT * FROM c1 UNION ALL SELECT * FROM c2) AS u`,
		`UPDATE n SET "claimed_by" = N'node-''a''', "claimed_until" = CAST('2025-06-02T09:31:00.123456' AS datetime2(6))`,
		`OUTPUT inserted."id", inserted."type", inserted."list"`,
		`inserted."claimed_until", inserted."target_states" FROM "notifications" AS n INNER JOIN chosen ON n."id" = chosen."id"`,
	)
	if strings.Count(sql, "READPAST, UPDLOCK, ROWLOCK") != len(claimParts) {
		t.Errorf("claim: every part must carry the hints:\n%s", sql)
	}
	// The OUTPUT columns are the model's, which the rows scan into.
	if !strings.Contains(sql, quoted("inserted.", notificationColumns)) {
		t.Errorf("claim: OUTPUT is not %s", quoted("inserted.", notificationColumns))
	}
}

func TestMSSQLInsert(t *testing.T) {
	s := mssqlNotifications(t)
	n := storetest.NewNotification(storetest.BaseTime)
	n.Subject = "it's ünïcödé"
	n.TypeData = json.RawMessage(`{"k":"v's"}`)
	n.ResolvedTargets = []string{"a@example.test"}
	n.Targets = []ports.TargetState{{Target: "a@example.test", Status: ports.TargetFailed, Attempts: 1, LastError: "smtp: 550 it's gone",
		LastAttemptAt: storetest.BaseTime}}
	bare := storetest.NewNotification(storetest.BaseTime)
	rows := mustRows(t, n, bare)
	cols := quoted("", notificationColumns)
	sql := render(t, "insert", mssqlDialect{}.insertQuery(s.w, rows))
	mustContain(t, "insert", sql,
		`INSERT INTO "notifications" (`+cols+`) OUTPUT inserted."id" SELECT `+quoted("v.", notificationColumns)+` FROM (VALUES (N'`+n.ID+`'`,
		`N'it''s ünïcödé'`, `N'{"k":"v''s"}'`, `N'["a@example.test"]'`,
		`N'[{"t":"a@example.test","s":"Failed","n":1,"e":"smtp: 550 it''s gone","a":1748856600123456}]'`,
		`CAST(NULL AS nvarchar(max))`, `CAST(NULL AS datetime2(6))`,
		`CAST('2025-06-02T09:30:00.123456' AS datetime2(6))`,
		`) AS v (`+cols+`) WHERE NOT EXISTS (SELECT 1 FROM "notifications" AS n WITH (UPDLOCK, HOLDLOCK) WHERE n."id" = v."id")`,
	)
	// A batch of insertChunk rows stays one statement without parameters
	// (a derived VALUES table has no 1,000-row cap).
	big := make([]ports.Notification, insertChunk)
	for i := range big {
		big[i] = storetest.NewNotification(storetest.BaseTime)
	}
	render(t, "insert big", mssqlDialect{}.insertQuery(s.w, mustRows(t, big...)))
}

func mustRows(t *testing.T, ns ...ports.Notification) []notificationRow {
	t.Helper()
	rows := make([]notificationRow, len(ns))
	for i := range ns {
		var err error
		if rows[i], err = toRow(&ns[i]); err != nil {
			t.Fatal(err)
		}
	}
	return rows
}

func TestMSSQLRecordAndRelease(t *testing.T) {
	s := mssqlNotifications(t)
	var rows []recordRow
	for _, u := range []ports.Update{
		{ID: storetest.NewID(), Status: ports.StatusDelivered, ResolvedTargets: []string{"x@example.test"},
			Targets: []ports.TargetState{{Target: "x@example.test", Status: ports.TargetDelivered, Attempts: 2,
				LastAttemptAt: storetest.BaseTime, DeliveredAt: storetest.BaseTime}},
			LastAttemptAt: storetest.BaseTime, DeliveredAt: storetest.BaseTime, UpdatedAt: storetest.BaseTime},
		{ID: storetest.NewID(), Status: ports.StatusRetrying, RetryCount: 2, LastError: "smtp: 451 try later",
			NextAttemptAt: storetest.BaseTime.Add(time.Minute), UpdatedAt: storetest.BaseTime},
	} {
		r, err := toRecordRow(&u)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	q, err := s.d.recordQuery(s.handle, "node-a", rows)
	sql := buildT(t, "record", q, err)
	mustContain(t, "record", sql,
		`UPDATE n SET "status" = v."status", "retry_count" = v."retry_count"`,
		`"claimed_by" = NULL, "claimed_until" = NULL`,
		`OUTPUT inserted."id" FROM "notifications" AS n INNER JOIN (VALUES (N'`,
		`"target_states" = v."target_states"`,
		`N'[{"t":"x@example.test","s":"Delivered","n":2,"a":1748856600123456,"d":1748856600123456}]'`,
		`N'smtp: 451 try later'`, `CAST(NULL AS nvarchar(max))`, `CAST(NULL AS datetime2(6))`,
		`) AS v ("id", "status", "retry_count", "last_error", "resolved_targets", "target_states", "last_attempt_at", "next_attempt_at", "delivered_at", "updated_at") ON n."id" = v."id" WHERE n."claimed_by" = N'node-a'`,
	)
	sql = render(t, "release", s.releaseQuery("node-a", []string{"a", "b"}))
	mustContain(t, "release", sql,
		`UPDATE "notifications" SET "claimed_by" = NULL, "claimed_until" = NULL WHERE ("id" IN (N'a', N'b')) AND ("claimed_by" = N'node-a')`)
}

// TestMSSQLReleaseNode: the owners of a node are found by a LIKE prefix in
// the binary collation (the column's own may ignore case), with the node's
// wildcards, brackets and escape character escaped.
func TestMSSQLReleaseNode(t *testing.T) {
	s := mssqlNotifications(t)
	sql := render(t, "releaseNode", s.releaseNodeQuery(`c_1%[x]\'`, `c_1%[x]\'/run`))
	mustContain(t, "releaseNode", sql,
		`UPDATE "notifications" SET "claimed_by" = NULL, "claimed_until" = NULL WHERE ("status" IN (N'Pending', N'Retrying'))`,
		` AND ("claimed_by" COLLATE Latin1_General_100_BIN2 LIKE N'c\_1\%\[x]\\''/%' ESCAPE '\')`,
		` AND ("claimed_by" <> N'c_1%[x]\''/run')`,
	)
	if sql := render(t, "releaseNode without keep", s.releaseNodeQuery("c", "")); strings.Contains(sql, "<>") {
		t.Errorf("releaseNode without an owner to keep excludes one:\n%s", sql)
	}
}

func TestMSSQLReads(t *testing.T) {
	s := mssqlNotifications(t)
	cols := quoted(`"n".`, notificationColumns)
	mustContain(t, "get", render(t, "get", s.getQuery(new(notificationRow), "x'y")),
		`SELECT `+cols+` FROM "notifications" AS "n" WHERE ("id" = N'x''y')`)
	mustContain(t, "statuses", render(t, "statuses", s.statusesQuery("", []string{"a", "b"})),
		`SELECT "n"."id", "n"."status" FROM "notifications" AS "n" WHERE ("id" IN (N'a', N'b'))`)
	mustContain(t, "statuses of a site", render(t, "statuses of a site", s.statusesQuery("site-'a", []string{"a"})),
		`WHERE ("id" IN (N'a')) AND ("source_site" = N'site-''a')`)

	at := storetest.BaseTime
	const ts = `CAST('2025-06-02T09:30:00.123456' AS datetime2(6))`
	filters := []struct {
		name string
		f    ports.Filter
		want string
	}{
		{"none", ports.Filter{}, `FROM "notifications" AS "n" ORDER BY`},
		{"statuses", ports.Filter{Statuses: []ports.Status{ports.StatusParked, ports.StatusRetrying}}, `("status" IN (N'Parked', N'Retrying'))`},
		{"type", ports.Filter{Type: "email"}, `("type" = N'email')`},
		{"site", ports.Filter{SourceSite: "site-1"}, `("source_site" = N'site-1')`},
		{"list", ports.Filter{List: "ops"}, `("list" = N'ops')`},
		{"created from", ports.Filter{CreatedFrom: at}, `("created_at" >= ` + ts + `)`},
		{"created to", ports.Filter{CreatedTo: at}, `("created_at" < ` + ts + `)`},
		{"updated from", ports.Filter{UpdatedFrom: at}, `("updated_at" >= ` + ts + `)`},
		{"stuck", ports.Filter{StuckBefore: at}, `("status" IN (N'Pending', N'Retrying')) AND ("created_at" < ` + ts + `)`},
		// A binary collation, and each ASCII letter in both cases: É and é differ.
		{"subject", ports.Filter{Subject: `50%_Off [x] it's É`}, `("subject" COLLATE Latin1_General_100_BIN2 LIKE N'%50\%\_[oO][fF][fF] \[[xX]] [iI][tT]''[sS] É%' ESCAPE '\')`},
	}
	for _, tc := range filters {
		sql := render(t, "query "+tc.name, s.listQuery(tc.f, nil, 51, nil, false))
		mustContain(t, "query "+tc.name, sql, `SELECT `+cols+` FROM "notifications" AS "n"`, tc.want,
			`ORDER BY "created_at" DESC, "id" DESC OFFSET 0 ROWS FETCH NEXT 51 ROWS ONLY`)
		sql = render(t, "count "+tc.name, s.countQuery(tc.f, nil))
		mustContain(t, "count "+tc.name, sql, `SELECT COUNT_BIG(*) FROM "notifications" AS "n"`)
		if tc.name != "none" {
			mustContain(t, "count "+tc.name, sql, tc.want)
		}
		sql = render(t, "count by status "+tc.name, s.countByStatusQuery(tc.f, nil))
		mustContain(t, "count by status "+tc.name, sql, `SELECT "status", COUNT_BIG(*) AS "matched" FROM "notifications" AS "n"`, `GROUP BY "status"`)
		if tc.name != "none" {
			mustContain(t, "count by status "+tc.name, sql, tc.want)
		}
		sql = render(t, "capped count by status "+tc.name, s.cappedCountByStatusQuery(tc.f, nil, 10_000))
		statuses := tc.f.Statuses
		if len(statuses) == 0 {
			statuses = ports.CentralStatuses
		}
		for i, st := range statuses {
			part := `SELECT N'` + string(st) + `' AS "status", COUNT_BIG(*) AS "matched" FROM (SELECT TOP (10001) 1 AS "one" FROM "notifications" AS "n"`
			if i > 0 {
				part = `UNION ALL (` + part
			}
			mustContain(t, "capped count by status "+tc.name, sql, part)
		}
		if strings.Count(sql, "UNION ALL") != len(statuses)-1 {
			t.Errorf("capped count by status %s: %d parts, want %d:\n%s", tc.name, strings.Count(sql, "UNION ALL")+1, len(statuses), sql)
		}
		if tc.name != "none" && tc.name != "statuses" {
			mustContain(t, "capped count by status "+tc.name, sql, tc.want)
		}
	}
	mustContain(t, "query after", render(t, "query after", s.listQuery(ports.Filter{}, &cursor{createdAt: at, id: "abc"}, 10, nil, false)),
		`WHERE (("created_at" < `+ts+` OR ("created_at" = `+ts+` AND "id" < N'abc')))`)
	mustContain(t, "query after, oldest first", render(t, "query after, oldest first", s.listQuery(ports.Filter{}, &cursor{createdAt: at, id: "abc"}, 10, nil, true)),
		`WHERE (("created_at" > `+ts+` OR ("created_at" = `+ts+` AND "id" > N'abc')))`,
		`ORDER BY "created_at" ASC, "id" ASC OFFSET 0 ROWS FETCH NEXT 10 ROWS ONLY`)

	mustContain(t, "kpis", render(t, "kpis", s.kpisQuery(ports.KPIRequest{StuckBefore: at, DeliveredSince: at})),
		`SELECT 0 AS "kind", "source_site", "status", COUNT_BIG(*) AS "n", SUM(CASE WHEN "created_at" < `+ts+` THEN 1 ELSE 0 END) AS "stuck"`,
		`WHERE ("status" IN (N'Pending', N'Retrying', N'Parked')) GROUP BY "status", "source_site"`,
		`UNION ALL (SELECT 1, "source_site", N'', COUNT_BIG(*), 0, CAST(NULL AS datetime2(6)) FROM "notifications" WHERE ("delivered_at" IS NOT NULL) AND ("delivered_at" >= `+ts)
	render(t, "kpis without instants", s.kpisQuery(ports.KPIRequest{}))
}

func TestMSSQLWrites(t *testing.T) {
	s := mssqlNotifications(t)
	at := storetest.BaseTime
	mustContain(t, "transition ids", render(t, "transition ids", s.transitionQuery(ports.TransitionRequest{
		Selection: ports.Selection{IDs: []string{"a", "b"}},
		From:      ports.StatusParked, To: ports.StatusPending, Now: at, Reset: true,
	})),
		`UPDATE "notifications" SET "status" = N'Pending', "updated_at" = CAST('2025-06-02T09:30:00.123456' AS datetime2(6)), "claimed_by" = NULL`,
		`"retry_count" = 0, "next_attempt_at" = NULL, "last_error" = N''`,
		` OUTPUT inserted."id", inserted."source_site", inserted."type" WHERE ("status" = N'Parked') AND ("id" IN (N'a', N'b'))`)
	mustContain(t, "transition due now", render(t, "transition due now", s.transitionQuery(ports.TransitionRequest{
		Selection: ports.Selection{IDs: []string{"a"}},
		From:      ports.StatusRetrying, To: ports.StatusRetrying, Now: at.Add(time.Hour), DueNow: true, LeaseEndedBy: at,
	})),
		`"claimed_until" = NULL, "next_attempt_at" = NULL OUTPUT inserted."id", inserted."source_site", inserted."type" WHERE ("status" = N'Retrying')`,
		`AND (("claimed_by" IS NULL OR "claimed_until" <= CAST('2025-06-02T09:30:00.123456' AS datetime2(6))))`)
	sql := render(t, "transition filter", s.transitionQuery(ports.TransitionRequest{
		Selection: ports.Selection{Filter: ports.Filter{List: "ops", UpdatedFrom: at}},
		From:      ports.StatusParked, To: ports.StatusDiscarded, Now: at,
	}))
	mustContain(t, "transition filter", sql, ` OUTPUT inserted."id", inserted."source_site", inserted."type" WHERE ("status" = N'Parked') AND ("list" = N'ops') AND ("updated_at" >= `)
	if strings.Contains(sql, "retry_count") {
		t.Errorf("transition without Reset touches retry_count:\n%s", sql)
	}

	mustContain(t, "purge", render(t, "purge", s.d.purge(s.w, at, 500)),
		`DELETE TOP (500) FROM "notifications" OUTPUT deleted."id" WHERE "status" IN (N'Delivered', N'Parked', N'Discarded') AND ("updated_at" < CAST(`, `OR "updated_at" IS NULL)`)

	rec := ports.AuditRecord{NotificationID: "a", At: at, Kind: ports.AuditAttempted, Actor: ports.ActorSystem, Outcome: ports.OutcomeTransient,
		Status: ports.StatusRetrying, Duration: 1500 * time.Microsecond, Error: "smtp: 451"}
	row, err := toAuditRow(&rec)
	if err != nil {
		t.Fatal(err)
	}
	rec.Targets = []ports.AuditTarget{{Target: "b@example.test", Outcome: ports.OutcomeTransient, Error: "smtp: 451"}}
	withTargets, err := toAuditRow(&rec)
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.d.appendQuery(s.handle, []auditRow{row, withTargets})
	mustContain(t, "append", buildT(t, "append", q, err),
		`INSERT INTO "notification_audit" (`+quoted("", auditColumns)+`) VALUES (N'a', CAST('2025-06-02T09:30:00.123456' AS datetime2(6)), N'Attempted', N'system', N'Transient', N'Retrying', 1500, N'smtp: 451', CAST(NULL AS nvarchar(max)), N'', N''), `+
			`(N'a', CAST('2025-06-02T09:30:00.123456' AS datetime2(6)), N'Attempted', N'system', N'Transient', N'Retrying', 1500, N'smtp: 451', N'[{"t":"b@example.test","o":"Transient","e":"smtp: 451"}]', N'', N'')`)
	var rows []auditRow
	mustContain(t, "history", render(t, "history", s.historyQuery(&rows, "a")),
		`SELECT `+quoted(`"a".`, auditColumns)+` FROM "notification_audit" AS "a" WHERE ("notification_id" = N'a') ORDER BY "at", "id"`)
	mustContain(t, "forget", render(t, "forget", s.forgetQuery([]string{"a"})), `DELETE FROM "notification_audit" WHERE ("notification_id" IN (N'a'))`)

}

// TestNULIsInvalid: no dialect stores a NUL byte; the store refuses it
// before any statement.
func TestNULIsInvalid(t *testing.T) {
	s := newSQLiteStore(t).Notifications()
	ctx := context.Background()
	n := storetest.NewNotification(storetest.BaseTime)
	n.Body = "a\x00b"
	if _, err := s.Insert(ctx, []ports.Notification{n}); !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "NUL") {
		t.Errorf("insert of a NUL byte = %v, want ErrInvalid", err)
	}
	if _, err := s.Query(ctx, ports.Filter{List: "a\x00"}, ports.PageRequest{Limit: 1}); !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("query of a NUL byte = %v, want ErrInvalid", err)
	}
	if _, err := s.Record(ctx, "a\x00", []ports.Update{{ID: n.ID, Status: ports.StatusDelivered}}); !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("record of a NUL byte = %v, want ErrInvalid", err)
	}
}

// TestUnstorableTargetTextIsInvalid: a target state or audit target whose
// text holds a NUL byte or is not UTF-8 (which JSON would replace) is
// refused with ErrInvalid, by an error that does not carry the target.
func TestUnstorableTargetTextIsInvalid(t *testing.T) {
	s := newSQLiteStore(t).Notifications()
	ctx := context.Background()
	n := storetest.NewNotification(storetest.BaseTime)
	if _, err := s.Insert(ctx, []ports.Notification{n}); err != nil {
		t.Fatal(err)
	}
	const secret = "ops-secret@example.test"
	for name, st := range map[string]ports.TargetState{
		"NUL in the target":       {Target: secret + "\x00", Status: ports.TargetFailed},
		"NUL in the error":        {Target: secret, Status: ports.TargetFailed, LastError: "smtp: 550\x00"},
		"invalid UTF-8 in target": {Target: secret + "\xff", Status: ports.TargetFailed},
		"invalid UTF-8 in error":  {Target: secret, Status: ports.TargetFailed, LastError: "smtp: \xc3("},
		"NUL in the status":       {Target: secret, Status: "Failed\x00"},
	} {
		u := ports.Update{ID: n.ID, Status: ports.StatusParked, Targets: []ports.TargetState{{Target: "ok@example.test"}, st}}
		_, err := s.Record(ctx, "node/1", []ports.Update{u})
		if !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "target 1") || strings.Contains(err.Error(), "ops-secret") {
			t.Errorf("Record with %s = %v, want ErrInvalid naming target 1 but not the target", name, err)
		}
		rec := ports.AuditRecord{NotificationID: n.ID, At: storetest.BaseTime, Kind: ports.AuditAttempted, Actor: ports.ActorSystem,
			Targets: []ports.AuditTarget{{Target: st.Target, Outcome: ports.Outcome(st.Status), Error: st.LastError}}}
		err = s.Append(ctx, []ports.AuditRecord{rec})
		if !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "target 0") || strings.Contains(err.Error(), "ops-secret") {
			t.Errorf("Append with %s = %v, want ErrInvalid naming target 0 but not the target", name, err)
		}
	}
	if h, err := s.History(ctx, n.ID); err != nil || len(h) != 0 {
		t.Errorf("History = %v, %v; want nothing appended", h, err)
	}
	if got, err := s.Get(ctx, n.ID); err != nil || got.Targets != nil || got.Status != ports.StatusPending {
		t.Errorf("Get = %+v, %v; want the row untouched", got, err)
	}
}

// createdColumns returns, per CREATE TABLE of stmts, the column names.
func createdColumns(stmts []string) map[string][]string {
	tables := map[string][]string{}
	tableRE := regexp.MustCompile(`(?is)CREATE TABLE (?:IF NOT EXISTS )?"?(\w+)"?\s*\((.*)\)`)
	colRE := regexp.MustCompile(`^\s*(\w+)\s+\w+`)
	addRE := regexp.MustCompile(`(?is)^(?:--[^\n]*\n|\s)*ALTER TABLE "?(\w+)"? ADD (?:COLUMN )?(?:IF NOT EXISTS )?(\w+)\s`)
	for _, s := range stmts {
		if m := addRE.FindStringSubmatch(s); m != nil {
			tables[m[1]] = append(tables[m[1]], m[2])
			continue
		}
		m := tableRE.FindStringSubmatch(s)
		if m == nil {
			continue
		}
		for _, line := range strings.Split(m[2], "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "--") || strings.HasPrefix(strings.ToUpper(line), "CONSTRAINT") ||
				strings.HasPrefix(strings.ToUpper(line), "CHECK") {
				continue
			}
			if c := colRE.FindStringSubmatch(line); c != nil {
				tables[m[1]] = append(tables[m[1]], c[1])
			}
		}
	}
	return tables
}

// TestMigrationFiles parses the embedded migrations of every dialect into
// statements and checks that they create the same tables and columns, the
// columns the statements write, and (MS SQL) only T-SQL.
func TestMigrationFiles(t *testing.T) {
	for _, dialect := range []string{DriverSQLite, DriverPostgres, DriverMSSQL} {
		steps, err := loadMigrations(dialect)
		if err != nil {
			t.Fatalf("%s: %v", dialect, err)
		}
		if len(steps) == 0 {
			t.Fatalf("%s: no migrations", dialect)
		}
		var all []string
		for _, m := range steps {
			for i, stmt := range m.statements {
				if strings.Contains(stmt, splitMarker) {
					t.Errorf("%s %s statement %d still holds a split marker", dialect, m.version, i+1)
				}
				all = append(all, stmt)
			}
		}
		tables := createdColumns(all)
		for table, want := range map[string][]string{
			"notifications":         notificationColumns,
			"notification_audit":    append([]string{"id"}, auditColumns...),
			"notification_lists":    listColumns,
			"notification_channels": channelColumns,
			"operator_accounts":     accountColumns,
			"operator_tokens":       tokenColumns,
			"operator_sessions":     sessionColumns,
			"admin_audit":           append([]string{"id"}, adminColumns...),
			"site_calls":            rowColumns((*siteCallRow)(nil)),
			"site_commands":         rowColumns((*siteCommandRow)(nil)),
			"site_cursors":          rowColumns((*siteCursorRow)(nil)),
			"site_health":           rowColumns((*siteHealthRow)(nil)),
		} {
			got := slices.Clone(tables[table])
			w := slices.Clone(want)
			slices.Sort(got)
			slices.Sort(w)
			if !slices.Equal(got, w) {
				t.Errorf("%s: table %s has columns %v, want %v", dialect, table, got, w)
			}
		}
		if dialect != DriverMSSQL {
			continue
		}
		for i, stmt := range all {
			code := stripLiterals(stmt)
			for _, bad := range []string{"IF NOT EXISTS", "::", "timestamptz", `COLLATE "C"`, "GENERATED", " text ", "INTEGER PRIMARY KEY", "--bun:"} {
				if strings.Contains(code, bad) {
					t.Errorf("mssql statement %d holds %q, which is not T-SQL:\n%s", i+1, bad, stmt)
				}
			}
			if !regexp.MustCompile(`^(--[^\n]*\n|\s)*(CREATE|ALTER|DROP|IF|EXEC sp_rename)\b`).MatchString(stmt) {
				t.Errorf("mssql statement %d does not start with DDL:\n%s", i+1, stmt)
			}
			checkTSQL(t, "mssql migration statement", query{text: stmt})
		}
	}
	// The SQLite claim and KPIs name their indexes.
	sqlite, err := loadMigrations(DriverSQLite)
	if err != nil {
		t.Fatal(err)
	}
	text := ""
	for _, m := range sqlite {
		text += strings.Join(m.statements, "\n")
	}
	for _, ix := range []string{"notifications_claim_pending_idx", "notifications_claim_retrying_idx", "notifications_kpi_idx"} {
		if !strings.Contains(text, "CREATE INDEX IF NOT EXISTS "+ix) {
			t.Errorf("sqlite migrations lack %s, which the statements name", ix)
		}
	}
}

func TestSplitStatements(t *testing.T) {
	got := splitStatements("-- header\n\nCREATE TABLE a (x int);\n\n--bun:split\n-- only a comment\n--bun:split\nCREATE INDEX b ON a (x);\n")
	want := []string{"-- header\n\nCREATE TABLE a (x int);", "CREATE INDEX b ON a (x);"}
	if !slices.Equal(got, want) {
		t.Errorf("splitStatements = %q, want %q", got, want)
	}
}

func TestCursorRoundTrip(t *testing.T) {
	c := cursor{createdAt: storetest.BaseTime, id: storetest.NewID()}
	got, err := decodeCursor(encodeCursor(c))
	if err != nil || !got.createdAt.Equal(c.createdAt) || got.id != c.id {
		t.Fatalf("decode(encode(%v)) = %v, %v", c, got, err)
	}
	for _, bad := range []string{"!!", "eA", "MTIzfA", "MTIz", "eHx5"} {
		if _, err := decodeCursor(bad); err == nil {
			t.Errorf("decodeCursor(%q) accepted a malformed cursor", bad)
		}
	}
}

func TestIsUUID(t *testing.T) {
	for id, want := range map[string]bool{
		storetest.NewID():                      true,
		"3F2504E0-4F89-11D3-9A0C-0305E82C3301": true,
		"3f2504e04f8911d39a0c0305e82c3301":     false,
		"3f2504e0-4f89-11d3-9a0c-0305e82c330":  false,
		"3f2504e0-4f89-11d3-9a0c-0305e82c330g": false,
		"":                                     false,
	} {
		if got := isUUID(id); got != want {
			t.Errorf("isUUID(%q) = %v, want %v", id, got, want)
		}
	}
}

// TestMSSQLThroughput: the buckets are DATEDIFF_BIG in microseconds from
// From, grouped by the same expression (T-SQL groups by no alias and no
// constant); the delivered part reads the delivered_at index, the audit
// parts the records alone.
func TestMSSQLThroughput(t *testing.T) {
	s := mssqlNotifications(t)
	const ts = `CAST('2025-06-02T09:30:00.123456' AS datetime2(6))`
	q := ports.ThroughputQuery{From: storetest.BaseTime, To: storetest.BaseTime.Add(time.Hour), Bucket: time.Minute,
		Site: "site-'a", By: ports.ThroughputByType}
	sql := render(t, "throughput", s.throughputQuery(q))
	bucket := `(DATEDIFF_BIG(microsecond, ` + ts + `, "delivered_at") / 60000000)`
	mustContain(t, "throughput", sql,
		`SELECT `+bucket+` AS "b", 0 AS "kind", COUNT_BIG(*) AS "n", "type" AS "k" FROM "notifications"`,
		`WHERE ("delivered_at" >= `+ts+`) AND ("delivered_at" < CAST('2025-06-02T10:30:00.123456' AS datetime2(6))) AND ("source_site" = N'site-''a') GROUP BY "type", `+bucket,
		`FROM "notification_audit" WHERE ("kind" = N'Attempted') AND ("status" = N'Retrying')`,
		`("kind" = N'Parked') AND ("status" = N'Parked')`,
		`GROUP BY "type", (DATEDIFF_BIG(microsecond, `+ts+`, "at") / 60000000)`)
	if strings.Contains(sql, "JOIN") {
		t.Errorf("the throughput joins: %s", sql)
	}
	total := q
	total.Site, total.By = "", ports.ThroughputTotal
	sql = render(t, "throughput total", s.throughputQuery(total))
	mustContain(t, "throughput total", sql, `N'' AS "k"`, `GROUP BY `+bucket+`)`)
}
