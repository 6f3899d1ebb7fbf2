package core

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
)

// adminRecords returns the whole admin audit log, oldest first.
func adminRecords(t *testing.T, o *Operators) []ports.AdminRecord {
	t.Helper()
	var out []ports.AdminRecord
	q := ports.AdminQuery{Limit: 2}
	for {
		page, err := o.AdminLog(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Records...)
		if page.Next == 0 {
			break
		}
		q.Before = page.Next
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

func TestTokenExpiry(t *testing.T) {
	ctx := context.Background()
	o, clock, _ := newTestOperators(t)
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{clock.Now(), "not in the future"},
		{clock.Now().Add(-time.Hour), "not in the future"},
		{clock.Now().Add(MaxTokenTTL + time.Hour), "at most 3650 days ahead"},
	} {
		_, _, err := o.CreateToken(ctx, ports.TokenRequest{Actor: testActor, Name: "ci", Role: ports.RoleViewer, ExpiresAt: c.at})
		if !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("expiry %s: %v, want ErrInvalid saying %q", c.at, err, c.want)
		}
	}
	secret, tok, err := o.CreateToken(ctx, ports.TokenRequest{Actor: testActor, Name: "ci", Role: ports.RoleOperator,
		ExpiresAt: clock.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if !tok.ExpiresAt.Equal(clock.Now().Add(time.Hour)) || tok.Expired {
		t.Fatalf("created %+v", tok)
	}
	if p, err := o.Authenticate(ctx, secret); err != nil || p.Role != ports.RoleOperator {
		t.Fatalf("before its expiry: %+v %v", p, err)
	}
	clock.advance(time.Hour - time.Microsecond)
	if _, err := o.Authenticate(ctx, secret); err != nil {
		t.Fatalf("a moment before its expiry: %v", err)
	}
	clock.advance(time.Microsecond)
	_, err = o.Authenticate(ctx, secret)
	if !errors.Is(err, ports.ErrUnauthenticated) || !strings.Contains(err.Error(), "token expired") {
		t.Fatalf("at its expiry: %v, want \"token expired\"", err)
	}
	// Only the holder of the secret learns that the token expired.
	if _, err := o.Authenticate(ctx, secret[:len(secret)-1]+"x"); !errors.Is(err, ports.ErrUnauthenticated) || strings.Contains(err.Error(), "expired") {
		t.Fatalf("wrong secret of an expired token: %v", err)
	}
	ts, err := o.Tokens(ctx)
	if err != nil || len(ts) != 1 || !ts[0].Expired || !ts[0].ExpiresAt.Equal(tok.ExpiresAt) {
		t.Fatalf("tokens %+v %v, want the token listed as expired", ts, err)
	}
	// A token without an expiry lasts.
	forever, _, err := o.CreateToken(ctx, ports.TokenRequest{Actor: testActor, Name: "forever", Role: ports.RoleViewer})
	if err != nil {
		t.Fatal(err)
	}
	clock.advance(5 * 365 * 24 * time.Hour)
	if _, err := o.Authenticate(ctx, forever); err != nil {
		t.Fatalf("a token without expiry, years later: %v", err)
	}
}

func TestAnExpiredAdminTokenIsNoAdmin(t *testing.T) {
	ctx := context.Background()
	o, clock, _ := newTestOperators(t)
	mustPutUser(t, o, "root", ports.RoleAdmin, "root's password")
	if _, _, err := o.CreateToken(ctx, ports.TokenRequest{Actor: testActor, Name: "robot", Role: ports.RoleAdmin,
		ExpiresAt: clock.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	clock.advance(2 * time.Hour)
	if err := o.DeleteUser(ctx, testActor, "root"); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("delete the last admin while only an expired admin token exists: %v, want ErrConflict", err)
	}
}

func TestOwnTokenFollowsTheAccount(t *testing.T) {
	ctx := context.Background()
	o, clock, store := newTestOperators(t)
	mustPutUser(t, o, "root", ports.RoleAdmin, "root's password")
	mustPutUser(t, o, "ann", ports.RoleOperator, "ann's password")
	s, err := o.Login(ctx, ports.LoginRequest{Name: "ann", Password: "ann's password"})
	if err != nil {
		t.Fatal(err)
	}
	ann, err := o.Authenticate(ctx, s.Secret)
	if err != nil {
		t.Fatal(err)
	}
	expires := clock.Now().Add(12 * time.Hour)
	secret, tok, err := o.CreateOwnToken(ctx, ann, ports.OwnTokenRequest{ExpiresAt: expires})
	if err != nil {
		t.Fatal(err)
	}
	if tok.Account != "ann" || !strings.HasPrefix(tok.Name, "ann/cli-") || tok.Role != ports.RoleOperator || !tok.ExpiresAt.Equal(expires) {
		t.Fatalf("own token %+v", tok)
	}
	p, err := o.Authenticate(ctx, secret)
	if err != nil || p != (ports.Principal{Name: "ann", Role: ports.RoleOperator, TokenID: tok.ID}) {
		t.Fatalf("authenticate the own token: %+v %v", p, err)
	}

	// A demotion takes effect at once.
	if _, err := o.PutUser(ctx, ports.UserRequest{Actor: "root", Name: "ann", Role: ports.RoleViewer}); err != nil {
		t.Fatal(err)
	}
	if p, err := o.Authenticate(ctx, secret); err != nil || p.Role != ports.RoleViewer {
		t.Fatalf("after the demotion: %+v %v, want the viewer role", p, err)
	}
	if ts, _ := o.Tokens(ctx); len(ts) != 1 || ts[0].Role != ports.RoleViewer {
		t.Fatalf("tokens after the demotion %+v, want the account's role now", ts)
	}
	// A bound admin token is no second admin.
	mustPutUser(t, o, "ann", ports.RoleAdmin, "")
	if err := o.DeleteUser(ctx, testActor, "root"); err != nil {
		t.Fatal(err)
	}
	if err := o.DeleteUser(ctx, testActor, "ann"); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("delete the last admin account, whose own token is left: %v, want ErrConflict", err)
	}
	mustPutUser(t, o, "root", ports.RoleAdmin, "root's password")

	// Deleting the account kills the token, and it stays dead when an
	// account of the same name comes back.
	if err := o.DeleteUser(ctx, testActor, "ann"); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Authenticate(ctx, secret); !errors.Is(err, ports.ErrUnauthenticated) {
		t.Fatalf("the token of a deleted account: %v", err)
	}
	if _, err := store.Token(ctx, tok.ID); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("the token of a deleted account is still stored: %v", err)
	}
	mustPutUser(t, o, "ann", ports.RoleAdmin, "ann's new password")
	if _, err := o.Authenticate(ctx, secret); !errors.Is(err, ports.ErrUnauthenticated) {
		t.Fatalf("the token of a deleted account, the name made again: %v", err)
	}
}

func TestOwnTokenRules(t *testing.T) {
	ctx := context.Background()
	o, clock, store := newTestOperators(t)
	mustPutUser(t, o, "ann", ports.RoleOperator, "ann's password")
	ann := loggedIn(t, o, "ann", "ann's password")
	for _, c := range []struct {
		req  ports.OwnTokenRequest
		want string
	}{
		{ports.OwnTokenRequest{}, "expires_at: required"},
		{ports.OwnTokenRequest{ExpiresAt: clock.Now()}, "not in the future"},
		{ports.OwnTokenRequest{ExpiresAt: clock.Now().Add(DefaultMaxOwnTokenTTL + time.Second)}, "at most 30 days ahead"},
		{ports.OwnTokenRequest{Label: "my laptop", ExpiresAt: clock.Now().Add(time.Hour)}, "only letters"},
		{ports.OwnTokenRequest{Label: strings.Repeat("x", 33), ExpiresAt: clock.Now().Add(time.Hour)}, "at most 32"},
	} {
		if _, _, err := o.CreateOwnToken(ctx, ann, c.req); !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want ErrInvalid saying %q", c.req, err, c.want)
		}
	}
	secret, tok, err := o.CreateOwnToken(ctx, ann, ports.OwnTokenRequest{Label: "laptop", ExpiresAt: clock.Now().Add(DefaultMaxOwnTokenTTL)})
	if err != nil || !strings.HasPrefix(tok.Name, "ann/laptop-") {
		t.Fatalf("the longest own token: %+v %v", tok, err)
	}
	// A token cannot make itself a successor: only a password login can.
	byToken, _ := o.Authenticate(ctx, secret)
	if _, _, err := o.CreateOwnToken(ctx, byToken, ports.OwnTokenRequest{ExpiresAt: clock.Now().Add(time.Hour)}); !errors.Is(err, ports.ErrForbidden) {
		t.Fatalf("an own token made by a token: %v, want ErrForbidden", err)
	}
	// A password change revokes the tokens the old password made.
	mustPutUser(t, o, "ann", ports.RoleOperator, "ann's next password")
	if _, err := o.Authenticate(ctx, secret); !errors.Is(err, ports.ErrUnauthenticated) {
		t.Fatalf("an own token after a password change: %v", err)
	}
	if _, err := store.Token(ctx, tok.ID); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("the revoked token is still stored: %v", err)
	}
	// And it expires.
	ann = loggedIn(t, o, "ann", "ann's next password")
	secret, _, err = o.CreateOwnToken(ctx, ann, ports.OwnTokenRequest{ExpiresAt: clock.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	clock.advance(time.Hour)
	if _, err := o.Authenticate(ctx, secret); !errors.Is(err, ports.ErrUnauthenticated) || !strings.Contains(err.Error(), "token expired") {
		t.Fatalf("an expired own token: %v", err)
	}
}

func TestRevokeOwnToken(t *testing.T) {
	ctx := context.Background()
	o, clock, _ := newTestOperators(t)
	mustPutUser(t, o, "ann", ports.RoleOperator, "ann's password")
	ann := loggedIn(t, o, "ann", "ann's password")
	if err := o.RevokeOwnToken(ctx, ann); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("a session revoking itself as a token: %v, want ErrInvalid", err)
	}
	secret, _, err := o.CreateOwnToken(ctx, ann, ports.OwnTokenRequest{ExpiresAt: clock.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := o.Authenticate(ctx, secret)
	if err := o.RevokeOwnToken(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Authenticate(ctx, secret); !errors.Is(err, ports.ErrUnauthenticated) {
		t.Fatalf("a revoked token: %v", err)
	}
	recs := adminRecords(t, o)
	last := recs[len(recs)-1]
	if last.Actor != "ann" || last.Kind != ports.AdminKindToken || last.Action != ports.AdminRevoked {
		t.Fatalf("the last record %+v, want ann revoking a token", last)
	}
}

func TestAccountChangesAreAudited(t *testing.T) {
	ctx := context.Background()
	o, clock, _ := newTestOperators(t)
	const pw = "a long secret password"
	if err := o.EnsureAdmin(ctx, "root", pw); err != nil {
		t.Fatal(err)
	}
	if err := o.EnsureAdmin(ctx, "root", pw); err != nil { // no change: no record
		t.Fatal(err)
	}
	do := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := o.PutUser(ctx, ports.UserRequest{Actor: "root", Name: "ann", Role: ports.RoleViewer, Password: "ann's " + pw})
	do(err)
	_, err = o.PutUser(ctx, ports.UserRequest{Actor: "root", Name: "ann", Role: ports.RoleViewer}) // no change: no record
	do(err)
	_, err = o.PutUser(ctx, ports.UserRequest{Actor: "root", Name: "ann", Role: ports.RoleOperator})
	do(err)
	_, err = o.PutUser(ctx, ports.UserRequest{Actor: "ann", Name: "ann", Role: ports.RoleOperator, Password: "ann's next " + pw})
	do(err)
	secret, tok, err := o.CreateToken(ctx, ports.TokenRequest{Actor: "token:robot", Name: "ci", Role: ports.RoleOperator, ExpiresAt: clock.Now().Add(time.Hour)})
	do(err)
	do(o.DeleteToken(ctx, "root", tok.ID))
	do(o.DeleteUser(ctx, "root", "ann"))

	want := []struct {
		actor   string
		kind    ports.AdminKind
		name    string
		action  ports.AdminAction
		summary string
	}{
		{"config", ports.AdminKindUser, "root", ports.AdminCreated, "role admin"},
		{"root", ports.AdminKindUser, "ann", ports.AdminCreated, "role viewer"},
		{"root", ports.AdminKindUser, "ann", ports.AdminChanged, "role viewer → operator; sessions closed"},
		{"ann", ports.AdminKindUser, "ann", ports.AdminPassword, "password changed; sessions closed"},
		{"token:robot", ports.AdminKindToken, "ci", ports.AdminCreated, "id " + tok.ID + ", role operator, expires 2026-03-01T09:00:00Z"},
		{"root", ports.AdminKindToken, "ci", ports.AdminRevoked, "id " + tok.ID + ", role operator"},
		{"root", ports.AdminKindUser, "ann", ports.AdminDeleted, "was role operator; sessions closed"},
	}
	recs := adminRecords(t, o)
	if len(recs) != len(want) {
		for _, r := range recs {
			t.Logf("%+v", r)
		}
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	for i, w := range want {
		r := recs[i]
		if r.Actor != w.actor || r.Kind != w.kind || r.Name != w.name || r.Action != w.action || r.Summary != w.summary || !r.At.Equal(clock.Now()) {
			t.Errorf("record %d = %+v, want %+v", i, r, w)
		}
		for _, secretValue := range []string{pw, "ann's " + pw, secret, secret[len(secret)-20:]} {
			if strings.Contains(r.Summary, secretValue) {
				t.Errorf("record %d holds a secret: %q", i, r.Summary)
			}
		}
	}
	// No actor, no change.
	if _, err := o.PutUser(ctx, ports.UserRequest{Name: "bob", Role: ports.RoleViewer, Password: pw}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("a change without an actor: %v, want ErrInvalid", err)
	}
	if us, _ := o.Users(ctx); len(us) != 1 {
		t.Fatalf("a change without an actor was made: %+v", us)
	}
}

// failingAudit refuses every record.
type failingAudit struct{ ports.AdminAudit }

func (failingAudit) AppendAdmin(context.Context, ports.AdminRecord) (ports.AdminRecord, error) {
	return ports.AdminRecord{}, errors.New("disk full")
}

func TestAnUnrecordedChangeIsReported(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	o, err := NewOperators(store, ports.SystemClock{}, OperatorsConfig{BcryptCost: bcrypt.MinCost, Audit: failingAudit{store}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = o.PutUser(ctx, ports.UserRequest{Actor: "root", Name: "ann", Role: ports.RoleViewer, Password: "ann's password"})
	if err == nil || !strings.Contains(err.Error(), `the user "ann" was created, but the audit log could not record it`) ||
		errors.Is(err, ports.ErrInvalid) || strings.Contains(err.Error(), "ann's password") {
		t.Fatalf("an unrecorded change: %v", err)
	}
	if _, err := store.Account(ctx, "ann"); err != nil {
		t.Fatalf("the change is not made: %v", err)
	}
	// A store without an admin audit log is refused at construction.
	if _, err := NewOperators(accountsOnly{store}, ports.SystemClock{}, OperatorsConfig{BcryptCost: bcrypt.MinCost}, nil); err == nil {
		t.Fatal("NewOperators without an admin audit log: no error")
	}
}

// accountsOnly hides every method but the AccountStore's.
type accountsOnly struct{ ports.AccountStore }

func newTestEditor(t *testing.T, public func(typ, key string) bool) (*DirectoryEditor, *memstore.Store, *stepClock) {
	t.Helper()
	dir, err := memdir.New(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New()
	clock := &stepClock{now: time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)}
	e, err := NewDirectoryEditor(dir, store, clock, DirectoryEditorConfig{PublicSetting: public}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return e, store, clock
}

func allRecords(t *testing.T, a ports.AdminAudit) []ports.AdminRecord {
	t.Helper()
	rs, err := a.AdminRecords(context.Background(), ports.AdminQuery{Limit: ports.MaxAdminPage})
	if err != nil {
		t.Fatal(err)
	}
	for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
		rs[i], rs[j] = rs[j], rs[i]
	}
	return rs
}

func TestDirectoryChangesAreAudited(t *testing.T) {
	ctx := context.Background()
	e, store, _ := newTestEditor(t, func(typ, key string) bool { return key != "signature" })
	mustList := func(actor string, l ports.List) {
		t.Helper()
		if _, err := e.PutList(ctx, actor, l); err != nil {
			t.Fatal(err)
		}
	}
	mustChannel := func(actor string, c ports.ChannelSettings) {
		t.Helper()
		if _, err := e.PutChannel(ctx, actor, c); err != nil {
			t.Fatal(err)
		}
	}
	const clearSecret = "hunter2-clear-secret"
	mustList("config", ports.List{Name: "ops", Type: "email", Targets: []string{"a@example.com"}})
	mustList("config", ports.List{Name: "ops", Type: "email", Targets: []string{"a@example.com"}}) // unchanged
	mustList("alice", ports.List{Name: "ops", Type: "webhook", Targets: []string{"https://hooks.example/T0/" + clearSecret, "b@example.com"}})
	if err := e.DeleteList(ctx, "alice", "ops"); err != nil {
		t.Fatal(err)
	}
	mustChannel("config", ports.ChannelSettings{Type: "email", Settings: map[string]string{
		"host": "smtp.example", "password": "env:SMTP_PASSWORD", "user": "env:SMTP_USER", "signature": clearSecret}})
	mustChannel("token:ci", ports.ChannelSettings{Type: "email", Settings: map[string]string{
		"host": "smtp2.example", "password": "file:/run/secrets/smtp", "signature": clearSecret + "2", "port": "25"},
		Retry: ports.RetrySettings{MaxRetries: 5}, RateLimit: 10})
	if err := e.DeleteChannel(ctx, "bob", "email"); err != nil {
		t.Fatal(err)
	}

	want := []struct {
		actor   string
		kind    ports.AdminKind
		name    string
		action  ports.AdminAction
		summary string
	}{
		{"config", ports.AdminKindList, "ops", ports.AdminCreated, "type email, 1 target"},
		{"alice", ports.AdminKindList, "ops", ports.AdminChanged, "type email → webhook; targets 1 → 2 (2 added, 1 removed)"},
		{"alice", ports.AdminKindList, "ops", ports.AdminDeleted, "was type webhook, 2 targets"},
		{"config", ports.AdminKindChannel, "email", ports.AdminCreated,
			`settings: host="smtp.example", password=env:SMTP_PASSWORD, signature=(hidden), user=env:SMTP_USER; retry: fixed; rate limit: none`},
		{"token:ci", ports.AdminKindChannel, "email", ports.AdminChanged,
			`settings: host "smtp.example" → "smtp2.example", password env:SMTP_PASSWORD → file:/run/secrets/smtp, port added ("25"), signature (hidden) → (hidden), user removed; ` +
				`retry: fixed → fixed, 5 retries; rate limit: none → 10/s`},
		{"bob", ports.AdminKindChannel, "email", ports.AdminDeleted,
			`was settings: host="smtp2.example", password=file:/run/secrets/smtp, port="25", signature=(hidden); retry: fixed, 5 retries; rate limit: 10/s`},
	}
	recs := allRecords(t, store)
	if len(recs) != len(want) {
		for _, r := range recs {
			t.Logf("%+v", r)
		}
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	for i, w := range want {
		r := recs[i]
		if r.Actor != w.actor || r.Kind != w.kind || r.Name != w.name || r.Action != w.action || r.Summary != w.summary {
			t.Errorf("record %d = %+v,\nwant %+v", i, r, w)
		}
		for _, leak := range []string{clearSecret, "example.com", "hooks.example"} {
			if strings.Contains(r.Summary, leak) {
				t.Errorf("record %d shows %q: %s", i, leak, r.Summary)
			}
		}
	}
	// Without the plugin's word, every clear value is hidden.
	e2, store2, _ := newTestEditor(t, nil)
	if _, err := e2.PutChannel(ctx, "alice", ports.ChannelSettings{Type: "x", Settings: map[string]string{"url": "https://x.example/" + clearSecret}}); err != nil {
		t.Fatal(err)
	}
	if r := allRecords(t, store2); len(r) != 1 || r[0].Summary != "settings: url=(hidden); retry: fixed; rate limit: none" {
		t.Fatalf("records %+v", r)
	}
	// No actor, no change; an unknown entry, no record.
	if _, err := e2.PutList(ctx, "", ports.List{Name: "x", Type: "email"}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("a change without an actor: %v", err)
	}
	if err := e2.DeleteList(ctx, "alice", "ghost"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("delete an unknown list: %v", err)
	}
	if r := allRecords(t, store2); len(r) != 1 {
		t.Fatalf("records after refused changes %+v", r)
	}
}

func TestAdminLogPages(t *testing.T) {
	ctx := context.Background()
	o, _, _ := newTestOperators(t)
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		if _, _, err := o.CreateToken(ctx, ports.TokenRequest{Actor: testActor, Name: name, Role: ports.RoleViewer}); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	for _, r := range adminRecords(t, o) {
		names = append(names, r.Name)
	}
	if strings.Join(names, "") != "abcde" {
		t.Fatalf("paged records %q", names)
	}
	for _, limit := range []int{0, adminLogPage + 1} {
		if _, err := o.AdminLog(ctx, ports.AdminQuery{Limit: limit}); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("limit %d: %v, want ErrInvalid", limit, err)
		}
	}
}

// TestOwnTokensAreCappedPerAccount: an account keeps at most MaxOwnTokens
// tokens of its own; each one more revokes the oldest, expired ones first,
// and the admin audit log records each revocation with the account as
// actor.
func TestOwnTokensAreCappedPerAccount(t *testing.T) {
	ctx := context.Background()
	o, clock, _ := newTestOperators(t)
	mustPutUser(t, o, "ann", ports.RoleViewer, "ann's password")
	ann := loggedIn(t, o, "ann", "ann's password")
	var secrets []string
	for i := range DefaultMaxOwnTokens {
		ttl := time.Hour
		if i == 4 {
			ttl = time.Minute // expires before the others
		}
		secret, _, err := o.CreateOwnToken(ctx, ann, ports.OwnTokenRequest{ExpiresAt: clock.Now().Add(ttl)})
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, secret)
		clock.advance(time.Second)
	}
	clock.advance(time.Minute)
	// One more: the expired one goes, though it is not the oldest.
	if _, _, err := o.CreateOwnToken(ctx, ann, ports.OwnTokenRequest{ExpiresAt: clock.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Authenticate(ctx, secrets[0]); err != nil {
		t.Fatalf("the oldest live token went before the expired one: %v", err)
	}
	// Two more: the two oldest go.
	for range 2 {
		if _, _, err := o.CreateOwnToken(ctx, ann, ports.OwnTokenRequest{ExpiresAt: clock.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	for i, secret := range secrets {
		_, err := o.Authenticate(ctx, secret)
		if live := i >= 2 && i != 4; (err == nil) != live {
			t.Fatalf("token %d: %v (want live: %v)", i, err, live)
		}
	}
	ts, _ := o.Tokens(ctx)
	if len(ts) != DefaultMaxOwnTokens {
		t.Fatalf("%d tokens, want %d", len(ts), DefaultMaxOwnTokens)
	}
	var revoked []ports.AdminRecord
	for _, r := range adminRecords(t, o) {
		if r.Action == ports.AdminRevoked {
			revoked = append(revoked, r)
		}
	}
	if len(revoked) != 3 || revoked[0].Actor != "ann" || !strings.Contains(revoked[0].Summary, "had expired") ||
		!strings.Contains(revoked[1].Summary, "the oldest of its tokens, revoked for ann/cli-") {
		t.Fatalf("revocations recorded: %+v", revoked)
	}
}

// TestAuditSummaryMasksURLCredentialsAndAddresses replays the reviewer's
// channel: a token_url carrying user:password@ and api_key=, and e-mail
// addresses in from and username, all settings the plugin calls public.
// The audit summary shows them with the credentials and the addresses
// masked, enough to recognise them.
func TestAuditSummaryMasksURLCredentialsAndAddresses(t *testing.T) {
	ctx := context.Background()
	e, store, _ := newTestEditor(t, func(string, string) bool { return true })
	settings := map[string]string{
		"token_url": "http://user:PASSWORD123@idp.example.com/token?api_key=KEY123&scope=mail",
		"from":      "alerts@plant.example.com", "username": "svc.outbox@plant.example.com",
	}
	if _, err := e.PutChannel(ctx, "alice", ports.ChannelSettings{Type: "email", Settings: settings}); err != nil {
		t.Fatal(err)
	}
	settings["from"] = "other@plant.example.com"
	if _, err := e.PutChannel(ctx, "alice", ports.ChannelSettings{Type: "email", Settings: settings}); err != nil {
		t.Fatal(err)
	}
	recs := allRecords(t, store)
	want := []string{
		`settings: from="a***@plant.example.com", token_url="http://***@idp.example.com/token?api_key=***&scope=mail", username="s***@plant.example.com"; retry: fixed; rate limit: none`,
		`settings: from "a***@plant.example.com" → "o***@plant.example.com"`,
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records", len(recs))
	}
	for i, r := range recs {
		if r.Summary != want[i] {
			t.Errorf("record %d: %s\nwant       %s", i, r.Summary, want[i])
		}
		for _, leak := range []string{"PASSWORD123", "KEY123", "alerts@", "svc.outbox@", "other@"} {
			if strings.Contains(r.Summary, leak) {
				t.Errorf("record %d shows %q", i, leak)
			}
		}
	}
}

// loggedIn logs name in with password and returns the principal of the
// session, as a browser would hold it.
func loggedIn(t *testing.T, o *Operators, name, password string) ports.Principal {
	t.Helper()
	ctx := context.Background()
	s, err := o.Login(ctx, ports.LoginRequest{Name: name, Password: password})
	if err != nil {
		t.Fatalf("login %s: %v", name, err)
	}
	p, err := o.Authenticate(ctx, s.Secret)
	if err != nil {
		t.Fatalf("the session of %s: %v", name, err)
	}
	return p
}
