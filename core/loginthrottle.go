package core

import (
	"net/netip"
	"sync"
	"time"

	"github.com/siteline/outbox/ports"
)

// LoginThrottle configures how Operators.Login slows password guessing. Two
// counters of recent failures decide whether a login's password is checked
// at all: one per client address and one per account name. Past a few free
// failures, each further failure doubles the wait before the next check
// (from BaseDelay up to the counter's cap); a counter is forgotten once it
// has seen no failure for Forget. A login refused by a counter costs no
// bcrypt hash and no database read.
//
// The account counter cannot lock the real owner out: it is short (capped at
// AccountMaxDelay), and it judges only addresses the account is not known
// at. An address where the account logged in before (on this node, within
// KnownFor), or one in TrustedNetworks, is judged by its own address counter
// only, so an attacker guessing from other addresses never delays it.
//
// The state lives in memory, per central node: several nodes each throttle
// on their own, and a restart forgets it.
type LoginThrottle struct {
	// AddressFreeFailures are the failures an address may make before it
	// waits; default 5.
	AddressFreeFailures int
	// AddressMaxDelay caps an address's wait; default 15m.
	AddressMaxDelay time.Duration
	// AccountFreeFailures are the failures an account name may see from
	// addresses it is not known at before they wait; default 10.
	AccountFreeFailures int
	// AccountMaxDelay caps an account's wait; default 1m. Keep it short:
	// it is the longest an attacker can delay the owner at a new address.
	AccountMaxDelay time.Duration
	// BaseDelay is the first wait past the free failures; default 1s.
	BaseDelay time.Duration
	// Forget is how long a counter lasts without a new failure; default
	// 1h. It must exceed both caps.
	Forget time.Duration
	// KnownFor is how long an address stays known to an account after a
	// successful login there; default 30 days.
	KnownFor time.Duration
	// TrustedNetworks are addresses (the operators' own workstations, the
	// control room) that no account counter judges.
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
	DefaultLoginKnownFor       = 30 * 24 * time.Hour
)

// WithDefaults returns t with every zero field set to its default.
func (t LoginThrottle) WithDefaults() LoginThrottle {
	if t.AddressFreeFailures <= 0 {
		t.AddressFreeFailures = DefaultAddressFreeFailures
	}
	if t.AddressMaxDelay <= 0 {
		t.AddressMaxDelay = DefaultAddressMaxDelay
	}
	if t.AccountFreeFailures <= 0 {
		t.AccountFreeFailures = DefaultAccountFreeFailures
	}
	if t.AccountMaxDelay <= 0 {
		t.AccountMaxDelay = DefaultAccountMaxDelay
	}
	if t.BaseDelay <= 0 {
		t.BaseDelay = DefaultLoginBaseDelay
	}
	if t.Forget <= 0 {
		t.Forget = DefaultLoginForget
	}
	t.Forget = max(t.Forget, 2*t.AddressMaxDelay, 2*t.AccountMaxDelay)
	if t.KnownFor <= 0 {
		t.KnownFor = DefaultLoginKnownFor
	}
	return t
}

// Bounds of the throttle's memory: a flood of distinct addresses or names
// costs a fixed amount.
const (
	maxThrottleKeys     = 16384 // entries per counter map
	maxKnownAccounts    = 4096  // accounts with known addresses
	maxKnownPerAccount  = 16    // known addresses per account
	loginBusyRetryAfter = time.Second
)

// failures is one counter of recent failed logins.
type failures struct {
	n     int
	last  time.Time // the last failure
	until time.Time // no password check before this instant
}

// loginThrottle is the state of a LoginThrottle; safe for concurrent use.
type loginThrottle struct {
	cfg LoginThrottle

	mu       sync.Mutex
	address  map[string]*failures
	account  map[string]*failures
	known    map[string]map[string]time.Time // account → address → last success
	checking map[string]bool                 // addresses with a password check in flight
}

