package memstore

import (
	"errors"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// FuzzDecodeCursor reads any text as a keyset cursor (the API's after
// parameter, which any caller sets): a malformed one is ErrInvalid with a
// bounded message, and one that decodes encodes back to the same position.
func FuzzDecodeCursor(f *testing.F) {
	f.Add(encodeCursor(cursor{created: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), id: "0194f0d2-7a3b-7c4d-8e5f-000000000042"}))
	f.Add("m1.")
	f.Add("m1.fA")
	f.Add("x1.abc")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := decodeCursor(text)
		if err != nil {
			if !errors.Is(err, ports.ErrInvalid) || len(err.Error()) > 300 {
				t.Fatalf("decodeCursor(%q): %v", text, err)
			}
			return
		}
		again, err := decodeCursor(encodeCursor(c))
		if err != nil || !again.created.Equal(c.created) || again.id != c.id {
			t.Fatalf("decodeCursor(%q) = %+v, re-encoded as %+v (%v)", text, c, again, err)
		}
	})
}

// FuzzDecodeSiteCallCursor is FuzzDecodeCursor for the pages of the
// site-call mirror.
func FuzzDecodeSiteCallCursor(f *testing.F) {
	f.Add(encodeSiteCallCursor(ports.SiteCall{Site: "site-1", Operation: ports.Operation{ID: "x", CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)}}))
	f.Add("s1.")
	f.Add("s1.e30")
	f.Add("m1.abc")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := decodeSiteCallCursor(text)
		if err != nil {
			if !errors.Is(err, ports.ErrInvalid) || len(err.Error()) > 300 {
				t.Fatalf("decodeSiteCallCursor(%q): %v", text, err)
			}
			return
		}
		row := ports.SiteCall{Site: c.Site, Operation: ports.Operation{ID: c.ID, CreatedAt: c.Created}}
		again, err := decodeSiteCallCursor(encodeSiteCallCursor(row))
		if err != nil || !again.Created.Equal(c.Created) || again.Site != c.Site || again.ID != c.ID {
			t.Fatalf("decodeSiteCallCursor(%q) = %+v, re-encoded as %+v (%v)", text, c, again, err)
		}
	})
}
