package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/siteline/outbox/adapters/devkit/hookcapture"
	"github.com/siteline/outbox/adapters/devkit/smtpcapture"
	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/httpapi/human"
	"github.com/siteline/outbox/adapters/metrics"
	"github.com/siteline/outbox/adapters/pluginhost"
	"github.com/siteline/outbox/adapters/sitelink"
	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/cmd/outbox/internal/cli"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

// setup parses a central subcommand's flags, loads and checks the
// configuration and builds the logger. When it returns ok false, the command
// exits with code.
// own, when given, is what the command adds to the settings.
func setup(name, summary string, args, environ []string, stderr io.Writer, own ...ownArgs) (l *loaded[Config], logger *slog.Logger, code int, ok bool) {
	return setupWith(centralSchema, name, summary, args, environ, stderr, own...)
}

// ownArgs is what a command adds to the settings' flags: an action word
// before them (shown in its usage) and flags of its own.
type ownArgs struct {
	action string              // e.g. "[up|down|status]"
	flags  func(*flag.FlagSet) // may be nil
}

// setupWith is setup for any configuration schema.
func setupWith[C any](sc schema[C], name, summary string, args, environ []string, stderr io.Writer, own ...ownArgs) (l *loaded[C], logger *slog.Logger, code int, ok bool) {
	var cl commandLine
	fs := sc.flagSet("outbox "+name, &cl, stderr)
	synopsis := name
	for _, o := range own {
		if o.flags != nil {
			o.flags(fs)
		}
		if o.action != "" {
			synopsis += " " + o.action
		}
	}
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: outbox %s [-config FILE] [flags]\n\n%s\n\nFlags:\n", synopsis, summary)
		fs.PrintDefaults()
		fmt.Fprint(w, "\nEvery setting can also be set in the file or the environment (OUTBOX_*);\nflags override the environment, which overrides the file. configs/README.md\ndescribes every setting.\n")
	}
	// An operand is refused before the configuration is loaded: no
	// command here takes one.
	if code, ok := cli.ParseArgs(fs, args, 0); !ok {
		return nil, nil, code, false
	}
	l, err := sc.load(cl, environ)
	if err != nil {
		printConfigError(stderr, "outbox "+name, err)
		if l != nil {
			for _, w := range l.Warnings {
				fmt.Fprintf(stderr, "warning: %s\n", w)
			}
		}
		return nil, nil, exitUsage, false
	}
	logger = loggerFor(sc.log(l.Cfg), stderr, environ)
	for _, w := range l.Warnings {
		logger.Warn(w)
	}
	return l, logger, exitOK, true
}

// runCentral is `outbox central`.
func runCentral(ctx context.Context, args, environ []string, _, stderr io.Writer) int {
	l, logger, code, ok := setup("central",
		"Runs central: opens the store, applies migrations, then dispatches notifications\nuntil SIGINT or SIGTERM, and stops gracefully.",
		args, environ, stderr)
	if !ok {
		return code
	}
	if err := central(ctx, l, logger); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// A signal came while central was still starting: a stop,
			// not a failure.
			logger.Info("central stopped while starting", "reason", context.Cause(ctx))
			return exitOK
		}
		logger.Error("central failed", "err", err)
		return exitFailure
	}
	return exitOK
}

// migrateSummary is the help of `outbox migrate`.
const migrateSummary = `Applies, rolls back or lists the database migrations of the configured store
and exits. The first argument is the action:
  up      apply the migrations the database lacks (the default; running it
          again is harmless; central does it at start too)
  down    roll back the last group of migrations, the ones one "up" applied
          (or, for a database older than the migration groups, all of them):
          their tables and the rows in them are dropped. Without -yes it only
          lists what it would roll back, and says so when that is every table
  status  list every migration, whether it is applied, when and in which group
          (it only reads: a read-only login can run it)`

