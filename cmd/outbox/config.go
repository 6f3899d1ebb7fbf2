package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/sitelink"
	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/core"
	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/ports"
	"gopkg.in/yaml.v3"
)

// Config is the configuration of `outbox central` and `outbox migrate`, one
// struct per component. Settings come, each overriding the one before, from
// the defaults (defaultConfig), the YAML file (-config or OUTBOX_CONFIG), the
// environment (OUTBOX_*, see the settings table) and the flags.
// configs/README.md describes every setting.
type Config struct {
	// DataDir holds the embedded SQLite database (outbox.db) when store.dsn
	// is not set. Default ".".
	DataDir  string          `yaml:"data_dir"`
	Store    StoreConfig     `yaml:"store"`
	Outbox   OutboxConfig    `yaml:"outbox"`
	Log      LogConfig       `yaml:"log"`
	Lists    []ListConfig    `yaml:"lists"`
	Channels []ChannelConfig `yaml:"channels"`
	Plugins  PluginsConfig   `yaml:"plugins"`
	// SMTPCapture runs a local SMTP server that keeps what it receives.
	SMTPCapture SMTPCaptureConfig `yaml:"smtp_capture"`
	// Delivery says what the channels may connect to.
	Delivery DeliveryConfig `yaml:"delivery"`
	// Link is the gRPC service sites forward to.
	Link LinkConfig `yaml:"link"`
	// HTTP is the operator surface: the page, the JSON API and /metrics.
	HTTP HTTPConfig `yaml:"http"`
	// Metrics, when its listen is set, serves /metrics, /healthz and
	// /readyz on an address of their own instead of with the page.
	Metrics MetricsConfig `yaml:"metrics"`
	// Secrets limits what the directory's secret references may read.
	Secrets SecretsConfig `yaml:"secrets"`

	// ConfigDir is the configuration file's directory, against which
	// relative file: references resolve; empty (no file) is the working
	// directory. The loader sets it.
	ConfigDir string `yaml:"-"`
}

// LinkConfig configures the site link: the gRPC service sites submit their
// notifications to and ask statuses of.
type LinkConfig struct {
	// Listen is the address to serve on (host:port); empty serves no link.
	Listen string `yaml:"listen"`
	// TLS: Cert and Key are central's certificate; CA, when set, verifies
	// site client certificates, whose CN is the site id. Required unless
	// Listen is a loopback address.
	TLS TLSFiles `yaml:"tls"`
	// Sites are the sites allowed to submit.
	Sites []LinkSiteConfig `yaml:"sites"`
	// MaxMessageBytes bounds one request; a larger one is refused before it
	// is read. Default sitelink.DefaultMaxRecvMsgBytes (6 MiB), which a
	// site's largest batch (4 MiB of subjects and bodies) fits.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// HandshakeTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface; IdleTimeout closes a connection without calls for that long.
	HandshakeTimeout Duration `yaml:"handshake_timeout"`
	IdleTimeout      Duration `yaml:"idle_timeout"`
	// Connections bounds the connections open at once.
	Connections LinkConnectionsConfig `yaml:"connections"`
	// Quota is each site's ingest quota.
	Quota LinkQuotaConfig `yaml:"quota"`
}

// defaultLinkConfig is the link's defaults: no link, the adapter's bounds.
func defaultLinkConfig() LinkConfig {
	return LinkConfig{
		MaxMessageBytes:  sitelink.DefaultMaxRecvMsgBytes,
		HandshakeTimeout: Duration(guard.DefaultHandshakeTimeout),
		IdleTimeout:      Duration(guard.DefaultIdleTimeout),
		Connections:      LinkConnectionsConfig{PerAddress: sitelink.DefaultConnsPerAddress, Total: sitelink.DefaultConnsTotal},
		Quota: LinkQuotaConfig{RowsPerSecond: sitelink.DefaultQuotaRowsPerSecond,
			BytesPerSecond: sitelink.DefaultQuotaBytesPerSecond},
	}
}

// LinkConnectionsConfig bounds the site link's open connections; past a
// bound a new connection is closed at once.
type LinkConnectionsConfig struct {
	// PerAddress is the most from one client address (IP).
	PerAddress int `yaml:"per_address"`
	// Total is the most in all.
	Total int `yaml:"total"`
}

