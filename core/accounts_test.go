package core

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
)

func newTestOperators(t *testing.T) (*Operators, *stepClock, *memstore.Store) {
	t.Helper()
	clock := &stepClock{now: time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)}
	store := memstore.New()
	o, err := NewOperators(store, clock, OperatorsConfig{SessionTTL: time.Hour, BcryptCost: bcrypt.MinCost}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return o, clock, store
}

// testActor is the actor of the changes the tests make.
const testActor = "tester"

func mustPutUser(t *testing.T, o *Operators, name string, role ports.OperatorRole, pw string) {
	t.Helper()
	if _, err := o.PutUser(context.Background(), ports.UserRequest{Actor: testActor, Name: name, Role: role, Password: pw}); err != nil {
		t.Fatal(err)
	}
}

func TestLoginOpensASessionThatExpires(t *testing.T) {
	ctx := context.Background()
	o, clock, store := newTestOperators(t)
	mustPutUser(t, o, "ann", ports.RoleOperator, "ann's password")

	for _, c := range []struct{ name, pw string }{{"ann", "wrong password"}, {"bob", "ann's password"}, {"ann", ""}, {"", ""}} {
		_, err := o.Login(ctx, ports.LoginRequest{Name: c.name, Password: c.pw})
		if !errors.Is(err, ports.ErrUnauthenticated) || err.Error() != errBadLogin.Error() {
			t.Fatalf("login %q/%q: %v, want the one bad-login error", c.name, c.pw, err)
		}
	}
	s, err := o.Login(ctx, ports.LoginRequest{Name: "ann", Password: "ann's password"})
	if err != nil {
		t.Fatal(err)
	}
	if s.User != "ann" || s.Role != ports.RoleOperator || !s.ExpiresAt.Equal(clock.Now().Add(time.Hour)) || len(s.Secret) < 40 {
		t.Fatalf("session %+v", s)
	}
	// The store holds the hash of the secret, never the secret.
	if _, err := store.Session(ctx, s.Secret); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("the session is stored under its secret: %v", err)
	}
	p, err := o.Authenticate(ctx, s.Secret)
	if err != nil || p != (ports.Principal{Name: "ann", Role: ports.RoleOperator, Session: true}) {
		t.Fatalf("authenticate: %+v %v", p, err)
	}
	clock.advance(time.Hour)
	if _, err := o.Authenticate(ctx, s.Secret); !errors.Is(err, ports.ErrUnauthenticated) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired session: %v", err)
	}
	// The next login sweeps expired sessions away.
	if _, err := o.Login(ctx, ports.LoginRequest{Name: "ann", Password: "ann's password"}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Session(ctx, sessionID(s.Secret)); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("expired session still stored: %v", err)
	}
}

func TestLogoutAndChangesCloseSessions(t *testing.T) {
	ctx := context.Background()
	o, _, _ := newTestOperators(t)
	mustPutUser(t, o, "root", ports.RoleAdmin, "root's password")
	mustPutUser(t, o, "ann", ports.RoleOperator, "ann's password")

	s, _ := o.Login(ctx, ports.LoginRequest{Name: "ann", Password: "ann's password"})
	if err := o.Logout(ctx, s.Secret); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Authenticate(ctx, s.Secret); !errors.Is(err, ports.ErrUnauthenticated) {
		t.Fatalf("after logout: %v", err)
	}
	// A role change closes the sessions; so does a password change.
	s, _ = o.Login(ctx, ports.LoginRequest{Name: "ann", Password: "ann's password"})
	mustPutUser(t, o, "ann", ports.RoleViewer, "")
	if _, err := o.Authenticate(ctx, s.Secret); !errors.Is(err, ports.ErrUnauthenticated) {
		t.Fatalf("after a role change: %v", err)
	}
	s, _ = o.Login(ctx, ports.LoginRequest{Name: "ann", Password: "ann's password"}) // the password was kept
	if p, err := o.Authenticate(ctx, s.Secret); err != nil || p.Role != ports.RoleViewer {
		t.Fatalf("after the change: %+v %v", p, err)
	}
	mustPutUser(t, o, "ann", ports.RoleViewer, "a new password")
	if _, err := o.Authenticate(ctx, s.Secret); !errors.Is(err, ports.ErrUnauthenticated) {
		t.Fatalf("after a password change: %v", err)
	}
	// A deleted account's session is refused.
	s, _ = o.Login(ctx, ports.LoginRequest{Name: "ann", Password: "a new password"})
	if err := o.DeleteUser(ctx, testActor, "ann"); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Authenticate(ctx, s.Secret); !errors.Is(err, ports.ErrUnauthenticated) {
		t.Fatalf("after delete: %v", err)
	}
}

