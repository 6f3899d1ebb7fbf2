package core

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"

	"github.com/siteline/outbox/ports"
)

// Operator account rules.
const (
	// DefaultSessionTTL is how long a session lasts after login.
	DefaultSessionTTL = 12 * time.Hour
	// MinPasswordBytes and MaxPasswordBytes bound a password; bcrypt reads
	// at most 72 bytes, so a longer one is refused rather than cut.
	MinPasswordBytes = 10
	MaxPasswordBytes = 72
	// maxOperatorName bounds a user or token name.
	maxOperatorName = 64
	// tokenPrefix starts every API token: "obx_" + id + "_" + secret.
	tokenPrefix = "obx_"
	// loginWait bounds how long a login waits for a password-check slot.
	loginWait  = 5 * time.Second
	tokenIDLen = 12 // hex characters
)

// OperatorsConfig configures Operators.
type OperatorsConfig struct {
	// SessionTTL is a session's lifetime; 0 means DefaultSessionTTL.
	SessionTTL time.Duration
	// BcryptCost is the bcrypt work factor; 0 means bcrypt.DefaultCost.
	// Tests lower it to bcrypt.MinCost.
	BcryptCost int
	// MaxConcurrentLogins caps the password checks that run at once, so
	// that a flood of logins (each costs a bcrypt hash) cannot take every
	// core from the dispatcher; 0 means half the CPUs, at least one. Each
	// client address has at most one check in flight, so a flood from one
	// address holds at most one of them.
	MaxConcurrentLogins int
	// Throttle slows password guessing per address and per account.
	Throttle LoginThrottle
}

// Operators implements ports.Operators (U5) over a ports.AccountStore:
// passwords are kept as bcrypt hashes, API tokens and session secrets as
// SHA-256 hashes, so the database holds nothing a caller could present.
// A session's role is read from its account at each request, so a role
// change or a deleted account takes effect at once, on every central node.
type Operators struct {
	store ports.AccountStore
	clock ports.Clock
	log   *slog.Logger
	cfg   OperatorsConfig
	// dummy is compared against when the account does not exist, so that
	// a wrong name costs as much time as a wrong password.
	dummy []byte
	// loginSlots holds a token per password check running.
	loginSlots chan struct{}
	// throttle decides which logins may check a password at all.
	throttle *loginThrottle
}

var _ ports.Operators = (*Operators)(nil)