// LinkQuotaConfig is the ingest quota of each site: past it a Submit is
// refused, nothing of it stored, and the site's forwarder retries after the
// delay central gives.
type LinkQuotaConfig struct {
	// RowsPerSecond is the notifications (and status ids) a site may send
	// per second on average, with bursts of two seconds' worth.
	RowsPerSecond int `yaml:"rows_per_second"`
	// BytesPerSecond is the request bytes a site may send per second on
	// average, with bursts of two seconds' worth.
	BytesPerSecond int `yaml:"bytes_per_second"`
}

// LinkSiteConfig is one site allowed on the link.
type LinkSiteConfig struct {
	// ID is the site id; rows it submits must carry it as source site.
	ID string `yaml:"id"`
	// Token, when set, authenticates the site (a reference, env:NAME or
	// file:/path). A site with no token must present a client certificate.
	Token string `yaml:"token"`
}

func (c LinkConfig) validate(o OutboxConfig) rules {
	var r rules
	if c.Listen == "" {
		if len(c.Sites) > 0 || c.TLS.set() {
			r.add("link.listen", "empty, but link.sites or link.tls are set: no link is served")
		}
		return r
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		r.add("link.listen", "%q is not host:port", c.Listen)
	} else if !c.TLS.set() && !guard.OnLoopback(c.Listen) {
		r.addRelated("link.tls", "link.listen", "required: %s is not a loopback address, and sites must not send in clear", c.Listen)
	}
	r = append(r, c.TLS.validate("link.tls", c.TLS.set())...)
	if len(c.Sites) == 0 {
		r.add("link.sites", "empty: no site could submit")
	}
	seen := map[string]bool{}
	for i, s := range c.Sites {
		key := fmt.Sprintf("link.sites[%d]", i)
		switch {
		case strings.TrimSpace(s.ID) == "":
			r.add(key+".id", "required")
		case seen[s.ID]:
			r.add(key+".id", "%q is listed twice", s.ID)
		}
		seen[s.ID] = true
		switch {
		case s.Token == "" && c.TLS.CA == "":
			r.add(key+".token", "required: without link.tls.ca sites authenticate by token only")
		case s.Token != "" && !ports.IsSecretRef(s.Token):
			r.add(key+".token", "must be a reference, env:NAME or file:/path, never the token itself")
		}
	}
	return append(r, c.validateBounds(o)...)
}

// Bounds of the link's message size setting.
const (
	minLinkMessageBytes = 1 << 20
	maxLinkMessageBytes = 256 << 20
)

// linkRowOverhead is what one notification adds on the link besides its
// subject and body, at most: its type data (64 KiB) and its id, list and
// provenance (a few hundred bytes each).
const linkRowOverhead = 72 << 10

// validateBounds checks the link's limits and quota; o bounds the largest
// notification a message must hold.
func (c LinkConfig) validateBounds(o OutboxConfig) rules {
	var r rules
	if c.MaxMessageBytes < minLinkMessageBytes || c.MaxMessageBytes > maxLinkMessageBytes {
		r.add("link.max_message_bytes", "must be from %d (1 MiB) to %d (256 MiB), got %d (leave it out for the default)",
			minLinkMessageBytes, maxLinkMessageBytes, c.MaxMessageBytes)
	}
	if one := o.MaxBodyBytes + o.MaxSubjectBytes + linkRowOverhead; o.MaxBodyBytes > 0 && c.MaxMessageBytes >= minLinkMessageBytes &&
		c.MaxMessageBytes < one {
		r.addRelated("link.max_message_bytes", "outbox.max_body_bytes", "%d cannot hold one notification of outbox.max_body_bytes (%d): want at least %d",
			c.MaxMessageBytes, o.MaxBodyBytes, one)
	}
	for _, d := range []struct {
		key string
		d   Duration
	}{{"link.handshake_timeout", c.HandshakeTimeout}, {"link.idle_timeout", c.IdleTimeout}} {
		if d.d <= 0 {
			r.add(d.key, "must be positive, got %s (leave it out for the default)", d.d)
		}
	}
	positive := func(key string, v int) {
		if v <= 0 {
			r.add(key, "must be positive, got %d (leave it out for the default)", v)
		}
	}
	positive("link.connections.per_address", c.Connections.PerAddress)
	positive("link.connections.total", c.Connections.Total)
	if c.Connections.PerAddress > 0 && c.Connections.Total > 0 && c.Connections.Total < c.Connections.PerAddress {
		r.addRelated("link.connections.total", "link.connections.per_address", "%d is below link.connections.per_address (%d)",
			c.Connections.Total, c.Connections.PerAddress)
	}
	positive("link.quota.rows_per_second", c.Quota.RowsPerSecond)
	positive("link.quota.bytes_per_second", c.Quota.BytesPerSecond)
	return r
}

