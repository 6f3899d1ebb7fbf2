// Package client is the Go client of central's HTTP JSON API, version 1,
// the one the operator CLI uses:
//
//	c, err := client.New("https://central.example:8080", token,
//		client.WithHTTPClient(&http.Client{Transport: transportWithOurCA}))
//	if err != nil {
//		return err
//	}
//	page, err := c.Notifications(ctx, api.Filter{Status: []ports.Status{ports.StatusParked}}, 50, "")
//
// There is one method per route, each taking a context first; the request
// and response types are those of package api, which the server shares.
// The client authenticates with an API token sent as "Authorization: Bearer".
//
// # Errors
//
// An answer other than 2xx is an *Error carrying the HTTP status, the API's
// error code and its message. errors.Is maps the code to the ports'
// sentinels (ports.ErrInvalid, ErrNotFound, ErrConflict, ErrUnauthenticated,
// ErrForbidden, ErrUnavailable), so a caller can test
// errors.Is(err, ports.ErrForbidden). A server out of reach is an error
// wrapping ports.ErrUnavailable and the transport's error; a cancelled or
// expired context wraps the context's error. Input the client can refuse by
// itself (an empty name) wraps ports.ErrInvalid and sends nothing.
//
// An *Error's text is the server's code and message; other errors name the
// method and the route. No error text holds the token.
// Response bodies are read up to a bound (MaxResponseBytes or
// WithMaxResponseBytes, and MaxErrorBytes for an error's body): a larger
// answer is an error.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/ports"
)

const (
	// MaxResponseBytes bounds the body of a successful answer.
	MaxResponseBytes = 32 << 20
	// MaxErrorBytes bounds the body of an error answer.
	MaxErrorBytes = 64 << 10
)

// Client calls central's HTTP API. It is safe for concurrent use.
type Client struct {
	base  string // scheme://host[/path], no trailing slash
	token string
	hc    *http.Client
	agent string
	limit int64 // of a successful answer's body
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client send its requests through hc: the way to
// give it a private CA, a client certificate or a proxy. The default is
// http.DefaultClient. Bound each call with its context rather than
// hc.Timeout.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(agent string) Option {
	return func(c *Client) { c.agent = agent }
}

// WithMaxResponseBytes bounds the body of a successful answer to n bytes
// instead of MaxResponseBytes.
func WithMaxResponseBytes(n int64) Option {
	return func(c *Client) {
		if n > 0 {
			c.limit = n
		}
	}
}

// New returns a client of the API served at baseURL (http or https, with an
// optional path prefix in front of api.Prefix) that authenticates with
// token; an empty token sends no credential.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimSpace(baseURL))
	if err != nil {
		return nil, fmt.Errorf("server URL: %v: %w", errors.Unwrap(err), ports.ErrInvalid)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("server URL %q: the scheme must be http or https: %w", u.Redacted(), ports.ErrInvalid)
	case u.Host == "":
		return nil, fmt.Errorf("server URL %q names no host: %w", u.Redacted(), ports.ErrInvalid)
	case u.User != nil:
		return nil, fmt.Errorf("server URL %q: give no user or password in it (use a token): %w", u.Redacted(), ports.ErrInvalid)
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("server URL %q: give no query or fragment: %w", u.Redacted(), ports.ErrInvalid)
	}
	c := &Client{
		base:  u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/"),
		token: token,
		hc:    http.DefaultClient,
		agent: "outbox-client",
		limit: MaxResponseBytes,
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Error is an answer of the API other than 2xx.
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Code is the API's error code (api.CodeInvalid, …); when the body was
	// not an API error (a proxy's page), the code the status stands for.
	Code string
	// Message is the server's message for people.
	Message string
}

// Error returns the server's message, a sentence for people; the code
// (for machines) when there is none. The code is not repeated before the
// message: the message says it ("notification X not found").
func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Message
}

