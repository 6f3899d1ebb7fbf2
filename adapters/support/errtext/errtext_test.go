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
		{errors.New("plain: words"), "plain: words"},
	} {
		if got := Sentence(tt.err); got != tt.want {
			t.Errorf("Sentence(%q) = %q, want %q", tt.err, got, tt.want)
		}
	}
}