// runMigrate is `outbox migrate [up|down|status]`.
func runMigrate(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	action := "up"
	// A completion probe learns the actions, then the flags (setup).
	cli.Subcommands(stdout, args, "up", "down", "status")
	// The action is the first operand, after any flags ("outbox migrate
	// -config F status"); without one it is up.
	var cl commandLine
	known := centralSchema.flagSet("outbox migrate", &cl, io.Discard)
	known.Bool("yes", false, "")
	if sub, rest, err := cli.SplitSubcommand(known, args); err == nil && sub != "" {
		action, args = sub, rest
	}
	switch action {
	case "up", "down", "status":
	default:
		fmt.Fprintf(stderr, "outbox migrate: unknown action %q%s (up, down or status)\n", human.Cell(action, 40),
			cli.SuggestionText("", action, []string{"up", "down", "status"}))
		return exitUsage
	}
	var yes bool
	l, logger, code, ok := setupWith(migrateSchema, "migrate", migrateSummary, args, environ, stderr, ownArgs{action: "[up|down|status]",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&yes, "yes", false, "with down: roll back (without it, down only lists what it would roll back)")
		}})
	if !ok {
		return code
	}
	if yes && action != "down" {
		fmt.Fprintf(stderr, "outbox migrate: -yes goes with down only, not with %s\n", action)
		return exitUsage
	}
	if action != "up" {
		// Only up creates a database: status and down read one that is there.
		if path, ok := sqliteFile(l.Cfg.StoreSettings()); ok {
			if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
				fmt.Fprintf(stderr, "outbox migrate %s: no database at %s (\"outbox migrate up\" creates it)\n", action, path)
				return exitFailure
			}
		}
	}
	store, err := openStore(ctx, l.Cfg, logger)
	if err != nil {
		logger.Error("migrate failed", "action", action, "err", err)
		return exitFailure
	}
	switch action {
	case "up":
		err = migrate(ctx, store, l.Cfg, logger)
	case "down":
		err = migrateDown(ctx, store, yes, stdout)
	case "status":
		err = migrationStatus(ctx, store, stdout)
	}
	if cerr := store.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close store: %w", cerr)
	}
	if err != nil {
		logger.Error("migrate failed", "action", action, "err", err)
		return exitFailure
	}
	return exitOK
}

// migrateDown rolls back the last group of migrations when yes, and
// otherwise lists what it would roll back.
func migrateDown(ctx context.Context, store *sqlstore.DB, yes bool, stdout io.Writer) error {
	if !yes {
		states, err := store.MigrationStatus(ctx)
		if err != nil {
			return err
		}
		var last int64
		applied := 0
		for _, m := range states {
			last = max(last, m.Group)
			if m.Applied {
				applied++
			}
		}
		var names []string
		for _, m := range slices.Backward(states) {
			if m.Applied && m.Group == last {
				names = append(names, m.Name)
			}
		}
		if len(names) == 0 {
			fmt.Fprintln(stdout, "No migration is applied: nothing to roll back.")
			return nil
		}
		fmt.Fprintf(stdout, "Would roll back group %d, dropping what these created and the rows in it:\n  %s\n",
			last, strings.Join(names, "\n  "))
		if len(names) == applied {
			fmt.Fprintf(stdout, "These are all the applied migrations: EVERY TABLE OF THE STORE would be dropped, with all its rows.\n")
			if last == 1 {
				fmt.Fprintf(stdout, "(A database migrated before migration groups existed has all its migrations in group 1.)\n")
			}
		}
		fmt.Fprintf(stdout, "Nothing was changed. Run \"outbox migrate down -yes\" with the same settings to roll them back.\n")
		return nil
	}
	names, err := store.MigrateDown(ctx)
	for _, n := range names {
		fmt.Fprintf(stdout, "rolled back %s\n", n)
	}
	if err == nil && len(names) == 0 {
		fmt.Fprintln(stdout, "No migration is applied: nothing to roll back.")
	}
	return err
}

// migrationStatus writes every migration and its state as a table.
func migrationStatus(ctx context.Context, store *sqlstore.DB, stdout io.Writer) error {
	states, err := store.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MIGRATION\tSTATE\tGROUP\tAPPLIED AT (UTC)")
	for _, m := range states {
		if !m.Applied {
			fmt.Fprintf(tw, "%s\tpending\t-\t-\n", m.Name)
			continue
		}
		fmt.Fprintf(tw, "%s\tapplied\t%d\t%s\n", m.Name, m.Group, m.AppliedAt.Format("2006-01-02 15:04:05"))
	}
	return tw.Flush()
}

// central wires central and runs it until ctx is done: store, migrations,
// the directory seeded from the configuration, the channel plugins, core. It
// returns after Run has returned, the plugins are stopped and the store is
// closed.
func central(ctx context.Context, l *loaded[Config], logger *slog.Logger) error {
	return runCentralNode(ctx, l.Cfg, centralOptions{configFile: l.File}, logger)
}

// centralOptions are what `outbox dev` changes in a central node.
type centralOptions struct {
	configFile string
	// dev runs without an admin and shows banner on the page.
	dev    bool
	banner string
	// hooks, when set, is dev's webhook capture, which the page shows.
	hooks *hookcapture.Server
	// started, when set, is called once everything listens, with the
	// addresses bound.
	started func(centralAddrs)
}

