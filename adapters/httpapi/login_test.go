package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/guard/guardtest"
	"github.com/siteline/outbox/adapters/httpapi"
	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/clocktest"
)

// The loopback addresses the login tests connect from: Linux routes all of
// 127/8 to loopback, so each is a distinct client over real TCP.
const (
	attackerIP = "127.0.0.2"
	adminIP    = "127.0.0.3"
)

// peerKey carries a request's TCP peer into the context, so that the store
// below can tell whose password check it serves.
type peerKey struct{}

// gatedAccounts counts account reads (a login that reads no account ran no
// bcrypt hash) and, while gated, holds every read made for a request from
// hold until the gate opens.
type gatedAccounts struct {
	*memstore.Store
	reads   atomic.Int64
	hold    string
	gate    chan struct{}
	holding chan struct{}
}

func (g *gatedAccounts) Account(ctx context.Context, name string) (ports.Account, error) {
	g.reads.Add(1)
	if peer, _ := ctx.Value(peerKey{}).(string); g.gate != nil && peer == g.hold {
		g.holding <- struct{}{}
		<-g.gate
	}
	return g.Store.Account(ctx, name)
}

// loginEnv is the real handler over the real core.Operators, with a clock
// the test moves, a store that counts password checks, and the refusal log
// in a buffer; served over real TCP on loopback.
type loginEnv struct {
	t        *testing.T
	srv      *httptest.Server
	clock    *clocktest.Manual
	store    *gatedAccounts
	refusals *guard.Refusals
	log      *guardtest.LogBuffer
}

func newLoginEnv(t *testing.T, cfg core.OperatorsConfig, store *gatedAccounts) *loginEnv {
	t.Helper()
	if store == nil {
		store = &gatedAccounts{Store: memstore.New()}
	}
	clock := clocktest.New(time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC))
	cfg.BcryptCost = bcrypt.MinCost
	ops, err := core.NewOperators(store, clock, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"admin", "ops@example.com"} {
		if _, err := ops.PutUser(t.Context(), ports.UserRequest{Actor: ports.ActorSystem, Name: u, Role: ports.RoleAdmin, Password: password}); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := memdir.New(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := core.New(core.Config{}, core.Deps{Store: store, Audit: store, Directory: dir, Clock: clock, Channels: ports.ChannelMap{}})
	if err != nil {
		t.Fatal(err)
	}
	editor, err := core.NewDirectoryEditor(dir, store, clock, core.DirectoryEditorConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &guardtest.LogBuffer{}
	refusals := guard.NewRefusals("http", slog.New(slog.NewTextHandler(logs, nil)), time.Minute)
	s, err := httpapi.New(httpapi.Config{Outbox: svc, Directory: dir, Editor: editor, Operators: ops, Refusals: refusals})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), peerKey{}, host)))
	}))
	t.Cleanup(srv.Close)
	store.reads.Store(0)
	return &loginEnv{t: t, srv: srv, clock: clock, store: store, refusals: refusals, log: logs}
}

// from returns a client whose connections come from the loopback address
// ip; it keeps cookies and does not follow redirects.
func (e *loginEnv) from(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 200}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// apiLogin posts to the API's login and returns the response with its body
// read.
func (e *loginEnv) apiLogin(c *http.Client, name, pw string) (*http.Response, string) {
	e.t.Helper()
	b, _ := json.Marshal(api.Login{Name: name, Password: pw})
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/api/v1/login", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	return e.do(c, req)
}

// pageLogin posts the page's login form.
func (e *loginEnv) pageLogin(c *http.Client, name, pw string) (*http.Response, string) {
	e.t.Helper()
	form := url.Values{"name": {name}, "password": {pw}, "next": {"/notifications"}}
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return e.do(c, req)
}

func (e *loginEnv) do(c *http.Client, req *http.Request) (*http.Response, string) {
	resp, err := c.Do(req)
	if err != nil {
		e.t.Error(err)
		return &http.Response{}, ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Error(err)
	}
	return resp, string(b)
}