// SMTPCaptureConfig configures the embedded SMTP capture server: a local
// mail sink for trying outbox without a mail server (the default set-up
// points the email channel at it), like MailHog. It has no TLS and no
// authentication, so it listens on loopback only.
type SMTPCaptureConfig struct {
	// Addr is the loopback address to listen on (127.0.0.1:2525); empty
	// runs no capture server.
	Addr string `yaml:"addr"`
	// Dir, when set, receives every captured message as a .eml file.
	Dir string `yaml:"dir"`
	// Reject lists recipients refused with 550 (an address, or @domain), to
	// try a permanent failure.
	Reject []string `yaml:"reject"`
}

func (c SMTPCaptureConfig) validate() rules {
	var r rules
	if c.Addr == "" {
		if c.Dir != "" || len(c.Reject) > 0 {
			r.add("smtp_capture.addr", "empty, but smtp_capture.dir or reject are set: no capture server runs")
		}
		return r
	}
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil {
		r.add("smtp_capture.addr", "%q is not host:port", c.Addr)
		return r
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		r.add("smtp_capture.addr", "%q is not a loopback address: the capture server has no TLS nor authentication", host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		r.add("smtp_capture.addr", "port %q is not a number from 0 to 65535", port)
	}
	return r
}

// DeliveryConfig configures how the channel plugins reach receivers.
type DeliveryConfig struct {
	// Network is the delivery network policy.
	Network NetworkConfig `yaml:"network"`
}

// NetworkConfig is the delivery network policy: which IP addresses the
// channels may connect to (webhook, Slack and Teams targets, the SMTP server,
// the OAuth2 token endpoint, and what third-party plugins connect to through
// the SDK). Its rules apply on top of the built-in ones
// (channel.NetworkPolicy): loopback, link-local, the cloud metadata
// addresses, unspecified, multicast, broadcast and this machine's own
// interface addresses are denied unless allowed;
// everything else, private networks included, is allowed unless denied. The
// most specific rule wins, deny on a tie.
type NetworkConfig struct {
	// Allow lists IP addresses and CIDR prefixes the channels may reach.
	Allow []string `yaml:"allow"`
	// Deny lists IP addresses and CIDR prefixes they may not.
	Deny []string `yaml:"deny"`
}

func (c DeliveryConfig) validate() rules {
	var r rules
	for _, l := range []struct {
		key     string
		entries []string
	}{{"delivery.network.allow", c.Network.Allow}, {"delivery.network.deny", c.Network.Deny}} {
		for i, e := range l.entries {
			if _, err := channel.ParseNetworkPrefix(e); err != nil {
				r.add(fmt.Sprintf("%s[%d]", l.key, i), "%s", strings.TrimSuffix(err.Error(), ": "+channel.ErrInvalidNetworkPolicy.Error()))
			}
		}
	}
	return r
}

// NetworkPolicy returns the delivery network policy the plugin host passes
// to every plugin process. The configuration must be valid.
func (c DeliveryConfig) NetworkPolicy() (*channel.NetworkPolicy, error) {
	p, err := channel.NewNetworkPolicy(c.Network.Allow, c.Network.Deny)
	if err != nil {
		return nil, fmt.Errorf("delivery.network: %w", err)
	}
	return p, nil
}

// StoreConfig says which database holds the notifications.
type StoreConfig struct {
	// Driver is sqlite (default), postgres or mssql.
	Driver string `yaml:"driver"`
	// DSN is the connection string: for sqlite a file path (default
	// DATA_DIR/outbox.db), for postgres a postgres:// URL, for mssql a
	// sqlserver:// URL. Give passwords through OUTBOX_STORE_DSN, never in a
	// file.
	DSN string `yaml:"dsn"`
	// MaxOpenConns caps the connection pool; 0 lets the store pick.
	MaxOpenConns int `yaml:"max_open_conns"`
}

// OutboxConfig is core.Config in YAML. The defaults are core's.
type OutboxConfig struct {
	// NodeID names this central in leases and logs. It must be unique among
	// the running centrals of one database and stay the same across the
	// node's restarts: at start central releases every lease held under its
	// node id, so that what a crashed run was delivering goes out at once
	// rather than after claim_lease, and a second running central with the
	// same id would lose its leases and deliver some notifications twice.
	// Empty: a random id, which no restart reuses (its leases are waited
	// out).
	NodeID              string   `yaml:"node_id"`
	DispatchInterval    Duration `yaml:"dispatch_interval"`
	DispatchBatchSize   int      `yaml:"dispatch_batch_size"`
	DispatchConcurrency int      `yaml:"dispatch_concurrency"`
	DeliveryTimeout     Duration `yaml:"delivery_timeout"`
	ClaimLease          Duration `yaml:"claim_lease"`
	StuckAgeThreshold   Duration `yaml:"stuck_age_threshold"`
	TerminalRetention   Duration `yaml:"terminal_retention"`
	PurgeInterval       Duration `yaml:"purge_interval"`
	DeliveredKpiWindow  Duration `yaml:"delivered_kpi_window"`
	MaxBatch            int      `yaml:"max_batch"`
	MaxSubjectBytes     int      `yaml:"max_subject_bytes"`
	MaxBodyBytes        int      `yaml:"max_body_bytes"`
}

// LogConfig configures the logs written to standard error.
type LogConfig struct {
	// Level is debug, info (default), warn or error.
	Level string `yaml:"level"`
	// Format is auto (default: colored text on a terminal, JSON otherwise),
	// text or json.
	Format string `yaml:"format"`
}

// ListConfig is one notification list (ports.List).
type ListConfig struct {
	Name    string   `yaml:"name"`
	Type    string   `yaml:"type"`
	Targets []string `yaml:"targets"`
}

// ChannelConfig is the settings of one channel type (ports.ChannelSettings).
type ChannelConfig struct {
	Type string `yaml:"type"`
	// Settings are channel specific; secret values are references
	// (env:NAME, file:/path).
	Settings  map[string]string `yaml:"settings"`
	Retry     RetryConfig       `yaml:"retry"`
	RateLimit float64           `yaml:"rate_limit"`
}

// RetryConfig is a channel's retry policy (ports.RetrySettings).
type RetryConfig struct {
	Backoff     string   `yaml:"backoff"`
	MaxRetries  int      `yaml:"max_retries"`
	Interval    Duration `yaml:"interval"`
	MaxInterval Duration `yaml:"max_interval"`
}

// Duration is a time.Duration written as a Go duration string ("10s",
// "8760h") in YAML, the environment and flags.
type Duration time.Duration

// String returns the duration in Go syntax.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalYAML reads a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseDuration(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*d = v
	return nil
}

