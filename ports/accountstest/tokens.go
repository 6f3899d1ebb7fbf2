package accountstest

import (
	"slices"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

func exerciseTokens(t *testing.T, newStore func(t *testing.T) ports.AccountStore) {
	t.Run("Empty", func(t *testing.T) {
		s := newStore(t)
		if ts := mustTokens(t, s); len(ts) != 0 {
			t.Errorf("Tokens of an empty store = %q, want none", tokenNames(ts))
		}
		_, err := s.Token(t.Context(), "tok-1")
		checkIs(t, "Token of an unknown id", err, ports.ErrNotFound)
		checkIs(t, "DeleteToken of an unknown id", s.DeleteToken(t.Context(), "tok-1"), ports.ErrNotFound)
	})

	t.Run("RoundTrip", func(t *testing.T) {
		s := newStore(t)
		ci := NewToken("tok_8f2a", "ci deploy ✓", ports.RoleOperator, BaseTime)
		viewer := NewToken("tok_01aa", "grafana", ports.RoleViewer, BaseTime.Add(time.Minute))
		mustPutToken(t, s, ci, viewer)
		checkToken(t, "Token", ci, mustToken(t, s, ci.ID))
		checkToken(t, "Token", viewer, mustToken(t, s, viewer.ID))
		all := mustTokens(t, s)
		if len(all) != 2 {
			t.Fatalf("Tokens = %q, want 2 tokens", tokenNames(all))
		}
		checkToken(t, "Tokens", ci, all[0])
		checkToken(t, "Tokens", viewer, all[1])
	})

	t.Run("ExpiryAndAccount", func(t *testing.T) {
		s := newStore(t)
		// Zero ExpiresAt is a token that never expires; an Account binds it.
		free := NewToken("tok-free", "ci", ports.RoleOperator, BaseTime)
		bound := NewBoundToken("tok-bound", "alice/cli-1a2b", "alice", BaseTime, BaseTime.Add(12*time.Hour))
		expired := NewToken("tok-old", "old", ports.RoleAdmin, BaseTime)
		expired.ExpiresAt = BaseTime.Add(-time.Second)
		far := NewToken("tok-far", "far", ports.RoleViewer, BaseTime)
		far.ExpiresAt = time.Date(2099, time.December, 31, 23, 59, 59, 999999000, time.UTC)
		mustPutToken(t, s, free, bound, expired, far)
		for _, want := range []ports.StoredToken{free, bound, expired, far} {
			got := mustToken(t, s, want.ID)
			checkToken(t, "Token", want, got)
			if !got.ExpiresAt.IsZero() && got.ExpiresAt.Location() != time.UTC {
				t.Errorf("Token(%s).ExpiresAt in %s, want UTC", want.ID, got.ExpiresAt.Location())
			}
		}
		all := mustTokens(t, s)
		if got := tokenNames(all); !slices.Equal(got, []string{"alice/cli-1a2b", "ci", "far", "old"}) {
			t.Fatalf("Tokens = %q", got)
		}
		checkToken(t, "Tokens", bound, all[0])
		checkToken(t, "Tokens", free, all[1])
		// An expired token is kept until it is deleted: the core refuses it.
		checkToken(t, "Tokens", expired, all[3])
	})

	t.Run("RepeatedIDConflicts", func(t *testing.T) {
		s := newStore(t)
		first := NewToken("tok-1", "ci", ports.RoleViewer, BaseTime)
		mustPutToken(t, s, first)
		again := NewToken("tok-1", "backup", ports.RoleAdmin, BaseTime.Add(time.Hour))
		again.Hash = []byte("another hash")
		err := s.PutToken(t.Context(), again)
		checkIs(t, "PutToken with a stored id", err, ports.ErrConflict)
		checkSecrets(t, "PutToken with a stored id", err, string(again.Hash))
		// The stored token is unchanged and the refused one left no trace.
		checkToken(t, "Token after a refused put", first, mustToken(t, s, "tok-1"))
		if got := tokenNames(mustTokens(t, s)); !slices.Equal(got, []string{"ci"}) {
			t.Errorf("Tokens after a refused put = %q, want [ci]", got)
		}
		// Nor does it hold the name it asked for.
		mustPutToken(t, s, NewToken("tok-2", "backup", ports.RoleAdmin, BaseTime))
	})

	t.Run("RepeatedNameConflicts", func(t *testing.T) {
		s := newStore(t)
		first := NewToken("tok-1", "ci", ports.RoleViewer, BaseTime)
		mustPutToken(t, s, first)
		err := s.PutToken(t.Context(), NewToken("tok-2", "ci", ports.RoleAdmin, BaseTime.Add(time.Hour)))
		checkIs(t, "PutToken with a stored name", err, ports.ErrConflict)
		_, err = s.Token(t.Context(), "tok-2")
		checkIs(t, "Token of a refused token", err, ports.ErrNotFound)
		checkToken(t, "Token after a refused put", first, mustToken(t, s, "tok-1"))
		all := mustTokens(t, s)
		if len(all) != 1 {
			t.Fatalf("Tokens after a refused put = %q, want [ci]", tokenNames(all))
		}
		// Names compare bytewise: another case is another name.
		mustPutToken(t, s, NewToken("tok-3", "CI", ports.RoleViewer, BaseTime))
		// Both repeated at once conflicts too.
		checkIs(t, "PutToken with a stored id and name",
			s.PutToken(t.Context(), NewToken("tok-1", "ci", ports.RoleViewer, BaseTime)), ports.ErrConflict)
	})

	t.Run("SortedByName", func(t *testing.T) {
		s := newStore(t)
		// IDs in the reverse order of the names: the order must be the names'.
		names := []string{"zeta", "Alpha", "beta", "alpha", "_ops", "ßtool", "9", "10"}
		for i, name := range names {
			id := string(rune('z'-i)) + "-token"
			mustPutToken(t, s, NewToken(id, name, ports.OperatorRoles[i%3], BaseTime.Add(time.Duration(i)*time.Minute)))
		}
		want := slices.Clone(names)
		slices.Sort(want)
		if got := tokenNames(mustTokens(t, s)); !slices.Equal(got, want) {
			t.Errorf("Tokens in order %q, want byte order of names %q", got, want)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		s := newStore(t)
		a := NewToken("tok-a", "ci", ports.RoleOperator, BaseTime)
		b := NewToken("tok-b", "grafana", ports.RoleViewer, BaseTime)
		mustPutToken(t, s, a, b)
		if err := s.DeleteToken(t.Context(), a.ID); err != nil {
			t.Fatalf("DeleteToken(%s): %v", a.ID, err)
		}
		_, err := s.Token(t.Context(), a.ID)
		checkIs(t, "Token of a deleted token", err, ports.ErrNotFound)
		all := mustTokens(t, s)
		if len(all) != 1 {
			t.Fatalf("Tokens after a delete = %q, want [grafana]", tokenNames(all))
		}
		checkToken(t, "Tokens after a delete", b, all[0])
		checkIs(t, "DeleteToken again", s.DeleteToken(t.Context(), a.ID), ports.ErrNotFound)
		// Its id and its name are free again.
		again := NewToken(a.ID, a.Name, ports.RoleAdmin, BaseTime.Add(time.Hour))
		mustPutToken(t, s, again)
		checkToken(t, "Token put again after a delete", again, mustToken(t, s, a.ID))
	})

	t.Run("Invalid", func(t *testing.T) {
		s := newStore(t)
		valid := NewToken(storedKey, storedKey, ports.RoleAdmin, BaseTime)
		mustPutToken(t, s, valid)
		bad := map[string]ports.StoredToken{}
		for why, key := range badKeys {
			bad["id "+why] = NewToken(key, "carol", ports.RoleViewer, BaseTime)
			bad["name "+why] = NewToken("tok-c", key, ports.RoleViewer, BaseTime)
		}
		for why, role := range map[string]ports.OperatorRole{"empty role": "", "unknown role": "root"} {
			bad[why] = NewToken("tok-c", "carol", role, BaseTime)
		}
		noCreated := NewToken("tok-c", "carol", ports.RoleViewer, BaseTime)
		noCreated.CreatedAt = time.Time{}
		bad["zero CreatedAt"] = noCreated
		for why, key := range badKeys {
			if key != "" {
				bad["account "+why] = NewBoundToken("tok-c", "carol", key, BaseTime, BaseTime.Add(time.Hour))
			}
		}
		for why, tk := range bad {
			err := s.PutToken(t.Context(), tk)
			checkIs(t, "PutToken with "+why, err, ports.ErrInvalid)
			checkSecrets(t, "PutToken with "+why, err, string(tk.Hash))
		}
		all := mustTokens(t, s)
		if len(all) != 1 {
			t.Fatalf("Tokens after refused puts = %q, want only %q", tokenNames(all), storedKey)
		}
		checkToken(t, "Tokens after refused puts", valid, all[0])
		for why, key := range badKeys {
			_, err := s.Token(t.Context(), key)
			checkIs(t, "Token of an id with "+why, err, ports.ErrNotFound)
			checkIs(t, "DeleteToken of an id with "+why, s.DeleteToken(t.Context(), key), ports.ErrNotFound)
		}
		checkToken(t, "Token after deletes of bad ids", valid, mustToken(t, s, storedKey))
	})
}
