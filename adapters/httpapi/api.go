package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/support/errtext"
	"github.com/siteline/outbox/ports"
)

// This file encodes the operations of ops.go as the JSON API.

func (s *Server) apiLogin(w http.ResponseWriter, r *http.Request) {
	var in api.Login
	if err := decodeJSON(w, r, &in); err != nil {
		s.apiError(w, r, err)
		return
	}
	sess, err := s.login(w, r, in.Name, in.Password)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Me{Name: sess.User, Role: sess.Role, ExpiresAt: api.TimePtr(sess.ExpiresAt)})
}

func (s *Server) apiLogout(w http.ResponseWriter, r *http.Request) {
	if err := s.logout(w, r); err != nil {
		s.apiError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) apiMe(w http.ResponseWriter, _ *http.Request, p ports.Principal) {
	writeJSON(w, http.StatusOK, api.Me{Name: p.Name, Role: p.Role})
}

func (s *Server) apiNotifications(w http.ResponseWriter, r *http.Request, _ ports.Principal) {
	q, err := parseListQuery(r.URL.Query())
	if err == nil {
		q.Oldest, err = parseOrder(r.URL.Query())
	}
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	page, err := s.notifications(r.Context(), q)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.FromPage(page))
}

func (s *Server) apiCount(w http.ResponseWriter, r *http.Request, _ ports.Principal) {
	q, err := parseListQuery(r.URL.Query())
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	at := api.TimePtr(time.Now())
	n, err := s.count(r.Context(), q.Filter)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Count{Count: n, At: at})
}

func (s *Server) apiNotification(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	d, err := s.notification(r.Context(), r.PathValue("id"))
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	d = shownDetail(p, d)
	writeJSON(w, http.StatusOK, api.FromDetail(d))
}

func (s *Server) apiAction(v verb) handler {
	return func(w http.ResponseWriter, r *http.Request, p ports.Principal) {
		var in api.ActionRequest
		if err := decodeJSON(w, r, &in); err != nil {
			s.apiError(w, r, err)
			return
		}
		res, err := s.act(r.Context(), p, v, in)
		if err != nil {
			s.apiError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, api.FromActionResult(res))
	}
}

func (s *Server) apiKPIs(w http.ResponseWriter, r *http.Request, _ ports.Principal) {
	k, err := s.kpis(r.Context())
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.FromKPIReport(k))
}

func (s *Server) apiLists(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	ls, err := s.lists(r.Context(), p)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	out := make([]api.List, len(ls))
	for i, l := range ls {
		out[i] = api.FromList(l)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) apiList(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	l, err := s.cfg.Directory.List(r.Context(), r.PathValue("name"))
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.FromList(shownList(p, l)))
}

func (s *Server) apiPutList(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	var in api.List
	if err := decodeJSON(w, r, &in); err != nil {
		s.apiError(w, r, err)
		return
	}
	l, err := s.putList(r.Context(), p, r.PathValue("name"), in, false)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.FromList(l))
}

