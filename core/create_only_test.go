package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/siteline/outbox/ports"
)

// createConcurrently runs create n times at once and returns how many
// succeeded and how many were refused with ErrConflict.
func createConcurrently(t *testing.T, n int, create func(i int) error) (ok, conflicts int) {
	t.Helper()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := range n {
		wg.Go(func() {
			err := create(i)
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ports.ErrConflict):
			conflicts++
		default:
			t.Fatalf("create: %v", err)
		}
	}
	return ok, conflicts
}

// CreateList makes a list only once: of several creations of one name at
// once, one succeeds, the others are refused with ErrConflict and change
// nothing; PutList still replaces.
func TestCreateListOnlyOnce(t *testing.T) {
	ctx := context.Background()
	e, store, _ := newTestEditor(t, nil)
	ok, conflicts := createConcurrently(t, 8, func(i int) error {
		_, err := e.CreateList(ctx, "root", ports.List{Name: "ops", Type: "email", Targets: []string{fmt.Sprintf("n%d@example.com", i)}})
		return err
	})
	if ok != 1 || conflicts != 7 {
		t.Fatalf("%d creations succeeded and %d were refused, want 1 and 7", ok, conflicts)
	}
	if rs := allRecords(t, store); len(rs) != 1 || rs[0].Action != ports.AdminCreated {
		t.Fatalf("the audit log holds %+v, want one creation", rs)
	}
	_, err := e.CreateList(ctx, "root", ports.List{Name: "ops", Type: "email"})
	if !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("create an existing list: %v", err)
	}
	if _, err := e.PutList(ctx, "root", ports.List{Name: "ops", Type: "email", Targets: []string{"new@example.com"}}); err != nil {
		t.Fatalf("PutList replaces: %v", err)
	}
}

// PutUser with Create makes an account only once, whatever runs at the
// same time; without it the account is changed.
func TestCreateUserOnlyOnce(t *testing.T) {
	ctx := context.Background()
	o, _, _ := newTestOperators(t)
	ok, conflicts := createConcurrently(t, 4, func(i int) error {
		_, err := o.PutUser(ctx, ports.UserRequest{Actor: testActor, Name: "jane", Role: ports.RoleViewer,
			Password: fmt.Sprintf("jane's password %d", i), Create: true})
		return err
	})
	if ok != 1 || conflicts != 3 {
		t.Fatalf("%d creations succeeded and %d were refused, want 1 and 3", ok, conflicts)
	}
	if _, err := o.PutUser(ctx, ports.UserRequest{Actor: testActor, Name: "jane", Role: ports.RoleOperator}); err != nil {
		t.Fatalf("a change without Create: %v", err)
	}
	if _, err := o.PutUser(ctx, ports.UserRequest{Actor: testActor, Name: "nopw", Role: ports.RoleViewer, Create: true}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("a new user without a password: %v", err)
	}
}
