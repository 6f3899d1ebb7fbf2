package errtext

import (
	"errors"
	"fmt"
	"testing"

	"github.com/siteline/outbox/ports"
)

// TestMessageDoesNotStutter pins the sentence an error body carries: no
// layer prefix, no repeated context, no sentinel the code already says.
func TestMessageDoesNotStutter(t *testing.T) {
	id := "01950000-0000-7000-8000-000000000009"
	for _, tt := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("notification %s: %w", id, fmt.Errorf("sqlstore: notification %s: %w", id, ports.ErrNotFound)),
			"notification " + id + " not found"},
		{fmt.Errorf("notification %s: %w", id, fmt.Errorf("memstore: get %s: %w", id, ports.ErrNotFound)),
			"notification " + id + " not found"},
		{fmt.Errorf("id %q is not a UUID: %w", "1234", ports.ErrInvalid), `id "1234" is not a UUID`},
		{fmt.Errorf("memdir: list %q: %w", "ops", ports.ErrNotFound), `list "ops" not found`},
		{fmt.Errorf("site %q never reported to central: %w", "p9", ports.ErrNotFound), `site "p9" never reported to central`},
		{ports.ErrConflict, "conflict"},
		{fmt.Errorf("site call %q of site %q: %w", "c1", "p2", fmt.Errorf("sqlstore: site call %q of %q: %w", "c1", "p2", ports.ErrNotFound)),
			`site call "c1" of site "p2" not found`},
		{fmt.Errorf("GET /api: %w", fmt.Errorf("%w: %w", errors.New("dial tcp 127.0.0.1:1: connection refused"), ports.ErrUnavailable)),
			"GET /api: dial tcp 127.0.0.1:1: connection refused"},
		// The part just before the sentinel names what is missing.
		{fmt.Errorf("retry: %w", fmt.Errorf("notification %s: %w", id, fmt.Errorf("sqlstore: notification %s: %w", id, ports.ErrNotFound))),
			"retry: notification " + id + " not found"},
		// A user's value is never split, even where it holds ": ".
		{fmt.Errorf("channel email: %w", fmt.Errorf("secret %q: %w", "env:SMTP_PASS", ports.ErrNotFound)),
			`channel email: secret "env:SMTP_PASS" not found`},
		{fmt.Errorf("channel email: secret %q: %w", "env:SMTP_PASS", ports.ErrNotFound),
			`channel email: secret "env:SMTP_PASS" not found`},
		// A verb's context says what was done, not what is missing.
		{fmt.Errorf("delete user %q: %w", "bob", fmt.Errorf("sqlstore: delete account: %w", ports.ErrNotFound)),
			`user "bob" not found`},
		{fmt.Errorf("memstore: read token %q: %w", "t1", ports.ErrNotFound), `token "t1" not found`},
		// A layer's name inside a user's value, or not at a layer's start, stays.
		{fmt.Errorf("list %q: %w", "core: sqlstore", ports.ErrNotFound), `list "core: sqlstore" not found`},
		{fmt.Errorf("channel notify: %w", fmt.Errorf("sqlstore: down: %w", ports.ErrUnavailable)), "channel notify: down"},
		{fmt.Errorf("sqlstore: %w", errors.New("sqlstore: connection refused")), "connection refused"},
		{errors.New("plain: words"), "plain: words"},
	} {
		if got := Sentence(tt.err); got != tt.want {
			t.Errorf("Sentence(%q) = %q, want %q", tt.err, got, tt.want)
		}
	}
}
