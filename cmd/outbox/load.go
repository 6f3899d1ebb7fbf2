package main

import (
	"flag"
	"io"
	"strings"

	"github.com/siteline/outbox/cmd/outbox/internal/settings"
)

// The loader's types, as the commands use them.
type (
	// SettingError is one broken rule of a configuration.
	SettingError = settings.SettingError
	// rules collects SettingErrors.
	rules = settings.Rules
	// commandLine is what a subcommand's flags gave.
	commandLine = settings.CommandLine
	// loaded is a configuration and where each setting came from.
	loaded[C any] = settings.Loaded[C]
)

// unjoin returns the errors joined in err, or err alone.
var unjoin = settings.Unjoin

// envConfigFile names the configuration file when -config is not given.
const envConfigFile = settings.EnvConfigFile

// schema is a command's settings and how to read the log settings of its
// configuration, which the command needs before anything else.
type schema[C any] struct {
	settings.Schema[C]
	log func(C) LogConfig
}

// flagSet defines -config and the settings' flags.
func (sc schema[C]) flagSet(name string, cl *commandLine, stderr io.Writer) *flag.FlagSet {
	return sc.FlagSet(name, cl, stderr)
}

// load builds and validates the configuration (settings.Schema.Load).
func (sc schema[C]) load(cl commandLine, environ []string) (*loaded[C], error) {
	return sc.Load(cl, environ)
}

// newFlagSet is centralSchema.flagSet.
func newFlagSet(name string, cl *commandLine, stderr io.Writer) *flag.FlagSet {
	return centralSchema.flagSet(name, cl, stderr)
}

// loadConfig is centralSchema.load.
func loadConfig(cl commandLine, environ []string) (*loaded[Config], error) {
	return centralSchema.load(cl, environ)
}

// migrateSchema is centralSchema for `outbox migrate`, which opens the
// store only: central's own references (the admin's password, the sites'
// tokens) need not resolve where it runs.
var migrateSchema = func() schema[Config] {
	sc := centralSchema
	sc.Validate = Config.Validate
	return sc
}()

// centralSchema is the configuration of `outbox central`.
var centralSchema = schema[Config]{
	Schema: settings.Schema[Config]{
		Defaults: defaultConfig,
		Settings: centralSettings,
		Validate: Config.validateToRun,
		Resolve: func(c *Config, dir string) {
			c.ConfigDir = dir
			c.HTTP.Admin.Password = absRef(c.HTTP.Admin.Password, dir)
			for i := range c.Link.Sites {
				c.Link.Sites[i].Token = absRef(c.Link.Sites[i].Token, dir)
			}
		},
		QuietEnv: func(c Config, name string) bool {
			return c.Secrets.EnvPrefix != "" && strings.HasPrefix(name, c.Secrets.EnvPrefix)
		},
		Warn: func(l *loaded[Config]) {
			l.Warnings = append(l.Warnings, l.Cfg.unresolvedDirectory()...)
			if l.Cfg.Store.DSN != "" && dsnHasPassword(l.Cfg.Store.DSN) && !strings.HasPrefix(l.Sources["store.dsn"], "env ") {
				l.Warnings = append(l.Warnings, "store.dsn holds a password in clear outside the environment ("+l.Sources["store.dsn"]+"); give it through OUTBOX_STORE_DSN instead")
			}
		},
	},
	log: func(c Config) LogConfig { return c.Log },
}

// setting declares one setting of C (see settings.Setting).
func setting[C any](key, env, flag, doc string, bind func(*C) any) settings.Setting[C] {
	return settings.Setting[C]{Key: key, Env: env, Flag: flag, Doc: doc, Bind: bind}
}

