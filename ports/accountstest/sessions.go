package accountstest

import (
	"errors"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

func exerciseSessions(t *testing.T, newStore func(t *testing.T) ports.AccountStore) {
	t.Run("Empty", func(t *testing.T) {
		s := newStore(t)
		_, err := s.Session(t.Context(), SessionID("x"))
		checkIs(t, "Session of an unknown id", err, ports.ErrNotFound)
		if err := s.DeleteSession(t.Context(), SessionID("x")); err != nil {
			t.Errorf("DeleteSession of an unknown id = %v, want nil", err)
		}
		if err := s.DeleteSessions(t.Context(), "alice"); err != nil {
			t.Errorf("DeleteSessions of an account without sessions = %v, want nil", err)
		}
		n, err := s.DeleteExpiredSessions(t.Context(), BaseTime)
		if err != nil || n != 0 {
			t.Errorf("DeleteExpiredSessions of an empty store = %d, %v; want 0, nil", n, err)
		}
	})

	t.Run("RoundTrip", func(t *testing.T) {
		s := newStore(t)
		x := NewSession("x", "alice", BaseTime, BaseTime.Add(12*time.Hour))
		y := NewSession("y", "bob ünïcödé", BaseTime.Add(time.Second), BaseTime.Add(8*time.Hour))
		mustPutSession(t, s, x, y)
		checkSession(t, "Session", x, mustSession(t, s, x.ID))
		checkSession(t, "Session", y, mustSession(t, s, y.ID))
	})

	t.Run("ExpiredIsReturned", func(t *testing.T) {
		s := newStore(t)
		// Long expired by any clock: Session still returns it (the core
		// decides), until DeleteExpiredSessions removes it.
		old := NewSession("old", "alice", BaseTime.Add(-48*time.Hour), BaseTime.Add(-24*time.Hour))
		mustPutSession(t, s, old)
		checkSession(t, "Session of an expired session", old, mustSession(t, s, old.ID))
	})

	t.Run("RepeatedIDConflicts", func(t *testing.T) {
		s := newStore(t)
		first := NewSession("x", "alice", BaseTime, BaseTime.Add(time.Hour))
		mustPutSession(t, s, first)
		again := NewSession("x", "bob", BaseTime.Add(time.Minute), BaseTime.Add(2*time.Hour))
		err := s.PutSession(t.Context(), again)
		checkIs(t, "PutSession with a stored id", err, ports.ErrConflict)
		checkSecrets(t, "PutSession with a stored id", err, again.ID)
		checkSession(t, "Session after a refused put", first, mustSession(t, s, first.ID))
	})

	t.Run("DeleteSession", func(t *testing.T) {
		s := newStore(t)
		x := NewSession("x", "alice", BaseTime, BaseTime.Add(time.Hour))
		y := NewSession("y", "alice", BaseTime, BaseTime.Add(time.Hour))
		mustPutSession(t, s, x, y)
		if err := s.DeleteSession(t.Context(), x.ID); err != nil {
			t.Fatalf("DeleteSession: %v", err)
		}
		_, err := s.Session(t.Context(), x.ID)
		checkIs(t, "Session of a deleted session", err, ports.ErrNotFound)
		checkSession(t, "Session of another session of the account", y, mustSession(t, s, y.ID))
		if err := s.DeleteSession(t.Context(), x.ID); err != nil {
			t.Errorf("DeleteSession again = %v, want nil", err)
		}
		// The id is free again.
		mustPutSession(t, s, x)
		checkSession(t, "Session put again after a delete", x, mustSession(t, s, x.ID))
	})

	t.Run("DeleteSessions", func(t *testing.T) {
		s := newStore(t)
		later := BaseTime.Add(time.Hour)
		a1 := NewSession("a1", "alice", BaseTime, later)
		a2 := NewSession("a2", "alice", BaseTime, BaseTime.Add(-time.Hour)) // expired
		b1 := NewSession("b1", "bob", BaseTime, later)
		c1 := NewSession("c1", "Alice", BaseTime, later)
		c2 := NewSession("c2", "alice2", BaseTime, later)
		mustPutSession(t, s, a1, a2, b1, c1, c2)
		// No account need exist: sessions are deleted by name.
		if err := s.DeleteSessions(t.Context(), "alice"); err != nil {
			t.Fatalf("DeleteSessions(alice): %v", err)
		}
		for _, gone := range []ports.StoredSession{a1, a2} {
			_, err := s.Session(t.Context(), gone.ID)
			checkIs(t, "Session of alice after DeleteSessions(alice)", err, ports.ErrNotFound)
		}
		for _, kept := range []ports.StoredSession{b1, c1, c2} {
			checkSession(t, "Session of another account after DeleteSessions(alice)", kept, mustSession(t, s, kept.ID))
		}
		if err := s.DeleteSessions(t.Context(), "alice"); err != nil {
			t.Errorf("DeleteSessions(alice) again = %v, want nil", err)
		}
		for why, key := range badKeys {
			if err := s.DeleteSessions(t.Context(), key); err != nil {
				t.Errorf("DeleteSessions of a name with %s = %v, want nil", why, err)
			}
		}
		checkSession(t, "Session after DeleteSessions of bad names", b1, mustSession(t, s, b1.ID))
	})

	t.Run("DeleteExpiredSessions", func(t *testing.T) {
		s := newStore(t)
		now := BaseTime.Add(time.Hour)
		created := BaseTime
		longAgo := NewSession("long-ago", "alice", created, now.Add(-24*time.Hour))
		justBefore := NewSession("just-before", "bob", created, now.Add(-time.Microsecond))
		atNow := NewSession("at-now", "alice", created, now)
		justAfter := NewSession("just-after", "alice", created, now.Add(time.Microsecond))
		later := NewSession("later", "bob", created, now.Add(time.Hour))
		mustPutSession(t, s, longAgo, justBefore, atNow, justAfter, later)

		// now in another zone is the same instant.
		n, err := s.DeleteExpiredSessions(t.Context(), now.In(time.FixedZone("UTC+5", 5*3600)))
		if err != nil {
			t.Fatalf("DeleteExpiredSessions: %v", err)
		}
		if n != 3 {
			t.Errorf("DeleteExpiredSessions = %d, want 3 (expired before and at now)", n)
		}
		for _, gone := range []ports.StoredSession{longAgo, justBefore, atNow} {
			_, err := s.Session(t.Context(), gone.ID)
			checkIs(t, "Session "+gone.Account+" expired by now", err, ports.ErrNotFound)
		}
		for _, kept := range []ports.StoredSession{justAfter, later} {
			checkSession(t, "Session expiring after now", kept, mustSession(t, s, kept.ID))
		}
		n, err = s.DeleteExpiredSessions(t.Context(), now)
		if err != nil || n != 0 {
			t.Errorf("DeleteExpiredSessions again = %d, %v; want 0, nil", n, err)
		}
		n, err = s.DeleteExpiredSessions(t.Context(), now.Add(time.Hour))
		if err != nil || n != 2 {
			t.Errorf("DeleteExpiredSessions an hour later = %d, %v; want 2, nil", n, err)
		}
	})

	t.Run("Invalid", func(t *testing.T) {
		s := newStore(t)
		valid := NewSession("valid", storedKey, BaseTime, BaseTime.Add(time.Hour))
		mustPutSession(t, s, valid)
		bad := map[string]ports.StoredSession{}
		for why, key := range badKeys {
			x := NewSession("x", key, BaseTime, BaseTime.Add(time.Hour))
			bad["account "+why] = x
			x = NewSession("x", "carol", BaseTime, BaseTime.Add(time.Hour))
			x.ID = key
			bad["id "+why] = x
		}
		noCreated := NewSession("x", "carol", BaseTime, BaseTime.Add(time.Hour))
		noCreated.CreatedAt = time.Time{}
		bad["zero CreatedAt"] = noCreated
		noExpiry := NewSession("x", "carol", BaseTime, BaseTime.Add(time.Hour))
		noExpiry.ExpiresAt = time.Time{}
		bad["zero ExpiresAt"] = noExpiry
		for why, x := range bad {
			err := s.PutSession(t.Context(), x)
			checkIs(t, "PutSession with "+why, err, ports.ErrInvalid)
			checkSecrets(t, "PutSession with "+why, err, SessionID("x"))
		}
		_, err := s.Session(t.Context(), SessionID("x"))
		checkIs(t, "Session of a refused session", err, ports.ErrNotFound)
		for why, key := range badKeys {
			_, err := s.Session(t.Context(), key)
			if !errors.Is(err, ports.ErrNotFound) {
				t.Errorf("Session of an id with %s = %v, want an error wrapping ports.ErrNotFound", why, err)
			}
			if err := s.DeleteSession(t.Context(), key); err != nil {
				t.Errorf("DeleteSession of an id with %s = %v, want nil", why, err)
			}
		}
		checkSession(t, "Session after refused puts and deletes", valid, mustSession(t, s, valid.ID))
		// The refused sessions expired nothing and count for nothing.
		n, err := s.DeleteExpiredSessions(t.Context(), BaseTime.Add(2*time.Hour))
		if err != nil || n != 1 {
			t.Errorf("DeleteExpiredSessions after refused puts = %d, %v; want 1, nil", n, err)
		}
	})
}
