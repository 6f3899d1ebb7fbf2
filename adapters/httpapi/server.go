// Package httpapi is central's operator surface over HTTP: the
// "Notification Outbox" web page and the JSON API, served by one handler
// layer (ops.go) so that the page and the API never hold the same logic
// twice. The page is server-rendered with html/template, its assets embedded
// in the binary, with one small script for conveniences the page works
// without.
//
// Every route names the least role it needs (viewer, operator, admin). A
// caller proves who it is with the session cookie the login sets or with an
// API token (Authorization: Bearer). Unsafe requests from another origin are
// refused (http.CrossOriginProtection), every response carries security
// headers (CSP, frame-ancestors, nosniff), and templates escape every value.
package httpapi

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/ports"
)

//go:embed web
var webFS embed.FS

// Config configures a Server. Outbox, Directory, Editor and Operators are
// required.
type Config struct {
	Outbox ports.Outbox
	// Directory is read for the lists and channels; Editor changes them,
	// recording each change with its actor in the admin audit log.
	Directory ports.DirectoryAdmin
	Editor    ports.DirectoryEditor
	Operators ports.Operators
	// SiteCalls, when set, serves central's mirror of the sites' cached
	// calls and the sites' health: the "Site calls" and "Sites" views and
	// their API routes.
	SiteCalls ports.SiteCalls
	// SiteStaleAfter and SiteDisconnectedAfter are the thresholds the
	// SiteCalls service turns a site stale and disconnected at, which the
	// Sites view explains; zero means ports.SiteStaleAfter and
	// ports.SiteDisconnectedAfter.
	SiteStaleAfter        time.Duration
	SiteDisconnectedAfter time.Duration
	// CheckChannel, when set, checks channel settings against the schema
	// of the plugin that delivers them before they are stored.
	CheckChannel func(ctx context.Context, c ports.ChannelSettings) error
	// ChannelSchema, when set, is the settings schema of the plugin that
	// delivers channel type typ (ok false when none does): the page's
	// channel form has one input per setting.
	ChannelSchema func(typ string) (schema []ChannelSetting, ok bool)
	// Plugins, when set, reports the channel plugins on the dashboard.
	Plugins func() []ports.PluginStatus
	// Mailbox, when set, shows the mails a local SMTP capture received on
	// the page /mail (dev mode).
	Mailbox func() []Mail
	// Hookbox, when set, shows the requests a local webhook capture
	// received on the page /hooks (dev mode); HooksURL is the capture's
	// URL the page names.
	Hookbox  func() []Hook
	HooksURL string
	// Public are extra routes served without authentication: /metrics,
	// /healthz, /readyz.
	Public map[string]http.Handler
	// SecureCookies sets the Secure attribute on cookies: on unless the
	// page is served over plain HTTP on loopback.
	SecureCookies bool
	// Banner, when set, is shown on every page (dev mode says so).
	Banner string
	// Refusals logs and counts failed and throttled logins, refused
	// credentials and tokens of one's own made too fast (entrance "http",
	// keyed by client address); register it with the metrics. Nil makes one
	// that logs to Logger and is counted nowhere.
	Refusals *guard.Refusals
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client; a request from any other peer is the peer's own.
	TrustedProxies []netip.Prefix
	// OwnTokenRate and OwnTokenBurst bound how fast one account makes
	// tokens of its own (POST /api/v1/me/tokens, what outbox login does):
	// tokens a second on average and at once; zero means
	// DefaultOwnTokenRate and DefaultOwnTokenBurst.
	OwnTokenRate  float64
	OwnTokenBurst int
	// ListRefresh is how often the Notifications and Site calls lists
	// refresh themselves in the browser; zero means DefaultListRefresh,
	// ListRefreshOff (any negative value) never.
	ListRefresh time.Duration
	// Clock is the throughput charts' and GET /throughput's "now" (the
	// service's clock); nil means ports.SystemClock.
	Clock  ports.Clock
	Logger *slog.Logger
}

// DefaultListRefresh is how often a list refreshes itself by default.
const DefaultListRefresh = 15 * time.Second

// ListRefreshOff as Config.ListRefresh keeps the lists still: an operator
// reloads them.
const ListRefreshOff time.Duration = -1

// How fast one account may make tokens of its own by default: a login a
// minute, five at once.
const (
	DefaultOwnTokenRate  = 1.0 / 60
	DefaultOwnTokenBurst = 5
)

// Mail is one captured mail as the page /mail shows it.
type Mail struct {
	At      time.Time
	From    string
	To      []string
	Subject string
	Body    string
}

// Server serves the page and the API.
type Server struct {
	cfg      Config
	log      *slog.Logger
	refusals *guard.Refusals
	// ownTokens limits how fast each account makes tokens of its own.
	ownTokens *guard.KeyedLimiter
	pages     map[string]*template.Template
	mux       *http.ServeMux
	h         http.Handler
	// apiPatterns are the API routes registered, for the OpenAPI test.
	apiPatterns []string
	// chartCache keeps the dashboard's closed hourly buckets (charts.go).
	chartCache chartCache
}

