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
	"slices"
	"strconv"
	"strings"
	"sync"
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
	// DefaultMaxOwnTokenTTL is the longest lifetime of a token an account
	// makes for itself (outbox login).
	DefaultMaxOwnTokenTTL = 30 * 24 * time.Hour
	// MaxTokenTTL bounds the expiry of any API token.
	MaxTokenTTL = 10 * 365 * 24 * time.Hour
	// maxTokenLabel bounds the label of a token of one's own.
	maxTokenLabel = 32
	// DefaultMaxOwnTokens is how many tokens of its own an account keeps:
	// making one more revokes the oldest.
	DefaultMaxOwnTokens = 10
	// MinSessionTTL bounds OperatorsConfig.SessionTTL from below, and
	// MaxOwnTokenTTLLimit bounds MaxOwnTokenTTL from above: a year.
	MinSessionTTL       = time.Minute
	MaxOwnTokenTTLLimit = 365 * 24 * time.Hour
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
	// MaxOwnTokenTTL is the longest lifetime of a token an account makes
	// for itself (CreateOwnToken); 0 means DefaultMaxOwnTokenTTL.
	MaxOwnTokenTTL time.Duration
	// MaxOwnTokens is how many tokens of its own an account keeps, expired
	// ones included; making one more revokes the oldest (expired first),
	// each recorded in the admin audit log. 0 means DefaultMaxOwnTokens.
	MaxOwnTokens int
	// Audit is where changes to accounts and tokens are recorded; nil means
	// the store, which must then implement ports.AdminAudit.
	Audit ports.AdminAudit
}

// WithDefaults returns c with every zero field set to its default (the
// throttle's too); a negative one is kept, for Validate to report.
func (c OperatorsConfig) WithDefaults() OperatorsConfig {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	set(&c.SessionTTL, DefaultSessionTTL)
	set(&c.MaxOwnTokenTTL, DefaultMaxOwnTokenTTL)
	if c.BcryptCost == 0 {
		c.BcryptCost = bcrypt.DefaultCost
	}
	if c.MaxConcurrentLogins == 0 {
		c.MaxConcurrentLogins = max(1, runtime.GOMAXPROCS(0)/2)
	}
	if c.MaxOwnTokens == 0 {
		c.MaxOwnTokens = DefaultMaxOwnTokens
	}
	c.Throttle = c.Throttle.WithDefaults()
	return c
}

// Validate returns one *ports.FieldError per broken rule, joined, each on
// the Go path of its field ("Throttle.AccountMaxDelay"). It checks c as
// given, where a zero is no default but a value: call it on
// c.WithDefaults() to check what will run.
func (c OperatorsConfig) Validate() error {
	var fe ports.FieldErrors
	if c.SessionTTL < MinSessionTTL {
		fe.Add("SessionTTL", "must be at least %s, got %s", fmtDuration(MinSessionTTL), c.SessionTTL)
	}
	if c.MaxOwnTokenTTL < time.Minute || c.MaxOwnTokenTTL > MaxOwnTokenTTLLimit {
		fe.Add("MaxOwnTokenTTL", "must be between 1m and %s, got %s", fmtDuration(MaxOwnTokenTTLLimit), c.MaxOwnTokenTTL)
	}
	if c.BcryptCost < bcrypt.MinCost || c.BcryptCost > bcrypt.MaxCost {
		fe.Add("BcryptCost", "must be from %d to %d, got %d", bcrypt.MinCost, bcrypt.MaxCost, c.BcryptCost)
	}
	if c.MaxConcurrentLogins <= 0 {
		fe.Add("MaxConcurrentLogins", "must be positive, got %d", c.MaxConcurrentLogins)
	}
	if c.MaxOwnTokens <= 0 {
		fe.Add("MaxOwnTokens", "must be positive, got %d", c.MaxOwnTokens)
	}
	fe.Nest("Throttle", c.Throttle.Validate())
	return fe.Err()
}

// fmtDuration writes d as an operator would ("1m", "8760h"), without the
// zero units time.Duration.String adds.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

