package ports

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// AdminAudit keeps the admin audit log: who changed which list, channel,
// account or API token, when, and how. The core appends one record per
// change (core.Operators for accounts and tokens, core.DirectoryEditor for
// lists and channels); admins read it through the API, the CLI and the page.
// adapters/sqlstore keeps it in the database next to what it records,
// adapters/memstore in memory; ports/adminaudittest is the contract.
//
// A record never holds a secret: no password, no token, no clear value of a
// secret setting (the core writes summaries that leave them out). Records
// are never changed or deleted through the port. The store is safe for
// concurrent use, and any number of central nodes may share one.
type AdminAudit interface {
	// AppendAdmin stores r and returns it with its ID set. r.ID is ignored.
	// A record that breaks the rules of [AdminRecord.Validate] is refused
	// with an error wrapping ErrInvalid, and nothing is stored.
	AppendAdmin(ctx context.Context, r AdminRecord) (AdminRecord, error)

	// AdminRecords returns the records q selects, newest first (ID
	// descending), at most q.Limit of them. A Limit outside 1 to
	// MaxAdminPage is refused with ErrInvalid.
	AdminRecords(ctx context.Context, q AdminQuery) ([]AdminRecord, error)
}

// AdminKind is what an admin change changed.
type AdminKind string

// The kinds of admin changes.
const (
	AdminKindList    AdminKind = "list"
	AdminKindChannel AdminKind = "channel"
	AdminKindUser    AdminKind = "user"
	AdminKindToken   AdminKind = "token"
)

// AdminKinds lists every AdminKind.
var AdminKinds = []AdminKind{AdminKindList, AdminKindChannel, AdminKindUser, AdminKindToken}

// Valid reports whether k is one of AdminKinds.
func (k AdminKind) Valid() bool {
	for _, v := range AdminKinds {
		if k == v {
			return true
		}
	}
	return false
}

// AdminAction is what was done.
type AdminAction string

// The actions of admin changes.
const (
	// AdminCreated: the entry did not exist.
	AdminCreated AdminAction = "created"
	// AdminChanged: the entry existed and changed (the summary says how).
	AdminChanged AdminAction = "changed"
	// AdminPassword: an account's password was set, nothing else changed.
	AdminPassword AdminAction = "password"
	// AdminDeleted: a list, channel or account was deleted.
	AdminDeleted AdminAction = "deleted"
	// AdminRevoked: an API token was revoked.
	AdminRevoked AdminAction = "revoked"
)

// AdminActions lists every AdminAction.
var AdminActions = []AdminAction{AdminCreated, AdminChanged, AdminPassword, AdminDeleted, AdminRevoked}

// Valid reports whether a is one of AdminActions.
func (a AdminAction) Valid() bool {
	for _, v := range AdminActions {
		if a == v {
			return true
		}
	}
	return false
}

// ActorConfig is the actor of the changes central makes at start from its
// configuration file (the seeded lists and channels, the configured admin).
// Changes central makes by itself otherwise are ActorSystem's.
const ActorConfig = "config"

// Bounds of an admin record and of a page of them.
const (
	// MaxAdminName bounds AdminRecord.Name and Actor, in bytes.
	MaxAdminName = 400
	// MaxAdminSummary bounds AdminRecord.Summary, in bytes.
	MaxAdminSummary = 2000
	// MaxAdminPage bounds AdminQuery.Limit.
	MaxAdminPage = 500
)

// AdminRecord is one admin change.
type AdminRecord struct {
	// ID orders the records: the store sets it, increasing with each
	// append.
	ID int64
	At time.Time
	// Actor is who made the change: an account's name, "token:<name>" for
	// an API token of its own, ActorConfig or ActorSystem.
	Actor string
	Kind  AdminKind
	// Name is the list's name, the channel's type, the account's name or
	// the token's name.
	Name   string
	Action AdminAction
	// Summary says what changed, without any secret value.
	Summary string
}

// Validate reports why r cannot be stored: At unset; Actor or Name empty,
// over MaxAdminName bytes, or not UTF-8 without NUL bytes and surrounding
// white space; an unknown Kind or Action; a Summary over MaxAdminSummary
// bytes or not UTF-8 without NUL bytes. Errors wrap ErrInvalid and name the
// field, never its value.
func (r AdminRecord) Validate() error {
	return cmp.Or(
		checkTimeSet("At", r.At),
		checkAdminText("Actor", r.Actor, MaxAdminName, true),
		checkAdminKind(r.Kind),
		checkAdminText("Name", r.Name, MaxAdminName, true),
		checkAdminAction(r.Action),
		checkAdminText("Summary", r.Summary, MaxAdminSummary, false),
	)
}

// AdminQuery selects admin records. Zero fields do not filter.
type AdminQuery struct {
	Kind AdminKind
	Name string
	// Before keeps the records whose ID is below it: the ID of the last
	// record of the previous page. 0 starts at the newest.
	Before int64
	// Limit is the most records returned, 1 to MaxAdminPage.
	Limit int
}

// Validate reports why q cannot be answered.
func (q AdminQuery) Validate() error {
	switch {
	case q.Kind != "" && !q.Kind.Valid():
		return fmt.Errorf("kind %q is not one of %v: %w", q.Kind, AdminKinds, ErrInvalid)
	case q.Before < 0:
		return fmt.Errorf("before is negative: %w", ErrInvalid)
	case q.Limit < 1 || q.Limit > MaxAdminPage:
		return fmt.Errorf("limit %d is not between 1 and %d: %w", q.Limit, MaxAdminPage, ErrInvalid)
	case q.Name != "" && len(q.Name) > MaxAdminName:
		return fmt.Errorf("name is over %d bytes: %w", MaxAdminName, ErrInvalid)
	}
	return nil
}

func checkAdminKind(k AdminKind) error {
	if !k.Valid() {
		return fmt.Errorf("kind %q is not one of %v: %w", k, AdminKinds, ErrInvalid)
	}
	return nil
}

func checkAdminAction(a AdminAction) error {
	if !a.Valid() {
		return fmt.Errorf("action %q is not one of %v: %w", a, AdminActions, ErrInvalid)
	}
	return nil
}

func checkAdminText(field, v string, maxBytes int, key bool) error {
	switch {
	case len(v) > maxBytes:
		return fmt.Errorf("%s is over %d bytes: %w", field, maxBytes, ErrInvalid)
	case key && !IsAccountKey(v):
		return fmt.Errorf("%s is empty or not UTF-8 without NUL bytes and surrounding white space: %w", field, ErrInvalid)
	case !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0:
		return fmt.Errorf("%s is not UTF-8 without NUL bytes: %w", field, ErrInvalid)
	}
	return nil
}