// NewOperators returns the operator accounts service.
func NewOperators(store ports.AccountStore, clock ports.Clock, cfg OperatorsConfig, logger *slog.Logger) (*Operators, error) {
	if store == nil || clock == nil {
		return nil, errors.New("core: NewOperators needs a store and a clock")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.BcryptCost == 0 {
		cfg.BcryptCost = bcrypt.DefaultCost
	}
	if cfg.MaxConcurrentLogins <= 0 {
		cfg.MaxConcurrentLogins = max(1, runtime.GOMAXPROCS(0)/2)
	}
	if cfg.BcryptCost < bcrypt.MinCost || cfg.BcryptCost > bcrypt.MaxCost {
		return nil, fmt.Errorf("core: bcrypt cost %d is outside %d..%d", cfg.BcryptCost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	dummy, err := bcrypt.GenerateFromPassword([]byte(randomHex(16)), cfg.BcryptCost)
	if err != nil {
		return nil, fmt.Errorf("core: operators: %w", err)
	}
	return &Operators{store: store, clock: clock, log: logger, cfg: cfg, dummy: dummy,
		loginSlots: make(chan struct{}, cfg.MaxConcurrentLogins), throttle: newLoginThrottle(cfg.Throttle)}, nil
}

// errBadLogin is the one answer to a wrong name or password.
var errBadLogin = fmt.Errorf("wrong name or password: %w", ports.ErrUnauthenticated)

// Login implements ports.Operators. Before any password check, the
// throttle (LoginThrottle) may refuse it with a *ports.LoginThrottledError;
// then one check runs per client address at a time, in one of the
// MaxConcurrentLogins slots.
func (o *Operators) Login(ctx context.Context, req ports.LoginRequest) (ports.Session, error) {
	name, password := req.Name, req.Password
	if name == "" || len(name) > maxOperatorName || len(password) > MaxPasswordBytes {
		return ports.Session{}, errBadLogin
	}
	if err := o.throttle.begin(o.clock.Now(), name, req.Client); err != nil {
		return ports.Session{}, err
	}
	a, err := o.checkPassword(ctx, name, password)
	switch {
	case errors.Is(err, errBadLogin):
		o.throttle.end(o.clock.Now(), name, req.Client, false)
		return ports.Session{}, err
	case err != nil:
		o.throttle.release(req.Client)
		return ports.Session{}, err
	}
	o.throttle.end(o.clock.Now(), name, req.Client, true)
	now := o.clock.Now().UTC()
	secret := randomToken()
	s := ports.StoredSession{ID: sessionID(secret), Account: a.Name, CreatedAt: now, ExpiresAt: now.Add(o.cfg.SessionTTL)}
	if err := o.store.PutSession(ctx, s); err != nil {
		return ports.Session{}, fmt.Errorf("login: open session: %w", err)
	}
	if n, err := o.store.DeleteExpiredSessions(ctx, now); err != nil {
		o.log.Warn("could not delete expired sessions", "err", err)
	} else if n > 0 {
		o.log.Debug("expired sessions deleted", "sessions", n)
	}
	o.log.Info("operator logged in", "user", a.Name, "role", a.Role)
	return ports.Session{Secret: secret, User: a.Name, Role: a.Role, ExpiresAt: s.ExpiresAt}, nil
}

// checkPassword waits for a password-check slot and checks name's
// password: the account, or errBadLogin, or another error when no slot
// came free or the store failed.
func (o *Operators) checkPassword(ctx context.Context, name, password string) (ports.Account, error) {
	wait := time.NewTimer(loginWait)
	defer wait.Stop()
	select {
	case o.loginSlots <- struct{}{}:
		defer func() { <-o.loginSlots }()
	case <-ctx.Done():
		return ports.Account{}, fmt.Errorf("too many logins at once; try again: %w", ports.ErrUnavailable)
	case <-wait.C:
		return ports.Account{}, fmt.Errorf("too many logins at once; try again: %w", ports.ErrUnavailable)
	}
	a, err := o.store.Account(ctx, name)
	if errors.Is(err, ports.ErrNotFound) {
		_ = bcrypt.CompareHashAndPassword(o.dummy, []byte(password))
		return ports.Account{}, errBadLogin
	}
	if err != nil {
		return ports.Account{}, fmt.Errorf("login: %w", err)
	}
	if bcrypt.CompareHashAndPassword(a.PasswordHash, []byte(password)) != nil {
		return ports.Account{}, errBadLogin
	}
	return a, nil
}

// Logout implements ports.Operators.
func (o *Operators) Logout(ctx context.Context, secret string) error {
	if secret == "" {
		return nil
	}
	if err := o.store.DeleteSession(ctx, sessionID(secret)); err != nil {
		return fmt.Errorf("logout: %w", err)
	}
	return nil
}

// Authenticate implements ports.Operators.
func (o *Operators) Authenticate(ctx context.Context, credential string) (ports.Principal, error) {
	if id, secret, ok := splitToken(credential); ok {
		t, err := o.store.Token(ctx, id)
		if errors.Is(err, ports.ErrNotFound) {
			return ports.Principal{}, fmt.Errorf("unknown or revoked token: %w", ports.ErrUnauthenticated)
		}
		if err != nil {
			return ports.Principal{}, fmt.Errorf("authenticate: %w", err)
		}
		sum := sha256.Sum256([]byte(secret))
		if subtle.ConstantTimeCompare(sum[:], t.Hash) != 1 {
			return ports.Principal{}, fmt.Errorf("unknown or revoked token: %w", ports.ErrUnauthenticated)
		}
		return ports.Principal{Name: "token:" + t.Name, Role: t.Role}, nil
	}
	if credential == "" || len(credential) > 256 {
		return ports.Principal{}, fmt.Errorf("no session: %w", ports.ErrUnauthenticated)
	}
	s, err := o.store.Session(ctx, sessionID(credential))
	if errors.Is(err, ports.ErrNotFound) {
		return ports.Principal{}, fmt.Errorf("no session: %w", ports.ErrUnauthenticated)
	}
	if err != nil {
		return ports.Principal{}, fmt.Errorf("authenticate: %w", err)
	}
	if !o.clock.Now().Before(s.ExpiresAt) {
		return ports.Principal{}, fmt.Errorf("the session has expired: %w", ports.ErrUnauthenticated)
	}
	a, err := o.store.Account(ctx, s.Account)
	if errors.Is(err, ports.ErrNotFound) {
		return ports.Principal{}, fmt.Errorf("the account was deleted: %w", ports.ErrUnauthenticated)
	}
	if err != nil {
		return ports.Principal{}, fmt.Errorf("authenticate: %w", err)
	}
	return ports.Principal{Name: a.Name, Role: a.Role, Session: true}, nil
}

// Users implements ports.Operators.
func (o *Operators) Users(ctx context.Context) ([]ports.User, error) {
	as, err := o.store.Accounts(ctx)
	if err != nil {
		return nil, fmt.Errorf("users: %w", err)
	}
	out := make([]ports.User, len(as))
	for i, a := range as {
		out[i] = ports.User{Name: a.Name, Role: a.Role, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt}
	}
	return out, nil
}

// PutUser implements ports.Operators.
func (o *Operators) PutUser(ctx context.Context, req ports.UserRequest) (ports.User, error) {
	if err := checkOperatorName("user name", req.Name); err != nil {
		return ports.User{}, err
	}
	if !req.Role.Valid() {
		return ports.User{}, fmt.Errorf("%w: role %q is not one of viewer, operator, admin", ports.ErrInvalid, truncate(string(req.Role), 40))
	}
	old, err := o.store.Account(ctx, req.Name)
	exists := err == nil
	if err != nil && !errors.Is(err, ports.ErrNotFound) {
		return ports.User{}, fmt.Errorf("put user: %w", err)
	}
	if !exists && req.Password == "" {
		return ports.User{}, fmt.Errorf("%w: password: required for a new user", ports.ErrInvalid)
	}
	now := o.clock.Now().UTC()
	a := ports.Account{Name: req.Name, Role: req.Role, CreatedAt: now, UpdatedAt: now}
	if exists {
		a.CreatedAt, a.PasswordHash = old.CreatedAt, old.PasswordHash
		if old.Role == ports.RoleAdmin && req.Role != ports.RoleAdmin {
			if err := o.keepAnAdmin(ctx, old.Name, ""); err != nil {
				return ports.User{}, err
			}
		}
	}
	if req.Password != "" {
		if a.PasswordHash, err = o.hash(req.Password); err != nil {
			return ports.User{}, err
		}
	}
	if err := o.store.PutAccount(ctx, a); err != nil {
		return ports.User{}, fmt.Errorf("put user %q: %w", a.Name, err)
	}
	if exists && (req.Password != "" || req.Role != old.Role) {
		if err := o.store.DeleteSessions(ctx, a.Name); err != nil {
			return ports.User{}, fmt.Errorf("put user %q: close its sessions: %w", a.Name, err)
		}
	}
	o.log.Info("operator account saved", "user", a.Name, "role", a.Role, "created", !exists, "password_changed", req.Password != "")
	return ports.User{Name: a.Name, Role: a.Role, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt}, nil
}

// DeleteUser implements ports.Operators.
func (o *Operators) DeleteUser(ctx context.Context, name string) error {
	a, err := o.store.Account(ctx, name)
	if err != nil {
		return fmt.Errorf("delete user %q: %w", truncate(name, 64), err)
	}
	if a.Role == ports.RoleAdmin {
		if err := o.keepAnAdmin(ctx, a.Name, ""); err != nil {
			return err
		}
	}
	if err := o.store.DeleteAccount(ctx, a.Name); err != nil {
		return fmt.Errorf("delete user %q: %w", a.Name, err)
	}
	o.log.Info("operator account deleted", "user", a.Name)
	return nil
}

// CreateToken implements ports.Operators.
func (o *Operators) CreateToken(ctx context.Context, name string, role ports.OperatorRole) (string, ports.Token, error) {
	if err := checkOperatorName("token name", name); err != nil {
		return "", ports.Token{}, err
	}
	if !role.Valid() {
		return "", ports.Token{}, fmt.Errorf("%w: role %q is not one of viewer, operator, admin", ports.ErrInvalid, truncate(string(role), 40))
	}
	id := randomHex(tokenIDLen / 2)
	secret := randomToken()
	sum := sha256.Sum256([]byte(secret))
	t := ports.StoredToken{ID: id, Name: name, Role: role, Hash: sum[:], CreatedAt: o.clock.Now().UTC()}
	if err := o.store.PutToken(ctx, t); err != nil {
		if errors.Is(err, ports.ErrConflict) {
			return "", ports.Token{}, fmt.Errorf("a token named %q exists: %w", name, err)
		}
		return "", ports.Token{}, fmt.Errorf("create token: %w", err)
	}
	o.log.Info("api token created", "token", name, "id", id, "role", role)
	return tokenPrefix + id + "_" + secret, ports.Token{ID: id, Name: name, Role: role, CreatedAt: t.CreatedAt}, nil
}

// Tokens implements ports.Operators.
func (o *Operators) Tokens(ctx context.Context) ([]ports.Token, error) {
	ts, err := o.store.Tokens(ctx)
	if err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	out := make([]ports.Token, len(ts))
	for i, t := range ts {
		out[i] = ports.Token{ID: t.ID, Name: t.Name, Role: t.Role, CreatedAt: t.CreatedAt}
	}
	return out, nil
}

// DeleteToken implements ports.Operators.
func (o *Operators) DeleteToken(ctx context.Context, id string) error {
	t, err := o.store.Token(ctx, id)
	if err != nil {
		return fmt.Errorf("delete token %q: %w", truncate(id, 40), err)
	}
	if t.Role == ports.RoleAdmin {
		if err := o.keepAnAdmin(ctx, "", t.ID); err != nil {
			return err
		}
	}
	if err := o.store.DeleteToken(ctx, t.ID); err != nil {
		return fmt.Errorf("delete token %q: %w", t.ID, err)
	}
	o.log.Info("api token revoked", "token", t.Name, "id", t.ID)
	return nil
}

// HasAdmin implements ports.Operators.
func (o *Operators) HasAdmin(ctx context.Context) (bool, error) {
	return o.otherAdmin(ctx, "", "")
}

// EnsureAdmin makes the account name an admin whose password is password:
// central calls it at start with the admin its configuration names, so that
// the configured password is always the one that works (changing it in the
// configuration and restarting is how a forgotten password is reset).
func (o *Operators) EnsureAdmin(ctx context.Context, name, password string) error {
	a, err := o.store.Account(ctx, name)
	switch {
	case errors.Is(err, ports.ErrNotFound):
	case err != nil:
		return fmt.Errorf("ensure admin: %w", err)
	case a.Role == ports.RoleAdmin && bcrypt.CompareHashAndPassword(a.PasswordHash, []byte(password)) == nil:
		return nil
	}
	_, err = o.PutUser(ctx, ports.UserRequest{Name: name, Role: ports.RoleAdmin, Password: password})
	return err
}

// keepAnAdmin refuses a change that would leave no admin: it succeeds when an
// admin other than the account exceptAccount and the token exceptToken exists.
func (o *Operators) keepAnAdmin(ctx context.Context, exceptAccount, exceptToken string) error {
	ok, err := o.otherAdmin(ctx, exceptAccount, exceptToken)
	if err != nil {
		return fmt.Errorf("check for another admin: %w", err)
	}
	if !ok {
		return fmt.Errorf("it is the last admin; make another admin first: %w", ports.ErrConflict)
	}
	return nil
}

func (o *Operators) otherAdmin(ctx context.Context, exceptAccount, exceptToken string) (bool, error) {
	as, err := o.store.Accounts(ctx)
	if err != nil {
		return false, err
	}
	for _, a := range as {
		if a.Role == ports.RoleAdmin && a.Name != exceptAccount {
			return true, nil
		}
	}
	ts, err := o.store.Tokens(ctx)
	if err != nil {
		return false, err
	}
	for _, t := range ts {
		if t.Role == ports.RoleAdmin && t.ID != exceptToken {
			return true, nil
		}
	}
	return false, nil
}

// hash checks a new password against the rules and hashes it.
func (o *Operators) hash(password string) ([]byte, error) {
	switch {
	case len(password) < MinPasswordBytes:
		return nil, fmt.Errorf("%w: password: at least %d bytes", ports.ErrInvalid, MinPasswordBytes)
	case len(password) > MaxPasswordBytes:
		return nil, fmt.Errorf("%w: password: at most %d bytes", ports.ErrInvalid, MaxPasswordBytes)
	case !utf8.ValidString(password) || strings.IndexByte(password, 0) >= 0:
		return nil, fmt.Errorf("%w: password: must be UTF-8 text without NUL", ports.ErrInvalid)
	}
	h, err := bcrypt.GenerateFromPassword([]byte(password), o.cfg.BcryptCost)
	if err != nil {
		return nil, fmt.Errorf("hash password: %w", err)
	}
	return h, nil
}

// checkOperatorName accepts 1 to 64 letters, digits and . _ - @.
func checkOperatorName(field, name string) error {
	if name == "" || len(name) > maxOperatorName {
		return fmt.Errorf("%w: %s: 1 to %d characters", ports.ErrInvalid, field, maxOperatorName)
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-', r == '@':
		default:
			return fmt.Errorf("%w: %s %q: only letters, digits and . _ - @", ports.ErrInvalid, field, truncate(name, 64))
		}
	}
	return nil
}

// splitToken parses an API token "obx_<id>_<secret>".
func splitToken(s string) (id, secret string, ok bool) {
	rest, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok || len(rest) < tokenIDLen+2 || rest[tokenIDLen] != '_' {
		return "", "", false
	}
	return rest[:tokenIDLen], rest[tokenIDLen+1:], true
}

// sessionID is the stored key of a session secret.
func sessionID(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// randomToken returns 32 random bytes, base64url without padding.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b)
}