// Operators implements ports.Operators over a ports.AccountStore:
// passwords are kept as bcrypt hashes, API tokens and session secrets as
// SHA-256 hashes, so the database holds nothing a caller could present.
// A session's role is read from its account at each request, so a role
// change or a deleted account takes effect at once, on every central node.
type Operators struct {
	// putMu makes PutUser's check of the stored account and its write one
	// step against the other PutUser calls (UserRequest.Create).
	putMu sync.Mutex
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
	// rec records every change to accounts and tokens.
	rec adminRecorder
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
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("core: operators: %w", err)
	}
	if cfg.Audit == nil {
		a, ok := store.(ports.AdminAudit)
		if !ok {
			return nil, errors.New("core: NewOperators needs an admin audit log (OperatorsConfig.Audit)")
		}
		cfg.Audit = a
	}
	dummy, err := bcrypt.GenerateFromPassword([]byte(randomHex(16)), cfg.BcryptCost)
	if err != nil {
		return nil, fmt.Errorf("core: operators: %w", err)
	}
	return &Operators{store: store, clock: clock, log: logger, cfg: cfg, dummy: dummy,
		loginSlots: make(chan struct{}, cfg.MaxConcurrentLogins), throttle: newLoginThrottle(cfg.Throttle),
		rec: adminRecorder{audit: cfg.Audit, clock: clock, log: logger}}, nil
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
		// Only the holder of the secret learns that the token expired.
		if o.expired(t) {
			return ports.Principal{}, fmt.Errorf("token expired: %w", ports.ErrUnauthenticated)
		}
		if t.Account == "" {
			return ports.Principal{Name: "token:" + t.Name, Role: t.Role, TokenID: t.ID}, nil
		}
		// A token bound to an account has the account's role now, as a
		// session does, and dies with it.
		a, err := o.store.Account(ctx, t.Account)
		if errors.Is(err, ports.ErrNotFound) {
			return ports.Principal{}, fmt.Errorf("the token's account was deleted: %w", ports.ErrUnauthenticated)
		}
		if err != nil {
			return ports.Principal{}, fmt.Errorf("authenticate: %w", err)
		}
		return ports.Principal{Name: a.Name, Role: a.Role, TokenID: t.ID}, nil
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
	if err := checkActor(req.Actor); err != nil {
		return ports.User{}, err
	}
	if err := checkOperatorName("user name", req.Name); err != nil {
		return ports.User{}, err
	}
	if !req.Role.Valid() {
		return ports.User{}, fmt.Errorf("role %q is not one of viewer, operator, admin: %w", truncate(string(req.Role), 40), ports.ErrInvalid)
	}
	// The password is hashed (slow on purpose) before the lock is taken.
	var hash []byte
	if req.Password != "" {
		h, err := o.hash(req.Password)
		if err != nil {
			return ports.User{}, err
		}
		hash = h
	}
	o.putMu.Lock()
	defer o.putMu.Unlock()
	old, err := o.store.Account(ctx, req.Name)
	exists := err == nil
	if err != nil && !errors.Is(err, ports.ErrNotFound) {
		return ports.User{}, fmt.Errorf("put user: %w", err)
	}
	if exists && req.Create {
		return ports.User{}, fmt.Errorf("user %q exists already: %w", req.Name, ports.ErrConflict)
	}
	if !exists && req.Password == "" {
		return ports.User{}, fmt.Errorf("password: required for a new user: %w", ports.ErrInvalid)
	}
	now := o.clock.Now().UTC()
	a := ports.Account{Name: req.Name, Role: req.Role, CreatedAt: now, UpdatedAt: now}
	roleChanged := exists && req.Role != old.Role
	if exists {
		a.CreatedAt, a.PasswordHash = old.CreatedAt, old.PasswordHash
		if !roleChanged && req.Password == "" {
			return toUser(old), nil // nothing to change
		}
		if old.Role == ports.RoleAdmin && req.Role != ports.RoleAdmin {
			if err := o.keepAnAdmin(ctx, old.Name, ""); err != nil {
				return ports.User{}, err
			}
		}
	}
	if req.Password != "" {
		a.PasswordHash = hash
	}
	if err := o.store.PutAccount(ctx, a); err != nil {
		return ports.User{}, fmt.Errorf("put user %q: %w", a.Name, err)
	}
	revoked := 0
	if exists {
		if err := o.store.DeleteSessions(ctx, a.Name); err != nil {
			return ports.User{}, fmt.Errorf("put user %q: close its sessions: %w", a.Name, err)
		}
		// A new password revokes the tokens the old one made.
		if req.Password != "" {
			if revoked, err = o.deleteAccountTokens(ctx, a.Name); err != nil {
				return ports.User{}, fmt.Errorf("put user %q: revoke its tokens: %w", a.Name, err)
			}
		}
	}
	o.log.Info("operator account saved", "user", a.Name, "role", a.Role, "created", !exists, "password_changed", req.Password != "")
	action, summary := ports.AdminCreated, "role "+string(a.Role)
	if exists {
		var parts []string
		action = ports.AdminPassword
		if roleChanged {
			action = ports.AdminChanged
			parts = append(parts, "role "+string(old.Role)+" → "+string(a.Role))
		}
		if req.Password != "" {
			parts = append(parts, "password changed")
		}
		parts = append(parts, "sessions closed")
		if revoked > 0 {
			parts = append(parts, plural(revoked, "token")+" of the account revoked")
		}
		summary = joinParts(parts...)
	}
	return toUser(a), o.rec.record(ctx, req.Actor, ports.AdminKindUser, a.Name, action, summary)
}

