package accountstest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// exerciseConcurrent has workers use one store at once, as the nodes of a
// cluster and the requests of one node do: each works on its own account and
// sessions, and in every round all race to create one token name and one
// session ID, which exactly one of them may win.
func exerciseConcurrent(t *testing.T, newStore func(t *testing.T) ports.AccountStore) {
	s := newStore(t)
	const workers, rounds = 8, 10
	var (
		wg          sync.WaitGroup
		errs        = make(chan error, workers*rounds*10)
		tokenWins   [rounds]atomic.Int32
		sessionWins [rounds]atomic.Int32
		expired     atomic.Int64 // as counted by DeleteExpiredSessions
	)
	live := BaseTime.Add(time.Hour)
	dead := BaseTime.Add(-time.Hour)
	lastRole := func(w int) ports.OperatorRole { return ports.OperatorRoles[(w+rounds-1)%3] }
	for w := range workers {
		wg.Go(func() {
			ctx := t.Context()
			name := fmt.Sprintf("worker-%d", w)
			for r := range rounds {
				role := ports.OperatorRoles[(w+r)%3]
				if err := s.PutAccount(ctx, NewAccount(name, role, BaseTime.Add(time.Duration(r)*time.Second))); err != nil {
					errs <- fmt.Errorf("PutAccount(%s): %w", name, err)
				}
				if err := s.PutSession(ctx, NewSession(fmt.Sprintf("%s-%d", name, r), name, BaseTime, live)); err != nil {
					errs <- fmt.Errorf("PutSession(%s, round %d): %w", name, r, err)
				}
				// An expired session of an account nobody deletes.
				if err := s.PutSession(ctx, NewSession(fmt.Sprintf("dead-%s-%d", name, r), "dead-"+name, dead, dead)); err != nil {
					errs <- fmt.Errorf("PutSession(dead-%s, round %d): %w", name, r, err)
				}

				err := s.PutToken(ctx, NewToken(fmt.Sprintf("race-%d-%d", r, w), fmt.Sprintf("race-%d", r), role, BaseTime))
				switch {
				case err == nil:
					tokenWins[r].Add(1)
				case !errors.Is(err, ports.ErrConflict):
					errs <- fmt.Errorf("PutToken(race-%d) = %w, want nil or ErrConflict", r, err)
				}
				err = s.PutSession(ctx, NewSession(fmt.Sprintf("race-%d", r), "racer", BaseTime, live))
				switch {
				case err == nil:
					sessionWins[r].Add(1)
				case !errors.Is(err, ports.ErrConflict):
					errs <- fmt.Errorf("PutSession(race-%d) = %w, want nil or ErrConflict", r, err)
				}

				if a, err := s.Account(ctx, name); err != nil {
					errs <- fmt.Errorf("Account(%s): %w", name, err)
				} else if a.Role != role {
					errs <- fmt.Errorf("Account(%s) has role %q after this worker put %q", name, a.Role, role)
				}
				if r%3 == 0 {
					if _, err := s.Accounts(ctx); err != nil {
						errs <- fmt.Errorf("accounts: %w", err)
					}
					if _, err := s.Tokens(ctx); err != nil {
						errs <- fmt.Errorf("tokens: %w", err)
					}
					n, err := s.DeleteExpiredSessions(ctx, BaseTime)
					if err != nil {
						errs <- fmt.Errorf("DeleteExpiredSessions: %w", err)
					}
					expired.Add(n)
				}
			}
			if w%2 == 1 {
				if err := s.DeleteAccount(ctx, name); err != nil {
					errs <- fmt.Errorf("DeleteAccount(%s): %w", name, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	for r := range rounds {
		if n := tokenWins[r].Load(); n != 1 {
			t.Errorf("round %d: %d workers created token name race-%d, want exactly 1", r, n, r)
		}
		if n := sessionWins[r].Load(); n != 1 {
			t.Errorf("round %d: %d workers created session race-%d, want exactly 1", r, n, r)
		}
		if _, err := s.Session(t.Context(), SessionID(fmt.Sprintf("race-%d", r))); err != nil {
			t.Errorf("Session(race-%d): %v", r, err)
		}
	}
	var wantTokens []string
	for r := range rounds {
		wantTokens = append(wantTokens, fmt.Sprintf("race-%d", r))
	}
	slices.Sort(wantTokens)
	if got := tokenNames(mustTokens(t, s)); !slices.Equal(got, wantTokens) {
		t.Errorf("Tokens = %q, want %q", got, wantTokens)
	}

	var wantAccounts []string
	for w := range workers {
		name := fmt.Sprintf("worker-%d", w)
		if w%2 == 1 {
			_, err := s.Account(t.Context(), name)
			checkIs(t, "Account of a deleted worker", err, ports.ErrNotFound)
		} else {
			wantAccounts = append(wantAccounts, name)
			if a := mustAccount(t, s, name); a.Role != lastRole(w) {
				t.Errorf("Account(%s) has role %q, want the last put's %q", name, a.Role, lastRole(w))
			}
		}
		for r := range rounds {
			id := SessionID(fmt.Sprintf("%s-%d", name, r))
			_, err := s.Session(t.Context(), id)
			if w%2 == 1 && !errors.Is(err, ports.ErrNotFound) {
				t.Errorf("Session %s-%d of a deleted account = %v, want ErrNotFound", name, r, err)
			}
			if w%2 == 0 && err != nil {
				t.Errorf("Session %s-%d: %v", name, r, err)
			}
		}
	}
	if got := accountNames(mustAccounts(t, s)); !slices.Equal(got, wantAccounts) {
		t.Errorf("Accounts = %q, want %q", got, wantAccounts)
	}

	// Every expired session is counted once, by one call or another.
	n, err := s.DeleteExpiredSessions(t.Context(), BaseTime)
	if err != nil {
		t.Fatalf("DeleteExpiredSessions: %v", err)
	}
	if total := expired.Load() + n; total != workers*rounds {
		t.Errorf("DeleteExpiredSessions deleted %d sessions in all, want %d", total, workers*rounds)
	}
}