// Is maps the error's code to the ports' sentinels: errors.Is(err,
// ports.ErrForbidden) holds for a 403.
func (e *Error) Is(target error) bool {
	switch e.Code {
	case api.CodeInvalid, api.CodeTooLarge:
		return target == ports.ErrInvalid
	case api.CodeUnauthenticated:
		return target == ports.ErrUnauthenticated
	case api.CodeForbidden:
		return target == ports.ErrForbidden
	case api.CodeNotFound:
		return target == ports.ErrNotFound
	case api.CodeConflict:
		return target == ports.ErrConflict
	case api.CodeUnavailable, api.CodeTooManyRequests:
		return target == ports.ErrUnavailable
	}
	return false
}

// codeOfStatus is the API code an HTTP status stands for.
func codeOfStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return api.CodeInvalid
	case http.StatusUnauthorized:
		return api.CodeUnauthenticated
	case http.StatusForbidden:
		return api.CodeForbidden
	case http.StatusNotFound:
		return api.CodeNotFound
	case http.StatusConflict:
		return api.CodeConflict
	case http.StatusRequestEntityTooLarge:
		return api.CodeTooLarge
	case http.StatusTooManyRequests:
		return api.CodeTooManyRequests
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return api.CodeUnavailable
	}
	return api.CodeInternal
}

// Me returns who the token belongs to (GET /me).
func (c *Client) Me(ctx context.Context) (api.Me, error) {
	var out api.Me
	err := c.do(ctx, http.MethodGet, "/me", nil, nil, &out)
	return out, err
}

// Notifications returns one page of notifications matching f, newest first
// (GET /notifications). limit 0 asks for the server's default page size;
// after is the Next cursor of the previous page, "" for the first.
func (c *Client) Notifications(ctx context.Context, f api.Filter, limit int, after string) (api.NotificationPage, error) {
	return c.notifications(ctx, f, limit, after, false)
}

// NotificationsOldestFirst is Notifications oldest first
// (GET /notifications?order=oldest); after is the Next cursor of the
// previous page of this order.
func (c *Client) NotificationsOldestFirst(ctx context.Context, f api.Filter, limit int, after string) (api.NotificationPage, error) {
	return c.notifications(ctx, f, limit, after, true)
}

func (c *Client) notifications(ctx context.Context, f api.Filter, limit int, after string, oldest bool) (api.NotificationPage, error) {
	if limit < 0 {
		return api.NotificationPage{}, fmt.Errorf("notifications: limit %d is negative: %w", limit, ports.ErrInvalid)
	}
	q := f.Values()
	if limit > 0 {
		q.Set(api.ParamLimit, strconv.Itoa(limit))
	}
	if after != "" {
		q.Set(api.ParamAfter, after)
	}
	if oldest {
		q.Set(api.ParamOrder, api.OrderOldest)
	}
	var out api.NotificationPage
	err := c.do(ctx, http.MethodGet, "/notifications", q, nil, &out)
	return out, err
}

// Count returns how many notifications match f (GET /notifications/count).
func (c *Client) Count(ctx context.Context, f api.Filter) (int64, error) {
	out, err := c.CountAt(ctx, f)
	return out.Count, err
}

// CountAt is Count with central's time of the count, the pin of a bulk
// action (GET /notifications/count).
func (c *Client) CountAt(ctx context.Context, f api.Filter) (api.Count, error) {
	var out api.Count
	err := c.do(ctx, http.MethodGet, "/notifications/count", f.Values(), nil, &out)
	return out, err
}

// Notification returns one notification with its history
// (GET /notifications/{id}).
func (c *Client) Notification(ctx context.Context, id string) (api.Detail, error) {
	var out api.Detail
	p, err := path("notification id", "/notifications/", id)
	if err == nil {
		err = c.do(ctx, http.MethodGet, p, nil, nil, &out)
	}
	return out, err
}

// Retry moves the selected Parked notifications back to Pending
// (POST /notifications/retry). Ids that did not move come back in
// ActionResult.Refused, not as an error.
func (c *Client) Retry(ctx context.Context, req api.ActionRequest) (api.ActionResult, error) {
	var out api.ActionResult
	err := c.do(ctx, http.MethodPost, "/notifications/retry", nil, req, &out)
	return out, err
}