// centralAddrs are the addresses a started central node listens on.
type centralAddrs struct {
	HTTP, Link, SMTP, Metrics string
	// DevToken is the admin token outbox dev prints (dev mode only).
	DevToken devToken
}

// runCentralNode is central with options.
func runCentralNode(ctx context.Context, cfg Config, opt centralOptions, logger *slog.Logger) (err error) {
	store, err := openStore(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := store.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close store: %w", cerr))
		}
	}()
	if err := migrate(ctx, store, cfg, logger); err != nil {
		return err
	}
	var capture *smtpcapture.Server
	if c := cfg.SMTPCapture; c.Addr != "" {
		var serr error
		capture, serr = smtpcapture.Start(smtpcapture.Config{Addr: c.Addr, Dir: c.Dir, Reject: c.Reject})
		if serr != nil {
			return serr
		}
		defer func() {
			if cerr := capture.Close(); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}()
		logger.Info("smtp capture listening: messages sent to it are kept, not delivered", "addr", capture.Addr(), "dir", c.Dir)
	}
	host, err := startPlugins(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := host.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("stop channel plugins: %w", cerr))
		}
	}()
	// The directory is written through the audited editor, as the API
	// writes it; the plugins' schemas say which settings it may show, and
	// the secrets policy which references it may store.
	editor, err := core.NewDirectoryEditor(policedDirectory{DirectoryAdmin: store.Directory(), policy: cfg.SecretPolicy()}, store.Accounts(), ports.SystemClock{},
		core.DirectoryEditorConfig{PublicSetting: publicSetting(host)}, logger.With("component", "directory"))
	if err != nil {
		return fmt.Errorf("build the directory editor: %w", err)
	}
	seeded, err := seedDirectory(ctx, editor, cfg, logger)
	if err != nil {
		return err
	}
	if err := checkChannels(ctx, store, host, seeded, logger); err != nil {
		return err
	}
	if err := checkReferences(ctx, store.Directory(), cfg.SecretPolicy(), logger); err != nil {
		return err
	}
	logger.Info("env: references of lists and channels may read these variables of central's environment",
		"env_prefix", cfg.Secrets.EnvPrefix, "variables", envExposed(cfg.Secrets.EnvPrefix, os.Environ()))
	delivery := metrics.NewDeliveryMetrics(host.Types()...)
	svc, err := core.New(cfg.Outbox, core.Deps{
		Store:     store.Notifications(),
		Audit:     store.Notifications(),
		Channels:  host,
		Directory: store.Directory(),
		Clock:     ports.SystemClock{},
		Logger:    logger,
		Observer:  delivery,
		SiteCalls: store.SiteCalls(),
	})
	if err != nil {
		return fmt.Errorf("build outbox: %w", err)
	}

	cc := svc.Config()
	attrs := []any{
		"version", versionString(),
		"node_id", cc.NodeID,
		"owner", svc.Owner(),
		"store_driver", cfg.Store.Driver,
	}
	if cfg.Store.Driver == sqlstore.DriverSQLite {
		attrs = append(attrs, "sqlite_path", cfg.StoreSettings().DSN)
	}
	// Durations as text ("10s"), as in the configuration, also in JSON.
	attrs = append(attrs,
		"dispatch_interval", cc.DispatchInterval.String(),
		"dispatch_batch_size", cc.DispatchBatchSize,
		"dispatch_concurrency", cc.DispatchConcurrency,
		"delivery_timeout", cc.DeliveryTimeout.String(),
		"claim_lease", cc.ClaimLease.String(),
		"purge_interval", cc.PurgeInterval.String(),
		"terminal_retention", cc.TerminalRetention.String(),
		"reconcile_interval", cc.ReconcileInterval.String(),
		"config_file", opt.configFile,
	)
	logger.Info("central started", attrs...)
	if cfg.Outbox.NodeID == "" {
		logger.Info("outbox.node_id is not set: this run's node id is random, so a restart after a crash waits claim_lease "+
			"before it delivers what this run held; set outbox.node_id, unique per running central and the same across its restarts",
			"node_id", cc.NodeID, "claim_lease", cc.ClaimLease.String())
	}

	var addrs centralAddrs
	if capture != nil {
		addrs.SMTP = capture.Addr()
	}
	var collectors []prometheus.Collector
	if cfg.Link.Listen != "" {
		stop, addr, refusals, err := serveLink(ctx, cfg.Link, svc, logger)
		if err != nil {
			return err
		}
		defer stop()
		addrs.Link = addr
		collectors = append(collectors, refusals)
	}
	if cfg.HTTP.Listen != "" || cfg.Metrics.Listen != "" {
		obs, err := newObservability(svc, store, host, delivery, collectors, logger)
		if err != nil {
			return err
		}
		if cfg.Metrics.Listen != "" {
			stop, addr, err := serveMetrics(ctx, cfg.Metrics.Listen, obs, logger)
			if err != nil {
				return err
			}
			defer stop()
			addrs.Metrics = addr
		}
		if cfg.HTTP.Listen != "" {
			stop, addr, devToken, err := serveHTTP(ctx, operatorSurface{cfg: cfg.HTTP, svc: svc, store: store, editor: editor,
				host: host, obs: obs, capture: capture, metricsApart: cfg.Metrics.Listen != "", dev: opt.dev, banner: opt.banner,
				hooks: opt.hooks}, logger)
			if err != nil {
				return err
			}
			defer stop()
			addrs.HTTP, addrs.DevToken = addr, devToken
		}
	}
	if opt.started != nil {
		opt.started(addrs)
	}

	runErr := svc.Run(ctx)
	if runErr != nil {
		return fmt.Errorf("run outbox: %w", runErr)
	}
	logger.Info("central stopped", "node_id", cc.NodeID, "reason", context.Cause(ctx))
	return nil
}

