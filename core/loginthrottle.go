package core

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/siteline/outbox/ports"
)

// LoginThrottle configures how Operators.Login slows password guessing. A
// login's password is checked only when no wait holds it; a refused login
// costs no bcrypt hash and no database read. Two waits apply:
//
//   - The address's own: past AddressFreeFailures failed logins from a
//     client address (any account), each further failure doubles the wait
//     before that address's next check, from BaseDelay up to
//     AddressMaxDelay.
//   - The account's, per address: past AccountFreeFailures failed logins
//     for an account (from all addresses together), an address that has
//     just failed for that account waits, before its next try at that
//     account, a delay that doubles with the account's further failures,
//     from BaseDelay up to AccountMaxDelay.
//
// So others' failures never hold an address: an address that has not
// failed for the account since its last wait — the owner at a workstation
// never used before, or any address after a restart — has its password
// checked at once however many addresses guess at the same account, while
// each guessing address gets at most one check of the account per delay
// and is slowed by its own counter too. TrustedNetworks are judged by their
// address counter only, and their failures do not count on the account.
//
// A counter is forgotten once it has seen no failure for Forget. The state
// lives in memory, per central node: several nodes each throttle on their
// own, and a restart forgets it.
type LoginThrottle struct {
	// AddressFreeFailures are the failures an address may make before it
	// waits; default 5.
	AddressFreeFailures int
	// AddressMaxDelay caps an address's wait; default 15m.
	AddressMaxDelay time.Duration
	// AccountFreeFailures are the failures an account may see before an
	// address that failed for it waits to try it again; default 10.
	AccountFreeFailures int
	// AccountMaxDelay caps how long an address that failed for an account
	// waits to try that account again; default 1m. It is also what a typo
	// costs the owner while someone guesses at the account.
	AccountMaxDelay time.Duration
	// BaseDelay is the first wait past the free failures; default 1s.
	BaseDelay time.Duration
	// Forget is how long a counter lasts without a new failure; default
	// 1h. It must exceed both caps.
	Forget time.Duration
	// TrustedNetworks are addresses (the operators' own workstations, the
	// control room) that the account's waits never hold and whose failures
	// do not count on the account.
	TrustedNetworks []netip.Prefix
}

// Login throttle defaults.
const (
	DefaultAddressFreeFailures = 5
	DefaultAddressMaxDelay     = 15 * time.Minute
	DefaultAccountFreeFailures = 10
	DefaultAccountMaxDelay     = time.Minute
	DefaultLoginBaseDelay      = time.Second
	DefaultLoginForget         = time.Hour
)

// WithDefaults returns t with every zero field set to its default, and
// Forget raised to twice the longer cap; a negative field is kept, for
// Validate to report.
func (t LoginThrottle) WithDefaults() LoginThrottle {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if t.AddressFreeFailures == 0 {
		t.AddressFreeFailures = DefaultAddressFreeFailures
	}
	if t.AccountFreeFailures == 0 {
		t.AccountFreeFailures = DefaultAccountFreeFailures
	}
	set(&t.AddressMaxDelay, DefaultAddressMaxDelay)
	set(&t.AccountMaxDelay, DefaultAccountMaxDelay)
	set(&t.BaseDelay, DefaultLoginBaseDelay)
	set(&t.Forget, DefaultLoginForget)
	t.Forget = max(t.Forget, 2*t.AddressMaxDelay, 2*t.AccountMaxDelay)
	return t
}

// Validate returns one *ports.FieldError per broken rule, joined. It
// checks t as given, where a zero is no default but a value: call it on
// t.WithDefaults() to check what will run.
func (t LoginThrottle) Validate() error {
	var fe ports.FieldErrors
	if d := t.AddressMaxDelay; d < time.Second || d > 24*time.Hour {
		fe.Add("AddressMaxDelay", "must be from 1s to 24h, got %s", d)
	}
	if d := t.AccountMaxDelay; d < time.Second || d > time.Hour {
		fe.Add("AccountMaxDelay", "must be from 1s to 1h, got %s (it is also what the owner's own typo costs during a guessing attack)", d)
	}
	if t.AddressFreeFailures <= 0 {
		fe.Add("AddressFreeFailures", "must be positive, got %d", t.AddressFreeFailures)
	}
	if t.AccountFreeFailures <= 0 {
		fe.Add("AccountFreeFailures", "must be positive, got %d", t.AccountFreeFailures)
	}
	if t.BaseDelay <= 0 {
		fe.Add("BaseDelay", "must be positive, got %s", t.BaseDelay)
	}
	if t.Forget <= 0 {
		fe.Add("Forget", "must be positive, got %s", t.Forget)
	}
	for i, p := range t.TrustedNetworks {
		if !p.IsValid() {
			fe.Add(fmt.Sprintf("TrustedNetworks[%d]", i), "is not an IP address or a CIDR range")
		}
	}
	return fe.Err()
}

// Bounds of the throttle's memory: a flood of distinct addresses or names
// costs a fixed amount.
const (
	maxThrottleKeys     = 16384 // entries per counter map
	loginBusyRetryAfter = time.Second
)

// failures is one counter of recent failed logins.
type failures struct {
	n     int
	last  time.Time // the last failure
	until time.Time // the counter's own wait ends (address counters)
}

// loginThrottle is the state of a LoginThrottle; safe for concurrent use.
type loginThrottle struct {
	cfg LoginThrottle

	mu      sync.Mutex
	address map[string]*failures // client key → its failures
	account map[string]*failures // account → its failures from untrusted addresses
	// pairs holds, per account and client key that failed for it, when
	// that address may try that account again.
	pairs    map[pairKey]time.Time
	checking map[string]bool // addresses with a password check in flight
}

