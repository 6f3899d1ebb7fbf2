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
	"github.com/siteline/outbox/adapters/httpapi"
	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/sitelink"
	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/cmd/outbox/internal/settings"
	"github.com/siteline/outbox/core"
	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/ports"
)

// Config is the configuration of `outbox central` and `outbox migrate`, one
// struct per component, the components' own where they have one
// (sqlstore.Config, core.Config). Settings come, each overriding the one
// before, from the defaults (defaultConfig), the YAML file (-config or
// OUTBOX_CONFIG), the environment (OUTBOX_*) and the flags; centralSettings
// declares every one of them, and configs/README.md describes each.
type Config struct {
	// DataDir holds the embedded SQLite database (outbox.db) when store.dsn
	// is not set. Default ".".
	DataDir string
	// Store says which database holds the notifications; its DSN, for
	// SQLite, defaults to DATA_DIR/outbox.db (see StoreSettings).
	Store sqlstore.Config
	// Outbox is the core's configuration: the dispatcher, leases,
	// retention and size limits.
	Outbox   core.Config
	Log      LogConfig
	Lists    []ListConfig
	Channels []ChannelConfig
	Plugins  PluginsConfig
	// SMTPCapture runs a local SMTP server that keeps what it receives.
	SMTPCapture SMTPCaptureConfig
	// Delivery says what the channels may connect to.
	Delivery DeliveryConfig
	// Link is the gRPC service sites forward to.
	Link LinkConfig
	// HTTP is the operator surface: the page, the JSON API and /metrics.
	HTTP HTTPConfig
	// Metrics, when its listen is set, serves /metrics, /healthz and
	// /readyz on an address of their own instead of with the page.
	Metrics MetricsConfig
	// Secrets limits what the directory's secret references may read.
	Secrets SecretsConfig

	// ConfigDir is the configuration file's directory, against which
	// relative file: references resolve; empty (no file) is the working
	// directory. The loader sets it.
	ConfigDir string
}

// LinkConfig configures the site link: the gRPC service sites submit their
// notifications to and ask statuses of.
type LinkConfig struct {
	// Listen is the address to serve on (host:port); empty serves no link.
	Listen string
	// TLS: Cert and Key are central's certificate; CA, when set, verifies
	// site client certificates, whose CN is the site id. Required unless
	// Listen is a loopback address.
	TLS TLSFiles
	// Sites are the sites allowed to submit.
	Sites []LinkSiteConfig
	// Limits bound what the sites may make the link spend: the request
	// size (default sitelink.DefaultMaxRecvMsgBytes, 6 MiB, which a site's
	// largest batch of 4 MiB of subjects and bodies fits), the handshake
	// and idle times, the connections open at once, and each site's ingest
	// quota (past it a Submit is refused, nothing of it stored, and the
	// site's forwarder retries after the delay central gives).
	Limits sitelink.Limits
}

// LinkSiteConfig is one site allowed on the link: an entry of the record
// setting link.sites, whose keys are its yaml tags.
type LinkSiteConfig struct {
	// ID is the site id; rows it submits must carry it as source site.
	ID string `yaml:"id"`
	// Token, when set, authenticates the site (a reference, env:NAME or
	// file:/path). A site with no token must present a client certificate.
	Token string `yaml:"token"`
}

func (c LinkConfig) validate(o core.Config) rules {
	var r rules
	if c.Listen == "" {
		if len(c.Sites) > 0 || c.TLS.set() {
			r.Add("link.listen", "empty, but link.sites or link.tls are set: no link is served")
		}
		return r
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		r.Add("link.listen", "%q is not host:port", c.Listen)
	} else if !c.TLS.set() && !guard.OnLoopback(c.Listen) {
		r.AddRelated("link.tls", "link.listen", "required: %s is not a loopback address, and sites must not send in clear", c.Listen)
	}
	r = append(r, c.TLS.validate("link.tls", c.TLS.set())...)
	if len(c.Sites) == 0 {
		r.Add("link.sites", "empty: no site could submit")
	}
	seen := map[string]bool{}
	for i, s := range c.Sites {
		key := fmt.Sprintf("link.sites[%d]", i)
		switch {
		case strings.TrimSpace(s.ID) == "":
			r.Add(key+".id", "required")
		case seen[s.ID]:
			r.Add(key+".id", "%q is listed twice", s.ID)
		}
		seen[s.ID] = true
		switch {
		case s.Token == "" && c.TLS.CA == "":
			r.Add(key+".token", "required: without link.tls.ca sites authenticate by token only")
		case s.Token != "" && !ports.IsSecretRef(s.Token):
			r.Add(key+".token", "must be a reference, env:NAME or file:/path, never the token itself")
		}
	}
	return append(r, c.validateBounds(o)...)
}

