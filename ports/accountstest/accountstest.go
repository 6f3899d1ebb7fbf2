// Package accountstest is the contract suite of the account store port:
// every adapter of [ports.AccountStore] runs [Exercise] against its real
// backend (memory, SQLite, PostgreSQL, MS SQL) from one line of its own
// tests:
//
//	func TestAccountContract(t *testing.T) {
//		accountstest.Exercise(t, func(t *testing.T) ports.AccountStore {
//			return newEmptyStore(t)
//		})
//	}
//
// The suite is organised one file per area of the port (accounts, tokens,
// sessions, values, concurrency). Every subtest asks for a fresh, empty store
// and uses nothing else, so an adapter may back each with its own database or
// schema.
//
// Times handed to the store are fixed and truncated to the microsecond; times
// read back must be in UTC and are compared with [time.Time.Equal], so a store
// need keep no more than microsecond precision and no time zone.
package accountstest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// Exercise runs the whole contract against the adapter. newStore is called
// once per subtest and must return an empty store.
func Exercise(t *testing.T, newStore func(t *testing.T) ports.AccountStore) {
	t.Helper()
	t.Run("Accounts", func(t *testing.T) { exerciseAccounts(t, newStore) })
	t.Run("Tokens", func(t *testing.T) { exerciseTokens(t, newStore) })
	t.Run("Sessions", func(t *testing.T) { exerciseSessions(t, newStore) })
	t.Run("Values", func(t *testing.T) { exerciseValues(t, newStore) })
	t.Run("Concurrent", func(t *testing.T) { exerciseConcurrent(t, newStore) })
}

// BaseTime is the fixed instant the suite builds its data around. It carries
// a microsecond fraction, so a store that keeps less precision fails.
var BaseTime = time.Date(2025, time.June, 2, 9, 30, 0, 0, time.UTC).Add(654321 * time.Microsecond)

// NewAccount returns a valid account named name with role, a bcrypt-shaped
// password hash derived from the name, created at createdAt and updated a
// minute later.
func NewAccount(name string, role ports.OperatorRole, createdAt time.Time) ports.Account {
	return ports.Account{
		Name:         name,
		Role:         role,
		PasswordHash: []byte("$2a$10$" + hex.EncodeToString(sum("password of " + name))[:53]),
		CreatedAt:    createdAt,
		UpdatedAt:    createdAt.Add(time.Minute),
	}
}

// NewToken returns a valid token with id and name, role, the SHA-256 of a
// secret derived from the id as its hash, created at createdAt.
func NewToken(id, name string, role ports.OperatorRole, createdAt time.Time) ports.StoredToken {
	return ports.StoredToken{ID: id, Name: name, Role: role, Hash: sum("secret of " + id), CreatedAt: createdAt}
}

// NewBoundToken returns a valid token with id and name bound to account,
// with the viewer role, the SHA-256 of a secret derived from the id as its
// hash, created at createdAt and expiring at expiresAt.
func NewBoundToken(id, name, account string, createdAt, expiresAt time.Time) ports.StoredToken {
	t := NewToken(id, name, ports.RoleViewer, createdAt)
	t.Account, t.ExpiresAt = account, expiresAt
	return t
}

// NewSession returns a valid session of account whose ID is the hex SHA-256
// of secret, created at createdAt and expiring at expiresAt.
func NewSession(secret, account string, createdAt, expiresAt time.Time) ports.StoredSession {
	return ports.StoredSession{ID: SessionID(secret), Account: account, CreatedAt: createdAt, ExpiresAt: expiresAt}
}

// SessionID returns the hex SHA-256 of secret, the form of a session ID.
func SessionID(secret string) string { return hex.EncodeToString(sum(secret)) }