// parseDuration parses a Go duration string, with an error that shows the
// expected form.
func parseDuration(s string) (Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (want a number with a unit, e.g. \"10s\", \"5m\", \"8760h\")", s)
	}
	return Duration(d), nil
}

// storeDrivers are the accepted store.driver values.
var storeDrivers = []string{sqlstore.DriverSQLite, sqlstore.DriverPostgres, sqlstore.DriverMSSQL}

// defaultConfig returns the defaults: SQLite in the current directory, core's
// dispatch defaults, info logs in the automatic format.
func defaultConfig() Config {
	d := core.Config{}.WithDefaults()
	return Config{
		DataDir: ".",
		Store:   StoreConfig{Driver: sqlstore.DriverSQLite},
		Outbox: OutboxConfig{
			DispatchInterval:    Duration(d.DispatchInterval),
			DispatchBatchSize:   d.DispatchBatchSize,
			DispatchConcurrency: d.DispatchConcurrency,
			DeliveryTimeout:     Duration(d.DeliveryTimeout),
			ClaimLease:          Duration(d.ClaimLease),
			StuckAgeThreshold:   Duration(d.StuckAgeThreshold),
			TerminalRetention:   Duration(d.TerminalRetention),
			PurgeInterval:       Duration(d.PurgeInterval),
			DeliveredKpiWindow:  Duration(d.DeliveredKpiWindow),
			MaxBatch:            d.MaxBatch,
			MaxSubjectBytes:     d.MaxSubjectBytes,
			MaxBodyBytes:        d.MaxBodyBytes,
		},
		Log:     LogConfig{Level: "info", Format: "auto"},
		Link:    defaultLinkConfig(),
		Secrets: SecretsConfig{EnvPrefix: secretref.DefaultEnvPrefix},
		Plugins: defaultPluginsConfig(),
		HTTP: HTTPConfig{SessionTTL: Duration(core.DefaultSessionTTL), LoginTokenMaxTTL: Duration(core.DefaultMaxOwnTokenTTL),
			Login: defaultLoginConfig()},
	}
}