// DeleteUser implements ports.Operators.
func (o *Operators) DeleteUser(ctx context.Context, actor, name string) error {
	if err := checkActor(actor); err != nil {
		return err
	}
	a, err := o.store.Account(ctx, name)
	if err != nil {
		return fmt.Errorf("delete user %q: %w", truncate(name, 64), err)
	}
	if a.Role == ports.RoleAdmin {
		if err := o.keepAnAdmin(ctx, a.Name, ""); err != nil {
			return err
		}
	}
	bound, err := o.accountTokens(ctx, a.Name)
	if err != nil {
		return fmt.Errorf("delete user %q: %w", a.Name, err)
	}
	// The store deletes the account's sessions and tokens with it.
	if err := o.store.DeleteAccount(ctx, a.Name); err != nil {
		return fmt.Errorf("delete user %q: %w", a.Name, err)
	}
	o.log.Info("operator account deleted", "user", a.Name)
	summary := "was role " + string(a.Role) + "; sessions closed"
	if len(bound) > 0 {
		summary += "; " + plural(len(bound), "token") + " of the account revoked"
	}
	return o.rec.record(ctx, actor, ports.AdminKindUser, a.Name, ports.AdminDeleted, summary)
}

// CreateToken implements ports.Operators.
func (o *Operators) CreateToken(ctx context.Context, req ports.TokenRequest) (string, ports.Token, error) {
	if err := checkActor(req.Actor); err != nil {
		return "", ports.Token{}, err
	}
	if err := checkOperatorName("token name", req.Name); err != nil {
		return "", ports.Token{}, err
	}
	if !req.Role.Valid() {
		return "", ports.Token{}, fmt.Errorf("role %q is not one of viewer, operator, admin: %w", truncate(string(req.Role), 40), ports.ErrInvalid)
	}
	now := o.clock.Now().UTC()
	if err := checkExpiry(req.ExpiresAt, now, MaxTokenTTL, false); err != nil {
		return "", ports.Token{}, err
	}
	t := ports.StoredToken{Name: req.Name, Role: req.Role, CreatedAt: now, ExpiresAt: expiryOf(req.ExpiresAt)}
	secret, err := o.putToken(ctx, &t)
	if err != nil {
		return "", ports.Token{}, err
	}
	o.log.Info("api token created", "token", t.Name, "id", t.ID, "role", t.Role, "expires_at", t.ExpiresAt)
	out := o.toToken(t, nil)
	return secret, out, o.rec.record(ctx, req.Actor, ports.AdminKindToken, t.Name, ports.AdminCreated,
		"id "+t.ID+", role "+string(t.Role)+", "+formatExpiry(t.ExpiresAt))
}