// openStore opens the configured database, creating the data directory of
// the embedded SQLite file when needed.
func openStore(ctx context.Context, cfg Config, logger *slog.Logger) (*sqlstore.DB, error) {
	sc := cfg.StoreSettings()
	if cfg.Store.Driver == sqlstore.DriverSQLite && strings.TrimSpace(cfg.Store.DSN) == "" {
		if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
			return nil, fmt.Errorf("create data_dir: %w", err)
		}
	}
	store, err := sqlstore.Open(ctx, sc, logger.With("component", "store"))
	if err != nil {
		return nil, fmt.Errorf("open %s store: %w", sc.Driver, err)
	}
	return store, nil
}

// sqliteFile is the file of an SQLite store's database, ok false for
// another driver or an in-memory database.
func sqliteFile(sc sqlstore.Config) (path string, ok bool) {
	if sc.Driver != sqlstore.DriverSQLite {
		return "", false
	}
	dsn := strings.TrimSpace(sc.DSN)
	if strings.HasPrefix(dsn, ":memory:") || strings.HasPrefix(dsn, "file::memory:") || strings.Contains(dsn, "mode=memory") {
		return "", false
	}
	dsn = strings.TrimPrefix(dsn, "file:")
	dsn, _, _ = strings.Cut(dsn, "?")
	return dsn, dsn != ""
}

// migrate applies the store's migrations.
func migrate(ctx context.Context, store *sqlstore.DB, cfg Config, logger *slog.Logger) error {
	if err := store.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate %s store: %w", cfg.Store.Driver, err)
	}
	logger.Info("migrations applied", "store_driver", cfg.Store.Driver)
	return nil
}

// seedDirectory writes the configured lists and channel settings into the
// database's directory, replacing entries of the same name; entries made
// through the API and absent from the file are kept. Each change is
// recorded in the admin audit log with the actor "config" (an entry the
// file leaves as it is records nothing). It returns the channel types the
// file configures.
func seedDirectory(ctx context.Context, editor ports.DirectoryEditor, cfg Config, logger *slog.Logger) (map[string]bool, error) {
	dir, err := cfg.Directory()
	if err != nil {
		return nil, err
	}
	lists, err := dir.Lists(ctx)
	if err != nil {
		return nil, err
	}
	channels, err := dir.Channels(ctx)
	if err != nil {
		return nil, err
	}
	seeded := make(map[string]bool, len(channels))
	for _, l := range lists {
		if _, err := editor.PutList(ctx, ports.ActorConfig, l); err != nil {
			return nil, fmt.Errorf("seed list %q: %w", l.Name, err)
		}
	}
	for _, c := range channels {
		if _, err := editor.PutChannel(ctx, ports.ActorConfig, c); err != nil {
			return nil, fmt.Errorf("seed channel %q: %w", c.Type, err)
		}
		seeded[c.Type] = true
	}
	if len(lists)+len(channels) > 0 {
		logger.Info("directory seeded from the configuration", "lists", len(lists), "channels", len(channels))
	}
	return seeded, nil
}

// publicSetting reports whether the plugin of typ describes the setting key
// as not secret, so that the admin audit log may show its value.
func publicSetting(host *pluginhost.Host) func(typ, key string) bool {
	return func(typ, key string) bool {
		d, err := host.Describe(typ)
		if err != nil {
			return false
		}
		for _, s := range d.Settings {
			if s.Name == key {
				return !s.Secret
			}
		}
		return false
	}
}

