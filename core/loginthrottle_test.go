package core

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
)

// countingAccounts counts the account reads a login makes: a login that
// reads no account ran no bcrypt hash either. When gate is set, each read
// first waits until gate is closed.
type countingAccounts struct {
	*memstore.Store
	reads   atomic.Int64
	gate    chan struct{}
	reading chan struct{}
}

func (c *countingAccounts) Account(ctx context.Context, name string) (ports.Account, error) {
	c.reads.Add(1)
	if c.gate != nil {
		c.reading <- struct{}{}
		select {
		case <-c.gate:
		case <-ctx.Done():
			return ports.Account{}, ctx.Err()
		}
	}
	return c.Store.Account(ctx, name)
}

func newThrottledOperators(t *testing.T, cfg OperatorsConfig) (*Operators, *stepClock, *countingAccounts) {
	t.Helper()
	clock := &stepClock{now: time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)}
	store := &countingAccounts{Store: memstore.New()}
	cfg.BcryptCost = bcrypt.MinCost
	o, err := NewOperators(store, clock, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustPutUser(t, o, "admin", ports.RoleAdmin, "the admin's password")
	store.reads.Store(0)
	return o, clock, store
}

func login(o *Operators, name, password, client string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := o.Login(ctx, ports.LoginRequest{Name: name, Password: password, Client: client})
	return err
}

// throttled returns the throttle's refusal in err, or fails the test.
func throttled(t *testing.T, err error, reason string) *ports.LoginThrottledError {
	t.Helper()
	var te *ports.LoginThrottledError
	if !errors.As(err, &te) || te.Reason != reason || !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("got %v, want a refusal %q", err, reason)
	}
	if te.RetryAfter <= 0 {
		t.Fatalf("RetryAfter %v", te.RetryAfter)
	}
	return te
}

// TestGuessingFromOneAddressIsThrottled plays an attacker guessing admin's
// password from one address: after the free failures no password is
// checked any more (the store is not even asked), the wait doubles with
// each further failure and is capped, the real admin still logs in from
// another address meanwhile, and the wait runs out with time.
func TestGuessingFromOneAddressIsThrottled(t *testing.T) {
	o, clock, store := newThrottledOperators(t, OperatorsConfig{})
	const attacker, admin = "203.0.113.9", "192.0.2.10"

	var bad, refused int
	for i := range 50 {
		err := login(o, "admin", fmt.Sprintf("guess %d", i), attacker)
		switch {
		case errors.Is(err, ports.ErrUnauthenticated):
			bad++
		default:
			te := throttled(t, err, ports.LoginThrottledAddress)
			if te.RetryAfter > time.Second {
				t.Fatalf("the first wait is %v, want 1s", te.RetryAfter)
			}
			refused++
		}
	}
	if want := DefaultAddressFreeFailures + 1; bad != want || refused != 50-want {
		t.Fatalf("%d checked and %d refused of 50 guesses, want %d checked", bad, refused, want)
	}
	if n := store.reads.Load(); n != int64(bad) {
		t.Fatalf("the store was asked %d times for %d checked guesses: refused guesses reached it", n, bad)
	}
	if err := login(o, "admin", "the admin's password", admin); err != nil {
		t.Fatalf("the admin from another address during the attack: %v", err)
	}

	// Each further failure doubles the wait, up to the cap.
	want := time.Second
	for range 15 {
		clock.advance(want)
		if err := login(o, "admin", "another guess", attacker); !errors.Is(err, ports.ErrUnauthenticated) {
			t.Fatalf("after waiting %v: %v", want, err)
		}
		te := throttled(t, login(o, "admin", "at once", attacker), ports.LoginThrottledAddress)
		want = min(2*want, DefaultAddressMaxDelay)
		if te.RetryAfter != want {
			t.Fatalf("wait %v, want %v", te.RetryAfter, want)
		}
	}
	// The right password from the throttled address waits too: the
	// throttle does not look at passwords.
	throttled(t, login(o, "admin", "the admin's password", attacker), ports.LoginThrottledAddress)

	// The counter is forgotten after a quiet hour; then a success clears it.
	clock.advance(DefaultLoginForget)
	if err := login(o, "admin", "the admin's password", attacker); err != nil {
		t.Fatalf("after the counter expired: %v", err)
	}
	for range DefaultAddressFreeFailures {
		if err := login(o, "admin", "typo", attacker); !errors.Is(err, ports.ErrUnauthenticated) {
			t.Fatalf("after a success, the free failures again: %v", err)
		}
	}
}

