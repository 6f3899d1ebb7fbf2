package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// hookBodyShown bounds the body the page shows of one request, and
// hooksShown the requests it shows, the newest: the page refreshes itself
// every hooksRefresh seconds, so it stays small.
const (
	hookBodyShown = 16 << 10
	hooksShown    = 50
	hooksRefresh  = 5
)

// hookView is a Hook as the template shows it.
type hookView struct {
	Hook
	// Text is the body as text, indented when it is JSON, clipped;
	// Clipped says the page or the capture shows less than was received.
	Text    string
	Clipped bool
	Binary  bool
	// Key tells the row apart across refreshes, so that the script keeps
	// what the reader opened.
	Key string
}

// hookPageRoutes registers /hooks when the server has a hooks box.
func (s *Server) hookPageRoutes() {
	if s.cfg.Hookbox != nil {
		s.pageRoute("GET /hooks", ports.RoleViewer, s.pageHooks)
	}
}

func (s *Server) pageHooks(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	hooks := s.cfg.Hookbox()
	total := len(hooks)
	hooks = hooks[max(0, total-hooksShown):]
	slices.Reverse(hooks)
	views := make([]hookView, len(hooks))
	for i, h := range hooks {
		views[i] = newHookView(h)
		views[i].Key = fmt.Sprintf("%d-%d", h.At.UnixNano(), h.Size)
	}
	b := s.newBase(w, r, p, "Webhook capture", "hooks")
	s.render(w, r, http.StatusOK, "hooks", struct {
		base
		Hooks []hookView
		Total int
		URL   string
		Every int // seconds between the script's refreshes
	}{b, views, total, s.cfg.HooksURL, hooksRefresh})
}

// newHookView renders h's body: JSON indented, text as it is, clipped to
// hookBodyShown; a body that is not UTF-8 (once a character the capture's
// clip cut in two is trimmed) is not shown, only its size.
func newHookView(h Hook) hookView {
	v := hookView{Hook: h, Clipped: int64(len(h.Body)) < h.Size}
	body := h.Body
	if v.Clipped {
		body = trimCutRune(body)
	}
	if json.Valid(body) {
		var b bytes.Buffer
		if json.Indent(&b, body, "", "  ") == nil {
			body = b.Bytes()
		}
	}
	if !utf8.Valid(body) {
		v.Binary = true
		return v
	}
	t := string(body)
	if c := human.Clip(t, hookBodyShown); c != t {
		t, v.Clipped = c, true
	}
	v.Text = t
	return v
}

// trimCutRune returns b without the start of a character its end cut in
// two (at most utf8.UTFMax-1 bytes); b as it is otherwise.
func trimCutRune(b []byte) []byte {
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		c := b[len(b)-i]
		if !utf8.RuneStart(c) {
			continue
		}
		if !utf8.FullRune(b[len(b)-i:]) {
			return b[:len(b)-i]
		}
		break
	}
	return b
}