// Discard moves the selected Parked notifications to Discarded
// (POST /notifications/discard), as Retry does.
func (c *Client) Discard(ctx context.Context, req api.ActionRequest) (api.ActionResult, error) {
	var out api.ActionResult
	err := c.do(ctx, http.MethodPost, "/notifications/discard", nil, req, &out)
	return out, err
}

// RetryNow makes the selected Retrying notifications due at once, their
// retry count and last error kept (POST /notifications/retry-now), as
// Retry does: ids that did not move come back in ActionResult.Refused.
func (c *Client) RetryNow(ctx context.Context, req api.ActionRequest) (api.ActionResult, error) {
	var out api.ActionResult
	err := c.do(ctx, http.MethodPost, "/notifications/retry-now", nil, req, &out)
	return out, err
}

// Park parks the selected Retrying notifications (POST
// /notifications/park), as Retry does.
func (c *Client) Park(ctx context.Context, req api.ActionRequest) (api.ActionResult, error) {
	var out api.ActionResult
	err := c.do(ctx, http.MethodPost, "/notifications/park", nil, req, &out)
	return out, err
}

// KPIs returns the delivery KPIs, global and per site (GET /kpis).
func (c *Client) KPIs(ctx context.Context) (api.KPIReport, error) {
	var out api.KPIReport
	err := c.do(ctx, http.MethodGet, "/kpis", nil, nil, &out)
	return out, err
}

// Lists returns every notification list (GET /lists).
func (c *Client) Lists(ctx context.Context) ([]api.List, error) {
	var out []api.List
	err := c.do(ctx, http.MethodGet, "/lists", nil, nil, &out)
	return out, err
}

// List returns one list (GET /lists/{name}).
func (c *Client) List(ctx context.Context, name string) (api.List, error) {
	var out api.List
	p, err := path("list name", "/lists/", name)
	if err == nil {
		err = c.do(ctx, http.MethodGet, p, nil, nil, &out)
	}
	return out, err
}

// PutList creates or replaces the list l.Name (PUT /lists/{name}) and
// returns it as stored.
func (c *Client) PutList(ctx context.Context, l api.List) (api.List, error) {
	var out api.List
	p, err := path("list name", "/lists/", l.Name)
	if err == nil {
		err = c.do(ctx, http.MethodPut, p, nil, l, &out)
	}
	return out, err
}

// DeleteList deletes a list (DELETE /lists/{name}).
func (c *Client) DeleteList(ctx context.Context, name string) error {
	p, err := path("list name", "/lists/", name)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodDelete, p, nil, nil, nil)
}

// Channels returns the settings of every channel type (GET /channels).
func (c *Client) Channels(ctx context.Context) ([]api.Channel, error) {
	var out []api.Channel
	err := c.do(ctx, http.MethodGet, "/channels", nil, nil, &out)
	return out, err
}

// Channel returns the settings of one channel type (GET /channels/{type}).
func (c *Client) Channel(ctx context.Context, typ string) (api.Channel, error) {
	var out api.Channel
	p, err := path("channel type", "/channels/", typ)
	if err == nil {
		err = c.do(ctx, http.MethodGet, p, nil, nil, &out)
	}
	return out, err
}

// PutChannel creates or replaces the settings of the channel type ch.Type
// (PUT /channels/{type}) and returns them as stored.
func (c *Client) PutChannel(ctx context.Context, ch api.Channel) (api.Channel, error) {
	var out api.Channel
	p, err := path("channel type", "/channels/", ch.Type)
	if err == nil {
		err = c.do(ctx, http.MethodPut, p, nil, ch, &out)
	}
	return out, err
}

// DeleteChannel deletes the settings of a channel type
// (DELETE /channels/{type}).
func (c *Client) DeleteChannel(ctx context.Context, typ string) error {
	p, err := path("channel type", "/channels/", typ)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodDelete, p, nil, nil, nil)
}

