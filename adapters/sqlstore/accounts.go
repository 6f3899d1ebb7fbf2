package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/siteline/outbox/ports"
)

// This file is ports.AccountStore over three small tables (migration
// 0003_accounts): operator_accounts (one row per account, keyed by name),
// operator_tokens (keyed by id, the name unique; since 0005_admin_audit with
// the account a token is bound to, indexed, and its expiry) and
// operator_sessions (keyed by the hex SHA-256 of the session's secret,
// indexed by account and by expiry). Hashes are binary columns written as binary literals. Reads are
// primary-key lookups or whole-table reads sorted in Go, as the directory's
// are; the core asks once per authenticated request, and sessions must be
// valid on every node, so there is no cache.
//
// Errors name token IDs (the public part of a token) but never account
// names, which may be e-mail addresses, nor session IDs.

var _ ports.AccountStore = (*Accounts)(nil)

// The account tables' columns, in the order the statements write and scan
// them; the first is the key.
var (
	accountColumns = []string{"name", "role", "password_hash", "created_at", "updated_at"}
	tokenColumns   = []string{"id", "name", "role", "hash", "created_at", "account", "expires_at"}
	sessionColumns = []string{"id", "account", "created_at", "expires_at"}
)

// bytes appends a binary literal quoted by the dialect: X'..' on SQLite,
// '\x..' (bytea input) on PostgreSQL, 0x.. on MS SQL. nil is written as
// empty: the hash columns are NOT NULL, and the port holds nil and empty
// alike.
func (s *stmt) bytes(v []byte) *stmt {
	if v == nil {
		v = []byte{}
	}
	s.b = s.g.d.AppendBytes(s.b, v)
	return s
}

// insertNew inserts one row of table unless a row with the same value in
// one of the unique columns exists: INSERT ... ON CONFLICT DO NOTHING (any
// unique constraint) on SQLite and PostgreSQL, INSERT ... SELECT ... WHERE
// NOT EXISTS with UPDLOCK, HOLDLOCK on MS SQL (the hints make the check and
// the insert one step against concurrent inserts of the same values). The
// statement affects no row when the row exists. values appends the
// parenthesised row.
func (g *sqlgen) insertNew(table string, cols, unique []string, values func(s *stmt)) (query, error) {
	s := g.stmt(256)
	all := colList("", cols)
	s.sql(`INSERT INTO "` + table + `" (` + all + `) `)
	if g.kind == kindMSSQL {
		s.sql(`SELECT ` + colList("v.", cols) + ` FROM (VALUES `)
		values(s)
		s.sql(`) AS v (` + all + `) WHERE NOT EXISTS (SELECT 1 FROM "` + table + `" AS t WITH (UPDLOCK, HOLDLOCK) WHERE `)
		for i, c := range unique {
			if i > 0 {
				s.sql(" OR ")
			}
			s.sql(`t."` + c + `" = v."` + c + `"`)
		}
		s.sql(")")
		return s.done()
	}
	s.sql("VALUES ")
	values(s)
	s.sql(" ON CONFLICT DO NOTHING")
	return s.done()
}

// putAccount creates or replaces the account a.
func (g *sqlgen) putAccount(a ports.Account) (query, error) {
	return g.upsert("operator_accounts", accountColumns, func(s *stmt) {
		s.sql("(").str(a.Name).sql(", ").str(string(a.Role)).sql(", ").bytes(a.PasswordHash).
			sql(", ").time(a.CreatedAt).sql(", ").time(a.UpdatedAt).sql(")")
	})
}

// putToken inserts the token t unless its id or name is taken.
func (g *sqlgen) putToken(t ports.StoredToken) (query, error) {
	return g.insertNew("operator_tokens", tokenColumns, []string{"id", "name"}, func(s *stmt) {
		s.sql("(").str(t.ID).sql(", ").str(t.Name).sql(", ").str(string(t.Role)).sql(", ").bytes(t.Hash).
			sql(", ").time(t.CreatedAt).sql(", ").str(t.Account).sql(", ").time(t.ExpiresAt).sql(")")
	})
}

// putSession inserts the session x unless its id is taken.
func (g *sqlgen) putSession(x ports.StoredSession) (query, error) {
	return g.insertNew("operator_sessions", sessionColumns, []string{"id"}, func(s *stmt) {
		s.sql("(").str(x.ID).sql(", ").str(x.Account).sql(", ").time(x.CreatedAt).sql(", ").time(x.ExpiresAt).sql(")")
	})
}

// deleteExpiredSessions deletes the sessions whose expiry is at or before
// now.
func (g *sqlgen) deleteExpiredSessions(now time.Time) (query, error) {
	s := g.stmt(128)
	s.sql(`DELETE FROM "operator_sessions" WHERE "expires_at" <= `).time(now)
	return s.done()
}

// --- accounts ----------------------------------------------------------------