// Cookie names.
const (
	sessionCookie = "outbox_session"
	flashCookie   = "outbox_flash"
)

// Request body limits.
const maxBodyBytes = 1 << 20

// New returns a Server.
func New(cfg Config) (*Server, error) {
	var errs []error
	if cfg.Outbox == nil {
		errs = append(errs, errors.New("httpapi: Config.Outbox is nil"))
	}
	if cfg.Directory == nil {
		errs = append(errs, errors.New("httpapi: Config.Directory is nil"))
	}
	if cfg.Editor == nil {
		errs = append(errs, errors.New("httpapi: Config.Editor is nil"))
	}
	if cfg.Operators == nil {
		errs = append(errs, errors.New("httpapi: Config.Operators is nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = ports.SystemClock{}
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	if cfg.Refusals == nil {
		cfg.Refusals = guard.NewRefusals("http", cfg.Logger, 0)
	}
	if cfg.SiteStaleAfter <= 0 {
		cfg.SiteStaleAfter = ports.SiteStaleAfter
	}
	if cfg.SiteDisconnectedAfter <= 0 {
		cfg.SiteDisconnectedAfter = ports.SiteDisconnectedAfter
	}
	if cfg.OwnTokenRate <= 0 {
		cfg.OwnTokenRate = DefaultOwnTokenRate
	}
	if cfg.OwnTokenBurst <= 0 {
		cfg.OwnTokenBurst = DefaultOwnTokenBurst
	}
	s := &Server{cfg: cfg, log: cfg.Logger, refusals: cfg.Refusals, pages: pages, mux: http.NewServeMux(),
		ownTokens: guard.NewKeyedLimiter(cfg.OwnTokenRate, cfg.OwnTokenBurst)}
	s.routes()
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(s.crossOrigin))
	s.h = securityHeaders(cop.Handler(s.mux))
	return s, nil
}

// Handler returns the HTTP handler of every route.
func (s *Server) Handler() http.Handler { return s.h }

// routes registers every route. A route's role is the least it needs;
// public routes have none.
func (s *Server) routes() {
	static, _ := fs.Sub(webFS, "web/static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", staticFiles(http.FS(static))))
	for path, h := range s.cfg.Public {
		s.mux.Handle(path, h)
	}

	// The JSON API (api.go).
	p := api.Prefix
	s.mux.HandleFunc("GET "+p+"/openapi.json", s.openAPI)
	s.mux.HandleFunc("POST "+p+"/login", s.apiLogin)
	s.mux.HandleFunc("POST "+p+"/logout", s.apiLogout) // clears the cookie even of a dead session
	s.apiRoute("GET "+p+"/me", ports.RoleViewer, s.apiMe)
	s.apiRoute("GET "+p+"/notifications", ports.RoleViewer, s.apiNotifications)
	s.apiRoute("GET "+p+"/notifications/count", ports.RoleViewer, s.apiCount)
	s.apiRoute("GET "+p+"/notifications/{id}", ports.RoleViewer, s.apiNotification)
	s.apiRoute("POST "+p+"/notifications/retry", ports.RoleOperator, s.apiAction(verbRetry))
	s.apiRoute("POST "+p+"/notifications/discard", ports.RoleOperator, s.apiAction(verbDiscard))
	s.retryingAPIRoutes() // api_retrying.go
	s.apiRoute("GET "+p+"/kpis", ports.RoleViewer, s.apiKPIs)
	s.throughputRoutes()
	s.apiRoute("GET "+p+"/lists", ports.RoleViewer, s.apiLists)
	s.apiRoute("GET "+p+"/lists/{name}", ports.RoleViewer, s.apiList)
	s.apiRoute("PUT "+p+"/lists/{name}", ports.RoleAdmin, s.apiPutList)
	s.apiRoute("DELETE "+p+"/lists/{name}", ports.RoleAdmin, s.apiDeleteList)
	s.apiRoute("GET "+p+"/channels", ports.RoleViewer, s.apiChannels)
	s.apiRoute("GET "+p+"/channels/{type}", ports.RoleViewer, s.apiChannel)
	s.apiRoute("PUT "+p+"/channels/{type}", ports.RoleAdmin, s.apiPutChannel)
	s.apiRoute("DELETE "+p+"/channels/{type}", ports.RoleAdmin, s.apiDeleteChannel)
	s.apiRoute("GET "+p+"/users", ports.RoleAdmin, s.apiUsers)
	s.apiRoute("PUT "+p+"/users/{name}", ports.RoleAdmin, s.apiPutUser)
	s.apiRoute("DELETE "+p+"/users/{name}", ports.RoleAdmin, s.apiDeleteUser)
	s.apiRoute("GET "+p+"/tokens", ports.RoleAdmin, s.apiTokens)
	s.apiRoute("POST "+p+"/tokens", ports.RoleAdmin, s.apiCreateToken)
	s.apiRoute("DELETE "+p+"/tokens/{id}", ports.RoleAdmin, s.apiDeleteToken)
	s.apiRoute("POST "+p+"/me/tokens", ports.RoleViewer, s.apiCreateOwnToken)
	s.apiRoute("DELETE "+p+"/me/token", ports.RoleViewer, s.apiRevokeOwnToken)
	s.apiRoute("GET "+p+"/audit", ports.RoleAdmin, s.apiAudit)
	if s.cfg.SiteCalls != nil {
		s.siteCallAPIRoutes()
	}
	s.mux.HandleFunc(p+"/", s.apiNoRoute)

	// The page (pages.go).
	s.mux.HandleFunc("GET /login", s.pageLogin)
	s.mux.HandleFunc("POST /login", s.pageLoginPost)
	s.mux.HandleFunc("POST /logout", s.pageLogout)
	s.pageRoute("GET /{$}", ports.RoleViewer, func(w http.ResponseWriter, r *http.Request, _ ports.Principal) {
		http.Redirect(w, r, "/notifications", http.StatusSeeOther)
	})
	s.pageRoute("GET /notifications", ports.RoleViewer, s.pageNotifications)
	s.pageRoute("GET /notifications/{id}", ports.RoleViewer, s.pageNotification)
	s.pageRoute("POST /notifications/retry", ports.RoleOperator, s.pageAction(verbRetry))
	s.pageRoute("POST /notifications/discard", ports.RoleOperator, s.pageAction(verbDiscard))
	s.pageListRoutes()
	s.pageRoute("GET /dashboard", ports.RoleViewer, s.pageDashboard)
	s.pageRoute("GET /lists", ports.RoleViewer, s.pageLists)
	s.pageRoute("GET /channels", ports.RoleViewer, s.pageChannels)
	s.pageRoute("GET /audit", ports.RoleAdmin, s.pageAudit)
	s.pageRoute("GET /tokens", ports.RoleAdmin, s.pageTokens)
	s.pageRoute("POST /tokens", ports.RoleAdmin, s.pageCreateToken)
	s.pageRoute("POST /tokens/revoke", ports.RoleAdmin, s.pageRevokeToken)
	if s.cfg.Mailbox != nil {
		s.pageRoute("GET /mail", ports.RoleViewer, s.pageMail)
	}
	if s.cfg.SiteCalls != nil {
		s.siteCallPageRoutes()
	}
	s.adminPageRoutes() // admin_pages.go
	s.hookPageRoutes()
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.renderError(w, r, ports.Principal{}, http.StatusNotFound, "There is no page at "+r.URL.Path+".")
	})
}