// TestSuccessClearsTheAddress: a typing operator who got delayed and then
// logs in starts again with a clean counter.
func TestSuccessClearsTheAddress(t *testing.T) {
	o, clock, _ := newThrottledOperators(t, OperatorsConfig{})
	const addr = "192.0.2.10"
	for range DefaultAddressFreeFailures + 1 {
		_ = login(o, "admin", "typo typo", addr)
	}
	te := throttled(t, login(o, "admin", "the admin's password", addr), ports.LoginThrottledAddress)
	clock.advance(te.RetryAfter)
	if err := login(o, "admin", "the admin's password", addr); err != nil {
		t.Fatal(err)
	}
	for range DefaultAddressFreeFailures {
		if err := login(o, "admin", "typo typo", addr); !errors.Is(err, ports.ErrUnauthenticated) {
			t.Fatalf("a success did not clear the address: %v", err)
		}
	}
}

// TestDistributedGuessingIsHeldPerAddress plays an attacker guessing
// admin's password from many addresses: each address's first guess is
// checked (others' failures never hold an address), but once the account
// has seen its free failures, an address that failed for it waits a delay
// that doubles with the account's failures, up to the cap, before it may
// try the account again. A trusted network's typo makes it wait for
// nothing, and other accounts are not slowed.
func TestDistributedGuessingIsHeldPerAddress(t *testing.T) {
	o, clock, store := newThrottledOperators(t, OperatorsConfig{Throttle: LoginThrottle{
		TrustedNetworks: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")},
	}})
	for i := range 200 {
		addr := fmt.Sprintf("198.51.100.%d", i)
		if err := login(o, "admin", "guess", addr); !errors.Is(err, ports.ErrUnauthenticated) {
			t.Fatalf("the first guess from %s: %v, want it checked", addr, err)
		}
		// Its next try at the account waits the account's delay: none
		// within the free failures, then 1 s, 2 s, ... up to the cap.
		over := i + 1 - DefaultAccountFreeFailures
		if over <= 0 {
			continue
		}
		want := DefaultAccountMaxDelay
		if over < 8 {
			want = min(DefaultLoginBaseDelay<<(over-1), DefaultAccountMaxDelay)
		}
		if te := throttled(t, login(o, "admin", "again at once", addr), ports.LoginThrottledAccount); te.RetryAfter != want {
			t.Fatalf("guess %d: the address waits %v for the account, want %v", i, te.RetryAfter, want)
		}
	}
	if n := store.reads.Load(); n != 200 {
		t.Fatalf("%d password checks, want 200", n)
	}

	// Any address that did not fail for admin is checked at once.
	if err := login(o, "admin", "the admin's password", "192.0.2.99"); err != nil {
		t.Fatalf("the admin at a new address during the attack: %v", err)
	}
	// In a trusted network a typo makes no wait for the account.
	if err := login(o, "admin", "typo typo", "10.1.2.3"); !errors.Is(err, ports.ErrUnauthenticated) {
		t.Fatalf("a typo in a trusted network: %v", err)
	}
	if err := login(o, "admin", "the admin's password", "10.1.2.3"); err != nil {
		t.Fatalf("the admin in a trusted network after a typo: %v", err)
	}
	// An attacking address may try again once its wait ran out.
	te := throttled(t, login(o, "admin", "guess", "198.51.100.150"), ports.LoginThrottledAccount)
	clock.advance(te.RetryAfter)
	if err := login(o, "admin", "guess", "198.51.100.150"); !errors.Is(err, ports.ErrUnauthenticated) {
		t.Fatalf("after the wait: %v", err)
	}
	// Other accounts are not slowed by admin's counter.
	mustPutUser(t, o, "ann", ports.RoleViewer, "ann's password")
	if err := login(o, "ann", "ann's password", "198.51.100.1"); err != nil {
		t.Fatalf("another account: %v", err)
	}
}

