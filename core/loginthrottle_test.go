package core

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
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
	for range DefaultAddressFreeFailures + 1 {
		if err := login(o, "admin", "typo typo", addr); !errors.Is(err, ports.ErrUnauthenticated) {
			t.Fatalf("a success did not clear the address: %v", err)
		}
	}
}

// TestDistributedGuessingCannotLockTheAdminOut plays an attacker guessing
// admin's password from many addresses, one guess each: the account's
// counter slows them, but an address the admin logged in from before and a
// trusted network are never judged by it, and the admin at a new address
// waits at most the account's short cap.
func TestDistributedGuessingCannotLockTheAdminOut(t *testing.T) {
	o, clock, store := newThrottledOperators(t, OperatorsConfig{Throttle: LoginThrottle{
		TrustedNetworks: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")},
	}})
	const known = "192.0.2.10"
	if err := login(o, "admin", "the admin's password", known); err != nil {
		t.Fatal(err)
	}
	store.reads.Store(0)

	checked := 0
	for i := range 200 {
		err := login(o, "admin", "guess", fmt.Sprintf("198.51.100.%d", i))
		if errors.Is(err, ports.ErrUnauthenticated) {
			checked++
			continue
		}
		throttled(t, err, ports.LoginThrottledAccount)
	}
	if want := DefaultAccountFreeFailures + 1; checked != want || store.reads.Load() != int64(want) {
		t.Fatalf("%d guesses from distinct addresses checked (%d reads), want %d", checked, store.reads.Load(), want)
	}

	// The admin at the known address: a typo counts on that address only,
	// and the right password works at once.
	if err := login(o, "admin", "typo typo", known); !errors.Is(err, ports.ErrUnauthenticated) {
		t.Fatalf("a typo at the known address: %v", err)
	}
	if err := login(o, "admin", "the admin's password", known); err != nil {
		t.Fatalf("the admin at a known address during the attack: %v", err)
	}
	if err := login(o, "admin", "the admin's password", "10.1.2.3"); err != nil {
		t.Fatalf("the admin in a trusted network during the attack: %v", err)
	}

	// At a new address, the admin waits no longer than the account's cap,
	// however long the attack goes on.
	for i := range 50 {
		te := throttled(t, login(o, "admin", "guess", fmt.Sprintf("203.0.113.%d", i)), ports.LoginThrottledAccount)
		if te.RetryAfter > DefaultAccountMaxDelay {
			t.Fatalf("the account's wait %v is over its cap %v", te.RetryAfter, DefaultAccountMaxDelay)
		}
		clock.advance(te.RetryAfter)
		if err := login(o, "admin", "guess", fmt.Sprintf("203.0.113.%d", i)); !errors.Is(err, ports.ErrUnauthenticated) {
			t.Fatalf("after the account's wait: %v", err)
		}
	}
	te := throttled(t, login(o, "admin", "the admin's password", "192.0.2.99"), ports.LoginThrottledAccount)
	clock.advance(te.RetryAfter)
	if err := login(o, "admin", "the admin's password", "192.0.2.99"); err != nil {
		t.Fatalf("the admin at a new address after the account's wait: %v", err)
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
}