// centralSettings is every setting of central, each declared once: its key,
// environment variable, flag and doc, and the field it sets. Its default is
// that field in defaultConfig. The order is the file's: sections and keys
// are listed in it this way when a key is unknown. configs/README.md
// describes each (TestREADMEDescribesEverySetting checks).
var centralSettings = []settings.Setting[Config]{
	setting("data_dir", "OUTBOX_DATA_DIR", "data-dir", "`directory` of the embedded SQLite database outbox.db", func(c *Config) any { return &c.DataDir }),

	setting("store.driver", "OUTBOX_STORE_DRIVER", "store-driver", "database `driver`: sqlite, postgres or mssql", func(c *Config) any { return &c.Store.Driver }),
	setting("store.dsn", "OUTBOX_STORE_DSN", "store-dsn", "database connection string `DSN` (prefer OUTBOX_STORE_DSN: flags show in the process list)", func(c *Config) any { return &c.Store.DSN }),
	setting("store.max_open_conns", "OUTBOX_STORE_MAX_OPEN_CONNS", "", "cap of the connection pool; 0 lets the store pick", func(c *Config) any { return &c.Store.MaxOpenConns }),

	setting("outbox.node_id", "OUTBOX_NODE_ID", "node-id", "`name` of this central node in leases and logs: unique per running central, the same across its restarts (default: random)", func(c *Config) any { return &c.Outbox.NodeID }),
	setting("outbox.dispatch_interval", "OUTBOX_DISPATCH_INTERVAL", "dispatch-interval", "fallback poll `interval` of the dispatcher, e.g. 10s", func(c *Config) any { return &c.Outbox.DispatchInterval }),
	setting("outbox.dispatch_batch_size", "OUTBOX_DISPATCH_BATCH_SIZE", "", "rows a dispatch batch delivers and records", func(c *Config) any { return &c.Outbox.DispatchBatchSize }),
	setting("outbox.dispatch_concurrency", "OUTBOX_DISPATCH_CONCURRENCY", "", "deliveries in flight at once", func(c *Config) any { return &c.Outbox.DispatchConcurrency }),
	setting("outbox.delivery_timeout", "OUTBOX_DELIVERY_TIMEOUT", "", "bound of one delivery attempt", func(c *Config) any { return &c.Outbox.DeliveryTimeout }),
	setting("outbox.claim_lease", "OUTBOX_CLAIM_LEASE", "", "how long a claimed row stays leased to this node", func(c *Config) any { return &c.Outbox.ClaimLease }),
	setting("outbox.stuck_age_threshold", "OUTBOX_STUCK_AGE_THRESHOLD", "", "Pending or Retrying rows older than this are shown as stuck", func(c *Config) any { return &c.Outbox.StuckAgeThreshold }),
	setting("outbox.terminal_retention", "OUTBOX_TERMINAL_RETENTION", "", "terminal rows older than this are purged", func(c *Config) any { return &c.Outbox.TerminalRetention }),
	setting("outbox.purge_interval", "OUTBOX_PURGE_INTERVAL", "", "cadence of the purge", func(c *Config) any { return &c.Outbox.PurgeInterval }),
	setting("outbox.delivered_kpi_window", "OUTBOX_DELIVERED_KPI_WINDOW", "", "trailing window of the delivered KPI", func(c *Config) any { return &c.Outbox.DeliveredKpiWindow }),
	setting("outbox.max_batch", "OUTBOX_MAX_BATCH", "", "most submissions in one site batch", func(c *Config) any { return &c.Outbox.MaxBatch }),
	setting("outbox.max_subject_bytes", "OUTBOX_MAX_SUBJECT_BYTES", "", "longest subject", func(c *Config) any { return &c.Outbox.MaxSubjectBytes }),
	setting("outbox.max_body_bytes", "OUTBOX_MAX_BODY_BYTES", "", "longest body", func(c *Config) any { return &c.Outbox.MaxBodyBytes }),
	setting("outbox.reconcile_interval", "OUTBOX_RECONCILE_INTERVAL", "", "how often central asks each site's leader for the tracking rows changed since its cursor", func(c *Config) any { return &c.Outbox.ReconcileInterval }),
	setting("outbox.site_stale_after", "OUTBOX_SITE_STALE_AFTER", "", "a site whose nodes have not reported for this long is stale", func(c *Config) any { return &c.Outbox.SiteStaleAfter }),
	setting("outbox.site_disconnected_after", "OUTBOX_SITE_DISCONNECTED_AFTER", "", "a site whose nodes have not reported for this long is disconnected", func(c *Config) any { return &c.Outbox.SiteDisconnectedAfter }),

	setting("log.level", "OUTBOX_LOG_LEVEL", "log-level", "log `level`: debug, info, warn or error", func(c *Config) any { return &c.Log.Level }),
	setting("log.format", "OUTBOX_LOG_FORMAT", "log-format", "log `format`: auto (text on a terminal, JSON otherwise), text or json", func(c *Config) any { return &c.Log.Format }),

	setting("lists", "", "", "the notification lists central writes into the database at start", func(c *Config) any { return &c.Lists }),
	setting("channels", "", "", "the settings of each channel type central writes into the database at start", func(c *Config) any { return &c.Channels }),

	setting("plugins.builtin", "", "", "built-in channels to run (all by default; none runs none)", func(c *Config) any { return &c.Plugins.Builtin }),
	setting("plugins.dir", "OUTBOX_PLUGINS_DIR", "plugins-dir", "`directory` of third-party channel plugin binaries", func(c *Config) any { return &c.Plugins.Dir }),
	setting("plugins.external", "", "", "third-party plugins listed one by one", func(c *Config) any { return &c.Plugins.External }),
	setting("plugins.max_concurrency", "", "", "deliveries in flight at once through each plugin", func(c *Config) any { return &c.Plugins.MaxConcurrency }),
	setting("plugins.socket_group", "", "", "group every plugin gives the Unix socket central connects to", func(c *Config) any { return &c.Plugins.Host.SocketGroup }),
	setting("plugins.ping_interval", "", "", "how often central pings each plugin process", func(c *Config) any { return &c.Plugins.Host.PingInterval }),
	setting("plugins.ping_timeout", "", "", "how long central waits for the answer to a ping", func(c *Config) any { return &c.Plugins.Host.PingTimeout }),
	setting("plugins.ping_failures", "", "", "unanswered pings in a row after which a plugin is restarted", func(c *Config) any { return &c.Plugins.Host.PingFailures }),

	setting("smtp_capture.addr", "", "", "loopback address of the embedded SMTP capture server; empty runs none", func(c *Config) any { return &c.SMTPCapture.Addr }),
	setting("smtp_capture.dir", "", "", "directory that receives every captured message as a .eml file", func(c *Config) any { return &c.SMTPCapture.Dir }),
	setting("smtp_capture.reject", "", "", "recipients the capture refuses with 550 (an address, or @domain)", func(c *Config) any { return &c.SMTPCapture.Reject }),

	setting("delivery.network.allow", "OUTBOX_DELIVERY_NETWORK_ALLOW", "", "IP addresses and CIDR prefixes the channels may reach", func(c *Config) any { return &c.Delivery.Network.Allow }),
	setting("delivery.network.deny", "OUTBOX_DELIVERY_NETWORK_DENY", "", "IP addresses and CIDR prefixes the channels may not reach", func(c *Config) any { return &c.Delivery.Network.Deny }),

	setting("link.listen", "", "", "address of the site link (gRPC); empty serves no link", func(c *Config) any { return &c.Link.Listen }),
	setting("link.tls", "", "", "central's certificate and key, and the CA of site client certificates", func(c *Config) any { return &c.Link.TLS }),
	setting("link.sites", "", "", "the sites allowed to submit", func(c *Config) any { return &c.Link.Sites }),
	setting("link.max_message_bytes", "", "", "largest request the link reads", func(c *Config) any { return &c.Link.Limits.GRPC.MaxRecvMsgBytes }),
	setting("link.handshake_timeout", "", "", "bound of a new connection's TLS and HTTP/2 handshake", func(c *Config) any { return &c.Link.Limits.GRPC.HandshakeTimeout }),
	setting("link.idle_timeout", "", "", "a connection without calls for this long is closed", func(c *Config) any { return &c.Link.Limits.GRPC.IdleTimeout }),
	setting("link.connections.per_address", "", "", "connections open at once from one client address", func(c *Config) any { return &c.Link.Limits.Conns.PerAddress }),
	setting("link.connections.total", "", "", "connections open at once in all", func(c *Config) any { return &c.Link.Limits.Conns.Total }),
	setting("link.quota.rows_per_second", "", "", "notifications a site may send per second on average", func(c *Config) any { return &c.Link.Limits.Quota.RowsPerSecond }),
	setting("link.quota.bytes_per_second", "", "", "request bytes a site may send per second on average", func(c *Config) any { return &c.Link.Limits.Quota.BytesPerSecond }),
	setting("link.max_syncs_per_site", "", "", "Syncs (long polls) of one site in progress at once", func(c *Config) any { return &c.Link.Limits.MaxSyncsPerSite }),
	setting("link.call_timeout", "", "", "bound of one call at central, a Sync's wait included", func(c *Config) any { return &c.Link.Limits.CallTimeout }),

	setting("http.listen", "OUTBOX_HTTP_LISTEN", "http-listen", "`address` (host:port) of the operator page, API and (unless metrics.listen is set) /metrics; empty serves none", func(c *Config) any { return &c.HTTP.Listen }),
	setting("http.tls", "", "", "the page's certificate and key", func(c *Config) any { return &c.HTTP.TLS }),
	setting("http.session_ttl", "OUTBOX_HTTP_SESSION_TTL", "", "how long a login lasts", func(c *Config) any { return &c.HTTP.Operators.SessionTTL }),
	setting("http.admin.name", "OUTBOX_HTTP_ADMIN_NAME", "", "an admin account central keeps at every start", func(c *Config) any { return &c.HTTP.Admin.Name }),
	setting("http.admin.password", "OUTBOX_HTTP_ADMIN_PASSWORD", "", "its password, as a reference", func(c *Config) any { return &c.HTTP.Admin.Password }),
	setting("http.login_token_max_ttl", "OUTBOX_HTTP_LOGIN_TOKEN_MAX_TTL", "", "longest lifetime of the token outbox login makes", func(c *Config) any { return &c.HTTP.Operators.MaxOwnTokenTTL }),
	setting("http.trusted_proxies", "", "", "reverse proxies whose X-Forwarded-For is read", func(c *Config) any { return &c.HTTP.TrustedProxies }),
	setting("http.list_refresh", "", "", "how often the page's lists refresh themselves; 0 never", func(c *Config) any { return &c.HTTP.ListRefresh }),
	setting("http.login.address_max_delay", "", "", "cap of an address's wait after failed logins", func(c *Config) any { return &c.HTTP.Operators.Throttle.AddressMaxDelay }),
	setting("http.login.account_max_delay", "", "", "cap of an address's wait for an account after failed logins", func(c *Config) any { return &c.HTTP.Operators.Throttle.AccountMaxDelay }),
	setting("http.login.trusted_networks", "", "", "addresses an account's failures never hold", func(c *Config) any { return &c.HTTP.Operators.Throttle.TrustedNetworks }),

	setting("metrics.listen", "OUTBOX_METRICS_LISTEN", "metrics", "`address` (host:port) of /metrics, /healthz and /readyz apart from the page; empty serves them with the page", func(c *Config) any { return &c.Metrics.Listen }),

	setting("secrets.dirs", "", "", "directories a file: reference of the directory may read", func(c *Config) any { return &c.Secrets.Dirs }),
	setting("secrets.env_prefix", "OUTBOX_SECRETS_ENV_PREFIX", "", "prefix of the variables an env: reference of the directory may read", func(c *Config) any { return &c.Secrets.EnvPrefix }),
}