func TestTokens(t *testing.T) {
	ctx := context.Background()
	o, _, store := newTestOperators(t)
	secret, tok, err := o.CreateToken(ctx, ports.TokenRequest{Actor: testActor, Name: "ci", Role: ports.RoleViewer})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, "obx_"+tok.ID+"_") {
		t.Fatalf("secret %q does not carry id %q", secret, tok.ID)
	}
	st, err := store.Token(ctx, tok.ID)
	if err != nil || strings.Contains(string(st.Hash), secret[len(secret)-10:]) {
		t.Fatalf("stored token %+v %v", st, err)
	}
	p, err := o.Authenticate(ctx, secret)
	if err != nil || p != (ports.Principal{Name: "token:ci", Role: ports.RoleViewer, TokenID: tok.ID}) {
		t.Fatalf("authenticate: %+v %v", p, err)
	}
	// A token with the right id and a wrong secret is refused.
	if _, err := o.Authenticate(ctx, secret[:len(secret)-1]+"x"); !errors.Is(err, ports.ErrUnauthenticated) {
		t.Fatalf("wrong secret: %v", err)
	}
	if _, _, err := o.CreateToken(ctx, ports.TokenRequest{Actor: testActor, Name: "ci", Role: ports.RoleAdmin}); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("repeated name: %v", err)
	}
	if err := o.DeleteToken(ctx, testActor, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Authenticate(ctx, secret); !errors.Is(err, ports.ErrUnauthenticated) {
		t.Fatalf("revoked: %v", err)
	}
	if err := o.DeleteToken(ctx, testActor, tok.ID); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
}

func TestTheLastAdminStays(t *testing.T) {
	ctx := context.Background()
	o, _, _ := newTestOperators(t)
	if ok, _ := o.HasAdmin(ctx); ok {
		t.Fatal("an empty store has an admin")
	}
	mustPutUser(t, o, "root", ports.RoleAdmin, "root's password")
	if ok, _ := o.HasAdmin(ctx); !ok {
		t.Fatal("no admin after making one")
	}
	if err := o.DeleteUser(ctx, testActor, "root"); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("delete the last admin: %v", err)
	}
	if _, err := o.PutUser(ctx, ports.UserRequest{Actor: testActor, Name: "root", Role: ports.RoleViewer}); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("demote the last admin: %v", err)
	}
	_, tok, err := o.CreateToken(ctx, ports.TokenRequest{Actor: testActor, Name: "automation", Role: ports.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.DeleteUser(ctx, testActor, "root"); err != nil {
		t.Fatalf("delete an admin while an admin token exists: %v", err)
	}
	if err := o.DeleteToken(ctx, testActor, tok.ID); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("delete the last admin token: %v", err)
	}
}

func TestEnsureAdminResetsThePassword(t *testing.T) {
	ctx := context.Background()
	o, _, _ := newTestOperators(t)
	if err := o.EnsureAdmin(ctx, "root", "first password"); err != nil {
		t.Fatal(err)
	}
	mustPutUser(t, o, "root", ports.RoleAdmin, "changed in the ui")
	if err := o.EnsureAdmin(ctx, "root", "first password"); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Login(ctx, ports.LoginRequest{Name: "root", Password: "first password"}); err != nil {
		t.Fatalf("the configured password does not work: %v", err)
	}
	// An account demoted by hand is made admin again.
	mustPutUser(t, o, "other", ports.RoleAdmin, "other password")
	mustPutUser(t, o, "root", ports.RoleViewer, "")
	if err := o.EnsureAdmin(ctx, "root", "first password"); err != nil {
		t.Fatal(err)
	}
	if us, _ := o.Users(ctx); us[1].Name != "root" || us[1].Role != ports.RoleAdmin {
		t.Fatalf("users %+v", us)
	}
}