// Users returns every operator account (GET /users).
func (c *Client) Users(ctx context.Context) ([]api.User, error) {
	var out []api.User
	err := c.do(ctx, http.MethodGet, "/users", nil, nil, &out)
	return out, err
}

// PutUser creates the account name or changes its role and, when
// u.Password is set, its password (PUT /users/{name}).
func (c *Client) PutUser(ctx context.Context, name string, u api.PutUser) (api.User, error) {
	var out api.User
	p, err := path("user name", "/users/", name)
	if err == nil {
		err = c.do(ctx, http.MethodPut, p, nil, u, &out)
	}
	return out, err
}

// DeleteUser deletes an account (DELETE /users/{name}).
func (c *Client) DeleteUser(ctx context.Context, name string) error {
	p, err := path("user name", "/users/", name)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodDelete, p, nil, nil, nil)
}

// Tokens returns every API token, without secrets (GET /tokens).
func (c *Client) Tokens(ctx context.Context) ([]api.Token, error) {
	var out []api.Token
	err := c.do(ctx, http.MethodGet, "/tokens", nil, nil, &out)
	return out, err
}

// CreateToken makes an API token (POST /tokens). The returned Secret is the
// only copy there will ever be.
func (c *Client) CreateToken(ctx context.Context, t api.NewToken) (api.CreatedToken, error) {
	var out api.CreatedToken
	err := c.do(ctx, http.MethodPost, "/tokens", nil, t, &out)
	return out, err
}

// DeleteToken revokes the token with that id (DELETE /tokens/{id}).
func (c *Client) DeleteToken(ctx context.Context, id string) error {
	p, err := path("token id", "/tokens/", id)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodDelete, p, nil, nil, nil)
}

// RevokeOwnToken revokes the token the client authenticates with
// (DELETE /me/token): what outbox logout does. The client's token is dead
// afterwards.
func (c *Client) RevokeOwnToken(ctx context.Context) error {
	return c.do(ctx, http.MethodDelete, "/me/token", nil, nil, nil)
}

// Audit returns one page of the admin audit log, newest first (GET /audit).
// q.Limit 0 asks for the server's default page size; q.After is the
// decoded Next cursor of the previous page (api.ParseAuditQuery), 0 for the
// first.
func (c *Client) Audit(ctx context.Context, q api.AuditQuery) (api.AdminPage, error) {
	var out api.AdminPage
	err := c.do(ctx, http.MethodGet, "/audit", q.Values(), nil, &out)
	return out, err
}

// SiteCalls returns one page of central's mirror of the sites' cached
// calls and writes matching f, newest first (GET /site-calls); limit and
// after as for Notifications.
func (c *Client) SiteCalls(ctx context.Context, f api.SiteCallFilter, limit int, after string) (api.SiteCallPage, error) {
	if limit < 0 {
		return api.SiteCallPage{}, fmt.Errorf("site calls: limit %d is negative: %w", limit, ports.ErrInvalid)
	}
	q := f.Values()
	if limit > 0 {
		q.Set(api.ParamLimit, strconv.Itoa(limit))
	}
	if after != "" {
		q.Set(api.ParamAfter, after)
	}
	var out api.SiteCallPage
	err := c.do(ctx, http.MethodGet, "/site-calls", q, nil, &out)
	return out, err
}

// CountSiteCalls returns how many mirror rows match f
// (GET /site-calls/count).
func (c *Client) CountSiteCalls(ctx context.Context, f api.SiteCallFilter) (int64, error) {
	out, err := c.CountSiteCallsAt(ctx, f)
	return out.Count, err
}

// CountSiteCallsAt is CountSiteCalls with central's time of the count,
// the pin of a bulk action (GET /site-calls/count).
func (c *Client) CountSiteCallsAt(ctx context.Context, f api.SiteCallFilter) (api.Count, error) {
	var out api.Count
	err := c.do(ctx, http.MethodGet, "/site-calls/count", f.Values(), nil, &out)
	return out, err
}

