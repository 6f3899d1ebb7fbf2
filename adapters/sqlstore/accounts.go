package sqlstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/uptrace/bun"

	"github.com/siteline/outbox/ports"
)

// This file is ports.AccountStore over three small tables (migration
// 0003_accounts): operator_accounts (one row per account, keyed by name),
// operator_tokens (keyed by id, the name unique; since 0005_admin_audit with
// the account a token is bound to, indexed, and its expiry) and
// operator_sessions (keyed by the hex SHA-256 of the session's secret,
// indexed by account and by expiry). Hashes are binary columns. The rows
// are bun models, as the directory's; PutAccount is the directory's upsert,
// PutToken and PutSession the dialect's insert of a new row (writeDialect in
// bunquery.go). Reads are primary-key lookups or whole-table reads sorted in
// Go, as the directory's are; the core asks once per authenticated request,
// and sessions must be valid on every node, so there is no cache.
//
// Errors name token IDs (the public part of a token) but never account
// names, which may be e-mail addresses, nor session IDs.

var _ ports.AccountStore = (*Accounts)(nil)

// accountRow is a row of operator_accounts.
type accountRow struct {
	bun.BaseModel `bun:"table:operator_accounts,alias:operator_accounts"`

	Name         string  `bun:"name,pk"`
	Role         string  `bun:"role"`
	PasswordHash []byte  `bun:"password_hash"`
	CreatedAt    instant `bun:"created_at"`
	UpdatedAt    instant `bun:"updated_at"`
}

// tokenRow is a row of operator_tokens; Account is "" for a token with a
// role of its own.
type tokenRow struct {
	bun.BaseModel `bun:"table:operator_tokens,alias:operator_tokens"`

	ID        string  `bun:"id,pk"`
	Name      string  `bun:"name"`
	Role      string  `bun:"role"`
	Hash      []byte  `bun:"hash"`
	CreatedAt instant `bun:"created_at"`
	Account   string  `bun:"account"`
	ExpiresAt instant `bun:"expires_at"`
}

// sessionRow is a row of operator_sessions.
type sessionRow struct {
	bun.BaseModel `bun:"table:operator_sessions,alias:operator_sessions"`

	ID        string  `bun:"id,pk"`
	Account   string  `bun:"account"`
	CreatedAt instant `bun:"created_at"`
	ExpiresAt instant `bun:"expires_at"`
}

// hash returns v, or an empty slice for nil: the hash columns are NOT NULL
// and bun writes a nil slice as NULL; the port holds nil and empty alike.
func hash(v []byte) []byte {
	if v == nil {
		return []byte{}
	}
	return v
}

// --- accounts ----------------------------------------------------------------