// PutAccount implements ports.AccountStore: an upsert.
func (s *Accounts) PutAccount(ctx context.Context, a ports.Account) error {
	if err := a.Validate(); err != nil {
		return fmt.Errorf("sqlstore: put account: %w", err)
	}
	q, err := s.g.putAccount(a)
	if err != nil {
		return fmt.Errorf("sqlstore: put account: %w", err)
	}
	if err := s.write(ctx, false, func(ctx context.Context, c conn) error { return exec(ctx, c, q) }); err != nil {
		return s.fail("put account", err)
	}
	return nil
}

// Account implements ports.AccountStore: one primary-key lookup.
func (s *Accounts) Account(ctx context.Context, name string) (ports.Account, error) {
	as, err := s.accounts(ctx, &name)
	if err != nil {
		return ports.Account{}, err
	}
	if len(as) == 0 {
		return ports.Account{}, fmt.Errorf("sqlstore: read account: %w", ports.ErrNotFound)
	}
	return as[0], nil
}

// Accounts implements ports.AccountStore.
func (s *Accounts) Accounts(ctx context.Context) ([]ports.Account, error) {
	as, err := s.accounts(ctx, nil)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(as, func(a, b ports.Account) int { return cmp.Compare(a.Name, b.Name) })
	return as, nil
}

// accounts reads the account named name, or every account when name is nil.
func (s *handle) accounts(ctx context.Context, name *string) ([]ports.Account, error) {
	what := "read accounts"
	if name != nil {
		what = "read account"
		if !storable(*name) {
			return nil, nil
		}
	}
	q, err := s.g.selectRows("operator_accounts", accountColumns, name)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: %s: %w", what, err)
	}
	return queryRows(ctx, s, what, q, func(rows *sql.Rows) (ports.Account, error) {
		var (
			a                ports.Account
			role             string
			created, updated dbTime
		)
		// database/sql copies the hash into a slice of a's own.
		if err := rows.Scan(&a.Name, &role, &a.PasswordHash, &created, &updated); err != nil {
			return a, err
		}
		a.Role, a.CreatedAt, a.UpdatedAt = ports.OperatorRole(role), created.t, updated.t
		return a, nil
	})
}

// DeleteAccount implements ports.AccountStore: the account's row, then its
// sessions and the tokens bound to it, in one transaction.
func (s *Accounts) DeleteAccount(ctx context.Context, name string) error {
	notFound := fmt.Errorf("sqlstore: delete account: %w", ports.ErrNotFound)
	if !storable(name) {
		return notFound
	}
	delAccount, err := s.g.deleteRow("operator_accounts", "name", name)
	if err != nil {
		return fmt.Errorf("sqlstore: delete account: %w", err)
	}
	delSessions, err := s.g.deleteRow("operator_sessions", "account", name)
	if err != nil {
		return fmt.Errorf("sqlstore: delete account: %w", err)
	}
	delTokens, err := s.g.deleteRow("operator_tokens", "account", name)
	if err != nil {
		return fmt.Errorf("sqlstore: delete account: %w", err)
	}
	var deleted int64
	err = s.write(ctx, true, func(ctx context.Context, c conn) error {
		res, err := c.ExecContext(ctx, delAccount.text, delAccount.args...)
		if err != nil {
			return err
		}
		if deleted, err = res.RowsAffected(); err != nil || deleted == 0 { // afresh: a group writer may run this twice
			return err
		}
		if err := exec(ctx, c, delSessions); err != nil {
			return err
		}
		return exec(ctx, c, delTokens)
	})
	if err != nil {
		return s.fail("delete account", err)
	}
	if deleted == 0 {
		return notFound
	}
	return nil
}

// --- tokens ------------------------------------------------------------------

// PutToken implements ports.AccountStore: an insert that a taken id or name
// turns into a no-op, reported as ErrConflict.
func (s *Accounts) PutToken(ctx context.Context, t ports.StoredToken) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("sqlstore: put token: %w", err)
	}
	what := fmt.Sprintf("put token %q", t.ID)
	q, err := s.g.putToken(t)
	if err != nil {
		return fmt.Errorf("sqlstore: %s: %w", what, err)
	}
	inserted, err := s.insertOne(ctx, q)
	if err != nil {
		return s.fail(what, err)
	}
	if !inserted {
		return fmt.Errorf("sqlstore: %s: the id or the name is taken: %w", what, ports.ErrConflict)
	}
	return nil
}

// Token implements ports.AccountStore: one primary-key lookup.
func (s *Accounts) Token(ctx context.Context, id string) (ports.StoredToken, error) {
	ts, err := s.tokens(ctx, &id)
	if err != nil {
		return ports.StoredToken{}, err
	}
	if len(ts) == 0 {
		return ports.StoredToken{}, fmt.Errorf("sqlstore: read token %q: %w", id, ports.ErrNotFound)
	}
	return ts[0], nil
}

// Tokens implements ports.AccountStore.
func (s *Accounts) Tokens(ctx context.Context) ([]ports.StoredToken, error) {
	ts, err := s.tokens(ctx, nil)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ts, func(a, b ports.StoredToken) int { return cmp.Compare(a.Name, b.Name) })
	return ts, nil
}

