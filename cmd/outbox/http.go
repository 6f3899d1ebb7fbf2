package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/siteline/outbox/adapters/httpapi"
	"github.com/siteline/outbox/adapters/metrics"
	"github.com/siteline/outbox/adapters/pluginhost"
	"github.com/siteline/outbox/adapters/secretref"
	"github.com/siteline/outbox/adapters/smtpcapture"
	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

// HTTPConfig configures central's operator surface: the web page, the JSON
// API, and the unauthenticated /metrics, /healthz and /readyz.
type HTTPConfig struct {
	// Listen is the address to serve on (host:port); empty serves nothing.
	Listen string `yaml:"listen"`
	// TLS: Cert and Key are the server's certificate. Required unless
	// Listen is a loopback address: passwords and session cookies must not
	// travel in clear.
	TLS TLSFiles `yaml:"tls"`
	// SessionTTL is how long a login lasts. Default 12h.
	SessionTTL Duration `yaml:"session_ttl"`
	// Admin, when set, is an account central keeps an admin with this
	// password at every start (a first admin, and how a lost password is
	// reset).
	Admin AdminConfig `yaml:"admin"`
}

// AdminConfig names an admin account central ensures at start.
type AdminConfig struct {
	Name string `yaml:"name"`
	// Password is a reference, env:NAME or file:/path, never the password.
	Password string `yaml:"password"`
}

func (c HTTPConfig) validate() rules {
	var r rules
	if c.Listen == "" {
		if c.TLS.set() || c.Admin.Name != "" {
			r.add("http.listen", "empty, but http.tls or http.admin are set: nothing is served")
		}
		return r
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		r.add("http.listen", "%q is not host:port", c.Listen)
	} else if !c.TLS.set() && !isLoopback(c.Listen) {
		r.addRelated("http.tls", "http.listen", "required: %s is not a loopback address, and passwords and session cookies must not travel in clear", c.Listen)
	}
	if c.TLS.set() && c.TLS.CA != "" {
		r.add("http.tls.ca", "not used: operators authenticate with a password or a token, not a client certificate")
	}
	r = append(r, c.TLS.validate("http.tls", c.TLS.set())...)
	if c.SessionTTL < Duration(time.Minute) {
		r.add("http.session_ttl", "must be at least 1m, got %s", c.SessionTTL)
	}
	switch {
	case c.Admin.Name == "" && c.Admin.Password != "":
		r.add("http.admin.name", "required: http.admin.password is set")
	case c.Admin.Name != "" && c.Admin.Password == "":
		r.add("http.admin.password", "required: a reference, env:NAME or file:/path")
	case c.Admin.Password != "" && !ports.IsSecretRef(c.Admin.Password):
		r.add("http.admin.password", "must be a reference, env:NAME or file:/path, never the password itself")
	}
	if n := c.Admin.Name; n != "" && strings.ContainsFunc(n, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-@", r))
	}) {
		r.add("http.admin.name", "%q: only letters, digits and . _ - @", n)
	}
	return r
}

// operatorSurface is what serveHTTP needs from central.
type operatorSurface struct {
	cfg      HTTPConfig
	svc      *core.Service
	store    *sqlstore.Store
	host     *pluginhost.Host
	secrets  secretref.Policy // what references put through the API may read
	delivery *metrics.DeliveryMetrics
	capture  *smtpcapture.Server
	// dev skips the admin check and shows a banner.
	dev    bool
	banner string
}

// newOperators builds the operator accounts service and ensures the
// configured admin. Outside dev mode it refuses to go on without any admin.
func newOperators(ctx context.Context, cfg HTTPConfig, store ports.AccountStore, dev bool, logger *slog.Logger) (*core.Operators, error) {
	ops, err := core.NewOperators(store, ports.SystemClock{}, core.OperatorsConfig{SessionTTL: time.Duration(cfg.SessionTTL)},
		logger.With("component", "operators"))
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

// serveHTTP serves the page, the API, /metrics, /healthz and /readyz until
// ctx is done or stop is called; stop waits for the server to end.
func serveHTTP(ctx context.Context, o operatorSurface, logger *slog.Logger) (stop func(), addr string, err error) {
	ops, err := newOperators(ctx, o.cfg, o.store, o.dev, logger)
	if err != nil {
		return nil, "", err
	}
	plugins := func() []metrics.PluginStatus {
		var out []metrics.PluginStatus
		for _, s := range o.host.Status() {
			out = append(out, metrics.PluginStatus{Type: s.Type, Running: s.Running, Restarts: s.Restarts})
		}
		return out
	}
	mh, err := metrics.CentralHandler(metrics.CentralSources{
		KPIs: o.svc.KPIs, Window: o.svc.Config().DeliveredKpiWindow, Plugins: plugins,
	}, o.delivery, logger.With("component", "metrics"))
	if err != nil {
		return nil, "", err
	}
	health := metrics.HealthHandler(5*time.Second,
		metrics.Check{Name: "store", Check: storeReadiness(o.store.Ping, logger)},
		metrics.Check{Name: "plugins", Check: func(context.Context) error {
			var down []string
			for _, s := range o.host.Status() {
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
	var t *tls.Config
	if o.cfg.TLS.set() {
		if t, err = o.cfg.TLS.load(); err != nil {
			return nil, "", fmt.Errorf("http.tls: %w", err)
		}
	}
	hc := httpapi.Config{
		Outbox: o.svc, Directory: policedDirectory{DirectoryAdmin: o.store, policy: o.secrets}, Operators: ops,
		CheckChannel: func(_ context.Context, c ports.ChannelSettings) error {
			if _, ok := o.host.Channel(c.Type); !ok {
				return fmt.Errorf("no channel plugin delivers type %q (plugins: %s)", c.Type, strings.Join(o.host.Types(), ", "))
			}
			return o.host.ValidateSettings(c.Type, c.Settings)
		},
		Plugins: func() []httpapi.PluginStatus {
			var out []httpapi.PluginStatus
			for _, s := range o.host.Status() {
				out = append(out, httpapi.PluginStatus{Name: s.Name, Types: []string{s.Type}, Running: s.Running, Restarts: s.Restarts})
			}
			return out
		},
		Public:        map[string]http.Handler{"GET /metrics": mh, "GET /healthz": health, "GET /readyz": health},
		SecureCookies: t != nil,
		Banner:        o.banner,
		Logger:        logger.With("component", "http"),
	}
	if o.capture != nil {
		hc.Mailbox = func() []httpapi.Mail { return capturedMails(o.capture) }
	}
	srv, err := httpapi.New(hc)
	if err != nil {
		return nil, "", err
	}
	lis, err := net.Listen("tcp", o.cfg.Listen)
	if err != nil {
		return nil, "", fmt.Errorf("http: %w", err)
	}
	if t != nil {
		lis = tls.NewListener(lis, t)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	logger.Info("operator page and API listening", "url", pageURL(lis.Addr().String(), t != nil), "tls", t != nil)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("http server stopped", "err", err)
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
	}, lis.Addr().String(), nil
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