// SiteCall returns one mirror row with the commands operators relayed for
// it (GET /site-calls/{site}/{id}).
func (c *Client) SiteCall(ctx context.Context, site, id string) (api.SiteCallDetail, error) {
	var out api.SiteCallDetail
	p, err := path("site", "/site-calls/", site)
	if err != nil {
		return out, err
	}
	p2, err := path("site call id", "/", id)
	if err != nil {
		return out, err
	}
	err = c.do(ctx, http.MethodGet, p+p2, nil, nil, &out)
	return out, err
}

// SiteCallKPIs returns the mirror's counts per site
// (GET /site-calls/kpis).
func (c *Client) SiteCallKPIs(ctx context.Context) ([]api.SiteCallKPI, error) {
	var out []api.SiteCallKPI
	err := c.do(ctx, http.MethodGet, "/site-calls/kpis", nil, nil, &out)
	return out, err
}

// RetrySiteCalls relays a Retry of the selected Parked cached calls to
// their sites (POST /site-calls/retry). Central changes no row: each shows
// the request until its site reports. Rows refused come back in
// SiteCallActionResult.Refused, not as an error.
func (c *Client) RetrySiteCalls(ctx context.Context, req api.SiteCallActionRequest) (api.SiteCallActionResult, error) {
	var out api.SiteCallActionResult
	err := c.do(ctx, http.MethodPost, "/site-calls/retry", nil, req, &out)
	return out, err
}

// DiscardSiteCalls relays a Discard of the selected Parked cached calls
// to their sites (POST /site-calls/discard), as RetrySiteCalls does.
func (c *Client) DiscardSiteCalls(ctx context.Context, req api.SiteCallActionRequest) (api.SiteCallActionResult, error) {
	var out api.SiteCallActionResult
	err := c.do(ctx, http.MethodPost, "/site-calls/discard", nil, req, &out)
	return out, err
}

// Sites returns every site that ever reported, with its state, nodes and
// cached-call counts (GET /sites).
func (c *Client) Sites(ctx context.Context) ([]api.Site, error) {
	var out []api.Site
	err := c.do(ctx, http.MethodGet, "/sites", nil, nil, &out)
	return out, err
}

// Site returns one site (GET /sites/{site}); one that never reported is
// ErrNotFound.
func (c *Client) Site(ctx context.Context, site string) (api.Site, error) {
	var out api.Site
	p, err := path("site", "/sites/", site)
	if err == nil {
		err = c.do(ctx, http.MethodGet, p, nil, nil, &out)
	}
	return out, err
}

// LoginToken logs in with a name and password and makes a token of the
// account's own (POST /login, POST /me/tokens, then POST /logout to close
// the session it used): what outbox login does. The client's own token is
// not sent. The returned Secret is the only copy there will ever be; the
// password appears in no error.
func (c *Client) LoginToken(ctx context.Context, name, password string, req api.NewOwnToken) (api.CreatedToken, error) {
	var out api.CreatedToken
	if strings.TrimSpace(name) == "" {
		return out, fmt.Errorf("the user name is empty: %w", ports.ErrInvalid)
	}
	anon := *c
	anon.token = ""
	login := &request{method: http.MethodPost, route: "/login", in: api.Login{Name: name, Password: password}}
	if err := anon.doRequest(ctx, login, nil); err != nil {
		return out, err
	}
	session := login.respCookies
	if len(session) == 0 {
		return out, fmt.Errorf("POST %s/login: the server set no session cookie", api.Prefix)
	}
	defer func() {
		// The session made the token; it is of no further use.
		_ = anon.doRequest(context.WithoutCancel(ctx), &request{method: http.MethodPost, route: "/logout", cookies: session}, nil)
	}()
	err := anon.doRequest(ctx, &request{method: http.MethodPost, route: "/me/tokens", in: req, cookies: session}, &out)
	return out, err
}

// path is prefix followed by the escaped segment, refusing a segment that
// would name another route.
func path(what, prefix, segment string) (string, error) {
	if strings.TrimSpace(segment) == "" || segment == "." || segment == ".." {
		return "", fmt.Errorf("the %s is empty: %w", what, ports.ErrInvalid)
	}
	return prefix + url.PathEscape(segment), nil
}

