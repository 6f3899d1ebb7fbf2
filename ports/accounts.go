package ports

import (
	"context"
	"fmt"
	"time"
)

// OperatorRole is what an operator may do. Each role grants everything
// the roles below it grant: viewer < operator < admin.
type OperatorRole string

const (
	// RoleViewer reads: the list, details, KPIs, lists and channels.
	RoleViewer OperatorRole = "viewer"
	// RoleOperator also retries and discards parked notifications.
	RoleOperator OperatorRole = "operator"
	// RoleAdmin also manages lists, channels, users and API tokens.
	RoleAdmin OperatorRole = "admin"
)

// OperatorRoles lists the roles from the least to the most powerful.
var OperatorRoles = []OperatorRole{RoleViewer, RoleOperator, RoleAdmin}

// Valid reports whether r is one of OperatorRoles.
func (r OperatorRole) Valid() bool { return r.rank() > 0 }

// Allows reports whether r grants what need grants. An invalid role allows
// nothing.
func (r OperatorRole) Allows(need OperatorRole) bool {
	return r.rank() > 0 && r.rank() >= need.rank()
}

func (r OperatorRole) rank() int {
	switch r {
	case RoleViewer:
		return 1
	case RoleOperator:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
}

// Operators is the driving port of operator authentication and account
// management: the HTTP API and the page call it; core.Operators
// implements it over an [AccountStore] and an [AdminAudit].
//
// Every change to an account or a token is recorded in the admin audit log
// with its actor (the request's Actor, or the principal's name). Errors wrap
// ErrUnauthenticated for a wrong name, password or credential (the text never
// says which), ErrInvalid for bad input (naming the field and the rule),
// ErrNotFound for unknown users or tokens and ErrConflict for a refused
// change (removing the last admin). Passwords and token secrets never appear
// in errors.
type Operators interface {
	// Login checks a name and password and opens a session. The returned
	// Session.Secret is the only copy of the session's secret. A login the
	// throttle refuses before checking the password fails with a
	// *LoginThrottledError (which wraps ErrUnavailable).
	Login(ctx context.Context, req LoginRequest) (Session, error)

	// Logout closes the session whose secret is given; an unknown secret is
	// not an error.
	Logout(ctx context.Context, secret string) error

	// Authenticate returns who holds credential: a session secret (from a
	// cookie) or an API token. Expired sessions and tokens, deleted users,
	// deleted tokens and the tokens of deleted accounts are refused with
	// ErrUnauthenticated (an expired token's error says "token expired").
	// A token bound to an account has the account's role at this moment.
	Authenticate(ctx context.Context, credential string) (Principal, error)

	// Users returns every account, sorted by name, without password hashes.
	Users(ctx context.Context) ([]User, error)

	// PutUser creates an account or changes its role and, when
	// req.Password is set, its password (required for a new account).
	// Changing the password or the role closes the account's sessions;
	// changing the password also revokes the tokens bound to it.
	PutUser(ctx context.Context, req UserRequest) (User, error)

	// DeleteUser deletes an account, its sessions and the tokens bound to
	// it. Deleting the last admin is refused with ErrConflict.
	DeleteUser(ctx context.Context, actor, name string) error

	// CreateToken makes an API token with its own role. The returned secret
	// is the only copy: it is stored hashed.
	CreateToken(ctx context.Context, req TokenRequest) (secret string, t Token, err error)

	// CreateOwnToken makes a token bound to the account p logged in as: its
	// role is the account's, read at each request, and it dies with the
	// account. Only a session (a login with the password) may make one, and
	// it must expire.
	CreateOwnToken(ctx context.Context, p Principal, req OwnTokenRequest) (secret string, t Token, err error)

	// Tokens returns every API token, sorted by name, without hashes.
	Tokens(ctx context.Context) ([]Token, error)

	// DeleteToken revokes the token with that id.
	DeleteToken(ctx context.Context, actor, id string) error

	// RevokeOwnToken revokes the token p authenticated with (a logout of
	// the CLI). A session is refused with ErrInvalid.
	RevokeOwnToken(ctx context.Context, p Principal) error

	// HasAdmin reports whether any admin account, or any admin token of its
	// own that has not expired, exists.
	HasAdmin(ctx context.Context) (bool, error)

	// AdminLog returns the admin audit records q selects, newest first.
	AdminLog(ctx context.Context, q AdminQuery) (AdminPage, error)
}

// Principal is an authenticated caller.
type Principal struct {
	// Name is the user name (also for a token bound to the account), or
	// "token:<name>" for an API token of its own: the actor recorded in the
	// audit logs.
	Name string
	Role OperatorRole
	// Session is set when the caller authenticated with a session (a browser);
	// false for an API token.
	Session bool
	// TokenID is the ID of the API token the caller authenticated with; ""
	// for a session.
	TokenID string
}

// LoginRequest is one login attempt.
type LoginRequest struct {
	Name     string
	Password string
	// Client is the caller's network address as the entrance saw it (an IP
	// address without its port, e.g. "192.0.2.7" or "2001:db8::1"): the
	// key of the per-address throttle. Empty when unknown, which is one
	// client of its own.
	Client string
}

// LoginThrottledError reports a login refused before its password was
// checked: too many recent failures from the client's address or for the
// account, or another login from the same address still being checked. It
// wraps ErrUnavailable: the same login may succeed after RetryAfter.
type LoginThrottledError struct {
	// RetryAfter is how long the caller should wait before trying again;
	// at least a second.
	RetryAfter time.Duration
	// Reason is a fixed text from the code saying which throttle refused:
	// one of the LoginThrottled* constants.
	Reason string
}

// The reasons of a LoginThrottledError.
const (
	// LoginThrottledAddress: too many failed logins from the address.
	LoginThrottledAddress = "too many failed logins from this address"
	// LoginThrottledAccount: the account has seen too many failed logins,
	// and this address failed for it last time; it waits before trying
	// that account again (other addresses do not).
	LoginThrottledAccount = "too many failed logins for this account, the last from this address"
	// LoginThrottledBusy: a login from the same address is being checked.
	LoginThrottledBusy = "another login from this address is being checked"
)

// Error implements error.
func (e *LoginThrottledError) Error() string {
	secs := int64((e.RetryAfter + time.Second - 1) / time.Second)
	return fmt.Sprintf("%s; try again in %d s", e.Reason, max(secs, 1))
}

// Unwrap makes errors.Is(err, ErrUnavailable) hold.
func (e *LoginThrottledError) Unwrap() error { return ErrUnavailable }

// Session is an open operator session.
type Session struct {
	// Secret is the value the browser keeps in its cookie; only Login
	// returns it.
	Secret    string
	User      string
	Role      OperatorRole
	ExpiresAt time.Time
}

// User is an operator account as listed.
type User struct {
	Name      string
	Role      OperatorRole
	CreatedAt time.Time
	UpdatedAt time.Time
}

// UserRequest creates or changes an account.
type UserRequest struct {
	// Actor is who asks, for the audit log.
	Actor string
	Name  string
	Role  OperatorRole
	// Password, when set, becomes the account's password.
	Password string
	// Create asks for a new account only: when one of that name exists
	// already, PutUser changes nothing and returns an error wrapping
	// ErrConflict.
	Create bool
}

// TokenRequest makes an API token with its own role.
type TokenRequest struct {
	// Actor is who asks, for the audit log.
	Actor string
	Name  string
	Role  OperatorRole
	// ExpiresAt, when set, is when the token stops working; it must be in
	// the future. Zero makes a token that does not expire.
	ExpiresAt time.Time
}

// OwnTokenRequest makes a token bound to the caller's account.
type OwnTokenRequest struct {
	// Label names the token among the account's (the stored name is
	// "<account>/<label>-<random>"); empty means "cli".
	Label string
	// ExpiresAt is when the token stops working: required, in the future
	// and within the longest lifetime central allows.
	ExpiresAt time.Time
}

// Token is an API token as listed.
type Token struct {
	// ID is the public part of the token, shown in listings and used to
	// revoke it.
	ID   string
	Name string
	// Role is the token's own role, or for a token bound to an account the
	// account's role now.
	Role OperatorRole
	// Account is the account the token is bound to; "" for a token with a
	// role of its own.
	Account   string
	CreatedAt time.Time
	// ExpiresAt is when the token stops working; zero for never.
	ExpiresAt time.Time
	// Expired reports that ExpiresAt has passed: the token is refused.
	Expired bool
}

// AdminPage is one page of the admin audit log.
type AdminPage struct {
	Records []AdminRecord
	// Next is the AdminQuery.Before of the following page; 0 on the last.
	Next int64
}

// AccountStore keeps operator accounts, API tokens and sessions: the driven
// port of core.Operators. adapters/sqlstore and adapters/memstore implement
// it; ports/accountstest is the contract. Hashes are computed by the core;
// the store keeps and compares nothing secret itself.
//
// Any number of central nodes may share one store: a session opened on one
// node is valid on every other.
//
// Keys — account names, token IDs and names, session IDs, a session's
// Account and a token's Account when set — are non-empty UTF-8 without NUL bytes or surrounding white space
// (as strings.TrimSpace sees it), and compare bytewise (case counts). Roles
// are valid ([OperatorRole.Valid]); CreatedAt, UpdatedAt and ExpiresAt are
// set. A Put that breaks these rules is refused with an error wrapping
// ErrInvalid; a lookup or delete by a key that breaks them answers as for an
// absent key. The core makes its values follow the rules; the store does not
// check that a session's Account exists.
//
// What a store returns is the caller's own copy: changing a returned hash
// changes nothing stored, and neither does changing a slice after handing it
// to a Put. Hashes come back byte for byte (nil and empty alike); times come
// back in UTC, the same instant to at least the microsecond. Errors never
// hold hashes or session IDs, nor account names (they may be e-mail
// addresses). The store is safe for concurrent use.
type AccountStore interface {
	// PutAccount creates the account a.Name or replaces it whole. Replacing
	// an account leaves its sessions alone: the core closes them when it
	// means to.
	PutAccount(ctx context.Context, a Account) error
	// Account returns one account, or an error wrapping ErrNotFound.
	Account(ctx context.Context, name string) (Account, error)
	// Accounts returns every account, sorted by name (byte order).
	Accounts(ctx context.Context) ([]Account, error)
	// DeleteAccount deletes the account, every session of it and every token
	// bound to it (whose Account is name), or returns an error wrapping
	// ErrNotFound.
	DeleteAccount(ctx context.Context, name string) error

	// PutToken stores a new API token. A token whose ID or Name is already
	// stored is refused with an error wrapping ErrConflict.
	PutToken(ctx context.Context, t StoredToken) error
	// Token returns the token with that ID, or an error wrapping ErrNotFound.
	Token(ctx context.Context, id string) (StoredToken, error)
	// Tokens returns every token, sorted by name (byte order).
	Tokens(ctx context.Context) ([]StoredToken, error)
	// DeleteToken deletes the token with that ID, or returns an error
	// wrapping ErrNotFound.
	DeleteToken(ctx context.Context, id string) error

	// PutSession stores a new session. A session whose ID is already
	// stored is refused with an error wrapping ErrConflict.
	PutSession(ctx context.Context, s StoredSession) error
	// Session returns the session with that ID, expired or not, or an error
	// wrapping ErrNotFound.
	Session(ctx context.Context, id string) (StoredSession, error)
	// DeleteSession deletes one session; an unknown ID is not an error.
	DeleteSession(ctx context.Context, id string) error
	// DeleteSessions deletes every session of the account (and no other);
	// none is not an error.
	DeleteSessions(ctx context.Context, account string) error
	// DeleteExpiredSessions deletes the sessions whose ExpiresAt is at or
	// before now, of every account, and returns how many.
	DeleteExpiredSessions(ctx context.Context, now time.Time) (int64, error)
}

// Account is an operator account as stored.
type Account struct {
	Name string
	Role OperatorRole
	// PasswordHash is the bcrypt hash of the password.
	PasswordHash []byte
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// StoredToken is an API token as stored.
type StoredToken struct {
	ID   string
	Name string
	// Role is the token's own role; for a token bound to an account, the
	// account's role when it was made (the core reads the account's role at
	// each request instead).
	Role OperatorRole
	// Hash is the SHA-256 of the token's secret part.
	Hash []byte
	// Account, when set, binds the token to that account: it dies with it.
	Account   string
	CreatedAt time.Time
	// ExpiresAt is when the token stops working; zero for never.
	ExpiresAt time.Time
}

// StoredSession is an operator session as stored.
type StoredSession struct {
	// ID is the SHA-256 of the session secret, hex encoded: a stolen
	// database holds no usable session.
	ID        string
	Account   string
	CreatedAt time.Time
	ExpiresAt time.Time
}