// pairKey is an account and a client key.
type pairKey struct{ account, client string }

func newLoginThrottle(cfg LoginThrottle) *loginThrottle {
	return &loginThrottle{cfg: cfg.WithDefaults(),
		address: map[string]*failures{}, account: map[string]*failures{},
		pairs: map[pairKey]time.Time{}, checking: map[string]bool{}}
}

// clientKey is the throttle's key of a client address: an IPv4 address as
// itself, an IPv6 address by its /64 (one host's whole subnet, which an
// attacker gets for free), anything else as given.
func clientKey(client string) (string, netip.Addr) {
	a, err := netip.ParseAddr(client)
	if err != nil {
		return client, netip.Addr{}
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String(), a
	}
	p, _ := a.Prefix(64)
	return p.String(), a
}

// begin decides whether a login of account from client may check its
// password. It returns nil and marks the address as checking, or a
// *ports.LoginThrottledError; end must follow a nil.
func (t *loginThrottle) begin(now time.Time, account, client string) error {
	key, _ := clientKey(client)
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := t.live(t.address, key, now); f != nil && now.Before(f.until) {
		return &ports.LoginThrottledError{RetryAfter: f.until.Sub(now), Reason: ports.LoginThrottledAddress}
	}
	pk := pairKey{account, key}
	if until, ok := t.pairs[pk]; ok {
		if now.Before(until) {
			return &ports.LoginThrottledError{RetryAfter: until.Sub(now), Reason: ports.LoginThrottledAccount}
		}
		delete(t.pairs, pk)
	}
	if t.checking[key] {
		return &ports.LoginThrottledError{RetryAfter: loginBusyRetryAfter, Reason: ports.LoginThrottledBusy}
	}
	t.checking[key] = true
	return nil
}

// end records the outcome of a password check begin allowed. A failure
// counts on the address and, unless the address is trusted, on the
// account; past the account's free failures it makes this address wait to
// try this account again. A success clears the address's failures and its
// wait for the account; the account's counter is left to expire, since the
// failures it counts may be someone else's.
func (t *loginThrottle) end(now time.Time, account, client string, ok bool) {
	key, addr := clientKey(client)
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.checking, key)
	pk := pairKey{account, key}
	if ok {
		delete(t.address, key)
		delete(t.pairs, pk)
		return
	}
	c := t.cfg
	f := t.fail(t.address, key, now)
	if d := t.delay(f.n, c.AddressFreeFailures, c.AddressMaxDelay); d > 0 {
		f.until = now.Add(d)
	}
	if t.trusted(addr) {
		return
	}
	f = t.fail(t.account, account, now)
	if d := t.delay(f.n, c.AccountFreeFailures, c.AccountMaxDelay); d > 0 {
		if len(t.pairs) >= maxThrottleKeys {
			t.prunePairs(now)
		}
		t.pairs[pk] = now.Add(d)
	}
}

// release forgets that client is checking without recording an outcome:
// the check did not happen (no slot, the store failed).
func (t *loginThrottle) release(client string) {
	key, _ := clientKey(client)
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.checking, key)
}

// delay is the wait after the n-th failure of a counter with free failures:
// none up to free, then doubling from the base delay up to maxDelay.
func (t *loginThrottle) delay(n, free int, maxDelay time.Duration) time.Duration {
	over := n - free
	switch {
	case over <= 0:
		return 0
	case over > 30:
		return maxDelay
	}
	return min(t.cfg.BaseDelay<<(over-1), maxDelay)
}

// live returns the counter of key in m, or nil when there is none or it
// has been forgotten; t.mu is held.
func (t *loginThrottle) live(m map[string]*failures, key string, now time.Time) *failures {
	f := m[key]
	if f != nil && now.Sub(f.last) >= t.cfg.Forget && !now.Before(f.until) {
		delete(m, key)
		return nil
	}
	return f
}

// fail counts one failure of key in m and returns its counter; t.mu is
// held.
func (t *loginThrottle) fail(m map[string]*failures, key string, now time.Time) *failures {
	f := t.live(m, key, now)
	if f == nil {
		if len(m) >= maxThrottleKeys {
			t.makeRoom(m, now)
		}
		f = &failures{}
		m[key] = f
	}
	f.n++
	f.last = now
	return f
}

// makeRoom drops forgotten counters and, if the map is still full, the
// one whose last failure is oldest; t.mu is held.
func (t *loginThrottle) makeRoom(m map[string]*failures, now time.Time) {
	var oldestKey string
	var oldest time.Time
	for k, f := range m {
		if now.Sub(f.last) >= t.cfg.Forget && !now.Before(f.until) {
			delete(m, k)
			continue
		}
		if oldestKey == "" || f.last.Before(oldest) {
			oldestKey, oldest = k, f.last
		}
	}
	if len(m) >= maxThrottleKeys {
		delete(m, oldestKey)
	}
}

// prunePairs drops the waits that have ended and, if the map is still
// full, the one that ends first; t.mu is held.
func (t *loginThrottle) prunePairs(now time.Time) {
	var first pairKey
	var firstEnd time.Time
	for k, until := range t.pairs {
		if !now.Before(until) {
			delete(t.pairs, k)
			continue
		}
		if firstEnd.IsZero() || until.Before(firstEnd) {
			first, firstEnd = k, until
		}
	}
	if len(t.pairs) >= maxThrottleKeys {
		delete(t.pairs, first)
	}
}

// trusted reports whether addr is in a trusted network.
func (t *loginThrottle) trusted(addr netip.Addr) bool {
	if !addr.IsValid() {
		return false
	}
	for _, p := range t.cfg.TrustedNetworks {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
