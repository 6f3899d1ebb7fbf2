package sqlstore

import (
	"database/sql"
	"testing"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mssqldialect"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"github.com/uptrace/bun/schema"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/accountstest"
)

// renderDB is a bun.DB with no server behind it: it renders statements.
func renderDB(d schema.Dialect) *bun.DB {
	return bun.NewDB(sql.OpenDB(noServer{}), d)
}

// rowColumns returns the columns of model, a pointer to a row struct,
// in their order.
func rowColumns(model any) []string {
	var out []string
	for _, f := range modelTable(renderDB(sqlitedialect.New()), model).Fields {
		out = append(out, f.Name)
	}
	return out
}

// The columns of the directory's and the accounts' models, which
// TestMigrationFiles compares with the tables the migrations create.
var (
	listColumns    = rowColumns((*listRow)(nil))
	channelColumns = rowColumns((*channelRow)(nil))
	accountColumns = rowColumns((*accountRow)(nil))
	tokenColumns   = rowColumns((*tokenRow)(nil))
	sessionColumns = rowColumns((*sessionRow)(nil))
	adminColumns   = rowColumns((*adminRow)(nil))[1:] // after the id
)

// TestMSSQLDirectoryAccounts renders the directory's, the accounts' and the
// admin audit's statements on MS SQL (no server runs here) and checks them
// as sqlgen_test.go checks the others.
func TestMSSQLDirectoryAccounts(t *testing.T) {
	db := renderDB(mssqldialect.New())
	w := mssqlDialect{}.writes()
	const ts = `CAST('2025-06-02T09:30:00.654321' AS datetime2(6))`
	at := at(accountstest.BaseTime)
	check := func(name, sql string, parts ...string) {
		t.Helper()
		mustContain(t, name, sql, parts...)
		checkTSQL(t, name, query{text: sql})
	}

	check("put list", w.upsert(db, nil, &listRow{Name: "o'ps", Type: "email", Targets: `["a@example.test","it's"]`, UpdatedAt: at}).String(),
		`MERGE INTO "notification_lists" WITH (HOLDLOCK) AS t USING (VALUES (N'o''ps', N'email', N'["a@example.test","it''s"]', `+ts+`)) AS v ("name", "type", "targets", "updated_at")`,
		` ON t."name" = v."name" WHEN MATCHED THEN UPDATE SET "type" = v."type", "targets" = v."targets", "updated_at" = v."updated_at"`,
		` WHEN NOT MATCHED THEN INSERT ("name", "type", "targets", "updated_at") VALUES (v."name", v."type", v."targets", v."updated_at");`)
	check("put channel", w.upsert(db, nil, &channelRow{Type: "email", Settings: "{}", RetryBackoff: "exponential", RetryMaxRetries: 12,
		RetryIntervalMS: 1500, RetryMaxIntervalMS: 3600000, RateLimit: 0.25, UpdatedAt: at}).String(),
		`USING (VALUES (N'email', N'{}', N'exponential', 12, 1500, 3600000, 2.5e-01, `+ts+`))`,
		`ON t."type" = v."type" WHEN MATCHED THEN UPDATE SET "settings" = v."settings"`)
	check("put zero channel", w.upsert(db, nil, &channelRow{Type: "slack", Settings: "{}", UpdatedAt: at}).String(),
		`(N'slack', N'{}', N'', 0, 0, 0, 0e+00, `)
	check("put account", w.upsert(db, nil, &accountRow{Name: "o'neil", Role: "admin", PasswordHash: hash([]byte{0x24, 0, 0xff}), CreatedAt: at, UpdatedAt: at}).String(),
		`MERGE INTO "operator_accounts" WITH (HOLDLOCK) AS t USING (VALUES (N'o''neil', N'admin', 0x2400ff, `+ts+`, `+ts+`))`)
	check("put account without a hash", w.upsert(db, nil, &accountRow{Name: "a", Role: "admin", PasswordHash: hash(nil), CreatedAt: at}).String(),
		`N'admin', 0x, `+ts+`, CAST(NULL AS datetime2(6))`)
	check("put token", w.insertNew(db, nil, &tokenRow{ID: "tok-1", Name: "ci", Role: "viewer", Hash: []byte{1, 2}, CreatedAt: at}, "id", "name").String(),
		`INSERT INTO "operator_tokens" ("id", "name", "role", "hash", "created_at", "account", "expires_at") SELECT v."id", v."name", v."role", v."hash", v."created_at", v."account", v."expires_at"`,
		` FROM (VALUES (N'tok-1', N'ci', N'viewer', 0x0102, `+ts+`, N'', CAST(NULL AS datetime2(6)))) AS v ("id", "name", "role", "hash", "created_at", "account", "expires_at")`,
		` WHERE NOT EXISTS (SELECT 1 FROM "operator_tokens" AS t WITH (UPDLOCK, HOLDLOCK) WHERE t."id" = v."id" OR t."name" = v."name")`)
	check("put session", w.insertNew(db, nil, &sessionRow{ID: "ab12", Account: "alice", CreatedAt: at, ExpiresAt: at}, "id").String(),
		` FROM (VALUES (N'ab12', N'alice', `+ts+`, `+ts+`)) AS v ("id", "account", "created_at", "expires_at")`,
		` WHERE NOT EXISTS (SELECT 1 FROM "operator_sessions" AS t WITH (UPDLOCK, HOLDLOCK) WHERE t."id" = v."id")`)
	check("append admin record", appendAdminQuery(db, w, &adminRow{At: at, Actor: "o'neil", Kind: "list", Name: "ops", Action: "created", Summary: "type email, 1 target"}).String(),
		`INSERT INTO "admin_audit" ("at", "actor", "kind", "name", "action", "summary") OUTPUT inserted."id" VALUES (`+ts+`, N'o''neil', N'list', N'ops', N'created', N'type email, 1 target')`)
	var recs []adminRow
	check("admin records", adminRecordsQuery(db, &recs, ports.AdminQuery{Kind: ports.AdminKindList, Name: "ops", Before: 42, Limit: 50}).String(),
		`FROM "admin_audit" WHERE ("id" < 42) AND ("kind" = N'list') AND ("name" = N'ops') ORDER BY "id" DESC OFFSET 0 ROWS FETCH NEXT 50 ROWS ONLY`)
	var lists []listRow
	key := "o'ps"
	check("get list", selectRowsQuery(db, &lists, "name", &key).String(),
		`SELECT "notification_lists"."name", "notification_lists"."type", "notification_lists"."targets", "notification_lists"."updated_at" FROM "notification_lists" WHERE ("name" = N'o''ps')`)
	check("delete bound tokens", deleteRowsQuery(db, "operator_tokens", "account", "alice").String(),
		`DELETE FROM "operator_tokens" WHERE ("account" = N'alice')`)
	check("delete expired sessions", expiredSessionsQuery(db, accountstest.BaseTime).String(),
		`DELETE FROM "operator_sessions" WHERE ("expires_at" <= `+ts+`)`)
}