// retryAfter returns a 429's Retry-After, failing the test for another
// answer.
func retryAfter(t *testing.T, resp *http.Response, body string) time.Duration {
	t.Helper()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("%d %s, want 429", resp.StatusCode, body)
	}
	n, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || n < 1 {
		t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	return time.Duration(n) * time.Second
}

// TestLoginBruteForceIsThrottledLoggedAndCounted plays an attacker sending
// 50 wrong passwords for admin from one address: after a few, each is
// answered 429 with Retry-After without any password check (the store is
// not even asked), every one is counted, the log holds one line for the
// whole burst, and the real admin logs in from another address meanwhile.
func TestLoginBruteForceIsThrottledLoggedAndCounted(t *testing.T) {
	e := newLoginEnv(t, core.OperatorsConfig{}, nil)
	attacker, admin := e.from(attackerIP), e.from(adminIP)

	var unauthorized, throttled int
	for i := range 50 {
		resp, body := e.apiLogin(attacker, "admin", fmt.Sprintf("guess number %d", i))
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			unauthorized++
		case http.StatusTooManyRequests:
			retryAfter(t, resp, body)
			if eb := decode[api.ErrorBody](t, []byte(body)); eb.Error.Code != api.CodeTooManyRequests {
				t.Fatalf("429 with code %q", eb.Error.Code)
			}
			throttled++
		default:
			t.Fatalf("guess %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if throttled < 40 {
		t.Fatalf("%d of 50 guesses throttled, %d checked", throttled, unauthorized)
	}
	if n := e.store.reads.Load(); n != int64(unauthorized) {
		t.Fatalf("%d password checks for %d answered 401: throttled guesses were checked", n, unauthorized)
	}
	if got := e.refusals.Count("login failed") + e.refusals.Count("login throttled (address)"); got != 50 {
		t.Fatalf("%d of 50 failed logins counted", got)
	}
	logs := e.log.String()
	if n := strings.Count(logs, "refused"); n < 1 || n > 2 {
		t.Fatalf("%d log lines for 50 failed logins from one address, want 1 (2 if a minute passed):\n%s", n, logs)
	}
	if !strings.Contains(logs, "caller="+attackerIP) || !strings.Contains(logs, "user=admin") || strings.Contains(logs, "guess number") {
		t.Fatalf("the log line must name the address and the account, never the password:\n%s", logs)
	}

	// The page says it plainly, with the same 429.
	resp, body := e.pageLogin(attacker, "admin", password)
	retryAfter(t, resp, body)
	if !strings.Contains(body, "Too many failed logins from your address") {
		t.Fatalf("the page's message: %s", body)
	}

	// The real admin, from another address, during the attack.
	if resp, body := e.pageLogin(admin, "admin", password); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the admin from another address: %d %s", resp.StatusCode, body)
	}
	if resp, body := e.apiLogin(admin, "admin", password); resp.StatusCode != http.StatusOK {
		t.Fatalf("the admin from another address (API): %d %s", resp.StatusCode, body)
	}

	// The wait runs out with time; then the right password logs in and
	// clears the address's failures.
	resp, body = e.apiLogin(attacker, "admin", password)
	e.clock.Advance(retryAfter(t, resp, body))
	if resp, body := e.apiLogin(attacker, "admin", password); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the wait: %d %s", resp.StatusCode, body)
	}
	for range core.DefaultAddressFreeFailures {
		if resp, body := e.apiLogin(attacker, "admin", "typo typo typo"); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("after a success, a typo: %d %s", resp.StatusCode, body)
		}
	}
}

