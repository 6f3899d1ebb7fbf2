package sqlstore

import (
	"io/fs"
	"testing"
	"time"

	"github.com/siteline/outbox/migrations"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/accountstest"
)

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
	b, err := fs.ReadFile(fsys, "0003_accounts.tx.down.sql")
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
	b, err := fs.ReadFile(fsys, "0005_admin_audit.tx.down.sql")
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