// TestWritesSQLitePostgres pins the upsert, the insert of a new row, the
// returned id and the representations of the other dialects (which the
// contract suites run for real).
func TestWritesSQLitePostgres(t *testing.T) {
	for _, tc := range []struct {
		d             dialect
		hash, ts, nul string
	}{
		{sqliteDialect{}, `X'00ff'`, `1748856600654321`, `NULL`},
		{pgDialect{}, `'\x00ff'`, `'2025-06-02 09:30:00.654321+00'::timestamptz`, `NULL::timestamptz`},
	} {
		db := renderDB(tc.d.newBun())
		w := tc.d.writes()
		at := at(accountstest.BaseTime)
		name := tc.d.newBun().Name().String()
		mustContain(t, name+" put list", w.upsert(db, nil, &listRow{Name: "ops", Type: "email", Targets: "[]", UpdatedAt: at}).String(),
			`INSERT INTO "notification_lists" AS "notification_lists" ("name", "type", "targets", "updated_at") VALUES ('ops', 'email', '[]', `+tc.ts+`)`,
			` ON CONFLICT ("name") DO UPDATE SET "type" = EXCLUDED."type", "targets" = EXCLUDED."targets", "updated_at" = EXCLUDED."updated_at"`)
		mustContain(t, name+" put channel", w.upsert(db, nil, &channelRow{Type: "email", RateLimit: 1e-300}).String(), `, 1e-300, `)
		mustContain(t, name+" put token", w.insertNew(db, nil, &tokenRow{ID: "tok-1", Name: "ci", Role: "viewer", Hash: []byte{0, 0xff}, CreatedAt: at}, "id", "name").String(),
			`("id", "name", "role", "hash", "created_at", "account", "expires_at") VALUES ('tok-1', 'ci', 'viewer', `+tc.hash+`, `+tc.ts+`, '', `+tc.nul+`) ON CONFLICT DO NOTHING`)
		mustContain(t, name+" append admin record", appendAdminQuery(db, w, &adminRow{At: at, Actor: "a", Kind: "user", Name: "b", Action: "deleted"}).String(),
			`INSERT INTO "admin_audit" ("at", "actor", "kind", "name", "action", "summary") VALUES (`+tc.ts+`, 'a', 'user', 'b', 'deleted', '') RETURNING "id"`)
		var recs []adminRow
		mustContain(t, name+" admin records", adminRecordsQuery(db, &recs, ports.AdminQuery{Limit: 3, Before: 9}).String(),
			`FROM "admin_audit" WHERE ("id" < 9) ORDER BY "id" DESC LIMIT 3`)
	}
}
