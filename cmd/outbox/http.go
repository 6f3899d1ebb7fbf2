package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/siteline/outbox/adapters/devkit/hookcapture"
	"github.com/siteline/outbox/adapters/devkit/smtpcapture"
	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/httpapi"
	"github.com/siteline/outbox/adapters/metrics"
	"github.com/siteline/outbox/adapters/pluginhost"
	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/cmd/outbox/internal/settings"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

// HTTPConfig configures central's operator surface: the web page, the JSON
// API, and the unauthenticated /metrics, /healthz and /readyz.
type HTTPConfig struct {
	// Listen is the address to serve on (host:port); empty serves nothing.
	Listen string
	// TLS: Cert and Key are the server's certificate. Required unless
	// Listen is a loopback address: passwords and session cookies must not
	// travel in clear.
	TLS TLSFiles
	// Operators is the accounts' configuration: how long a login and a
	// token of one's own last, and the login throttle that slows password
	// guessing.
	Operators core.OperatorsConfig
	// Admin, when set, is an account central keeps an admin with this
	// password at every start (a first admin, and how a lost password is
	// reset).
	Admin AdminConfig
	// TrustedProxies are the reverse proxies in front of the page (IP
	// addresses or CIDR ranges): from them, and only from them, the client
	// address is read from X-Forwarded-For. Without them, a proxy's clients
	// would all share the proxy's address in the login throttle.
	TrustedProxies []netip.Prefix
	// ListRefresh is how often the Notifications and Site calls lists
	// refresh themselves in the browser: 1s to 1h, or 0 for never.
	// Default httpapi.DefaultListRefresh (15 s).
	ListRefresh time.Duration
}

// AdminConfig names an admin account central ensures at start.
type AdminConfig struct {
	Name string
	// Password is a reference, env:NAME or file:/path, never the password.
	Password string
}

func (c HTTPConfig) validate() rules {
	var r rules
	if c.Listen == "" {
		if c.TLS.set() || c.Admin.Name != "" || len(c.TrustedProxies) > 0 || len(c.Operators.Throttle.TrustedNetworks) > 0 {
			r.Add("http.listen", "empty, but http.tls, http.admin, http.trusted_proxies or http.login are set: nothing is served")
		}
		return r
	}
	if err := settings.Fields("HTTP.Operators", c.Operators.Validate()); err != nil {
		r = append(r, err)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		r.Add("http.listen", "%q is not host:port", c.Listen)
	} else if !c.TLS.set() && !guard.OnLoopback(c.Listen) {
		r.AddRelated("http.tls", "http.listen", "required: %s is not a loopback address, and passwords and session cookies must not travel in clear", c.Listen)
	}
	if d := c.ListRefresh; d != 0 && (d < time.Second || d > time.Hour) {
		r.Add("http.list_refresh", "must be 0 (off) or between 1s and 1h, got %s", d)
	}
	if c.TLS.set() && c.TLS.CA != "" {
		r.Add("http.tls.ca", "not used: operators authenticate with a password or a token, not a client certificate")
	}
	r = append(r, c.TLS.validate("http.tls", c.TLS.set())...)
	switch {
	case c.Admin.Name == "" && c.Admin.Password != "":
		r.Add("http.admin.name", "required: http.admin.password is set")
	case c.Admin.Name != "" && c.Admin.Password == "":
		r.Add("http.admin.password", "required: a reference, env:NAME or file:/path")
	case c.Admin.Password != "" && !ports.IsSecretRef(c.Admin.Password):
		r.Add("http.admin.password", "must be a reference, env:NAME or file:/path, never the password itself")
	}
	if n := c.Admin.Name; n != "" && strings.ContainsFunc(n, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-@", r))
	}) {
		r.Add("http.admin.name", "%q: only letters, digits and . _ - @", n)
	}
	return r
}

// MetricsConfig's rules for central: /metrics, /healthz and /readyz on a
// listener of their own, apart from the page.
func (m MetricsConfig) validateCentral(pageListen string) rules {
	var r rules
	if m.Listen == "" {
		return r
	}
	if _, _, err := net.SplitHostPort(m.Listen); err != nil {
		r.Add("metrics.listen", "%q is not host:port", m.Listen)
	} else if m.Listen == pageListen {
		r.AddRelated("metrics.listen", "http.listen", "%q is http.listen too; give the metrics an address of their own, or leave metrics.listen out to serve them with the page", m.Listen)
	}
	return r
}

// operatorSurface is what serveHTTP needs from central.
type operatorSurface struct {
	cfg     HTTPConfig
	svc     *core.Service
	store   *sqlstore.DB
	editor  ports.DirectoryEditor
	host    *pluginhost.Host
	obs     observability
	capture *smtpcapture.Server
	// hooks, when set, is outbox dev's webhook capture, shown on /hooks.
	hooks *hookcapture.Server
	// metricsApart: /metrics and /readyz are served on metrics.listen, not
	// with the page.
	metricsApart bool
	// dev skips the admin check and shows a banner.
	dev    bool
	banner string
}