// tokens reads the token with id, or every token when id is nil.
func (s *handle) tokens(ctx context.Context, id *string) ([]ports.StoredToken, error) {
	what := "read tokens"
	if id != nil {
		what = fmt.Sprintf("read token %q", *id)
		if !storable(*id) {
			return nil, nil
		}
	}
	q, err := s.g.selectRows("operator_tokens", tokenColumns, id)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: %s: %w", what, err)
	}
	return queryRows(ctx, s, what, q, func(rows *sql.Rows) (ports.StoredToken, error) {
		var (
			t                ports.StoredToken
			role             string
			created, expires dbTime
		)
		if err := rows.Scan(&t.ID, &t.Name, &role, &t.Hash, &created, &t.Account, &expires); err != nil {
			return t, err
		}
		t.Role, t.CreatedAt, t.ExpiresAt = ports.OperatorRole(role), created.t, expires.t
		return t, nil
	})
}

// DeleteToken implements ports.AccountStore.
func (s *Accounts) DeleteToken(ctx context.Context, id string) error {
	return s.deleteKey(ctx, "operator_tokens", "id", id, "token")
}

// --- sessions ----------------------------------------------------------------

// PutSession implements ports.AccountStore: an insert that a taken id turns
// into a no-op, reported as ErrConflict.
func (s *Accounts) PutSession(ctx context.Context, x ports.StoredSession) error {
	if err := x.Validate(); err != nil {
		return fmt.Errorf("sqlstore: put session: %w", err)
	}
	q, err := s.g.putSession(x)
	if err != nil {
		return fmt.Errorf("sqlstore: put session: %w", err)
	}
	inserted, err := s.insertOne(ctx, q)
	if err != nil {
		return s.fail("put session", err)
	}
	if !inserted {
		return fmt.Errorf("sqlstore: put session: the id is taken: %w", ports.ErrConflict)
	}
	return nil
}

// Session implements ports.AccountStore: one primary-key lookup.
func (s *Accounts) Session(ctx context.Context, id string) (ports.StoredSession, error) {
	notFound := fmt.Errorf("sqlstore: read session: %w", ports.ErrNotFound)
	if !storable(id) {
		return ports.StoredSession{}, notFound
	}
	q, err := s.g.selectRows("operator_sessions", sessionColumns, &id)
	if err != nil {
		return ports.StoredSession{}, fmt.Errorf("sqlstore: read session: %w", err)
	}
	xs, err := queryRows(ctx, s.handle, "read session", q, func(rows *sql.Rows) (ports.StoredSession, error) {
		var (
			x                ports.StoredSession
			created, expires dbTime
		)
		if err := rows.Scan(&x.ID, &x.Account, &created, &expires); err != nil {
			return x, err
		}
		x.CreatedAt, x.ExpiresAt = created.t, expires.t
		return x, nil
	})
	if err != nil {
		return ports.StoredSession{}, err
	}
	if len(xs) == 0 {
		return ports.StoredSession{}, notFound
	}
	return xs[0], nil
}

// DeleteSession implements ports.AccountStore.
func (s *Accounts) DeleteSession(ctx context.Context, id string) error {
	if !storable(id) {
		return nil
	}
	q, err := s.g.deleteRow("operator_sessions", "id", id)
	if err != nil {
		return fmt.Errorf("sqlstore: delete session: %w", err)
	}
	if err := s.write(ctx, false, func(ctx context.Context, c conn) error { return exec(ctx, c, q) }); err != nil {
		return s.fail("delete session", err)
	}
	return nil
}

// DeleteSessions implements ports.AccountStore: through the account index.
func (s *Accounts) DeleteSessions(ctx context.Context, account string) error {
	if !storable(account) {
		return nil
	}
	q, err := s.g.deleteRow("operator_sessions", "account", account)
	if err != nil {
		return fmt.Errorf("sqlstore: delete the sessions of an account: %w", err)
	}
	if err := s.write(ctx, false, func(ctx context.Context, c conn) error { return exec(ctx, c, q) }); err != nil {
		return s.fail("delete the sessions of an account", err)
	}
	return nil
}

// DeleteExpiredSessions implements ports.AccountStore: through the expiry
// index.
func (s *Accounts) DeleteExpiredSessions(ctx context.Context, now time.Time) (int64, error) {
	q, err := s.g.deleteExpiredSessions(now)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: delete expired sessions: %w", err)
	}
	var deleted int64
	err = s.write(ctx, false, func(ctx context.Context, c conn) error {
		res, err := c.ExecContext(ctx, q.text, q.args...)
		if err != nil {
			return err
		}
		deleted, err = res.RowsAffected() // afresh: a group writer may run this twice
		return err
	})
	if err != nil {
		return 0, s.fail("delete expired sessions", err)
	}
	return deleted, nil
}

// insertOne runs q, an insertNew statement, and reports whether it inserted
// its row.
func (s *handle) insertOne(ctx context.Context, q query) (bool, error) {
	var n int64
	err := s.write(ctx, false, func(ctx context.Context, c conn) error {
		res, err := c.ExecContext(ctx, q.text, q.args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected() // afresh: a group writer may run this twice
		return err
	})
	return n > 0, err
}

// --- rules -------------------------------------------------------------------