func sum(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// DiffAccount lists the fields in which got differs from want, one line per
// field, or nothing when they are equal. Times are compared with
// [time.Time.Equal]; nil and empty hashes are equal.
func DiffAccount(want, got ports.Account) []string {
	var d diff
	d.str("Name", want.Name, got.Name)
	d.str("Role", string(want.Role), string(got.Role))
	d.bytes("PasswordHash", want.PasswordHash, got.PasswordHash)
	d.time("CreatedAt", want.CreatedAt, got.CreatedAt)
	d.time("UpdatedAt", want.UpdatedAt, got.UpdatedAt)
	return d
}

// DiffToken lists the fields in which got differs from want, one line per
// field, or nothing when they are equal (as DiffAccount compares).
func DiffToken(want, got ports.StoredToken) []string {
	var d diff
	d.str("ID", want.ID, got.ID)
	d.str("Name", want.Name, got.Name)
	d.str("Role", string(want.Role), string(got.Role))
	d.bytes("Hash", want.Hash, got.Hash)
	d.str("Account", want.Account, got.Account)
	d.time("CreatedAt", want.CreatedAt, got.CreatedAt)
	d.time("ExpiresAt", want.ExpiresAt, got.ExpiresAt)
	return d
}

// DiffSession lists the fields in which got differs from want, one line per
// field, or nothing when they are equal (as DiffAccount compares).
func DiffSession(want, got ports.StoredSession) []string {
	var d diff
	d.str("ID", want.ID, got.ID)
	d.str("Account", want.Account, got.Account)
	d.time("CreatedAt", want.CreatedAt, got.CreatedAt)
	d.time("ExpiresAt", want.ExpiresAt, got.ExpiresAt)
	return d
}

type diff []string

func (d *diff) str(name, w, g string) {
	if w != g {
		*d = append(*d, fmt.Sprintf("%s: want %q, got %q", name, w, g))
	}
}

func (d *diff) bytes(name string, w, g []byte) {
	if !bytes.Equal(w, g) {
		*d = append(*d, fmt.Sprintf("%s: want %x (%d bytes), got %x (%d bytes)", name, w, len(w), g, len(g)))
	}
}

func (d *diff) time(name string, w, g time.Time) {
	if !w.Equal(g) {
		*d = append(*d, fmt.Sprintf("%s: want %s, got %s", name, fmtTime(w), fmtTime(g)))
	}
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "zero"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// --- helpers shared by the areas ---------------------------------------------

func checkAccount(t *testing.T, what string, want, got ports.Account) {
	t.Helper()
	if d := DiffAccount(want, got); len(d) > 0 {
		t.Errorf("%s: account %q differs:\n  %s", what, want.Name, strings.Join(d, "\n  "))
	}
}

func checkToken(t *testing.T, what string, want, got ports.StoredToken) {
	t.Helper()
	if d := DiffToken(want, got); len(d) > 0 {
		t.Errorf("%s: token %q differs:\n  %s", what, want.ID, strings.Join(d, "\n  "))
	}
}

func checkSession(t *testing.T, what string, want, got ports.StoredSession) {
	t.Helper()
	if d := DiffSession(want, got); len(d) > 0 {
		t.Errorf("%s: session %.12s… differs:\n  %s", what, want.ID, strings.Join(d, "\n  "))
	}
}

func mustPutAccount(t *testing.T, s ports.AccountStore, as ...ports.Account) {
	t.Helper()
	for _, a := range as {
		if err := s.PutAccount(t.Context(), a); err != nil {
			t.Fatalf("PutAccount(%q): %v", a.Name, err)
		}
	}
}

func mustAccount(t *testing.T, s ports.AccountStore, name string) ports.Account {
	t.Helper()
	a, err := s.Account(t.Context(), name)
	if err != nil {
		t.Fatalf("Account(%q): %v", name, err)
	}
	return a
}

func mustAccounts(t *testing.T, s ports.AccountStore) []ports.Account {
	t.Helper()
	as, err := s.Accounts(t.Context())
	if err != nil {
		t.Fatalf("Accounts: %v", err)
	}
	return as
}

func mustPutToken(t *testing.T, s ports.AccountStore, ts ...ports.StoredToken) {
	t.Helper()
	for _, tk := range ts {
		if err := s.PutToken(t.Context(), tk); err != nil {
			t.Fatalf("PutToken(%q): %v", tk.ID, err)
		}
	}
}

func mustToken(t *testing.T, s ports.AccountStore, id string) ports.StoredToken {
	t.Helper()
	tk, err := s.Token(t.Context(), id)
	if err != nil {
		t.Fatalf("Token(%q): %v", id, err)
	}
	return tk
}

func mustTokens(t *testing.T, s ports.AccountStore) []ports.StoredToken {
	t.Helper()
	ts, err := s.Tokens(t.Context())
	if err != nil {
		t.Fatalf("Tokens: %v", err)
	}
	return ts
}

func mustPutSession(t *testing.T, s ports.AccountStore, ss ...ports.StoredSession) {
	t.Helper()
	for _, x := range ss {
		if err := s.PutSession(t.Context(), x); err != nil {
			t.Fatalf("PutSession(%.12s…): %v", x.ID, err)
		}
	}
}

func mustSession(t *testing.T, s ports.AccountStore, id string) ports.StoredSession {
	t.Helper()
	x, err := s.Session(t.Context(), id)
	if err != nil {
		t.Fatalf("Session(%.12s…): %v", id, err)
	}
	return x
}

// checkIs reports when err does not wrap target.
func checkIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s = %v, want an error wrapping %v", what, err, target)
	}
}

// checkSecrets reports when err's text holds one of values.
func checkSecrets(t *testing.T, what string, err error, values ...string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, v := range values {
		if v != "" && strings.Contains(err.Error(), v) {
			t.Errorf("%s = %v: the error repeats %q", what, err, v)
		}
	}
}

// accountNames returns the names of as in order.
func accountNames(as []ports.Account) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Name
	}
	return out
}

// tokenNames returns the names of ts in order.
func tokenNames(ts []ports.StoredToken) []string {
	out := make([]string, len(ts))
	for i, tk := range ts {
		out[i] = tk.Name
	}
	return out
}

// badKeys are keys no store accepts (see ports.AccountStore), by what is
// wrong with them.
var badKeys = map[string]string{
	"empty":                  "",
	"leading space":          " alice",
	"trailing space":         "alice ",
	"trailing tab":           "alice\t",
	"NUL byte":               "al\x00ice",
	"invalid UTF-8":          "al\xffice",
	"only white space":       "  ",
	"trailing newline":       "alice\n",
	"trailing no-break char": "alice\u00a0",
}

// storedKey is a valid key that shares a prefix with every bad key, so that
// a store which trims or truncates a bad key would find it.
const storedKey = "alice"