// observability is what central serves without a login — /metrics,
// /healthz and /readyz — and the refusal logs the metrics count.
type observability struct {
	metrics, health http.Handler
	// httpRefusals logs and counts the page's and the API's failed logins;
	// metricsRefusals the connections the metrics listener turns away.
	httpRefusals, metricsRefusals *guard.Refusals
}

// newObservability builds /metrics (the KPIs, read at most once per
// metrics.DefaultKPICacheFor whatever the scrapers do; collectors are more
// metrics, such as the site link's refusals), /healthz and /readyz.
func newObservability(svc *core.Service, store *sqlstore.DB, host *pluginhost.Host, delivery *metrics.DeliveryMetrics,
	collectors []prometheus.Collector, logger *slog.Logger) (observability, error) {
	o := observability{
		httpRefusals:    guard.NewRefusals("http", logger.With("component", "http"), 0),
		metricsRefusals: guard.NewRefusals("metrics", logger.With("component", "metrics"), 0),
	}
	var err error
	o.metrics, err = metrics.CentralHandler(metrics.CentralSources{
		KPIs: svc.KPIs, Window: svc.Config().DeliveredKpiWindow, Plugins: host.Status, Sites: svc.SiteStates,
	}, delivery, logger.With("component", "metrics"), append([]prometheus.Collector{o.httpRefusals, o.metricsRefusals}, collectors...)...)
	if err != nil {
		return observability{}, err
	}
	o.health = metrics.HealthHandler(5*time.Second,
		metrics.Check{Name: "store", Check: storeReadiness(store.Ping, logger)},
		metrics.Check{Name: "plugins", Check: func(context.Context) error {
			var down []string
			for _, s := range host.Status() {
				if !s.Running {
					down = append(down, s.Type)
				}
			}
			if len(down) > 0 {
				return fmt.Errorf("channel plugins down: %s", strings.Join(down, ", "))
			}
			return nil
		}},
	)
	return o, nil
}

// Bounds of the metrics listener: scrapers and probes need few connections.
var metricsConnLimits = guard.ConnLimits{PerAddress: 16, Total: 128}

// serveMetrics serves /metrics, /healthz and /readyz on listen, apart from
// the page, until ctx is done or stop is called; stop waits for the server
// to end.
func serveMetrics(ctx context.Context, listen string, obs observability, logger *slog.Logger) (stop func(), addr string, err error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", obs.metrics)
	mux.Handle("GET /healthz", obs.health)
	mux.Handle("GET /readyz", obs.health)
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, "", fmt.Errorf("metrics: %w", err)
	}
	lis = guard.LimitListener(lis, metricsConnLimits, obs.metricsRefusals)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	logger.Info("metrics and health listening", "url", pageURL(lis.Addr().String(), false)+"metrics")
	return serve(ctx, hs, lis, "metrics", logger), lis.Addr().String(), nil
}

// serve runs hs on lis until ctx is done or the returned stop is called;
// stop waits for the server to end.
func serve(ctx context.Context, hs *http.Server, lis net.Listener, what string, logger *slog.Logger) (stop func()) {
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(what+" server stopped", "err", err)
		}
	})
	shutdown := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}
	done := context.AfterFunc(ctx, shutdown)
	return func() {
		done()
		shutdown()
		wg.Wait()
	}
}

// newOperators builds the operator accounts service and ensures the
// configured admin. Outside dev mode it refuses to go on without any admin.
func newOperators(ctx context.Context, cfg HTTPConfig, store ports.AccountStore, dev bool, logger *slog.Logger) (*core.Operators, error) {
	ops, err := core.NewOperators(store, ports.SystemClock{}, cfg.Operators, logger.With("component", "operators"))
	if err != nil {
		return nil, err
	}
	if a := cfg.Admin; a.Name != "" {
		pw, err := secretref.Resolve(a.Password)
		if err != nil {
			return nil, fmt.Errorf("http.admin.password: %w", err)
		}
		if err := ops.EnsureAdmin(ctx, a.Name, strings.TrimRight(pw, "\r\n")); err != nil {
			return nil, fmt.Errorf("http.admin: %w", err)
		}
	}
	if dev {
		return ops, nil
	}
	ok, err := ops.HasAdmin(ctx)
	if err != nil {
		return nil, fmt.Errorf("look for an admin: %w", err)
	}
	if !ok {
		return nil, errors.New("no admin account or token exists: set http.admin.name and http.admin.password (a reference such as file:/etc/outbox/admin.password) to make one, or try outbox dev")
	}
	return ops, nil
}