// TestOneCheckPerAddressAtATime: while a password check from an address is
// in flight, another login from that address is refused at once, and a
// login from another address goes ahead.
func TestOneCheckPerAddressAtATime(t *testing.T) {
	o, _, store := newThrottledOperators(t, OperatorsConfig{MaxConcurrentLogins: 2})
	store.gate, store.reading = make(chan struct{}), make(chan struct{}, 200)
	var wg sync.WaitGroup
	var first error
	wg.Go(func() { first = login(o, "admin", "guess", "203.0.113.9") })
	<-store.reading // the first check is in flight
	for range 100 {
		throttled(t, login(o, "admin", "the admin's password", "203.0.113.9"), ports.LoginThrottledBusy)
	}
	otherDone := make(chan error, 1)
	go func() { otherDone <- login(o, "admin", "the admin's password", "192.0.2.10") }()
	<-store.reading // the other address's check runs beside it
	close(store.gate)
	wg.Wait()
	if !errors.Is(first, ports.ErrUnauthenticated) {
		t.Fatalf("the first check: %v", first)
	}
	if err := <-otherDone; err != nil {
		t.Fatalf("the other address: %v", err)
	}
	// The address is free again once its check ended.
	store.gate = nil
	if err := login(o, "admin", "the admin's password", "203.0.113.9"); err != nil {
		t.Fatal(err)
	}
}

// TestIPv6IsThrottledBySubnet: an attacker with an IPv6 /64 cannot get a
// fresh counter by changing the last 64 bits.
func TestIPv6IsThrottledBySubnet(t *testing.T) {
	o, _, _ := newThrottledOperators(t, OperatorsConfig{})
	for i := range DefaultAddressFreeFailures + 1 {
		_ = login(o, "admin", "guess", fmt.Sprintf("2001:db8:1:2::%x", i+1))
	}
	throttled(t, login(o, "admin", "guess", "2001:db8:1:2:ffff::1"), ports.LoginThrottledAddress)
	if err := login(o, "admin", "the admin's password", "2001:db8:1:3::1"); err != nil {
		t.Fatalf("another /64: %v", err)
	}
	// An IPv4 address written as IPv6 is the same address.
	if a, _ := clientKey("::ffff:203.0.113.9"); a != "203.0.113.9" {
		t.Fatalf("clientKey of a mapped IPv4 address: %q", a)
	}
}

// TestThrottleMemoryIsBounded: a flood of distinct addresses and names
// costs a fixed amount of memory.
func TestThrottleMemoryIsBounded(t *testing.T) {
	th := newLoginThrottle(LoginThrottle{})
	now := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	for i := range maxThrottleKeys + 500 {
		addr := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String()
		if err := th.begin(now, fmt.Sprintf("name-%d", i), addr); err != nil {
			t.Fatal(err)
		}
		th.end(now, fmt.Sprintf("name-%d", i), addr, false)
		now = now.Add(time.Millisecond)
	}
	if len(th.address) > maxThrottleKeys || len(th.account) > maxThrottleKeys || len(th.checking) != 0 {
		t.Fatalf("%d addresses, %d accounts, %d checking", len(th.address), len(th.account), len(th.checking))
	}
	// One account guessed at from ever more addresses: each leaves a wait
	// for the pair, and those are bounded too.
	th = newLoginThrottle(LoginThrottle{})
	for i := range maxThrottleKeys + 500 {
		addr := netip.AddrFrom4([4]byte{11, byte(i >> 16), byte(i >> 8), byte(i)}).String()
		if err := th.begin(now, "admin", addr); err != nil {
			t.Fatal(err)
		}
		th.end(now, "admin", addr, false)
		now = now.Add(time.Millisecond)
	}
	if len(th.pairs) > maxThrottleKeys || len(th.pairs) < maxThrottleKeys/2 {
		t.Fatalf("%d waits of (account, address) pairs", len(th.pairs))
	}
}

// rotatingAttack plays the reviewer's attacker against o: addrs addresses
// guess account's password, each retrying the instant its wait ends (or
// 50 ms after a checked guess), for d of the clock's time. Every 3 s,
// newcomer(k) is called with the attack in full swing. It returns the
// instants of each address's password checks.
func rotatingAttack(t *testing.T, o *Operators, clock *stepClock, account string, addrs []string, d time.Duration,
	newcomer func(k int)) map[string][]time.Time {
	t.Helper()
	start := clock.Now()
	next := make(map[string]time.Time, len(addrs))
	for i, a := range addrs {
		next[a] = start.Add(time.Duration(i) * 50 * time.Millisecond) // ~20 guesses a second at first
	}
	checks := map[string][]time.Time{}
	nextNewcomer, k := start.Add(5*time.Second), 0
	for i := 0; ; i++ {
		// The earliest due address (ties by order), or the newcomer.
		due := ""
		for _, a := range addrs {
			if due == "" || next[a].Before(next[due]) {
				due = a
			}
		}
		at := next[due]
		if nextNewcomer.Before(at) {
			at = nextNewcomer
		}
		if at.Sub(start) > d {
			return checks
		}
		if at.After(clock.Now()) {
			clock.advance(at.Sub(clock.Now()))
		}
		if at.Equal(nextNewcomer) {
			newcomer(k)
			k++
			nextNewcomer = nextNewcomer.Add(3 * time.Second)
			continue
		}
		err := login(o, account, fmt.Sprintf("guess %d", i), due)
		var te *ports.LoginThrottledError
		switch {
		case errors.As(err, &te):
			next[due] = clock.Now().Add(te.RetryAfter)
		case errors.Is(err, ports.ErrUnauthenticated):
			checks[due] = append(checks[due], clock.Now())
			next[due] = clock.Now().Add(50 * time.Millisecond)
		default:
			t.Fatalf("guess from %s: %v", due, err)
		}
	}
}

