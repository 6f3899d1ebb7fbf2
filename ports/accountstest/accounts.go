package accountstest

import (
	"slices"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

func exerciseAccounts(t *testing.T, newStore func(t *testing.T) ports.AccountStore) {
	t.Run("Empty", func(t *testing.T) {
		s := newStore(t)
		if as := mustAccounts(t, s); len(as) != 0 {
			t.Errorf("Accounts of an empty store = %q, want none", accountNames(as))
		}
		_, err := s.Account(t.Context(), "alice")
		checkIs(t, "Account of an unknown name", err, ports.ErrNotFound)
		checkIs(t, "DeleteAccount of an unknown name", s.DeleteAccount(t.Context(), "alice"), ports.ErrNotFound)
	})

	t.Run("RoundTrip", func(t *testing.T) {
		s := newStore(t)
		alice := NewAccount("alice", ports.RoleAdmin, BaseTime)
		bob := NewAccount("bob ünïcödé ✓ 'quote' \"double\" \\", ports.RoleViewer, BaseTime.Add(time.Hour))
		mustPutAccount(t, s, alice, bob)
		checkAccount(t, "Account", alice, mustAccount(t, s, alice.Name))
		checkAccount(t, "Account", bob, mustAccount(t, s, bob.Name))
		all := mustAccounts(t, s)
		if len(all) != 2 {
			t.Fatalf("Accounts = %q, want 2 accounts", accountNames(all))
		}
		checkAccount(t, "Accounts", alice, all[0])
		checkAccount(t, "Accounts", bob, all[1])
	})

	t.Run("PutReplaces", func(t *testing.T) {
		s := newStore(t)
		first := NewAccount("alice", ports.RoleViewer, BaseTime)
		mustPutAccount(t, s, first)
		// Whole: every field comes from the second put, CreatedAt included.
		next := ports.Account{
			Name:         "alice",
			Role:         ports.RoleOperator,
			PasswordHash: []byte("$2a$10$another.hash.of.another.password.entirely.xxxxxx"),
			CreatedAt:    BaseTime.Add(-24 * time.Hour),
			UpdatedAt:    BaseTime.Add(2 * time.Hour),
		}
		mustPutAccount(t, s, next)
		checkAccount(t, "Account after a replace", next, mustAccount(t, s, "alice"))
		all := mustAccounts(t, s)
		if len(all) != 1 {
			t.Fatalf("Accounts after a replace = %q, want one account", accountNames(all))
		}
		checkAccount(t, "Accounts after a replace", next, all[0])
		// A shorter hash replaces a longer one entirely.
		short := next
		short.PasswordHash = []byte{1}
		mustPutAccount(t, s, short)
		checkAccount(t, "Account after a replace with a shorter hash", short, mustAccount(t, s, "alice"))
	})

	t.Run("SortedByteOrder", func(t *testing.T) {
		s := newStore(t)
		// Byte order: digits < upper case < '_' < lower case < non-ASCII; a
		// prefix sorts first. A collation-aware sort gets several wrong.
		want := []string{"10", "9", "Zed", "_service", "alice", "alice.b", "bob", "zoë", "Ängel", "éric"}
		slices.Sort(want)
		for i, j := range []int{7, 2, 9, 0, 5, 3, 8, 1, 6, 4} {
			mustPutAccount(t, s, NewAccount(want[j], ports.OperatorRoles[i%3], BaseTime.Add(time.Duration(i)*time.Second)))
		}
		if got := accountNames(mustAccounts(t, s)); !slices.Equal(got, want) {
			t.Errorf("Accounts in order %q, want byte order %q", got, want)
		}
	})

	t.Run("CaseCounts", func(t *testing.T) {
		s := newStore(t)
		lower := NewAccount("ops", ports.RoleViewer, BaseTime)
		upper := NewAccount("Ops", ports.RoleAdmin, BaseTime.Add(time.Second))
		mustPutAccount(t, s, lower, upper)
		checkAccount(t, "Account(ops)", lower, mustAccount(t, s, "ops"))
		checkAccount(t, "Account(Ops)", upper, mustAccount(t, s, "Ops"))
		_, err := s.Account(t.Context(), "OPS")
		checkIs(t, "Account(OPS)", err, ports.ErrNotFound)
		if err := s.DeleteAccount(t.Context(), "Ops"); err != nil {
			t.Fatalf("DeleteAccount(Ops): %v", err)
		}
		checkAccount(t, "Account(ops) after deleting Ops", lower, mustAccount(t, s, "ops"))
	})

	t.Run("Delete", func(t *testing.T) {
		s := newStore(t)
		alice := NewAccount("alice", ports.RoleAdmin, BaseTime)
		bob := NewAccount("bob", ports.RoleViewer, BaseTime)
		mustPutAccount(t, s, alice, bob)
		if err := s.DeleteAccount(t.Context(), "alice"); err != nil {
			t.Fatalf("DeleteAccount(alice): %v", err)
		}
		_, err := s.Account(t.Context(), "alice")
		checkIs(t, "Account of a deleted account", err, ports.ErrNotFound)
		all := mustAccounts(t, s)
		if len(all) != 1 {
			t.Fatalf("Accounts after a delete = %q, want [bob]", accountNames(all))
		}
		checkAccount(t, "Accounts after a delete", bob, all[0])
		checkIs(t, "DeleteAccount again", s.DeleteAccount(t.Context(), "alice"), ports.ErrNotFound)
		// The name is free again.
		mustPutAccount(t, s, alice)
		checkAccount(t, "Account put again after a delete", alice, mustAccount(t, s, "alice"))
	})

	t.Run("DeleteTakesTheSessions", func(t *testing.T) {
		s := newStore(t)
		mustPutAccount(t, s, NewAccount("alice", ports.RoleAdmin, BaseTime), NewAccount("bob", ports.RoleViewer, BaseTime))
		later := BaseTime.Add(time.Hour)
		a1 := NewSession("a1", "alice", BaseTime, later)
		a2 := NewSession("a2", "alice", BaseTime, BaseTime.Add(-time.Hour)) // expired
		b1 := NewSession("b1", "bob", BaseTime, later)
		// Neither a prefix nor another case of the deleted name is its.
		c1 := NewSession("c1", "alice2", BaseTime, later)
		c2 := NewSession("c2", "Alice", BaseTime, later)
		mustPutSession(t, s, a1, a2, b1, c1, c2)
		tok := NewToken("tok-1", "alice", ports.RoleAdmin, BaseTime)
		mustPutToken(t, s, tok)

		if err := s.DeleteAccount(t.Context(), "alice"); err != nil {
			t.Fatalf("DeleteAccount(alice): %v", err)
		}
		for _, gone := range []ports.StoredSession{a1, a2} {
			_, err := s.Session(t.Context(), gone.ID)
			checkIs(t, "Session of the deleted account", err, ports.ErrNotFound)
		}
		for _, kept := range []ports.StoredSession{b1, c1, c2} {
			checkSession(t, "Session of another account", kept, mustSession(t, s, kept.ID))
		}
		// A token of its own is no account's: one named like it stays.
		checkToken(t, "Token named like the deleted account", tok, mustToken(t, s, tok.ID))
	})

	t.Run("DeleteTakesTheBoundTokens", func(t *testing.T) {
		s := newStore(t)
		mustPutAccount(t, s, NewAccount("alice", ports.RoleAdmin, BaseTime), NewAccount("bob", ports.RoleViewer, BaseTime))
		a1 := NewBoundToken("tok-a1", "alice/cli-1", "alice", BaseTime, BaseTime.Add(time.Hour))
		a2 := NewBoundToken("tok-a2", "alice/cli-2", "alice", BaseTime, BaseTime.Add(-time.Hour)) // expired
		b1 := NewBoundToken("tok-b1", "bob/cli-1", "bob", BaseTime, BaseTime.Add(time.Hour))
		// Neither a prefix nor another case of the deleted name is its.
		c1 := NewBoundToken("tok-c1", "alice2/cli-1", "alice2", BaseTime, BaseTime.Add(time.Hour))
		c2 := NewBoundToken("tok-c2", "Alice/cli-1", "Alice", BaseTime, BaseTime.Add(time.Hour))
		own := NewToken("tok-own", "alice", ports.RoleAdmin, BaseTime)
		mustPutToken(t, s, a1, a2, b1, c1, c2, own)

		if err := s.DeleteAccount(t.Context(), "alice"); err != nil {
			t.Fatalf("DeleteAccount(alice): %v", err)
		}
		for _, gone := range []ports.StoredToken{a1, a2} {
			_, err := s.Token(t.Context(), gone.ID)
			checkIs(t, "Token bound to the deleted account", err, ports.ErrNotFound)
		}
		for _, kept := range []ports.StoredToken{b1, c1, c2, own} {
			checkToken(t, "Token not bound to the deleted account", kept, mustToken(t, s, kept.ID))
		}
		if got := tokenNames(mustTokens(t, s)); !slices.Equal(got, []string{"Alice/cli-1", "alice", "alice2/cli-1", "bob/cli-1"}) {
			t.Errorf("Tokens after the delete = %q", got)
		}
		// The names of the deleted tokens are free again.
		mustPutToken(t, s, NewBoundToken("tok-a3", a1.Name, "bob", BaseTime, BaseTime.Add(time.Hour)))
	})

	t.Run("DeleteUnknownKeepsBoundTokens", func(t *testing.T) {
		s := newStore(t)
		orphan := NewBoundToken("tok-o", "ghost/cli-1", "ghost", BaseTime, BaseTime.Add(time.Hour))
		mustPutToken(t, s, orphan)
		checkIs(t, "DeleteAccount(ghost)", s.DeleteAccount(t.Context(), "ghost"), ports.ErrNotFound)
		checkToken(t, "Token after a refused DeleteAccount", orphan, mustToken(t, s, orphan.ID))
	})

	t.Run("DeleteUnknownKeepsSessions", func(t *testing.T) {
		s := newStore(t)
		// A session of a name that has no account (the store does not
		// check): a refused delete changes nothing.
		orphan := NewSession("o1", "ghost", BaseTime, BaseTime.Add(time.Hour))
		mustPutSession(t, s, orphan)
		checkIs(t, "DeleteAccount(ghost)", s.DeleteAccount(t.Context(), "ghost"), ports.ErrNotFound)
		checkSession(t, "Session after a refused DeleteAccount", orphan, mustSession(t, s, orphan.ID))
	})

	t.Run("ReplaceKeepsTheSessions", func(t *testing.T) {
		s := newStore(t)
		mustPutAccount(t, s, NewAccount("alice", ports.RoleAdmin, BaseTime))
		x := NewSession("x", "alice", BaseTime, BaseTime.Add(time.Hour))
		mustPutSession(t, s, x)
		mustPutAccount(t, s, NewAccount("alice", ports.RoleViewer, BaseTime.Add(time.Minute)))
		checkSession(t, "Session after its account was replaced", x, mustSession(t, s, x.ID))
	})

	t.Run("Invalid", func(t *testing.T) {
		s := newStore(t)
		valid := NewAccount(storedKey, ports.RoleAdmin, BaseTime)
		mustPutAccount(t, s, valid)
		bad := map[string]ports.Account{}
		for why, key := range badKeys {
			a := NewAccount(key, ports.RoleViewer, BaseTime.Add(time.Hour))
			bad["name "+why] = a
		}
		for why, role := range map[string]ports.OperatorRole{"empty role": "", "unknown role": "root", "role in capitals": "Admin"} {
			a := NewAccount("carol", role, BaseTime)
			bad[why] = a
		}
		noCreated := NewAccount("carol", ports.RoleViewer, BaseTime)
		noCreated.CreatedAt = time.Time{}
		bad["zero CreatedAt"] = noCreated
		noUpdated := NewAccount("carol", ports.RoleViewer, BaseTime)
		noUpdated.UpdatedAt = time.Time{}
		bad["zero UpdatedAt"] = noUpdated
		for why, a := range bad {
			err := s.PutAccount(t.Context(), a)
			checkIs(t, "PutAccount with "+why, err, ports.ErrInvalid)
			checkSecrets(t, "PutAccount with "+why, err, string(a.PasswordHash))
		}
		all := mustAccounts(t, s)
		if len(all) != 1 {
			t.Fatalf("Accounts after refused puts = %q, want only %q", accountNames(all), storedKey)
		}
		checkAccount(t, "Account after refused puts", valid, all[0])
		for why, key := range badKeys {
			_, err := s.Account(t.Context(), key)
			checkIs(t, "Account of a name with "+why, err, ports.ErrNotFound)
			checkIs(t, "DeleteAccount of a name with "+why, s.DeleteAccount(t.Context(), key), ports.ErrNotFound)
		}
		checkAccount(t, "Account after deletes of bad names", valid, mustAccount(t, s, storedKey))
	})
}