func TestPutUserRules(t *testing.T) {
	ctx := context.Background()
	o, _, _ := newTestOperators(t)
	for _, c := range []struct {
		req  ports.UserRequest
		want string
	}{
		{ports.UserRequest{Name: "", Role: ports.RoleViewer, Password: "long enough"}, "user name: 1 to 64"},
		{ports.UserRequest{Name: "a b", Role: ports.RoleViewer, Password: "long enough"}, "only letters"},
		{ports.UserRequest{Name: "token:x", Role: ports.RoleViewer, Password: "long enough"}, "only letters"},
		{ports.UserRequest{Name: "ann", Role: "root", Password: "long enough"}, "role \"root\""},
		{ports.UserRequest{Name: "ann", Role: ports.RoleViewer}, "password: required"},
		{ports.UserRequest{Name: "ann", Role: ports.RoleViewer, Password: "short"}, "at least 10"},
		{ports.UserRequest{Name: "ann", Role: ports.RoleViewer, Password: strings.Repeat("x", 73)}, "at most 72"},
		{ports.UserRequest{Name: "ann", Role: ports.RoleViewer, Password: "nul\x00inside password"}, "without NUL"},
	} {
		c.req.Actor = testActor
		_, err := o.PutUser(ctx, c.req)
		if !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.req.Name, err, c.want)
		}
		if err != nil && c.req.Password != "" && strings.Contains(err.Error(), c.req.Password) {
			t.Errorf("the error shows the password: %v", err)
		}
	}
	if us, _ := o.Users(ctx); len(us) != 0 {
		t.Fatalf("a refused user was stored: %+v", us)
	}
}

// TestLoginsWaitForAFreeSlot: with every password-check slot taken, a login
// waits, and gives up as unavailable when its context ends, instead of
// adding one more bcrypt hash to the load.
func TestLoginsWaitForAFreeSlot(t *testing.T) {
	o, _, _ := newTestOperators(t)
	mustPutUser(t, o, "ann", ports.RoleOperator, "ann's password")
	for range cap(o.loginSlots) {
		o.loginSlots <- struct{}{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := o.Login(ctx, ports.LoginRequest{Name: "ann", Password: "ann's password"}); !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("login with no free slot: %v", err)
	}
	<-o.loginSlots
	if _, err := o.Login(context.Background(), ports.LoginRequest{Name: "ann", Password: "ann's password"}); err != nil {
		t.Fatalf("login with a free slot: %v", err)
	}
}

// TestOperatorsConfigValidate: the defaults hold; each rule reports its
// field by its Go path, the throttle's under Throttle; NewOperators refuses
// what Validate refuses and fills in the zeros.
func TestOperatorsConfigValidate(t *testing.T) {
	def := OperatorsConfig{}.WithDefaults()
	if err := def.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	bad := def
	bad.SessionTTL = 10 * time.Second
	bad.MaxOwnTokenTTL = 9000 * time.Hour
	bad.Throttle.AccountMaxDelay = 2 * time.Hour
	bad.Throttle.AddressMaxDelay = 0
	err := bad.Validate()
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *ports.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v: not a *ports.FieldError", e)
		}
		fields = append(fields, fe.Field)
	}
	if got := strings.Join(fields, " "); got != "SessionTTL MaxOwnTokenTTL Throttle.AddressMaxDelay Throttle.AccountMaxDelay" {
		t.Fatalf("fields %q (%v)", got, err)
	}
	if !strings.Contains(err.Error(), "must be between 1m and 8760h") {
		t.Errorf("error %v", err)
	}
	if _, err := NewOperators(memstore.New(), ports.SystemClock{}, OperatorsConfig{SessionTTL: time.Second}, nil); err == nil ||
		!strings.Contains(err.Error(), "SessionTTL: must be at least 1m") {
		t.Fatalf("NewOperators with a 1s session: %v", err)
	}
}
