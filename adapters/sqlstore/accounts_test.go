package sqlstore

import (
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/migrations"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/accountstest"
)

// TestMSSQLAccounts builds the account store's statements on MS SQL (no
// server runs here) and checks them as sqlgen_test.go checks the others.
func TestMSSQLAccounts(t *testing.T) {
	g := mssqlGen(t)
	const ts = `CAST('2025-06-02T09:30:00.654321' AS datetime2(6))`
	a := ports.Account{Name: "o'neil", Role: ports.RoleAdmin, PasswordHash: []byte{0x24, 0x00, 0xff},
		CreatedAt: accountstest.BaseTime, UpdatedAt: accountstest.BaseTime}
	q, err := g.putAccount(a)
	mustContain(t, "put account", buildT(t, "put account", q, err),
		`MERGE INTO "operator_accounts" WITH (HOLDLOCK) AS t USING (VALUES (N'o''neil', N'admin', 0x2400ff, `+ts+`, `+ts+`))`,
		` AS v ("name", "role", "password_hash", "created_at", "updated_at") ON t."name" = v."name"`,
		` WHEN MATCHED THEN UPDATE SET "role" = v."role", "password_hash" = v."password_hash", "created_at" = v."created_at", "updated_at" = v."updated_at"`,
		` WHEN NOT MATCHED THEN INSERT ("name", "role", "password_hash", "created_at", "updated_at") VALUES (v."name", v."role", v."password_hash", v."created_at", v."updated_at");`)
	a.PasswordHash = nil
	q, err = g.putAccount(a)
	mustContain(t, "put account without a hash", buildT(t, "put account without a hash", q, err), `N'admin', 0x, CAST(`)

	q, err = g.putToken(ports.StoredToken{ID: "tok-1", Name: "ci", Role: ports.RoleViewer, Hash: []byte{1, 2}, CreatedAt: accountstest.BaseTime})
	mustContain(t, "put token", buildT(t, "put token", q, err),
		`INSERT INTO "operator_tokens" ("id", "name", "role", "hash", "created_at", "account", "expires_at") SELECT v."id", v."name", v."role", v."hash", v."created_at", v."account", v."expires_at"`,
		` FROM (VALUES (N'tok-1', N'ci', N'viewer', 0x0102, `+ts+`, N'', CAST(NULL AS datetime2(6)))) AS v ("id", "name", "role", "hash", "created_at", "account", "expires_at")`,
		` WHERE NOT EXISTS (SELECT 1 FROM "operator_tokens" AS t WITH (UPDLOCK, HOLDLOCK) WHERE t."id" = v."id" OR t."name" = v."name")`)
	q, err = g.putToken(accountstest.NewBoundToken("tok-2", "alice/cli-1", "alice", accountstest.BaseTime, accountstest.BaseTime))
	mustContain(t, "put bound token", buildT(t, "put bound token", q, err), `, `+ts+`, N'alice', `+ts+`)) AS v (`)
	q, err = g.deleteRow("operator_tokens", "account", "alice")
	mustContain(t, "delete bound tokens", buildT(t, "delete bound tokens", q, err), `DELETE FROM "operator_tokens" WHERE "account" = N'alice'`)

	r := ports.AdminRecord{At: accountstest.BaseTime, Actor: "o'neil", Kind: ports.AdminKindList, Name: "ops", Action: ports.AdminCreated, Summary: "type email, 1 target"}
	q, err = g.appendAdmin(r)
	mustContain(t, "append admin record", buildT(t, "append admin record", q, err),
		`INSERT INTO "admin_audit" ("at", "actor", "kind", "name", "action", "summary") OUTPUT inserted."id" VALUES (`+ts+`, N'o''neil', N'list', N'ops', N'created', N'type email, 1 target')`)
	q, err = g.adminRecords(ports.AdminQuery{Kind: ports.AdminKindList, Name: "ops", Before: 42, Limit: 50})
	mustContain(t, "admin records", buildT(t, "admin records", q, err),
		`SELECT TOP (50) "id", "at", "actor", "kind", "name", "action", "summary" FROM "admin_audit" WHERE "id" < 42 AND "kind" = N'list' AND "name" = N'ops' ORDER BY "id" DESC`)
	q, err = g.adminRecords(ports.AdminQuery{Limit: 3})
	if text := buildT(t, "admin records unfiltered", q, err); strings.Contains(text, "WHERE") || strings.Contains(text, "LIMIT") {
		t.Errorf("admin records unfiltered: %s", text)
	}

	q, err = g.putSession(ports.StoredSession{ID: "ab12", Account: "alice", CreatedAt: accountstest.BaseTime, ExpiresAt: accountstest.BaseTime})
	mustContain(t, "put session", buildT(t, "put session", q, err),
		`INSERT INTO "operator_sessions" ("id", "account", "created_at", "expires_at") SELECT v."id", v."account", v."created_at", v."expires_at"`,
		` FROM (VALUES (N'ab12', N'alice', `+ts+`, `+ts+`)) AS v ("id", "account", "created_at", "expires_at")`,
		` WHERE NOT EXISTS (SELECT 1 FROM "operator_sessions" AS t WITH (UPDLOCK, HOLDLOCK) WHERE t."id" = v."id")`)

	q, err = g.deleteExpiredSessions(accountstest.BaseTime)
	mustContain(t, "delete expired sessions", buildT(t, "delete expired sessions", q, err),
		`DELETE FROM "operator_sessions" WHERE "expires_at" <= `+ts)

	key := "alice"
	q, err = g.selectRows("operator_accounts", accountColumns, &key)
	mustContain(t, "get account", buildT(t, "get account", q, err),
		`SELECT "name", "role", "password_hash", "created_at", "updated_at" FROM "operator_accounts" WHERE "name" = N'alice'`)
	q, err = g.deleteRow("operator_sessions", "account", key)
	mustContain(t, "delete sessions", buildT(t, "delete sessions", q, err), `DELETE FROM "operator_sessions" WHERE "account" = N'alice'`)
}