// linkRowOverhead is what one notification adds on the link besides its
// subject and body, at most: its type data (64 KiB) and its id, list and
// provenance (a few hundred bytes each).
const linkRowOverhead = 72 << 10

// validateBounds checks the link's limits; o bounds the largest
// notification a request must hold.
func (c LinkConfig) validateBounds(o core.Config) rules {
	var r rules
	if err := settings.Fields("Link.Limits", c.Limits.Validate()); err != nil {
		r = append(r, err)
	}
	if one, got := o.MaxBodyBytes+o.MaxSubjectBytes+linkRowOverhead, c.Limits.GRPC.MaxRecvMsgBytes; o.MaxBodyBytes > 0 && got > 0 && got < one {
		r.AddRelated("link.max_message_bytes", "outbox.max_body_bytes", "%d cannot hold one notification of outbox.max_body_bytes (%d): want at least %d",
			got, o.MaxBodyBytes, one)
	}
	return r
}

// SMTPCaptureConfig configures the embedded SMTP capture server: a local
// mail sink for trying outbox without a mail server (the default set-up
// points the email channel at it), like MailHog. It has no TLS and no
// authentication, so it listens on loopback only.
type SMTPCaptureConfig struct {
	// Addr is the loopback address to listen on (127.0.0.1:2525); empty
	// runs no capture server.
	Addr string
	// Dir, when set, receives every captured message as a .eml file.
	Dir string
	// Reject lists recipients refused with 550 (an address, or @domain), to
	// try a permanent failure.
	Reject []string
}

