package accountstest

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// hashes are byte strings every store must keep exactly: every byte value,
// NUL bytes at both ends, bytes that are not UTF-8, quote and escape
// characters of SQL literals, a real bcrypt hash, and empty.
func hashes() map[string][]byte {
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(255 - i)
	}
	return map[string][]byte{
		"every byte":       every,
		"NUL at both ends": {0, 0, 'a', 0, 0},
		"not UTF-8":        {0xff, 0xfe, 0xc3, 0x28, 0x80},
		"SQL quoting":      []byte(`'\x00' \\ " '' 0x ` + "\n\r\t"),
		"bcrypt":           []byte("$2a$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy"),
		"sha-256":          sum("s3cr3t"),
		"one byte":         {0},
		"empty":            {},
		"nil":              nil,
	}
}

func exerciseValues(t *testing.T, newStore func(t *testing.T) ports.AccountStore) {
	t.Run("HashesRoundTrip", func(t *testing.T) {
		s := newStore(t)
		hs := hashes()
		for _, why := range slices.Sorted(maps.Keys(hs)) {
			h := hs[why]
			a := NewAccount("user "+why, ports.RoleViewer, BaseTime)
			a.PasswordHash = h
			tk := NewToken("tok "+why, "token "+why, ports.RoleViewer, BaseTime)
			tk.Hash = h
			mustPutAccount(t, s, a)
			mustPutToken(t, s, tk)
			if got := mustAccount(t, s, a.Name).PasswordHash; !bytes.Equal(got, h) {
				t.Errorf("Account: password hash %s: got %x, want %x", why, got, h)
			}
			if got := mustToken(t, s, tk.ID).Hash; !bytes.Equal(got, h) {
				t.Errorf("Token: hash %s: got %x, want %x", why, got, h)
			}
		}
		for _, a := range mustAccounts(t, s) {
			why := a.Name[len("user "):]
			if !bytes.Equal(a.PasswordHash, hs[why]) {
				t.Errorf("Accounts: password hash %s: got %x, want %x", why, a.PasswordHash, hs[why])
			}
		}
		for _, tk := range mustTokens(t, s) {
			why := tk.Name[len("token "):]
			if !bytes.Equal(tk.Hash, hs[why]) {
				t.Errorf("Tokens: hash %s: got %x, want %x", why, tk.Hash, hs[why])
			}
		}
	})

	t.Run("TimesInUTC", func(t *testing.T) {
		s := newStore(t)
		// Handed over in other zones, with a microsecond fraction; read back
		// in UTC, the same instants. One far in the past, one far ahead.
		east := time.FixedZone("UTC+5:30", 5*3600+1800)
		west := time.FixedZone("UTC-8", -8*3600)
		created := BaseTime.In(east)
		updated := time.Date(2099, time.December, 31, 23, 59, 59, 999999000, west)
		a := NewAccount("alice", ports.RoleAdmin, created)
		a.UpdatedAt = updated
		tk := NewToken("tok-1", "ci", ports.RoleViewer, time.Date(1971, time.January, 1, 0, 0, 0, 1000, east))
		x := NewSession("x", "alice", created, updated)
		mustPutAccount(t, s, a)
		mustPutToken(t, s, tk)
		mustPutSession(t, s, x)

		got := mustAccount(t, s, a.Name)
		checkAccount(t, "Account", a, got)
		all := mustAccounts(t, s)
		gotTk := mustToken(t, s, tk.ID)
		checkToken(t, "Token", tk, gotTk)
		allTk := mustTokens(t, s)
		gotX := mustSession(t, s, x.ID)
		checkSession(t, "Session", x, gotX)
		for what, tm := range map[string]time.Time{
			"Account CreatedAt": got.CreatedAt, "Account UpdatedAt": got.UpdatedAt,
			"Accounts CreatedAt": all[0].CreatedAt, "Accounts UpdatedAt": all[0].UpdatedAt,
			"Token CreatedAt": gotTk.CreatedAt, "Tokens CreatedAt": allTk[0].CreatedAt,
			"Session CreatedAt": gotX.CreatedAt, "Session ExpiresAt": gotX.ExpiresAt,
		} {
			if tm.Location() != time.UTC {
				t.Errorf("%s = %s, want it in UTC", what, tm)
			}
		}
	})

	t.Run("CopiesOut", func(t *testing.T) {
		s := newStore(t)
		put := NewAccount("alice", ports.RoleAdmin, BaseTime)
		putTk := NewToken("tok-1", "ci", ports.RoleViewer, BaseTime)
		mustPutAccount(t, s, put)
		mustPutToken(t, s, putTk)
		// What the store must still hold, in slices nobody else has.
		a, tk := put, putTk
		a.PasswordHash = slices.Clone(put.PasswordHash)
		tk.Hash = slices.Clone(putTk.Hash)
		scribble := func(b []byte) {
			for i := range b {
				b[i] = 'X'
			}
		}
		scribble(mustAccount(t, s, a.Name).PasswordHash)
		scribble(mustAccounts(t, s)[0].PasswordHash)
		scribble(mustToken(t, s, tk.ID).Hash)
		scribble(mustTokens(t, s)[0].Hash)
		checkAccount(t, "Account after its returned hash was changed", a, mustAccount(t, s, a.Name))
		checkAccount(t, "Accounts after a returned hash was changed", a, mustAccounts(t, s)[0])
		checkToken(t, "Token after its returned hash was changed", tk, mustToken(t, s, tk.ID))
		checkToken(t, "Tokens after a returned hash was changed", tk, mustTokens(t, s)[0])
	})

	t.Run("CopiesIn", func(t *testing.T) {
		s := newStore(t)
		a := NewAccount("alice", ports.RoleAdmin, BaseTime)
		tk := NewToken("tok-1", "ci", ports.RoleViewer, BaseTime)
		wantA, wantTk := a, tk
		wantA.PasswordHash = slices.Clone(a.PasswordHash)
		wantTk.Hash = slices.Clone(tk.Hash)
		mustPutAccount(t, s, a)
		mustPutToken(t, s, tk)
		a.PasswordHash[0], tk.Hash[0] = 'X', 'X'
		checkAccount(t, "Account after the caller changed the hash it put", wantA, mustAccount(t, s, "alice"))
		checkToken(t, "Token after the caller changed the hash it put", wantTk, mustToken(t, s, "tok-1"))
	})

	t.Run("ErrorsKeepSecrets", func(t *testing.T) {
		s := newStore(t)
		const email = "alice@example.test"
		a := NewAccount(email, ports.RoleAdmin, BaseTime)
		mustPutAccount(t, s, a)
		x := NewSession("x", email, BaseTime, BaseTime.Add(time.Hour))
		mustPutSession(t, s, x)
		tk := NewToken("tok-1", "ci", ports.RoleAdmin, BaseTime)
		mustPutToken(t, s, tk)
		secrets := []string{email, x.ID, string(a.PasswordHash), fmt.Sprintf("%x", a.PasswordHash),
			string(tk.Hash), fmt.Sprintf("%x", tk.Hash)}

		bad := a
		bad.Role = "root"
		errs := map[string]error{"PutAccount with an unknown role": s.PutAccount(t.Context(), bad)}
		_, errs["Account of an unknown e-mail"] = s.Account(t.Context(), "bob@example.test")
		errs["DeleteAccount of an unknown e-mail"] = s.DeleteAccount(t.Context(), "bob@example.test")
		errs["PutSession with a stored id"] = s.PutSession(t.Context(), x)
		_, errs["Session of an unknown id"] = s.Session(t.Context(), SessionID("y"))
		dup := tk
		dup.ID = "tok-2"
		errs["PutToken with a stored name"] = s.PutToken(t.Context(), dup)
		for what, err := range errs {
			if err == nil {
				t.Errorf("%s: no error", what)
				continue
			}
			checkSecrets(t, what, err, append(secrets, "bob@example.test", SessionID("y"))...)
		}
	})
}
