package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/human"
	"github.com/siteline/outbox/ports"
)

// This file renders the admin views of the page: the lists and channels
// (read by everyone, changed by admins), the operator accounts and the API
// tokens (admins only), and the admin audit log. Every change goes through
// the operations the JSON API calls (ops.go, ops_admin.go), which write the
// admin audit row; every deletion asks for a confirmation first.

// maxAdminFormBytes bounds the body of the admin forms.
const maxAdminFormBytes = 16 << 10

// tokenExpiries are the lifetimes the token form offers, the first the
// default.
var tokenExpiries = []struct{ Value, Label string }{
	{"30d", "30 days"}, {"1d", "1 day"}, {"7d", "7 days"}, {"90d", "90 days"}, {"365d", "1 year"}, {"never", "never"},
}

type tokensPage struct {
	base
	Tokens   []ports.Token
	Roles    []ports.OperatorRole
	Expiries []struct{ Value, Label string }
	// Created is the token just made, whose Secret is shown this once.
	Created *createdToken
}

// createdToken is a token just made and its secret.
type createdToken struct {
	ports.Token
	Secret string
}

func (s *Server) pageTokens(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	s.renderTokens(w, r, p, http.StatusOK, nil, "")
}

// renderTokens renders the tokens view, with the token just created or an
// error of the form.
func (s *Server) renderTokens(w http.ResponseWriter, r *http.Request, p ports.Principal, status int, created *createdToken, formErr string) {
	ts, err := s.cfg.Operators.Tokens(r.Context())
	if err != nil {
		s.pageError(w, r, p, err)
		return
	}
	v := tokensPage{base: s.newBase(w, r, p, "API tokens", "tokens"), Tokens: ts, Roles: ports.OperatorRoles,
		Expiries: tokenExpiries, Created: created}
	v.Error = formErr
	s.render(w, r, status, "tokens", v)
}

// readAdminForm parses a small form; ok false means the answer is written.
func (s *Server) readAdminForm(w http.ResponseWriter, r *http.Request, p ports.Principal) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxAdminFormBytes)
	if err := r.ParseForm(); err != nil {
		if mbe := new(http.MaxBytesError); errors.As(err, &mbe) {
			s.renderError(w, r, p, http.StatusRequestEntityTooLarge, "The form is over the limit.")
			return false
		}
		s.renderError(w, r, p, http.StatusBadRequest, "The form could not be read.")
		return false
	}
	return true
}

func (s *Server) pageCreateToken(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	if !s.readAdminForm(w, r, p) {
		return
	}
	f := r.PostForm
	in := api.NewToken{Name: strings.TrimSpace(f.Get("name")), Role: ports.OperatorRole(f.Get("role"))}
	ttl, err := parseLifetime(f.Get("expires"))
	if err == nil && ttl > 0 {
		in.ExpiresAt = api.TimePtr(time.Now().Add(ttl))
	}
	var (
		secret string
		t      ports.Token
	)
	if err == nil {
		secret, t, err = s.createToken(r.Context(), p, in)
	}
	if err != nil {
		code, msg := s.classify(r, err)
		s.renderTokens(w, r, p, statusOf[code], nil, msg)
		return
	}
	s.renderTokens(w, r, p, http.StatusCreated, &createdToken{Token: t, Secret: secret}, "")
}

// pageRevokeToken revokes a token once confirmed: the first post shows
// what the token is and asks.
func (s *Server) pageRevokeToken(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	if !s.readAdminForm(w, r, p) {
		return
	}
	id := r.PostForm.Get("id")
	if r.PostForm.Get("confirm") != "yes" {
		ts, err := s.cfg.Operators.Tokens(r.Context())
		if err != nil {
			s.pageError(w, r, p, err)
			return
		}
		i := slices.IndexFunc(ts, func(t ports.Token) bool { return t.ID == id })
		if i < 0 {
			s.pageError(w, r, p, fmt.Errorf("token %s: %w", human.Clip(id, 20), ports.ErrNotFound))
			return
		}
		s.confirmAdmin(w, r, p, adminConfirm{Heading: "Revoke token " + ts[i].Name,
			Message: fmt.Sprintf("Token %s (%s) stops working at once: every script or CLI using it is refused from now on. This cannot be undone.", ts[i].Name, ts[i].Role),
			Button:  "Revoke token " + ts[i].Name, Action: "/tokens/revoke", Return: "/tokens", Fields: []field{{"id", id}}})
		return
	}
	if err := s.deleteToken(r.Context(), p, id); err != nil {
		code, msg := s.classify(r, err)
		s.renderTokens(w, r, p, statusOf[code], nil, msg)
		return
	}
	s.setFlash(w, "Token "+human.Clip(id, 20)+" revoked.")
	http.Redirect(w, r, "/tokens", http.StatusSeeOther)
}

// parseLifetime reads a token lifetime: "never" (0), a number of days
// ("30d") or a Go duration ("12h").
func parseLifetime(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "never" {
		return 0, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err == nil && n > 0 && n <= 3650 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	} else if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d, nil
	}
	return 0, fmt.Errorf("expires: %q is not a lifetime such as 30d or 12h: %w", human.Clip(s, 20), ports.ErrInvalid)
}

func (s *Server) pageAudit(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	q, err := api.ParseAuditQuery(r.URL.Query())
	if err != nil {
		s.pageError(w, r, p, invalid(err))
		return
	}
	page, err := s.cfg.Operators.AdminLog(r.Context(), q.PortsQuery())
	if err != nil {
		s.pageError(w, r, p, err)
		return
	}
	v := struct {
		base
		Records     []ports.AdminRecord
		Query       api.AuditQuery
		Kinds       []ports.AdminKind
		Next, First string
	}{base: s.newBase(w, r, p, "Admin audit log", "audit"), Records: page.Records, Query: q, Kinds: ports.AdminKinds}
	if page.Next != 0 {
		nq := q
		nq.After = page.Next
		v.Next = "/audit?" + nq.Values().Encode()
	}
	if q.After != 0 {
		fq := q
		fq.After = 0
		v.First = "/audit?" + fq.Values().Encode()
	}
	s.render(w, r, http.StatusOK, "audit", v)
}