// startPlugins starts the configured channel plugins.
func startPlugins(ctx context.Context, cfg Config, logger *slog.Logger) (*pluginhost.Host, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the outbox binary for the built-in channels: %w", err)
	}
	plugins, err := cfg.Plugins.hostPlugins(exe)
	if err != nil {
		return nil, err
	}
	policy, err := cfg.Delivery.NetworkPolicy()
	if err != nil {
		return nil, err
	}
	logger.Info("delivery network policy: channels may not connect to loopback, link-local, cloud metadata, "+
		"unspecified, multicast or broadcast addresses, nor to this machine's own addresses, unless allowed",
		"allow", prefixList(policy.Allowed()), "deny", prefixList(policy.Denied()))
	hc := cfg.Plugins.Host
	hc.Plugins, hc.Logger, hc.NetworkPolicy, hc.Secrets = plugins, logger.With("component", "plugins"), policy, cfg.SecretPolicy()
	host, err := pluginhost.New(hc)
	if err != nil {
		return nil, err
	}
	if err := host.Start(ctx); err != nil {
		return nil, err
	}
	return host, nil
}

// prefixList writes prefixes for a log line: "127.0.0.0/8, ::1/128", or
// "none".
func prefixList(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return "none"
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return strings.Join(out, ", ")
}

// checkChannels checks the stored channel settings against the schema of
// their plugins before the first delivery. Invalid settings from the
// configuration file stop central; invalid settings managed through the API
// are logged, and their notifications park with the channel's reason. Lists
// and settings of a type no plugin delivers are logged.
func checkChannels(ctx context.Context, store *sqlstore.DB, host *pluginhost.Host, seeded map[string]bool, logger *slog.Logger) error {
	channels, err := store.Directory().Channels(ctx)
	if err != nil {
		return fmt.Errorf("read channel settings: %w", err)
	}
	var errs []error
	for _, c := range channels {
		if _, ok := host.Channel(c.Type); !ok {
			logger.Warn("channel settings for a type no plugin delivers", "type", c.Type, "plugins", host.Types())
			continue
		}
		err := host.ValidateSettings(c.Type, c.Settings)
		switch {
		case err == nil:
		case seeded[c.Type]:
			errs = append(errs, fmt.Errorf("channels (type %s): %w", c.Type, err))
		default:
			logger.Error("stored channel settings are invalid", "type", c.Type, "err", err)
		}
	}
	lists, err := store.Directory().Lists(ctx)
	if err != nil {
		return fmt.Errorf("read lists: %w", err)
	}
	for _, l := range lists {
		if _, ok := host.Channel(l.Type); !ok {
			logger.Warn("list of a type no plugin delivers: its notifications will park", "list", l.Name, "type", l.Type)
		}
	}
	return errors.Join(errs...)
}

// serveLink serves the site link on cfg.Listen until ctx is done or stop is
// called; stop waits for the server to end. refusals counts the link's
// refused calls and connections, for /metrics.
func serveLink(ctx context.Context, cfg LinkConfig, svc ports.Central, logger *slog.Logger) (stop func(), addr string, refusals *guard.Refusals, err error) {
	sites := make([]sitelink.Site, len(cfg.Sites))
	for i, s := range cfg.Sites {
		token, err := secretref.Resolve(s.Token)
		if err != nil {
			return nil, "", nil, fmt.Errorf("link.sites[%d].token: %w", i, err)
		}
		sites[i] = sitelink.Site{ID: s.ID, Token: token}
	}
	var t *tls.Config
	if cfg.TLS.set() {
		if t, err = cfg.TLS.load(); err != nil {
			return nil, "", nil, fmt.Errorf("link.tls: %w", err)
		}
		// A site proves itself by certificate or by token.
		t.ClientAuth = tls.VerifyClientCertIfGiven
	}
	log := logger.With("component", "link")
	srv, err := sitelink.NewServer(sitelink.ServerConfig{Central: svc, Sites: sites, TLS: t, Logger: log, Limits: cfg.Limits,
		Refusals: guard.NewRefusals("site_link", log, 0),
	})
	if err != nil {
		return nil, "", nil, fmt.Errorf("site link: %w", err)
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, "", nil, fmt.Errorf("site link: %w", err)
	}
	logger.Info("site link listening", "addr", lis.Addr().String(), "tls", t != nil, "sites", len(sites))
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Serve(lis); err != nil {
			logger.Error("site link stopped", "err", err)
		}
	})
	done := context.AfterFunc(ctx, srv.Stop)
	return func() {
		done()
		srv.Stop()
		wg.Wait()
	}, lis.Addr().String(), srv.Refusals(), nil
}