// SettingError is one broken rule: the setting's key (its YAML path, e.g.
// store.driver or lists[1].type), what is wrong, and where the value came
// from when known (a file and line, an environment variable, a flag).
type SettingError struct {
	Key    string
	Msg    string
	Source string

	// related is the key of another setting the rule depends on; its
	// source is shown when Key itself was not set.
	related string
}

// Error implements error.
func (e *SettingError) Error() string {
	s := e.Key + ": " + e.Msg
	if e.Source != "" {
		s += " [" + e.Source + "]"
	}
	return s
}

// rules collects SettingErrors.
type rules []error

func (r *rules) add(key, format string, args ...any) {
	*r = append(*r, &SettingError{Key: key, Msg: fmt.Sprintf(format, args...)})
}

// addRelated adds a rule on key that another setting, related, brought in.
func (r *rules) addRelated(key, related, format string, args ...any) {
	*r = append(*r, &SettingError{Key: key, Msg: fmt.Sprintf(format, args...), related: related})
}

// Validate checks every component and returns one *SettingError per broken
// rule, joined, or nil.
func (c Config) Validate() error {
	var r rules
	dsnFromDataDir := c.Store.Driver == sqlstore.DriverSQLite && strings.TrimSpace(c.Store.DSN) == ""
	if dsnFromDataDir && strings.TrimSpace(c.DataDir) == "" {
		r.addRelated("data_dir", "store.dsn", "empty (it holds outbox.db when store.dsn is not set)")
	}
	r = append(r, c.Store.validate()...)
	r = append(r, c.Outbox.validate()...)
	r = append(r, c.Log.validate()...)
	r = append(r, c.validateDirectory()...)
	r = append(r, c.Plugins.validate()...)
	r = append(r, c.SMTPCapture.validate()...)
	r = append(r, c.Delivery.validate()...)
	r = append(r, c.Link.validate(c.Outbox)...)
	r = append(r, c.HTTP.validate()...)
	r = append(r, c.Metrics.validateCentral(c.HTTP.Listen)...)
	if sr := c.Secrets.validate(c.ConfigDir); len(sr) > 0 {
		r = append(r, sr...)
	} else {
		r = append(r, c.validateReferences()...)
		r = append(r, c.validateOwnSecretsOutside()...)
	}
	if len(r) == 0 {
		// Backstops: the components' own checks, should ours have missed a rule.
		if err := c.StoreSettings().Validate(); err != nil {
			r.add("store", "%v", err)
		}
		if err := c.CoreConfig().Validate(); err != nil {
			r.add("outbox", "%v", err)
		}
	}
	return errors.Join(r...)
}

// Validate checks the store settings.
func (s StoreConfig) Validate() error { return errors.Join(s.validate()...) }