// attackers are n addresses of the attacker's.
func attackers(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("198.51.100.%d", 10+i)
	}
	return out
}

// TestRotatingAddressesCannotLockANewAddressOut plays the reviewer's attack:
// 31 addresses guess admin's password without pause, each retrying the
// instant its wait ends, for ten minutes. Others' failures never hold an
// address: every 3 s a new address — the real admin at a workstation it
// never used — has its password checked at once (a right one logs in, a
// typo is a plain failure). Each attacking address gets at most one check
// of the account per the account's delay once that delay has reached its
// cap, and its own address counter holds it too.
func TestRotatingAddressesCannotLockANewAddressOut(t *testing.T) {
	o, clock, _ := newThrottledOperators(t, OperatorsConfig{})
	addrs := attackers(31)
	const attack = 10 * time.Minute
	checks := rotatingAttack(t, o, clock, "admin", addrs, attack, func(k int) {
		addr := fmt.Sprintf("203.0.113.%d", k%250)
		if k%250 != k {
			addr = fmt.Sprintf("192.0.2.%d", k%250)
		}
		pw := "the admin's password"
		if k%4 == 3 {
			pw = "a typo by someone new" // someone else's first try, wrong
		}
		err := login(o, "admin", pw, addr)
		switch {
		case k%4 == 3 && errors.Is(err, ports.ErrUnauthenticated):
		case k%4 != 3 && err == nil:
		default:
			t.Fatalf("a new address's first login %d s into the attack: %v", 5+3*k, err)
		}
	})

	total := 0
	capDelay := DefaultAccountMaxDelay
	// The account's delay reaches its cap after this many failures.
	warm := DefaultAccountFreeFailures + 1
	for d := DefaultLoginBaseDelay; d < capDelay; d *= 2 {
		warm++
	}
	seen := 0
	for _, a := range addrs {
		total += len(checks[a])
		if len(checks[a]) > 1+int(attack/capDelay)+DefaultAddressFreeFailures {
			t.Errorf("%s had %d password checks in %v", a, len(checks[a]), attack)
		}
	}
	// Past the warm-up, the same address checks the account at most once
	// per the capped delay.
	var all []time.Time
	for _, a := range addrs {
		all = append(all, checks[a]...)
	}
	slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
	if len(all) <= warm {
		t.Fatalf("only %d checks in all", len(all))
	}
	capped := all[warm-1] // the failure that brought the delay to its cap
	for _, a := range addrs {
		for i := 1; i < len(checks[a]); i++ {
			prev := checks[a][i-1]
			if !prev.Before(capped) {
				if gap := checks[a][i].Sub(prev); gap < capDelay {
					t.Errorf("%s: checks %v apart once the account's delay was capped", a, gap)
				}
				seen++
			}
		}
	}
	if seen == 0 {
		t.Fatal("no address checked twice after the warm-up: the attack did not run")
	}
	t.Logf("%d password checks from %d addresses in %v", total, len(addrs), attack)
}

// TestRestartDoesNotLockTheAdminOut: a restart forgets where the admin
// logged in before; the attack, restarted with central, still does not
// keep the admin's usual address out.
func TestRestartDoesNotLockTheAdminOut(t *testing.T) {
	o, clock, store := newThrottledOperators(t, OperatorsConfig{})
	const usual = "192.0.2.10"
	if err := login(o, "admin", "the admin's password", usual); err != nil {
		t.Fatal(err)
	}
	// The restart: a new Operators over the same store.
	o, err := NewOperators(store, clock, OperatorsConfig{BcryptCost: bcrypt.MinCost}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rotatingAttack(t, o, clock, "admin", attackers(31), time.Minute, func(k int) {
		if k == 10 {
			if err := login(o, "admin", "the admin's password", usual); err != nil {
				t.Fatalf("the admin at the usual address after a restart, during the attack: %v", err)
			}
		}
	})
}
