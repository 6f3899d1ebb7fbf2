package ports

import (
	"cmp"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The rules every AccountStore applies to what it is asked to keep, checked
// in one place so that the adapters agree. Errors wrap ErrInvalid and name
// the field, never its value (a name may be an e-mail address, an ID the
// hash of a secret).

// Validate reports why a cannot be stored.
func (a Account) Validate() error {
	return cmp.Or(checkAccountKey("Name", a.Name), checkOperatorRole(a.Role),
		checkTimeSet("CreatedAt", a.CreatedAt), checkTimeSet("UpdatedAt", a.UpdatedAt))
}

// Validate reports why t cannot be stored.
func (t StoredToken) Validate() error {
	var account error
	if t.Account != "" {
		account = checkAccountKey("Account", t.Account)
	}
	return cmp.Or(checkAccountKey("ID", t.ID), checkAccountKey("Name", t.Name), checkOperatorRole(t.Role),
		account, checkTimeSet("CreatedAt", t.CreatedAt))
}

// Validate reports why s cannot be stored.
func (s StoredSession) Validate() error {
	return cmp.Or(checkAccountKey("ID", s.ID), checkAccountKey("Account", s.Account),
		checkTimeSet("CreatedAt", s.CreatedAt), checkTimeSet("ExpiresAt", s.ExpiresAt))
}

// IsAccountKey reports whether v may be a key of an AccountStore: non-empty
// UTF-8 without NUL bytes or surrounding white space. A lookup of any other
// value finds nothing.
func IsAccountKey(v string) bool {
	return v != "" && utf8.ValidString(v) && strings.IndexByte(v, 0) < 0 && strings.TrimSpace(v) == v
}

func checkAccountKey(field, v string) error {
	if !IsAccountKey(v) {
		return fmt.Errorf("%s is empty or not UTF-8 without NUL bytes and surrounding white space: %w", field, ErrInvalid)
	}
	return nil
}

func checkOperatorRole(r OperatorRole) error {
	if !r.Valid() {
		return fmt.Errorf("role %q is not one of %v: %w", r, OperatorRoles, ErrInvalid)
	}
	return nil
}

func checkTimeSet(field string, t time.Time) error {
	if t.IsZero() {
		return fmt.Errorf("%s is not set: %w", field, ErrInvalid)
	}
	return nil
}