func (s *Server) apiDeleteList(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	if err := s.deleteList(r.Context(), p, r.PathValue("name")); err != nil {
		s.apiError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// apiChannels lists every channel type in use, as the page's Channels
// view does (channelTypes): a type without a settings row is marked
// Defaults.
func (s *Server) apiChannels(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	ts, err := s.channelTypes(r.Context(), p)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	out := make([]api.Channel, len(ts))
	for i, t := range ts {
		out[i] = apiChannelOf(t, p)
	}
	writeJSON(w, http.StatusOK, out)
}

// apiChannel answers a type's settings row, or the defaults of a type in
// use without one; a type neither configured nor in use is not found.
func (s *Server) apiChannel(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	typ := r.PathValue("type")
	c, err := s.cfg.Directory.ChannelSettings(r.Context(), typ)
	if errors.Is(err, ports.ErrNotFound) {
		ts, terr := s.channelTypes(r.Context(), p)
		if terr != nil {
			s.apiError(w, r, terr)
			return
		}
		if i := slices.IndexFunc(ts, func(t channelType) bool { return t.Type == typ }); i >= 0 {
			writeJSON(w, http.StatusOK, apiChannelOf(ts[i], p))
			return
		}
	}
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	out := api.FromChannel(shownChannel(p, c))
	out.SettingsHidden = !p.Role.Allows(ports.RoleAdmin)
	writeJSON(w, http.StatusOK, out)
}

// apiChannelOf is a channel type in use as the API shows it to p.
func apiChannelOf(t channelType, p ports.Principal) api.Channel {
	var out api.Channel
	if t.Settings != nil {
		out = api.FromChannel(*t.Settings)
	} else {
		out = api.Channel{Type: t.Type, Settings: map[string]string{}, Defaults: true}
	}
	out.SettingsHidden = !p.Role.Allows(ports.RoleAdmin)
	return out
}

func (s *Server) apiPutChannel(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	var in api.Channel
	if err := decodeJSON(w, r, &in); err != nil {
		s.apiError(w, r, err)
		return
	}
	c, err := s.putChannel(r.Context(), p, r.PathValue("type"), in)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.FromChannel(shownChannel(p, c)))
}

func (s *Server) apiDeleteChannel(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	if err := s.deleteChannel(r.Context(), p, r.PathValue("type")); err != nil {
		s.apiError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) apiUsers(w http.ResponseWriter, r *http.Request, _ ports.Principal) {
	us, err := s.cfg.Operators.Users(r.Context())
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	out := make([]api.User, len(us))
	for i, u := range us {
		out[i] = api.FromUser(u)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) apiPutUser(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	var in api.PutUser
	if err := decodeJSON(w, r, &in); err != nil {
		s.apiError(w, r, err)
		return
	}
	u, err := s.putUser(r.Context(), p, r.PathValue("name"), in, false)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.FromUser(u))
}

func (s *Server) apiDeleteUser(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	if err := s.deleteUser(r.Context(), p, r.PathValue("name")); err != nil {
		s.apiError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) apiTokens(w http.ResponseWriter, r *http.Request, _ ports.Principal) {
	ts, err := s.cfg.Operators.Tokens(r.Context())
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	out := make([]api.Token, len(ts))
	for i, t := range ts {
		out[i] = api.FromToken(t)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) apiCreateToken(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	var in api.NewToken
	if err := decodeJSON(w, r, &in); err != nil {
		s.apiError(w, r, err)
		return
	}
	secret, t, err := s.createToken(r.Context(), p, in)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, api.CreatedToken{Token: api.FromToken(t), Secret: secret})
}

func (s *Server) apiDeleteToken(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	if err := s.deleteToken(r.Context(), p, r.PathValue("id")); err != nil {
		s.apiError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// apiCreateOwnToken makes a token bound to the logged-in account: the way
// outbox login turns a password into a token.
func (s *Server) apiCreateOwnToken(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	if !p.Session {
		// Refused before the body is read: a token never makes tokens of
		// its own.
		s.apiError(w, r, fmt.Errorf("only a login with a password (a session) makes a token of its own, not an API token: %w", ports.ErrForbidden))
		return
	}
	if !s.ownTokens.Allow(p.Name) {
		// Refused before the body is read: each token made is a row and an
		// audit record, and a session could otherwise make them by the
		// thousand.
		wait := max(time.Second, s.ownTokens.RetryAfter(p.Name, 1))
		s.refusals.Refuse(s.clientAddr(r), refusedOwnTokenRate, "user", logName(p.Name))
		w.Header().Set("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
		every := time.Duration(float64(time.Second) / s.cfg.OwnTokenRate).Round(time.Second)
		writeError(w, http.StatusTooManyRequests, api.CodeTooManyRequests, fmt.Sprintf(
			"%s made too many tokens of its own lately (%d at once, then one every %s); try again in %s",
			p.Name, s.cfg.OwnTokenBurst, every, wait.Round(time.Second)))
		return
	}
	var in api.NewOwnToken
	if err := decodeJSON(w, r, &in); err != nil {
		s.apiError(w, r, err)
		return
	}
	req, err := ownTokenRequest(in)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	secret, t, err := s.cfg.Operators.CreateOwnToken(r.Context(), p, req)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, api.CreatedToken{Token: api.FromToken(t), Secret: secret})
}

// apiRevokeOwnToken revokes the token the request carries: outbox logout.
func (s *Server) apiRevokeOwnToken(w http.ResponseWriter, r *http.Request, p ports.Principal) {
	if err := s.cfg.Operators.RevokeOwnToken(r.Context(), p); err != nil {
		s.apiError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// apiAudit answers a page of the admin audit log.
func (s *Server) apiAudit(w http.ResponseWriter, r *http.Request, _ ports.Principal) {
	q, err := api.ParseAuditQuery(r.URL.Query())
	if err != nil {
		s.apiError(w, r, invalid(err))
		return
	}
	page, err := s.cfg.Operators.AdminLog(r.Context(), q.PortsQuery())
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.FromAdminPage(page))
}

// apiNoRoute answers a request no API route takes: 405 with the methods
// the path does take, or 404.
func (s *Server) apiNoRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" && pattern != api.Prefix+"/" {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "no such API route: "+r.Method+" "+r.URL.Path)
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed,
		fmt.Sprintf("%s %s: this route takes %s", r.Method, r.URL.Path, strings.Join(allow, ", ")))
}

// statusOf maps an API error code to its HTTP status.
var statusOf = map[string]int{
	api.CodeInvalid:          http.StatusBadRequest,
	api.CodeUnauthenticated:  http.StatusUnauthorized,
	api.CodeForbidden:        http.StatusForbidden,
	api.CodeNotFound:         http.StatusNotFound,
	api.CodeMethodNotAllowed: http.StatusMethodNotAllowed,
	api.CodeConflict:         http.StatusConflict,
	api.CodeTooLarge:         http.StatusRequestEntityTooLarge,
	api.CodeTooManyRequests:  http.StatusTooManyRequests,
	api.CodeUnavailable:      http.StatusServiceUnavailable,
	api.CodeInternal:         http.StatusInternalServerError,
}

// errTooLarge reports a request body over maxBodyBytes.
var errTooLarge = fmt.Errorf("the request body is over the limit of %d bytes", maxBodyBytes)

// apiError answers err as JSON. Internal errors are logged and answered
// with a generic message, so that no database detail reaches the caller.
func (s *Server) apiError(w http.ResponseWriter, r *http.Request, err error) {
	code, msg := s.classify(r, err)
	if code == api.CodeUnauthenticated {
		w.Header().Set("WWW-Authenticate", `Bearer realm="outbox"`)
	}
	setRetryAfter(w, err)
	writeError(w, statusOf[code], code, msg)
}

// classify maps err to an API code and the message the caller may see.
func (s *Server) classify(r *http.Request, err error) (code, msg string) {
	if errors.Is(err, errTooLarge) {
		return api.CodeTooLarge, err.Error()
	}
	code = api.CodeOf(err)
	if code == api.CodeInternal {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		return code, "internal error; the server log has the details"
	}
	return code, errtext.Sentence(err)
}

// decodeJSON reads one JSON value of at most maxBodyBytes into v, refusing
// unknown fields and trailing data.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		return fmt.Errorf("the body must be JSON (Content-Type: application/json), not %q: %w", ct, ports.ErrInvalid)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errTooLarge
		}
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("the request needs a JSON body: %w", ports.ErrInvalid)
		}
		return fmt.Errorf("malformed JSON body: %v: %w", err, ports.ErrInvalid)
	}
	if dec.More() {
		return fmt.Errorf("the body holds more than one JSON value: %w", ports.ErrInvalid)
	}
	return nil
}

// writeJSON writes v as the JSON body with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away
}

// writeError writes an API error body.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, api.ErrorBody{Error: api.Error{Code: code, Message: msg}})
}

// isAPI reports whether r is for the JSON API.
func isAPI(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, api.Prefix+"/") }