func (s StoreConfig) validate() rules {
	var r rules
	switch s.Driver {
	case sqlstore.DriverSQLite, sqlstore.DriverPostgres, sqlstore.DriverMSSQL:
		if s.Driver != sqlstore.DriverSQLite && strings.TrimSpace(s.DSN) == "" {
			r.addRelated("store.dsn", "store.driver", "required for driver %s (set OUTBOX_STORE_DSN; keep passwords out of files)", s.Driver)
		}
	case "":
		r.add("store.driver", "empty (want %s)", orList(storeDrivers))
	default:
		r.add("store.driver", "unknown driver %q (want %s)", s.Driver, orList(storeDrivers))
	}
	if s.DSN != "" {
		switch {
		case s.Driver == sqlstore.DriverPostgres && strings.Contains(s.DSN, "://") && !strings.HasPrefix(s.DSN, "postgres://") && !strings.HasPrefix(s.DSN, "postgresql://"):
			r.add("store.dsn", "driver postgres wants a postgres:// URL, got a %s URL", scheme(s.DSN))
		case s.Driver == sqlstore.DriverMSSQL && !strings.HasPrefix(s.DSN, "sqlserver://"):
			r.add("store.dsn", "driver mssql wants a sqlserver:// URL")
		}
	}
	if s.MaxOpenConns < 0 {
		r.add("store.max_open_conns", "must not be negative, got %d (0 lets the store pick)", s.MaxOpenConns)
	}
	return r
}

// scheme returns the scheme of a URL-looking DSN without repeating the rest,
// which may hold a password.
func scheme(dsn string) string {
	s, _, _ := strings.Cut(dsn, "://")
	return s
}

// Validate checks the outbox settings.
func (o OutboxConfig) Validate() error { return errors.Join(o.validate()...) }

func (o OutboxConfig) validate() rules {
	var r rules
	// A node id names the leases of every run of one central: letters and
	// a few marks only, and never the "/" that separates it from the run.
	// Nothing here can check the rule that matters most, that no two
	// running centrals share it (see OutboxConfig.NodeID).
	if o.NodeID != "" {
		if len(o.NodeID) > 64 {
			r.add("outbox.node_id", "longer than 64 characters (%d)", len(o.NodeID))
		}
		if i := strings.IndexFunc(o.NodeID, func(c rune) bool {
			return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-:", c))
		}); i >= 0 {
			r.add("outbox.node_id", "%q holds %q (use letters, digits, '.', '_', '-' and ':')", o.NodeID, o.NodeID[i:i+1])
		}
	}
	positive := func(key string, d Duration) {
		if d <= 0 {
			r.add(key, "must be positive, got %s (leave it out for the default)", d)
		}
	}
	positiveInt := func(key string, v int) {
		if v <= 0 {
			r.add(key, "must be positive, got %d (leave it out for the default)", v)
		}
	}
	positive("outbox.dispatch_interval", o.DispatchInterval)
	positiveInt("outbox.dispatch_batch_size", o.DispatchBatchSize)
	if o.DispatchBatchSize > 10000 {
		r.add("outbox.dispatch_batch_size", "must be at most 10000, got %d", o.DispatchBatchSize)
	}
	positiveInt("outbox.dispatch_concurrency", o.DispatchConcurrency)
	positive("outbox.delivery_timeout", o.DeliveryTimeout)
	positive("outbox.claim_lease", o.ClaimLease)
	if o.ClaimLease > 0 && o.DeliveryTimeout > 0 && o.ClaimLease <= o.DeliveryTimeout {
		r.addRelated("outbox.claim_lease", "outbox.delivery_timeout", "%s must exceed outbox.delivery_timeout (%s), or a slow delivery could be claimed twice", o.ClaimLease, o.DeliveryTimeout)
	}
	positive("outbox.stuck_age_threshold", o.StuckAgeThreshold)
	positive("outbox.terminal_retention", o.TerminalRetention)
	positive("outbox.purge_interval", o.PurgeInterval)
	positive("outbox.delivered_kpi_window", o.DeliveredKpiWindow)
	positiveInt("outbox.max_batch", o.MaxBatch)
	positiveInt("outbox.max_subject_bytes", o.MaxSubjectBytes)
	positiveInt("outbox.max_body_bytes", o.MaxBodyBytes)
	return r
}

// Log levels and formats.
var (
	logLevels  = []string{"debug", "info", "warn", "error"}
	logFormats = []string{"auto", "text", "json"}
)

// Validate checks the log settings.
func (l LogConfig) Validate() error { return errors.Join(l.validate()...) }

func (l LogConfig) validate() rules {
	var r rules
	if !slices.Contains(logLevels, l.Level) {
		r.add("log.level", "unknown level %q (want %s)", l.Level, orList(logLevels))
	}
	if !slices.Contains(logFormats, l.Format) {
		r.add("log.format", "unknown format %q (want %s)", l.Format, orList(logFormats))
	}
	return r
}