// TestAccountStatementsSQLitePostgres pins the binary literals and the
// insert-if-new of the other dialects (which the contract suite runs for
// real).
func TestAccountStatementsSQLitePostgres(t *testing.T) {
	for driver, hash := range map[string]string{DriverSQLite: `X'00ff'`, DriverPostgres: `'\x00ff'`} {
		g, err := newSQLGen(driver)
		if err != nil {
			t.Fatal(err)
		}
		q, err := g.putToken(ports.StoredToken{ID: "tok-1", Name: "ci", Role: ports.RoleViewer, Hash: []byte{0, 0xff}, CreatedAt: accountstest.BaseTime})
		if err != nil {
			t.Fatal(err)
		}
		mustContain(t, driver+" put token", q.text,
			`INSERT INTO "operator_tokens" ("id", "name", "role", "hash", "created_at", "account", "expires_at") VALUES ('tok-1', 'ci', 'viewer', `+hash+`, `,
			`, '', NULL`, `) ON CONFLICT DO NOTHING`)
		q, err = g.appendAdmin(ports.AdminRecord{At: accountstest.BaseTime, Actor: "a", Kind: ports.AdminKindUser, Name: "b", Action: ports.AdminDeleted})
		if err != nil {
			t.Fatal(err)
		}
		mustContain(t, driver+" append admin record", q.text, `INSERT INTO "admin_audit" (`, `, 'a', 'user', 'b', 'deleted', '') RETURNING "id"`)
		q, err = g.adminRecords(ports.AdminQuery{Limit: 3, Before: 9})
		if err != nil {
			t.Fatal(err)
		}
		mustContain(t, driver+" admin records", q.text, `FROM "admin_audit" WHERE "id" < 9 ORDER BY "id" DESC LIMIT 3`)
		if len(q.args) != 0 {
			t.Errorf("%s put token: %d parameters, want the values inlined", driver, len(q.args))
		}
	}
}