// TestFailedLoginLogMasksAnEmailName: an account named by an e-mail address
// is logged masked.
func TestFailedLoginLogMasksAnEmailName(t *testing.T) {
	e := newLoginEnv(t, core.OperatorsConfig{}, nil)
	if resp, body := e.apiLogin(e.from(attackerIP), "ops@example.com", "wrong password"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	logs := e.log.String()
	if strings.Contains(logs, "ops@example.com") || !strings.Contains(logs, "o***@example.com") {
		t.Fatalf("the account's address is not masked:\n%s", logs)
	}
}

// TestLoginFloodFromOneAddressCannotStarveAnother plays an attacker sending
// 120 logins at once from one address, each password check held for as long
// as the test likes: the address holds one check slot, the other 119 are
// answered 429 at once, and the admin logging in from another address at
// the same time gets the other slot and succeeds (not 503).
func TestLoginFloodFromOneAddressCannotStarveAnother(t *testing.T) {
	store := &gatedAccounts{Store: memstore.New(), hold: attackerIP, gate: make(chan struct{}), holding: make(chan struct{}, 200)}
	e := newLoginEnv(t, core.OperatorsConfig{MaxConcurrentLogins: 2}, store)
	attacker, admin := e.from(attackerIP), e.from(adminIP)
	opened := false
	open := func() {
		if !opened {
			opened = true
			close(store.gate)
		}
	}
	defer open()

	codes := make(chan int, 120)
	var wg sync.WaitGroup
	for i := range 120 {
		wg.Go(func() {
			resp, _ := e.apiLogin(attacker, "admin", fmt.Sprintf("flood %d", i))
			codes <- resp.StatusCode
		})
	}
	select {
	case <-store.holding: // one of the flood's checks is in flight and held
	case <-time.After(20 * time.Second):
		t.Fatal("no password check of the flood started")
	}
	resp, body := e.apiLogin(admin, "admin", password)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the admin during the flood: %d %s", resp.StatusCode, body)
	}
	count := map[int]int{}
	for range 119 {
		select {
		case c := <-codes:
			count[c]++
		case <-time.After(20 * time.Second):
			t.Fatalf("the flood's other logins were not answered at once: %v so far", count)
		}
	}
	open()
	wg.Wait()
	count[<-codes]++
	if count[http.StatusTooManyRequests] != 119 || count[http.StatusUnauthorized] != 1 {
		t.Fatalf("the flood was answered %v, want 119×429 and 1×401", count)
	}
	if got := e.refusals.Count("login in progress"); got != 119 {
		t.Fatalf("%d logins in progress counted, want 119", got)
	}
}

// rotatingAttack plays the reviewer's attack over real TCP: 31 loopback
// addresses guess admin's password, each once per second of the test's
// clock, all at the same instant, for rounds seconds; every 3 s newcomer(k)
// runs with the attack in full swing. It returns each attacking address's
// password checks (answers 401), as the instants of the test's clock.
func (e *loginEnv) rotatingAttack(rounds int, newcomer func(k int)) map[string][]time.Time {
	e.t.Helper()
	addrs := make([]string, 31)
	clients := make([]*http.Client, len(addrs))
	for i := range addrs {
		addrs[i] = fmt.Sprintf("127.0.0.%d", 10+i)
		clients[i] = e.from(addrs[i])
	}
	var mu sync.Mutex
	checks := map[string][]time.Time{}
	for round := range rounds {
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Go(func() {
				resp, body := e.apiLogin(c, "admin", fmt.Sprintf("guess %d", round))
				switch resp.StatusCode {
				case http.StatusUnauthorized:
					mu.Lock()
					checks[addrs[i]] = append(checks[addrs[i]], e.clock.Now())
					mu.Unlock()
				case http.StatusTooManyRequests:
				default:
					e.t.Errorf("a guess from %s: %d %s", addrs[i], resp.StatusCode, body)
				}
			})
		}
		wg.Wait()
		if round%3 == 2 {
			newcomer(round / 3)
		}
		e.clock.Advance(time.Second)
	}
	return checks
}