// CreateOwnToken implements ports.Operators.
func (o *Operators) CreateOwnToken(ctx context.Context, p ports.Principal, req ports.OwnTokenRequest) (string, ports.Token, error) {
	if !p.Session {
		return "", ports.Token{}, fmt.Errorf("only a login with a password makes a token of one's own, not an API token: %w", ports.ErrForbidden)
	}
	label := req.Label
	if label == "" {
		label = "cli"
	}
	if err := checkOperatorName("label", label); err != nil {
		return "", ports.Token{}, err
	}
	if len(label) > maxTokenLabel {
		return "", ports.Token{}, fmt.Errorf("label: at most %d characters: %w", maxTokenLabel, ports.ErrInvalid)
	}
	now := o.clock.Now().UTC()
	if err := checkExpiry(req.ExpiresAt, now, o.cfg.MaxOwnTokenTTL, true); err != nil {
		return "", ports.Token{}, err
	}
	a, err := o.store.Account(ctx, p.Name)
	if errors.Is(err, ports.ErrNotFound) {
		return "", ports.Token{}, fmt.Errorf("the account was deleted: %w", ports.ErrUnauthenticated)
	}
	if err != nil {
		return "", ports.Token{}, fmt.Errorf("create own token: %w", err)
	}
	var t ports.StoredToken
	var secret string
	for try := 0; ; try++ {
		// The name's random suffix is short; a clash takes another.
		t = ports.StoredToken{Name: a.Name + "/" + label + "-" + randomHex(2), Role: a.Role, Account: a.Name,
			CreatedAt: now, ExpiresAt: expiryOf(req.ExpiresAt)}
		secret, err = o.putToken(ctx, &t)
		if err == nil {
			break
		}
		if !errors.Is(err, ports.ErrConflict) || try == 3 {
			return "", ports.Token{}, err
		}
	}
	o.log.Info("api token of an account created", "token", t.Name, "id", t.ID, "user", a.Name, "expires_at", t.ExpiresAt)
	err = o.rec.record(ctx, p.Name, ports.AdminKindToken, t.Name, ports.AdminCreated,
		"id "+t.ID+", bound to the account "+a.Name+" (role "+string(a.Role)+" now), "+formatExpiry(t.ExpiresAt))
	if terr := o.trimOwnTokens(ctx, p.Name, a.Name, t); terr != nil {
		err = errors.Join(err, terr)
	}
	return secret, o.toToken(t, map[string]ports.OperatorRole{a.Name: a.Role}), err
}