func newLoginThrottle(cfg LoginThrottle) *loginThrottle {
	return &loginThrottle{cfg: cfg.WithDefaults(),
		address: map[string]*failures{}, account: map[string]*failures{},
		known: map[string]map[string]time.Time{}, checking: map[string]bool{}}
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
	key, addr := clientKey(client)
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := t.live(t.address, key, now); f != nil && now.Before(f.until) {
		return &ports.LoginThrottledError{RetryAfter: f.until.Sub(now), Reason: ports.LoginThrottledAddress}
	}
	if !t.exempt(now, account, key, addr) {
		if f := t.live(t.account, account, now); f != nil && now.Before(f.until) {
			return &ports.LoginThrottledError{RetryAfter: f.until.Sub(now), Reason: ports.LoginThrottledAccount}
		}
	}
	if t.checking[key] {
		return &ports.LoginThrottledError{RetryAfter: loginBusyRetryAfter, Reason: ports.LoginThrottledBusy}
	}
	t.checking[key] = true
	return nil
}

// end records the outcome of a password check begin allowed: a failure
// counts on the address and, unless the address is exempt, on the account;
// a success clears the address's failures and makes the address known to the
// account. The account's counter is left to expire, since the failures it
// counts may be someone else's.
func (t *loginThrottle) end(now time.Time, account, client string, ok bool) {
	key, addr := clientKey(client)
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.checking, key)
	if ok {
		delete(t.address, key)
		t.remember(now, account, key)
		return
	}
	c := t.cfg
	t.fail(t.address, key, now, c.AddressFreeFailures, c.AddressMaxDelay)
	if !t.exempt(now, account, key, addr) {
		t.fail(t.account, account, now, c.AccountFreeFailures, c.AccountMaxDelay)
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

// fail counts one failure of key in m: past free failures, the wait doubles
// from the base delay up to maxDelay; t.mu is held.
func (t *loginThrottle) fail(m map[string]*failures, key string, now time.Time, free int, maxDelay time.Duration) {
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
	if over := f.n - free; over > 0 {
		d := maxDelay
		if over <= 30 {
			d = min(t.cfg.BaseDelay<<(over-1), maxDelay)
		}
		f.until = now.Add(d)
	}
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

// exempt reports whether the account counter does not judge the address
// key: it is in a trusted network, or the account logged in there before;
// t.mu is held.
func (t *loginThrottle) exempt(now time.Time, account, key string, addr netip.Addr) bool {
	if addr.IsValid() {
		for _, p := range t.cfg.TrustedNetworks {
			if p.Contains(addr) {
				return true
			}
		}
	}
	at, ok := t.known[account][key]
	return ok && now.Sub(at) < t.cfg.KnownFor
}

// remember makes key known to account; t.mu is held. Each account keeps
// its most recent addresses, and the accounts are bounded in number.
func (t *loginThrottle) remember(now time.Time, account, key string) {
	addrs := t.known[account]
	if addrs == nil {
		if len(t.known) >= maxKnownAccounts {
			t.forgetKnown(now)
		}
		if len(t.known) >= maxKnownAccounts {
			return
		}
		addrs = map[string]time.Time{}
		t.known[account] = addrs
	}
	if _, ok := addrs[key]; !ok && len(addrs) >= maxKnownPerAccount {
		var oldestKey string
		var oldest time.Time
		for k, at := range addrs {
			if oldestKey == "" || at.Before(oldest) {
				oldestKey, oldest = k, at
			}
		}
		delete(addrs, oldestKey)
	}
	addrs[key] = now
}

// forgetKnown drops the known addresses older than KnownFor; t.mu is held.
func (t *loginThrottle) forgetKnown(now time.Time) {
	for account, addrs := range t.known {
		for k, at := range addrs {
			if now.Sub(at) >= t.cfg.KnownFor {
				delete(addrs, k)
			}
		}
		if len(addrs) == 0 {
			delete(t.known, account)
		}
	}
}