// TestRotatingAddressesCannotLockTheAdminOut replays the reviewer's attack:
// 31 addresses hammer admin's login for three minutes (of the test's clock)
// while the real admin arrives every 3 s at an address it never used.
// Every first login of the admin at a new address is answered at once (200
// from the API, the page's redirect), never 429; each attacking address gets
// at most one password check per the account's delay once it is capped.
func TestRotatingAddressesCannotLockTheAdminOut(t *testing.T) {
	e := newLoginEnv(t, core.OperatorsConfig{}, nil)
	const rounds = 180
	checks := e.rotatingAttack(rounds, func(k int) {
		ip := fmt.Sprintf("127.0.0.%d", 100+k)
		c := e.from(ip)
		if k%2 == 0 {
			if resp, body := e.apiLogin(c, "admin", password); resp.StatusCode != http.StatusOK {
				t.Fatalf("the admin's first login at %s, %d s into the attack: %d %s", ip, 3*k+2, resp.StatusCode, body)
			}
			return
		}
		if resp, body := e.pageLogin(c, "admin", password); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("the admin's first login on the page at %s, %d s into the attack: %d %s", ip, 3*k+2, resp.StatusCode, body)
		}
	})
	total := 0
	for ip, at := range checks {
		total += len(at)
		if most := 1 + rounds/60 + core.DefaultAddressFreeFailures; len(at) > most {
			t.Errorf("%s had %d password checks in %d s, want at most %d", ip, len(at), rounds, most)
		}
		// At most one check per minute once the account has seen a few
		// dozen failures (its delay is then at its cap).
		for i := 1; i < len(at); i++ {
			if at[i-1].Sub(at[0]) >= 30*time.Second && at[i].Sub(at[i-1]) < core.DefaultAccountMaxDelay {
				t.Errorf("%s: two checks %v apart", ip, at[i].Sub(at[i-1]))
			}
		}
	}
	if got := e.refusals.Count("login failed") + e.refusals.Count("login throttled (account)") + e.refusals.Count("login throttled (address)"); got != 31*rounds {
		t.Fatalf("%d of %d guesses counted as refused", got, 31*rounds)
	}
	t.Logf("%d password checks for %d guesses from 31 addresses in %d s", total, 31*rounds, rounds)
}

// TestRestartDoesNotLockTheAdminOut: after a restart central has forgotten
// where the admin logged in; an attack that starts with it does not keep the
// admin out of the usual address.
func TestRestartDoesNotLockTheAdminOut(t *testing.T) {
	store := &gatedAccounts{Store: memstore.New()}
	before := newLoginEnv(t, core.OperatorsConfig{}, store)
	if resp, body := before.apiLogin(before.from(adminIP), "admin", password); resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	e := newLoginEnv(t, core.OperatorsConfig{}, store) // the restart: new Operators, same database
	e.rotatingAttack(40, func(k int) {
		if k == 10 {
			if resp, body := e.apiLogin(e.from(adminIP), "admin", password); resp.StatusCode != http.StatusOK {
				t.Fatalf("the admin at the usual address after a restart, during the attack: %d %s", resp.StatusCode, body)
			}
		}
	})
}