// serveHTTP serves the page, the API and, unless metricsApart, /metrics,
// /healthz and /readyz until ctx is done or stop is called; stop waits for
// the server to end. With the metrics apart, the page keeps /healthz (a
// constant "ok" for a load balancer in front of it) and answers 404 for
// /metrics and /readyz. In dev mode it also makes the admin token outbox
// dev prints, which stop revokes.
func serveHTTP(ctx context.Context, o operatorSurface, logger *slog.Logger) (stop func(), addr string, dt devToken, err error) {
	ops, err := newOperators(ctx, o.cfg, o.store.Accounts(), o.dev, logger)
	if err != nil {
		return nil, "", devToken{}, err
	}
	revokeDevToken := func() {}
	if o.dev {
		if dt, revokeDevToken, err = makeDevToken(ctx, ops, logger); err != nil {
			return nil, "", devToken{}, err
		}
	}
	defer func() {
		if err != nil {
			revokeDevToken()
		}
	}()
	var t *tls.Config
	if o.cfg.TLS.set() {
		if t, err = o.cfg.TLS.load(); err != nil {
			return nil, "", devToken{}, fmt.Errorf("http.tls: %w", err)
		}
	}
	public := map[string]http.Handler{"GET /healthz": o.obs.health}
	if !o.metricsApart {
		public["GET /metrics"], public["GET /readyz"] = o.obs.metrics, o.obs.health
	}
	hc := httpapi.Config{
		Outbox: o.svc, Directory: o.store.Directory(), Editor: o.editor, Operators: ops, SiteCalls: o.svc, Clock: ports.SystemClock{},
		SiteStaleAfter: o.svc.Config().SiteStaleAfter, SiteDisconnectedAfter: o.svc.Config().SiteDisconnectedAfter,
		CheckChannel: func(_ context.Context, c ports.ChannelSettings) error {
			if _, ok := o.host.Channel(c.Type); !ok {
				return fmt.Errorf("no channel plugin delivers type %q (plugins: %s)", c.Type, strings.Join(o.host.Types(), ", "))
			}
			return o.host.ValidateSettings(c.Type, c.Settings)
		},
		ChannelSchema:  func(typ string) ([]httpapi.ChannelSetting, bool) { return channelSchema(o.host, typ) },
		Plugins:        o.host.Status,
		Public:         public,
		SecureCookies:  t != nil,
		Banner:         o.banner,
		Refusals:       o.obs.httpRefusals,
		TrustedProxies: o.cfg.TrustedProxies,
		ListRefresh:    o.cfg.ListRefresh,
		Logger:         logger.With("component", "http"),
	}
	if hc.ListRefresh == 0 {
		hc.ListRefresh = httpapi.ListRefreshOff
	}
	if o.capture != nil {
		hc.Mailbox = func() []httpapi.Mail { return capturedMails(o.capture) }
	}
	if o.hooks != nil {
		hc.Hookbox, hc.HooksURL = func() []httpapi.Hook { return capturedHooks(o.hooks) }, o.hooks.URL()
	}
	srv, err := httpapi.New(hc)
	if err != nil {
		return nil, "", devToken{}, err
	}
	lis, err := net.Listen("tcp", o.cfg.Listen)
	if err != nil {
		return nil, "", devToken{}, fmt.Errorf("http: %w", err)
	}
	if t != nil {
		lis = tls.NewListener(lis, t)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 32 << 10,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	logger.Info("operator page and API listening", "url", pageURL(lis.Addr().String(), t != nil), "tls", t != nil,
		"metrics", !o.metricsApart)
	stopServer := serve(ctx, hs, lis, "http", logger)
	return func() {
		stopServer()
		revokeDevToken()
	}, lis.Addr().String(), dt, nil
}

// storeReadiness is the readiness check of the database. /readyz is public,
// so the driver's error (it may name the user, the database, the address)
// goes to the log only and the check says no more than that.
func storeReadiness(ping func(context.Context) error, logger *slog.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := ping(ctx); err != nil {
			logger.Warn("readiness: the database does not answer", "err", err)
			return errors.New("the database does not answer")
		}
		return nil
	}
}

// pageURL is the page's URL on addr.
func pageURL(addr string, tls bool) string {
	if tls {
		return "https://" + addr + "/"
	}
	return "http://" + addr + "/"
}

// capturedMails is the capture server's messages as the page shows them.
func capturedMails(c *smtpcapture.Server) []httpapi.Mail {
	msgs := c.Messages()
	out := make([]httpapi.Mail, len(msgs))
	for i, m := range msgs {
		subject, body := m.Parse()
		out[i] = httpapi.Mail{At: m.At, From: m.From, To: m.To, Subject: subject, Body: body}
	}
	return out
}

// channelSchema is the settings schema the plugin of typ describes, as the
// page's channel form takes it; ok is false when no plugin delivers typ.
func channelSchema(h *pluginhost.Host, typ string) (schema []httpapi.ChannelSetting, ok bool) {
	d, err := h.Describe(typ)
	if err != nil {
		return nil, false
	}
	return httpapi.ChannelSchemaOf(d.Settings), true
}

// capturedHooks is the webhook capture's requests as the page shows them.
func capturedHooks(c *hookcapture.Server) []httpapi.Hook {
	posts := c.Posts()
	out := make([]httpapi.Hook, len(posts))
	for i, p := range posts {
		h := httpapi.Hook{At: p.At, Method: p.Method, Path: p.Path, Query: p.Query, Body: p.Body, Size: p.Size,
			Header: make([]httpapi.HookHeader, len(p.Header))}
		for j, hd := range p.Header {
			h.Header[j] = httpapi.HookHeader{Name: hd.Name, Value: hd.Value}
		}
		out[i] = h
	}
	return out
}