// handler is a route's handler once the caller is known.
type handler func(w http.ResponseWriter, r *http.Request, p ports.Principal)

// apiRoute registers a JSON route needing role.
func (s *Server) apiRoute(pattern string, role ports.OperatorRole, h handler) {
	s.apiPatterns = append(s.apiPatterns, pattern)
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		p, err := s.authenticate(r)
		if err != nil {
			s.countRefusal(r, err, true)
			s.apiError(w, r, err)
			return
		}
		if !p.Role.Allows(role) {
			s.refusals.Refuse(s.clientAddr(r), refusedRole, "user", logName(p.Name), "path", logPath(r.URL.Path))
			s.apiError(w, r, forbidden(p, role))
			return
		}
		h(w, r, p)
	})
}

// pageRoute registers a page route needing role: a caller with no session
// is sent to the login page, one without the role gets a 403 page.
func (s *Server) pageRoute(pattern string, role ports.OperatorRole, h handler) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		p, err := s.authenticate(r)
		if errors.Is(err, ports.ErrUnauthenticated) {
			s.countRefusal(r, err, false)
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			s.renderError(w, r, p, http.StatusUnauthorized, "Your session has ended. Log in again.")
			return
		}
		if err != nil {
			s.pageError(w, r, p, err)
			return
		}
		if !p.Role.Allows(role) {
			s.refusals.Refuse(s.clientAddr(r), refusedRole, "user", logName(p.Name), "path", logPath(r.URL.Path))
			s.pageError(w, r, p, forbidden(p, role))
			return
		}
		h(w, r, p)
	})
}

// forbidden is the error of a caller whose role is too low.
func forbidden(p ports.Principal, need ports.OperatorRole) error {
	return fmt.Errorf("this needs the %s role; %s has the %s role: %w", need, p.Name, p.Role, ports.ErrForbidden)
}

// crossOrigin answers an unsafe request from another origin.
func (s *Server) crossOrigin(w http.ResponseWriter, r *http.Request) {
	const msg = "cross-origin request refused: unsafe requests must come from the page's own origin"
	s.refusals.Refuse(s.clientAddr(r), refusedCrossOrigin, "path", logPath(r.URL.Path))
	if isAPI(r) {
		writeError(w, http.StatusForbidden, api.CodeForbidden, msg)
		return
	}
	http.Error(w, msg, http.StatusForbidden)
}

// securityHeaders sets the headers every response carries.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// staticFiles serves the embedded assets, cached for an hour.
func staticFiles(fsys http.FileSystem) http.Handler {
	files := http.FileServer(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})
}