// PutAccount implements ports.AccountStore: an upsert.
func (s *Accounts) PutAccount(ctx context.Context, a ports.Account) error {
	if err := a.Validate(); err != nil {
		return fmt.Errorf("sqlstore: put account: %w", err)
	}
	row := &accountRow{Name: a.Name, Role: string(a.Role), PasswordHash: hash(a.PasswordHash),
		CreatedAt: at(a.CreatedAt), UpdatedAt: at(a.UpdatedAt)}
	if err := s.write(ctx, false, func(ctx context.Context, c conn) error { return s.upsert(ctx, c, row) }); err != nil {
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
	var rows []accountRow
	if err := s.selectRows(ctx, &rows, "name", name); err != nil {
		return nil, s.fail(what, err)
	}
	out := make([]ports.Account, len(rows))
	for i, r := range rows {
		out[i] = ports.Account{Name: r.Name, Role: ports.OperatorRole(r.Role), PasswordHash: r.PasswordHash,
			CreatedAt: r.CreatedAt.t, UpdatedAt: r.UpdatedAt.t}
	}
	return out, nil
}

// DeleteAccount implements ports.AccountStore: the account's row, then its
// sessions and the tokens bound to it, in one transaction.
func (s *Accounts) DeleteAccount(ctx context.Context, name string) error {
	notFound := fmt.Errorf("sqlstore: delete account: %w", ports.ErrNotFound)
	if !storable(name) {
		return notFound
	}
	var deleted int64
	err := s.write(ctx, true, func(ctx context.Context, c conn) (err error) {
		// afresh: a group writer may run this twice
		if deleted, err = s.deleteRows(ctx, c, "operator_accounts", "name", name); err != nil || deleted == 0 {
			return err
		}
		if _, err := s.deleteRows(ctx, c, "operator_sessions", "account", name); err != nil {
			return err
		}
		_, err = s.deleteRows(ctx, c, "operator_tokens", "account", name)
		return err
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
	row := &tokenRow{ID: t.ID, Name: t.Name, Role: string(t.Role), Hash: hash(t.Hash),
		CreatedAt: at(t.CreatedAt), Account: t.Account, ExpiresAt: at(t.ExpiresAt)}
	inserted, err := s.insertNew(ctx, row, "id", "name")
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
	var rows []tokenRow
	if err := s.selectRows(ctx, &rows, "id", id); err != nil {
		return nil, s.fail(what, err)
	}
	out := make([]ports.StoredToken, len(rows))
	for i, r := range rows {
		out[i] = ports.StoredToken{ID: r.ID, Name: r.Name, Role: ports.OperatorRole(r.Role), Hash: r.Hash,
			CreatedAt: r.CreatedAt.t, Account: r.Account, ExpiresAt: r.ExpiresAt.t}
	}
	return out, nil
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
	row := &sessionRow{ID: x.ID, Account: x.Account, CreatedAt: at(x.CreatedAt), ExpiresAt: at(x.ExpiresAt)}
	inserted, err := s.insertNew(ctx, row, "id")
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
	var rows []sessionRow
	if err := s.selectRows(ctx, &rows, "id", &id); err != nil {
		return ports.StoredSession{}, s.fail("read session", err)
	}
	if len(rows) == 0 {
		return ports.StoredSession{}, notFound
	}
	r := rows[0]
	return ports.StoredSession{ID: r.ID, Account: r.Account, CreatedAt: r.CreatedAt.t, ExpiresAt: r.ExpiresAt.t}, nil
}

// DeleteSession implements ports.AccountStore.
func (s *Accounts) DeleteSession(ctx context.Context, id string) error {
	if !storable(id) {
		return nil
	}
	err := s.write(ctx, false, func(ctx context.Context, c conn) error {
		_, err := s.deleteRows(ctx, c, "operator_sessions", "id", id)
		return err
	})
	if err != nil {
		return s.fail("delete session", err)
	}
	return nil
}

// DeleteSessions implements ports.AccountStore: through the account index.
func (s *Accounts) DeleteSessions(ctx context.Context, account string) error {
	if !storable(account) {
		return nil
	}
	err := s.write(ctx, false, func(ctx context.Context, c conn) error {
		_, err := s.deleteRows(ctx, c, "operator_sessions", "account", account)
		return err
	})
	if err != nil {
		return s.fail("delete the sessions of an account", err)
	}
	return nil
}

// DeleteExpiredSessions implements ports.AccountStore: through the expiry
// index.
func (s *Accounts) DeleteExpiredSessions(ctx context.Context, now time.Time) (int64, error) {
	var deleted int64
	err := s.write(ctx, false, func(ctx context.Context, c conn) error {
		res, err := expiredSessionsQuery(s.w, now).Conn(c).Exec(ctx)
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

// expiredSessionsQuery deletes the sessions whose expiry is at or before
// now.
func expiredSessionsQuery(db *bun.DB, now time.Time) *bun.DeleteQuery {
	return db.NewDelete().TableExpr("?", bun.Ident("operator_sessions")).
		Where("? <= ?", bun.Ident("expires_at"), at(now))
}

// insertNew inserts the row model (a pointer to a row struct) unless a row
// has the same value in one of the unique columns, and reports whether it
// did.
func (s *handle) insertNew(ctx context.Context, model any, unique ...string) (bool, error) {
	var n int64
	err := s.write(ctx, false, func(ctx context.Context, c conn) error {
		res, err := s.writes().insertNew(s.w, c, model, unique...).Exec(ctx)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected() // afresh: a group writer may run this twice
		return err
	})
	return n > 0, err
}

// --- rules -------------------------------------------------------------------