// request is one call: what to send, and the cookies the answer set.
type request struct {
	method, route string
	query         url.Values
	in            any
	// cookies are sent with the request (a session, for LoginToken).
	cookies []*http.Cookie
	// respCookies are the cookies the answer set.
	respCookies []*http.Cookie
}

// do sends one request and decodes a 2xx answer's body into out (when out is
// not nil). route is the path after api.Prefix, already escaped.
func (c *Client) do(ctx context.Context, method, route string, query url.Values, in, out any) error {
	return c.doRequest(ctx, &request{method: method, route: route, query: query, in: in}, out)
}

func (c *Client) doRequest(ctx context.Context, r *request, out any) error {
	op := r.method + " " + api.Prefix + r.route
	err := c.send(ctx, r, out)
	if err == nil {
		return nil
	}
	var ae *Error
	if errors.As(err, &ae) {
		ae.Message = c.redact(ae.Message)
		return ae
	}
	return fmt.Errorf("%s: %w", op, c.redactErr(err))
}

func (c *Client) send(ctx context.Context, r *request, out any) error {
	method, in := r.method, r.in
	target := c.base + api.Prefix + r.route
	if len(r.query) > 0 {
		target += "?" + r.query.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode the request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return fmt.Errorf("%v: %w", err, ports.ErrInvalid)
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.agent != "" {
		req.Header.Set("User-Agent", c.agent)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for _, ck := range r.cookies {
		req.AddCookie(&http.Cookie{Name: ck.Name, Value: ck.Value})
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text repeats the URL
		}
		return fmt.Errorf("%w: %w", err, ports.ErrUnavailable)
	}
	defer resp.Body.Close()
	r.respCookies = resp.Cookies()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return errorOf(resp)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxErrorBytes))
		return nil
	}
	b, err := readCapped(resp.Body, c.limit)
	if err != nil {
		return fmt.Errorf("read the answer: %w", err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decode the answer (HTTP %d, %s): %w", resp.StatusCode, contentType(resp), err)
	}
	return nil
}

// errorOf reads an error answer into an *Error.
func errorOf(resp *http.Response) error {
	e := &Error{Status: resp.StatusCode, Code: codeOfStatus(resp.StatusCode)}
	b, err := readCapped(resp.Body, MaxErrorBytes)
	var eb api.ErrorBody
	if err == nil && json.Unmarshal(b, &eb) == nil && eb.Error.Code != "" {
		e.Code, e.Message = eb.Error.Code, eb.Error.Message
		return e
	}
	// Not the API's error body: a proxy's page or a server that is not ours.
	e.Message = fmt.Sprintf("HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	if ct := contentType(resp); ct != "application/json" {
		e.Message += " (" + ct + ", not the API's answer)"
	}
	return e
}

func contentType(resp *http.Response) string {
	ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	if ct = strings.TrimSpace(ct); ct == "" {
		return "no content type"
	}
	return ct
}

// readCapped reads r, refusing more than limit bytes.
func readCapped(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("the answer is over %d bytes", limit)
	}
	return b, nil
}

// redact removes the token from a text that came from elsewhere: a server
// should never echo it, but the client does not rely on that.
func (c *Client) redact(s string) string {
	if c.token == "" {
		return s
	}
	return strings.ReplaceAll(s, c.token, "[token]")
}

// redactErr keeps err (for errors.Is) when its text holds no token, and
// otherwise replaces its text while keeping the sentinels it wrapped.
func (c *Client) redactErr(err error) error {
	if c.token == "" || !strings.Contains(err.Error(), c.token) {
		return err
	}
	return &redacted{text: c.redact(err.Error()), err: err}
}

// redacted is an error whose text had the token removed.
type redacted struct {
	text string
	err  error
}

func (r *redacted) Error() string { return r.text }
func (r *redacted) Unwrap() error { return r.err }
