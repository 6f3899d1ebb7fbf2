package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/siteline/outbox/ports"
)

// This file is ports.AccountStore: operator accounts, API tokens and
// sessions in three maps under the store's mutex. Errors name token IDs (the
// public part of a token) but never account names, which may be e-mail
// addresses, nor session IDs.

var _ ports.AccountStore = (*Store)(nil)

// accountTables holds the operator accounts, tokens and sessions. Every value
// is a private copy, times in UTC.
type accountTables struct {
	accounts map[string]ports.Account // by name
	tokens   map[string]ports.StoredToken
	// tokenIDs maps a token's name to its ID: names are unique.
	tokenIDs map[string]string
	sessions map[string]ports.StoredSession // by ID
}

func newAccountTables() accountTables {
	return accountTables{
		accounts: map[string]ports.Account{},
		tokens:   map[string]ports.StoredToken{},
		tokenIDs: map[string]string{},
		sessions: map[string]ports.StoredSession{},
	}
}

// PutAccount implements ports.AccountStore.
func (s *Store) PutAccount(ctx context.Context, a ports.Account) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: put account: %w", err)
	}
	if err := a.Validate(); err != nil {
		return fmt.Errorf("memstore: put account: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acct.accounts[a.Name] = cloneAccount(a)
	return nil
}

// Account implements ports.AccountStore.
func (s *Store) Account(ctx context.Context, name string) (ports.Account, error) {
	if err := ctx.Err(); err != nil {
		return ports.Account{}, fmt.Errorf("memstore: read account: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.acct.accounts[name]
	if !ok {
		return ports.Account{}, fmt.Errorf("memstore: read account: %w", ports.ErrNotFound)
	}
	return cloneAccount(a), nil
}

// Accounts implements ports.AccountStore.
func (s *Store) Accounts(ctx context.Context) ([]ports.Account, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: read accounts: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ports.Account, 0, len(s.acct.accounts))
	for _, name := range slices.Sorted(maps.Keys(s.acct.accounts)) {
		out = append(out, cloneAccount(s.acct.accounts[name]))
	}
	return out, nil
}

// DeleteAccount implements ports.AccountStore.
func (s *Store) DeleteAccount(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: delete account: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.acct.accounts[name]; !ok {
		return fmt.Errorf("memstore: delete account: %w", ports.ErrNotFound)
	}
	delete(s.acct.accounts, name)
	s.deleteSessionsLocked(name)
	for id, t := range s.acct.tokens {
		if t.Account == name {
			delete(s.acct.tokens, id)
			delete(s.acct.tokenIDs, t.Name)
		}
	}
	return nil
}

// PutToken implements ports.AccountStore.
func (s *Store) PutToken(ctx context.Context, t ports.StoredToken) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: put token %q: %w", t.ID, err)
	}
	if err := t.Validate(); err != nil {
		return fmt.Errorf("memstore: put token: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.acct.tokens[t.ID]; ok {
		return fmt.Errorf("memstore: put token %q: the id is taken: %w", t.ID, ports.ErrConflict)
	}
	if _, ok := s.acct.tokenIDs[t.Name]; ok {
		return fmt.Errorf("memstore: put token %q: the name is taken: %w", t.ID, ports.ErrConflict)
	}
	s.acct.tokens[t.ID] = cloneToken(t)
	s.acct.tokenIDs[t.Name] = t.ID
	return nil
}

// Token implements ports.AccountStore.
func (s *Store) Token(ctx context.Context, id string) (ports.StoredToken, error) {
	if err := ctx.Err(); err != nil {
		return ports.StoredToken{}, fmt.Errorf("memstore: read token %q: %w", id, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.acct.tokens[id]
	if !ok {
		return ports.StoredToken{}, fmt.Errorf("memstore: read token %q: %w", id, ports.ErrNotFound)
	}
	return cloneToken(t), nil
}

// Tokens implements ports.AccountStore.
func (s *Store) Tokens(ctx context.Context) ([]ports.StoredToken, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: read tokens: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ports.StoredToken, 0, len(s.acct.tokens))
	for _, name := range slices.Sorted(maps.Keys(s.acct.tokenIDs)) {
		out = append(out, cloneToken(s.acct.tokens[s.acct.tokenIDs[name]]))
	}
	return out, nil
}

// DeleteToken implements ports.AccountStore.
func (s *Store) DeleteToken(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: delete token %q: %w", id, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.acct.tokens[id]
	if !ok {
		return fmt.Errorf("memstore: delete token %q: %w", id, ports.ErrNotFound)
	}
	delete(s.acct.tokens, id)
	delete(s.acct.tokenIDs, t.Name)
	return nil
}

// PutSession implements ports.AccountStore.
func (s *Store) PutSession(ctx context.Context, ss ports.StoredSession) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: put session: %w", err)
	}
	if err := ss.Validate(); err != nil {
		return fmt.Errorf("memstore: put session: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.acct.sessions[ss.ID]; ok {
		return fmt.Errorf("memstore: put session: the id is taken: %w", ports.ErrConflict)
	}
	ss.CreatedAt, ss.ExpiresAt = utc(ss.CreatedAt), utc(ss.ExpiresAt)
	s.acct.sessions[ss.ID] = ss
	return nil
}

// Session implements ports.AccountStore.
func (s *Store) Session(ctx context.Context, id string) (ports.StoredSession, error) {
	if err := ctx.Err(); err != nil {
		return ports.StoredSession{}, fmt.Errorf("memstore: read session: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.acct.sessions[id]
	if !ok {
		return ports.StoredSession{}, fmt.Errorf("memstore: read session: %w", ports.ErrNotFound)
	}
	return ss, nil
}

// DeleteSession implements ports.AccountStore.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: delete session: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.acct.sessions, id)
	return nil
}

// DeleteSessions implements ports.AccountStore.
func (s *Store) DeleteSessions(ctx context.Context, account string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: delete the sessions of an account: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleteSessionsLocked(account)
	return nil
}

// DeleteExpiredSessions implements ports.AccountStore.
func (s *Store) DeleteExpiredSessions(ctx context.Context, now time.Time) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memstore: delete expired sessions: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for id, ss := range s.acct.sessions {
		if !ss.ExpiresAt.After(now) {
			delete(s.acct.sessions, id)
			n++
		}
	}
	return n, nil
}

// deleteSessionsLocked deletes every session of account; s.mu is held.
func (s *Store) deleteSessionsLocked(account string) {
	maps.DeleteFunc(s.acct.sessions, func(_ string, ss ports.StoredSession) bool { return ss.Account == account })
}

// --- rules and copies --------------------------------------------------------

// cloneAccount returns a copy of a that shares no memory, times in UTC.
func cloneAccount(a ports.Account) ports.Account {
	a.PasswordHash = slices.Clone(a.PasswordHash)
	a.CreatedAt, a.UpdatedAt = utc(a.CreatedAt), utc(a.UpdatedAt)
	return a
}

// cloneToken returns a copy of t that shares no memory, times in UTC.
func cloneToken(t ports.StoredToken) ports.StoredToken {
	t.Hash = slices.Clone(t.Hash)
	t.CreatedAt, t.ExpiresAt = utc(t.CreatedAt), utc(t.ExpiresAt)
	return t
}
