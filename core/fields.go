package core

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/siteline/outbox/ports"
)

// fieldErrors collects one error per broken rule of a request's fields, so a
// caller learns every problem at once. Central's ingest and the site's Send
// check text fields by the same rules.
type fieldErrors []error

func (e *fieldErrors) add(err error) { *e = append(*e, err) }

// text checks one text field: required (not blank), at most limit bytes,
// valid UTF-8, no NUL byte (which no database stores faithfully).
func (e *fieldErrors) text(field, v string, limit int, required bool) {
	switch {
	case required && strings.TrimSpace(v) == "":
		e.add(fmt.Errorf("%s is empty", field))
	case len(v) > limit:
		e.add(fmt.Errorf("%s is %d bytes, over the limit of %d", field, len(v), limit))
	case !utf8.ValidString(v):
		e.add(fmt.Errorf("%s is not valid UTF-8", field))
	case strings.IndexByte(v, 0) >= 0:
		e.add(fmt.Errorf("%s holds a NUL byte", field))
	}
}

// provenance checks the optional provenance fields a script supplies.
func (e *fieldErrors) provenance(instance, script, execution, parent string) {
	e.text("source instance", instance, maxNameBytes, false)
	e.text("source script", script, maxNameBytes, false)
	e.text("execution id", execution, maxNameBytes, false)
	e.text("parent execution id", parent, maxNameBytes, false)
}

// content checks a notification's subject and body: each a text of at most
// its limit, and not both blank, since a notification with neither says
// nothing and would be delivered empty.
func (e *fieldErrors) content(subject, body string, maxSubject, maxBody int) {
	e.text("subject", subject, maxSubject, false)
	e.text("body", body, maxBody, false)
	if emptyContent(subject, body) {
		e.add(errors.New("subject and body are both empty: give a subject, a body or both"))
	}
}

// emptyContent reports whether a notification has neither subject nor body
// (blank counts as empty).
func emptyContent(subject, body string) bool {
	return strings.TrimSpace(subject) == "" && strings.TrimSpace(body) == ""
}

// err joins the collected errors on one line, or returns nil.
func (e fieldErrors) err() error {
	if len(e) == 0 {
		return nil
	}
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

// parseID accepts a notification id in canonical UUID text form (any case)
// and returns it lowercased.
func parseID(id string) (string, error) {
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 {
		return "", fmt.Errorf("id %q is not a UUID: %w", truncate(id, 40), ports.ErrInvalid)
	}
	return u.String(), nil
}
