package sqlstore

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
	f.Add(encodeCursor(cursor{id: "0194f0d2-7a3b-7c4d-8e5f-000000000042"}))
	f.Add("MTc2NzIyNTYwMDAwMDAwMHxh")
	f.Add("OTIyMzM3MjAzNjg1NDc3NTgwN3x4")
	f.Add("fA")
	f.Add("!!")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := decodeCursor(text)
		if err != nil {
			if !errors.Is(err, ports.ErrInvalid) || len(err.Error()) > 300 {
				t.Fatalf("decodeCursor(%q): %v", text, err)
			}
			return
		}
		again, err := decodeCursor(encodeCursor(c))
		if err != nil || !again.createdAt.Equal(c.createdAt) || again.id != c.id {
			t.Fatalf("decodeCursor(%q) = %+v, re-encoded as %+v (%v)", text, c, again, err)
		}
	})
}

// FuzzDecodeSiteCallCursor is FuzzDecodeCursor for the pages of the
// site-call mirror.
func FuzzDecodeSiteCallCursor(f *testing.F) {
	f.Add(encodeSiteCallCursor(ports.SiteCall{Site: "site-1", Operation: ports.Operation{ID: "0194f0d2-7a3b-7c4d-8e5f-000000000042"}}))
	f.Add("eyJjIjoxLCJzIjoiIiwiaSI6IngifQ")
	f.Add("e30")
	f.Add("!!")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := decodeSiteCallCursor(text)
		if err != nil {
			if !errors.Is(err, ports.ErrInvalid) || len(err.Error()) > 300 {
				t.Fatalf("decodeSiteCallCursor(%q): %v", text, err)
			}
			return
		}
		row := ports.SiteCall{Site: c.Site, Operation: ports.Operation{ID: c.ID, CreatedAt: time.UnixMicro(c.CreatedUS)}}
		again, err := decodeSiteCallCursor(encodeSiteCallCursor(row))
		if err != nil || again != c {
			t.Fatalf("decodeSiteCallCursor(%q) = %+v, re-encoded as %+v (%v)", text, c, again, err)
		}
	})
}