// validateDirectory checks lists and channels with the rules of the directory
// that will serve them.
func (c Config) validateDirectory() rules {
	_, err := c.Directory()
	if err == nil {
		return nil
	}
	var r rules
	for _, e := range unjoin(err) {
		var fe *ports.FieldError
		if errors.As(e, &fe) {
			r = append(r, &SettingError{Key: fe.Field, Msg: fe.Msg})
		} else {
			r.add("lists", "%v", e)
		}
	}
	return r
}

// Directory checks the configured lists and channels and holds them in an
// in-memory directory; central seeds the database's directory from it.
func (c Config) Directory() (*memdir.Directory, error) {
	lists := make([]ports.List, len(c.Lists))
	for i, l := range c.Lists {
		lists[i] = ports.List{Name: l.Name, Type: l.Type, Targets: l.Targets}
	}
	channels := make([]ports.ChannelSettings, len(c.Channels))
	for i, ch := range c.Channels {
		channels[i] = ports.ChannelSettings{
			Type:     ch.Type,
			Settings: ch.Settings,
			Retry: ports.RetrySettings{
				Backoff:     ports.Backoff(ch.Retry.Backoff),
				MaxRetries:  ch.Retry.MaxRetries,
				Interval:    time.Duration(ch.Retry.Interval),
				MaxInterval: time.Duration(ch.Retry.MaxInterval),
			},
			RateLimit: ch.RateLimit,
		}
	}
	d, err := memdir.New(lists, channels)
	if err != nil {
		return nil, fmt.Errorf("lists and channels: %w", err)
	}
	return d, nil
}

// StoreSettings returns the sqlstore configuration, with the SQLite file in
// the data directory when no DSN is set.
func (c Config) StoreSettings() sqlstore.Config {
	s := sqlstore.Config{Driver: c.Store.Driver, DSN: c.Store.DSN, MaxOpenConns: c.Store.MaxOpenConns}
	if s.Driver == sqlstore.DriverSQLite && strings.TrimSpace(s.DSN) == "" {
		s.DSN = filepath.Join(c.DataDir, "outbox.db")
	}
	return s
}

// CoreConfig returns the core configuration.
func (c Config) CoreConfig() core.Config {
	o := c.Outbox
	return core.Config{
		NodeID:              o.NodeID,
		DispatchInterval:    time.Duration(o.DispatchInterval),
		DispatchBatchSize:   o.DispatchBatchSize,
		DispatchConcurrency: o.DispatchConcurrency,
		DeliveryTimeout:     time.Duration(o.DeliveryTimeout),
		ClaimLease:          time.Duration(o.ClaimLease),
		StuckAgeThreshold:   time.Duration(o.StuckAgeThreshold),
		TerminalRetention:   time.Duration(o.TerminalRetention),
		PurgeInterval:       time.Duration(o.PurgeInterval),
		DeliveredKpiWindow:  time.Duration(o.DeliveredKpiWindow),
		MaxBatch:            o.MaxBatch,
		MaxSubjectBytes:     o.MaxSubjectBytes,
		MaxBodyBytes:        o.MaxBodyBytes,
	}
}

// dsnHasPassword reports whether a DSN carries a password in clear: a URL
// with user:password@, or a password= / pwd= keyword.
func dsnHasPassword(dsn string) bool {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			return true
		}
	}
	if u, err := url.Parse(dsn); err == nil && (u.Query().Has("password") || u.Query().Has("pwd")) {
		return true
	}
	l := strings.ToLower(dsn)
	return strings.Contains(l, "password=") || strings.Contains(l, "pwd=")
}

// unjoin returns the errors joined in err, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, unjoin(e)...)
		}
		return out
	}
	// Look through one layer of %w wrapping (as Directory adds).
	if u := errors.Unwrap(err); u != nil {
		if _, ok := u.(interface{ Unwrap() []error }); ok {
			return unjoin(u)
		}
	}
	return []error{err}
}

// orList writes "a, b or c".
func orList(list []string) string {
	if len(list) == 1 {
		return list[0]
	}
	return strings.Join(list[:len(list)-1], ", ") + " or " + list[len(list)-1]
}