// trimOwnTokens revokes the oldest tokens of account (expired ones first)
// past MaxOwnTokens, never newest, the one just made; each revocation is
// audited with actor. A store failure is logged, not returned: the token
// was made, and the next one made trims again; an audit failure is
// returned, as for every change.
func (o *Operators) trimOwnTokens(ctx context.Context, actor, account string, newest ports.StoredToken) error {
	ts, err := o.accountTokens(ctx, account)
	if err != nil {
		o.log.Error("could not count an account's tokens", "user", account, "err", err)
		return nil // the next token made trims
	}
	over := len(ts) - o.cfg.MaxOwnTokens
	if over <= 0 {
		return nil
	}
	slices.SortFunc(ts, func(a, b ports.StoredToken) int {
		if ea, eb := o.expired(a), o.expired(b); ea != eb {
			if ea {
				return -1
			}
			return 1
		}
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	var errs []error
	for _, t := range ts {
		if over == 0 {
			break
		}
		if t.ID == newest.ID {
			continue
		}
		if err := o.store.DeleteToken(ctx, t.ID); err != nil {
			// Not found: another request revoked it. Otherwise the next
			// token made trims again.
			if !errors.Is(err, ports.ErrNotFound) {
				o.log.Error("could not revoke an account's oldest token", "token", t.Name, "id", t.ID, "err", err)
			}
			continue
		}
		over--
		o.log.Info("api token of an account revoked: the account has too many", "token", t.Name, "id", t.ID, "user", account)
		summary := "id " + t.ID + ", bound to the account " + account + "; the oldest of its tokens, revoked for " +
			newest.Name + " (an account keeps at most " + strconv.Itoa(o.cfg.MaxOwnTokens) + ")"
		if o.expired(t) {
			summary += ", had expired"
		}
		if err := o.rec.record(ctx, actor, ports.AdminKindToken, t.Name, ports.AdminRevoked, summary); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// putToken gives t an ID and a secret's hash and stores it; it returns the
// token as its holder presents it.
func (o *Operators) putToken(ctx context.Context, t *ports.StoredToken) (string, error) {
	t.ID = randomHex(tokenIDLen / 2)
	secret := randomToken()
	sum := sha256.Sum256([]byte(secret))
	t.Hash = sum[:]
	if err := o.store.PutToken(ctx, *t); err != nil {
		if errors.Is(err, ports.ErrConflict) {
			return "", fmt.Errorf("a token named %q exists: %w", t.Name, err)
		}
		return "", fmt.Errorf("create token: %w", err)
	}
	return tokenPrefix + t.ID + "_" + secret, nil
}

// checkExpiry checks a token's expiry: in the future and at most longest
// ahead; zero is refused when required.
func checkExpiry(at, now time.Time, longest time.Duration, required bool) error {
	switch {
	case at.IsZero() && required:
		return fmt.Errorf("expires_at: required: %w", ports.ErrInvalid)
	case at.IsZero():
		return nil
	case !at.After(now):
		return fmt.Errorf("expires_at: %s is not in the future: %w", at.UTC().Format(time.RFC3339), ports.ErrInvalid)
	case at.Sub(now) > longest:
		return fmt.Errorf("expires_at: at most %s ahead: %w", formatTTL(longest), ports.ErrInvalid)
	}
	return nil
}

// expiryOf is an expiry as stored: UTC, to the microsecond.
func expiryOf(at time.Time) time.Time {
	if at.IsZero() {
		return at
	}
	return at.UTC().Truncate(time.Microsecond)
}

// formatTTL is a lifetime in days when it is whole days.
func formatTTL(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + " days"
	}
	return d.String()
}

// Tokens implements ports.Operators.
func (o *Operators) Tokens(ctx context.Context) ([]ports.Token, error) {
	ts, err := o.store.Tokens(ctx)
	if err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	var roles map[string]ports.OperatorRole
	for _, t := range ts {
		if t.Account != "" {
			as, err := o.store.Accounts(ctx)
			if err != nil {
				return nil, fmt.Errorf("tokens: %w", err)
			}
			roles = make(map[string]ports.OperatorRole, len(as))
			for _, a := range as {
				roles[a.Name] = a.Role
			}
			break
		}
	}
	out := make([]ports.Token, len(ts))
	for i, t := range ts {
		out[i] = o.toToken(t, roles)
	}
	return out, nil
}

// toToken is a stored token as listed; roles holds the roles of the
// accounts tokens are bound to.
func (o *Operators) toToken(t ports.StoredToken, roles map[string]ports.OperatorRole) ports.Token {
	role := t.Role
	if t.Account != "" {
		role = roles[t.Account]
	}
	return ports.Token{ID: t.ID, Name: t.Name, Role: role, Account: t.Account, CreatedAt: t.CreatedAt,
		ExpiresAt: t.ExpiresAt, Expired: o.expired(t)}
}

// expired reports whether t's expiry has passed.
func (o *Operators) expired(t ports.StoredToken) bool {
	return !t.ExpiresAt.IsZero() && !o.clock.Now().Before(t.ExpiresAt)
}

// DeleteToken implements ports.Operators.
func (o *Operators) DeleteToken(ctx context.Context, actor, id string) error {
	if err := checkActor(actor); err != nil {
		return err
	}
	t, err := o.store.Token(ctx, id)
	if err != nil {
		return fmt.Errorf("delete token %q: %w", truncate(id, 40), err)
	}
	if t.Role == ports.RoleAdmin && t.Account == "" && !o.expired(t) {
		if err := o.keepAnAdmin(ctx, "", t.ID); err != nil {
			return err
		}
	}
	if err := o.store.DeleteToken(ctx, t.ID); err != nil {
		return fmt.Errorf("delete token %q: %w", t.ID, err)
	}
	o.log.Info("api token revoked", "token", t.Name, "id", t.ID)
	summary := "id " + t.ID + ", role " + string(t.Role)
	if t.Account != "" {
		summary = "id " + t.ID + ", bound to the account " + t.Account
	}
	if o.expired(t) {
		summary += ", had expired"
	}
	return o.rec.record(ctx, actor, ports.AdminKindToken, t.Name, ports.AdminRevoked, summary)
}

// RevokeOwnToken implements ports.Operators.
func (o *Operators) RevokeOwnToken(ctx context.Context, p ports.Principal) error {
	if p.TokenID == "" {
		return fmt.Errorf("the caller logged in with a session, not an API token: log out instead: %w", ports.ErrInvalid)
	}
	return o.DeleteToken(ctx, p.Name, p.TokenID)
}

// AdminLog implements ports.Operators.
func (o *Operators) AdminLog(ctx context.Context, q ports.AdminQuery) (ports.AdminPage, error) {
	return adminLog(ctx, o.cfg.Audit, q)
}

// accountTokens returns the tokens bound to account.
func (o *Operators) accountTokens(ctx context.Context, account string) ([]ports.StoredToken, error) {
	ts, err := o.store.Tokens(ctx)
	if err != nil {
		return nil, err
	}
	var out []ports.StoredToken
	for _, t := range ts {
		if t.Account == account {
			out = append(out, t)
		}
	}
	return out, nil
}

// deleteAccountTokens deletes the tokens bound to account and returns how
// many.
func (o *Operators) deleteAccountTokens(ctx context.Context, account string) (int, error) {
	ts, err := o.accountTokens(ctx, account)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range ts {
		if err := o.store.DeleteToken(ctx, t.ID); err != nil && !errors.Is(err, ports.ErrNotFound) {
			return n, err
		}
		n++
	}
	return n, nil
}

func toUser(a ports.Account) ports.User {
	return ports.User{Name: a.Name, Role: a.Role, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt}
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
	_, err = o.PutUser(ctx, ports.UserRequest{Actor: ports.ActorConfig, Name: name, Role: ports.RoleAdmin, Password: password})
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
		// A token bound to an account is that account's power, not another
		// admin; an expired one is no one's.
		if t.Role == ports.RoleAdmin && t.Account == "" && t.ID != exceptToken && !o.expired(t) {
			return true, nil
		}
	}
	return false, nil
}

// hash checks a new password against the rules and hashes it.
func (o *Operators) hash(password string) ([]byte, error) {
	switch {
	case len(password) < MinPasswordBytes:
		return nil, fmt.Errorf("password: at least %d bytes: %w", MinPasswordBytes, ports.ErrInvalid)
	case len(password) > MaxPasswordBytes:
		return nil, fmt.Errorf("password: at most %d bytes: %w", MaxPasswordBytes, ports.ErrInvalid)
	case !utf8.ValidString(password) || strings.IndexByte(password, 0) >= 0:
		return nil, fmt.Errorf("password: must be UTF-8 text without NUL: %w", ports.ErrInvalid)
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
		return fmt.Errorf("%s: 1 to %d characters: %w", field, maxOperatorName, ports.ErrInvalid)
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-', r == '@':
		default:
			return fmt.Errorf("%s %q: only letters, digits and . _ - @: %w", field, truncate(name, 64), ports.ErrInvalid)
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
