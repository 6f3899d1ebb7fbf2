package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/siteline/outbox/adapters/httpapi/human"
	"github.com/siteline/outbox/ports"
)

// This file is the page /hooks: the requests a local webhook capture
// received (dev mode), as /mail is the mails of the SMTP capture.

// Hook is one request a webhook capture received, as the page /hooks shows
// it. Header holds no credential's value: the capture hides them.
type Hook struct {
	At           time.Time
	Method, Path string
	// Query is the query string, credential values hidden.
	Query  string
	Header []HookHeader
	// Body is what the capture kept of the body; Size the body's length.
	Body []byte
	Size int64
}

// HookHeader is one header of a Hook.
type HookHeader struct {
	Name, Value string
}

// hookBodyShown bounds the body the page shows of one request.
const hookBodyShown = 16 << 10

// hookView is a Hook as the template shows it.
type hookView struct {
	Hook
	// Text is the body as text, indented when it is JSON, clipped;
	// Clipped says the page or the capture shows less than was received.
	Text    string
	Clipped bool
	Binary  bool
}

// hookPageRoutes registers /hooks when the server has a hooks box.
func (s *Server) hookPageRoutes() {
	if s.cfg.Hookbox != nil {
		s.pageRoute("GET /hooks", ports.RoleViewer, s.pageHooks)
	}
}

func (s *Server) pageHooks(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	hooks := s.cfg.Hookbox()
	slices.Reverse(hooks)
	views := make([]hookView, len(hooks))
	for i, h := range hooks {
		views[i] = newHookView(h)
	}
	b := s.newBase(w, r, p, "Webhook capture", "hooks")
	b.Refresh = 5
	s.render(w, r, http.StatusOK, "hooks", struct {
		base
		Hooks []hookView
		URL   string
	}{b, views, s.cfg.HooksURL})
}

// newHookView renders h's body: JSON indented, text as it is, clipped to
// hookBodyShown; a body that is not UTF-8 is not shown, only its size.
func newHookView(h Hook) hookView {
	v := hookView{Hook: h, Clipped: int64(len(h.Body)) < h.Size}
	body := h.Body
	if json.Valid(body) {
		var b bytes.Buffer
		if json.Indent(&b, body, "", "  ") == nil {
			body = b.Bytes()
		}
	}
	switch {
	case !utf8.Valid(body) && !v.Clipped:
		v.Binary = true
	default:
		t := string(bytes.ToValidUTF8(body, nil)) // a clip may cut a character
		if c := human.Clip(t, hookBodyShown); c != t {
			t, v.Clipped = c, true
		}
		v.Text = t
	}
	return v
}