// checkAccountsDown runs the down migration of 0003_accounts on s, a
// migrated store holding an account, a token and a session: it drops the
// account tables and leaves the notifications and the directory alone.
func checkAccountsDown(t *testing.T, s *DB) {
	t.Helper()
	mustPut := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	at := accountstest.BaseTime
	mustPut("PutAccount", s.Accounts().PutAccount(t.Context(), accountstest.NewAccount("alice", ports.RoleAdmin, at)))
	mustPut("PutToken", s.Accounts().PutToken(t.Context(), accountstest.NewToken("tok-1", "ci", ports.RoleViewer, at)))
	mustPut("PutSession", s.Accounts().PutSession(t.Context(), accountstest.NewSession("x", "alice", at, at.Add(time.Hour))))
	mustPut("PutList", s.Directory().PutList(t.Context(), ports.List{Name: "ops", Type: "email"}))
	fsys, err := migrations.FS(s.driver)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fs.ReadFile(fsys, "0003_accounts.down.sql")
	if err != nil {
		t.Fatal(err)
	}
	for i, stmt := range splitStatements(string(b)) {
		if _, err := s.writer().ExecContext(t.Context(), stmt); err != nil {
			t.Fatalf("down statement %d: %v", i+1, err)
		}
	}
	if _, err := s.Accounts().Accounts(t.Context()); err == nil {
		t.Errorf("Accounts after the down migration: no error, want the table gone")
	}
	if _, err := s.Accounts().Tokens(t.Context()); err == nil {
		t.Errorf("Tokens after the down migration: no error, want the table gone")
	}
	if _, err := s.Accounts().Session(t.Context(), accountstest.SessionID("x")); err == nil {
		t.Errorf("Session after the down migration: no error, want the table gone")
	}
	if _, err := s.Directory().Lists(t.Context()); err != nil {
		t.Errorf("Lists after the down migration: %v", err)
	}
	if _, err := s.Notifications().Count(t.Context(), ports.Filter{}); err != nil {
		t.Errorf("Count after the down migration: %v", err)
	}
}

// checkAdminAuditDown runs the down migration of 0005_admin_audit on s, a
// migrated store holding a token and an admin record: it drops the admin
// audit log and the tokens' new columns, and leaves the tokens themselves.
func checkAdminAuditDown(t *testing.T, s *DB) {
	t.Helper()
	at := accountstest.BaseTime
	if err := s.Accounts().PutToken(t.Context(), accountstest.NewBoundToken("tok-1", "alice/cli", "alice", at, at.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Accounts().AppendAdmin(t.Context(), ports.AdminRecord{At: at, Actor: "a", Kind: ports.AdminKindList, Name: "ops", Action: ports.AdminCreated}); err != nil {
		t.Fatal(err)
	}
	fsys, err := migrations.FS(s.driver)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fs.ReadFile(fsys, "0005_admin_audit.down.sql")
	if err != nil {
		t.Fatal(err)
	}
	for i, stmt := range splitStatements(string(b)) {
		if _, err := s.writer().ExecContext(t.Context(), stmt); err != nil {
			t.Fatalf("down statement %d: %v", i+1, err)
		}
	}
	if _, err := s.Accounts().AdminRecords(t.Context(), ports.AdminQuery{Limit: 1}); err == nil {
		t.Errorf("AdminRecords after the down migration: no error, want the table gone")
	}
	var n int
	if err := s.reader().QueryRowContext(t.Context(), `SELECT COUNT(*) FROM operator_tokens WHERE id = 'tok-1'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("the token after the down migration: %d rows, %v", n, err)
	}
	if _, err := s.reader().ExecContext(t.Context(), `SELECT account FROM operator_tokens`); err == nil {
		t.Errorf("operator_tokens.account after the down migration: no error, want the column gone")
	}
}

func TestAdminAuditDownSQLite(t *testing.T) {
	t.Parallel()
	checkAdminAuditDown(t, newSQLiteStore(t))
}

func TestAdminAuditDownPostgres(t *testing.T) {
	t.Parallel()
	checkAdminAuditDown(t, newPostgresStore(t, postgresDSN(t)))
}

func TestAccountsDownSQLite(t *testing.T) {
	t.Parallel()
	checkAccountsDown(t, newSQLiteStore(t))
}

func TestAccountsDownPostgres(t *testing.T) {
	t.Parallel()
	checkAccountsDown(t, newPostgresStore(t, postgresDSN(t)))
}