func (c SMTPCaptureConfig) validate() rules {
	var r rules
	if c.Addr == "" {
		if c.Dir != "" || len(c.Reject) > 0 {
			r.Add("smtp_capture.addr", "empty, but smtp_capture.dir or reject are set: no capture server runs")
		}
		return r
	}
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil {
		r.Add("smtp_capture.addr", "%q is not host:port", c.Addr)
		return r
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		r.Add("smtp_capture.addr", "%q is not a loopback address: the capture server has no TLS nor authentication", host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		r.Add("smtp_capture.addr", "port %q is not a number from 0 to 65535", port)
	}
	return r
}

// DeliveryConfig configures how the channel plugins reach receivers.
type DeliveryConfig struct {
	// Network is the delivery network policy.
	Network NetworkConfig
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
	Allow []string
	// Deny lists IP addresses and CIDR prefixes they may not.
	Deny []string
}

func (c DeliveryConfig) validate() rules {
	var r rules
	for _, l := range []struct {
		key     string
		entries []string
	}{{"delivery.network.allow", c.Network.Allow}, {"delivery.network.deny", c.Network.Deny}} {
		for i, e := range l.entries {
			if _, err := channel.ParseNetworkPrefix(e); err != nil {
				r.Add(fmt.Sprintf("%s[%d]", l.key, i), "%s", strings.TrimSuffix(err.Error(), ": "+channel.ErrInvalidNetworkPolicy.Error()))
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

// LogConfig configures the logs written to standard error.
type LogConfig struct {
	// Level is debug, info (default), warn or error.
	Level string
	// Format is auto (default: colored text on a terminal, JSON otherwise),
	// text or json.
	Format string
}

// ListConfig is one notification list (ports.List): an entry of the record
// setting lists, whose keys are its yaml tags.
type ListConfig struct {
	Name    string   `yaml:"name"`
	Type    string   `yaml:"type"`
	Targets []string `yaml:"targets"`
}

// ChannelConfig is the settings of one channel type (ports.ChannelSettings):
// an entry of the record setting channels, whose keys are its yaml tags.
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
	Backoff     string        `yaml:"backoff"`
	MaxRetries  int           `yaml:"max_retries"`
	Interval    time.Duration `yaml:"interval"`
	MaxInterval time.Duration `yaml:"max_interval"`
}

// defaultConfig returns the defaults: SQLite in the current directory, core's
// dispatch defaults, info logs in the automatic format.
func defaultConfig() Config {
	return Config{
		DataDir: ".",
		Store:   sqlstore.Config{Driver: sqlstore.DriverSQLite},
		Outbox:  core.Config{}.WithDefaults(),
		Log:     LogConfig{Level: "info", Format: "auto"},
		Link:    LinkConfig{Limits: sitelink.Limits{}.WithDefaults()},
		Secrets: SecretsConfig{EnvPrefix: secretref.DefaultEnvPrefix},
		Plugins: defaultPluginsConfig(),
		HTTP:    HTTPConfig{Operators: core.OperatorsConfig{}.WithDefaults(), ListRefresh: httpapi.DefaultListRefresh},
	}
}

// namedDSNVariable names the environment variable in the store's "DSN
// required" error: the adapter only knows to say "the environment".
func namedDSNVariable(err error) error {
	for _, e := range settings.Unjoin(err) {
		var fe *ports.FieldError
		if errors.As(e, &fe) && fe.Field == "DSN" && strings.Contains(fe.Msg, "set it in the environment") {
			fe.Msg = strings.Replace(fe.Msg, "set it in the environment", "set it in the environment (OUTBOX_STORE_DSN)", 1)
		}
	}
	return err
}

// Validate checks every component and returns one error per broken rule,
// joined, or nil: a *SettingError, or a component's *ports.FieldError that
// settings.Fields places on its setting.
func (c Config) Validate() error {
	var r rules
	dsnFromDataDir := c.Store.Driver == sqlstore.DriverSQLite && strings.TrimSpace(c.Store.DSN) == ""
	if dsnFromDataDir && strings.TrimSpace(c.DataDir) == "" {
		r.AddRelated("data_dir", "store.dsn", "empty (it holds outbox.db when store.dsn is not set)")
	}
	if !dsnFromDataDir || strings.TrimSpace(c.DataDir) != "" {
		if err := settings.Fields("Store", namedDSNVariable(c.StoreSettings().Validate())); err != nil {
			r = append(r, err)
		}
	}
	if err := settings.Fields("Outbox", c.Outbox.Validate()); err != nil {
		r = append(r, err)
	}
	r = append(r, c.Log.validate()...)
	r = append(r, c.validateDirectory()...)
	r = append(r, c.Plugins.validate()...)
	r = append(r, c.SMTPCapture.validate()...)
	r = append(r, c.Delivery.validate()...)
	r = append(r, c.Link.validate(c.Outbox)...)
	r = append(r, c.HTTP.validate()...)
	r = append(r, c.Metrics.validateCentral(c.HTTP.Listen)...)
	sr := c.Secrets.validate(c.ConfigDir)
	if len(sr) > 0 {
		r = append(r, sr...)
	} else {
		r = append(r, c.validateReferences()...)
		r = append(r, c.validateOwnSecretsOutside()...)
	}
	return r.Err()
}

// validateToRun is Validate and, for a command that runs central (central
// and dev, not migrate, which needs only the store), validateOwnResolvable:
// every broken rule and every own reference that does not resolve, at once.
func (c Config) validateToRun() error {
	return errors.Join(c.Validate(), c.validateOwnResolvable().Err())
}

// Log levels and formats.
var (
	logLevels  = []string{"debug", "info", "warn", "error"}
	logFormats = []string{"auto", "text", "json"}
)

func (l LogConfig) validate() rules {
	var r rules
	if !slices.Contains(logLevels, l.Level) {
		r.Add("log.level", "unknown level %q (want %s)", l.Level, orList(logLevels))
	}
	if !slices.Contains(logFormats, l.Format) {
		r.Add("log.format", "unknown format %q (want %s)", l.Format, orList(logFormats))
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
			r.Add("lists", "%v", e)
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
				Interval:    ch.Retry.Interval,
				MaxInterval: ch.Retry.MaxInterval,
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
	s := c.Store
	if s.Driver == sqlstore.DriverSQLite && strings.TrimSpace(s.DSN) == "" {
		s.DSN = filepath.Join(c.DataDir, "outbox.db")
	}
	return s
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

// orList writes "a, b or c".
func orList(list []string) string {
	if len(list) == 1 {
		return list[0]
	}
	return strings.Join(list[:len(list)-1], ", ") + " or " + list[len(list)-1]
}