// TestRefusedCredentialsAreCountedAndLogged replays the reviewer's probe:
// 300 API requests with forged tokens from one address used to leave no
// trace (no log line, no metric). Every refused credential — a forged,
// revoked or malformed token, a closed session, on the API and on the page
// — is now counted under its reason, and logged at most once per address
// per minute, never with the credential.
func TestRefusedCredentialsAreCountedAndLogged(t *testing.T) {
	e := newLoginEnv(t, core.OperatorsConfig{}, nil)
	attacker := e.from(attackerIP)
	get := func(c *http.Client, path string, set func(*http.Request)) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
		set(req)
		resp, _ := e.do(c, req)
		return resp
	}
	var forged []string
	for i := range 300 {
		tok := fmt.Sprintf("obx_%012x_forged-secret-%d", i, i)
		if i%3 == 0 {
			tok = fmt.Sprintf("not-even-a-token-%d", i)
		}
		forged = append(forged, tok)
		resp := get(attacker, "/api/v1/notifications", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) })
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a forged token: %d", resp.StatusCode)
		}
	}
	if got := e.refusals.Count("bad token"); got != 300 {
		t.Fatalf("%d of 300 forged tokens counted", got)
	}
	logs := e.log.String()
	if n := strings.Count(logs, "refused"); n != 1 || !strings.Contains(logs, "caller="+attackerIP) || !strings.Contains(logs, `reason="bad token"`) {
		t.Fatalf("want one line for the 300, naming the address and the reason:\n%s", logs)
	}
	for _, tok := range forged {
		if strings.Contains(logs, tok) || strings.Contains(logs, "forged-secret") {
			t.Fatalf("the log holds a token:\n%s", logs)
		}
	}

	// A revoked token of one's own, from another address.
	c := e.from(adminIP)
	resp, body := e.apiLogin(c, "admin", password)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "outbox_session" {
			cookie = ck
		}
	}
	expires := e.clock.Now().Add(time.Hour)
	b, _ := json.Marshal(api.NewOwnToken{ExpiresAt: &expires})
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/api/v1/me/tokens", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.AddCookie(cookie)
	resp, body = e.do(c, req)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	secret := decode[api.CreatedToken](t, []byte(body)).Secret
	req, _ = http.NewRequest(http.MethodDelete, e.srv.URL+"/api/v1/me/token", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	if resp, body := e.do(c, req); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", resp.StatusCode, body)
	}
	if resp := get(c, "/api/v1/kpis", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+secret) }); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a revoked token: %d", resp.StatusCode)
	}
	if got := e.refusals.Count("bad token"); got != 301 {
		t.Fatalf("the revoked token was not counted: %d", got)
	}

	// A closed session, on the API and on the page (which still sends the
	// browser to the login page).
	req, _ = http.NewRequest(http.MethodPost, e.srv.URL+"/api/v1/logout", nil)
	req.AddCookie(cookie)
	if resp, _ := e.do(c, req); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	if resp := get(c, "/api/v1/kpis", func(r *http.Request) { r.AddCookie(cookie) }); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a closed session on the API: %d", resp.StatusCode)
	}
	if resp := get(c, "/notifications", func(r *http.Request) { r.AddCookie(cookie) }); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a closed session on the page: %d", resp.StatusCode)
	}
	if got := e.refusals.Count("bad session"); got != 2 {
		t.Fatalf("%d closed sessions counted, want 2", got)
	}
	// A malformed header, and none at all on the API; a page visited
	// without a session is a browser's first visit, not a refusal.
	get(c, "/api/v1/kpis", func(r *http.Request) { r.Header.Set("Authorization", "Basic YWRtaW46YWRtaW4=") })
	get(c, "/api/v1/kpis", func(*http.Request) {})
	if resp := get(c, "/notifications", func(*http.Request) {}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the page without a session: %d", resp.StatusCode)
	}
	if e.refusals.Count("malformed credentials") != 1 || e.refusals.Count("no credentials") != 1 {
		t.Fatalf("malformed %d, none %d; want 1 and 1", e.refusals.Count("malformed credentials"), e.refusals.Count("no credentials"))
	}
	if strings.Contains(e.log.String(), secret) || strings.Contains(e.log.String(), cookie.Value) || strings.Contains(e.log.String(), "YWRtaW46") {
		t.Fatalf("the log holds a credential:\n%s", e.log.String())
	}

	// The other refusals of the entrance: a route above the caller's role,
	// an unsafe request from another origin.
	resp, body = e.apiLogin(c, "admin", password)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	for _, ck := range resp.Cookies() {
		if ck.Name == "outbox_session" {
			cookie = ck
		}
	}
	b, _ = json.Marshal(api.PutUser{Role: ports.RoleViewer, Password: "the viewer's password"})
	req, _ = http.NewRequest(http.MethodPut, e.srv.URL+"/api/v1/users/vic", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.AddCookie(cookie)
	if resp, body := e.do(c, req); resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT user: %d %s", resp.StatusCode, body)
	}
	vic := e.from("127.0.0.4")
	resp, body = e.apiLogin(vic, "vic", "the viewer's password")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var vicCookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "outbox_session" {
			vicCookie = ck
		}
	}
	if resp := get(vic, "/api/v1/users", func(r *http.Request) { r.AddCookie(vicCookie) }); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a viewer asking for the users: %d", resp.StatusCode)
	}
	req, _ = http.NewRequest(http.MethodPost, e.srv.URL+"/api/v1/notifications/retry", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.AddCookie(cookie)
	if resp, _ := e.do(c, req); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a cross-origin post: %d", resp.StatusCode)
	}
	if e.refusals.Count("role too low") != 1 || e.refusals.Count("cross-origin") != 1 {
		t.Fatalf("role too low %d, cross-origin %d; want 1 and 1", e.refusals.Count("role too low"), e.refusals.Count("cross-origin"))
	}
}
