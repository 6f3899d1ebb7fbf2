package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// setting is one scalar setting of a configuration C that the environment
// (and, for the common ones, a flag) can set. Lists come from the file only,
// but for lists of plain strings, which a variable gives comma-separated.
type setting[C any] struct {
	key   string // YAML path
	env   string // environment variable
	flag  string // flag name without the dash; "" when there is none
	usage string
	field func(*C) any // *string, *int, *bool, *Duration or *[]string (comma-separated)
}

// schema is what the loader needs to know of one command's configuration
// type C: its defaults, its scalar settings and its validation. central and
// site each have one (centralSchema, siteSchema).
type schema[C any] struct {
	defaults func() C
	settings []setting[C]
	validate func(C) error
	// log returns the log settings of a loaded configuration.
	log func(C) LogConfig
	// warn, when set, adds warnings about a valid configuration.
	warn func(*loaded[C])
	// setDir, when set, tells the configuration the directory of its
	// file (absolute), against which relative references resolve.
	setDir func(c *C, dir string)
	// ownRefs, when set, returns the configuration's own secret
	// references (tokens, passwords); the loader makes their relative
	// file: paths absolute against the file's directory.
	ownRefs func(c *C) []*string
	// quietEnv, when set, says which OUTBOX_* variables that are no
	// setting are still expected (secrets references read).
	quietEnv func(c C, name string) bool
}

// centralSchema is the configuration of `outbox central` and `outbox migrate`.
var centralSchema = schema[Config]{
	defaults: defaultConfig,
	settings: settings,
	validate: Config.Validate,
	log:      func(c Config) LogConfig { return c.Log },
	setDir:   func(c *Config, dir string) { c.ConfigDir = dir },
	ownRefs: func(c *Config) []*string {
		refs := []*string{&c.HTTP.Admin.Password}
		for i := range c.Link.Sites {
			refs = append(refs, &c.Link.Sites[i].Token)
		}
		return refs
	},
	quietEnv: func(c Config, name string) bool {
		return c.Secrets.EnvPrefix != "" && strings.HasPrefix(name, c.Secrets.EnvPrefix)
	},
	warn: func(l *loaded[Config]) {
		if l.cfg.Store.DSN != "" && dsnHasPassword(l.cfg.Store.DSN) && !strings.HasPrefix(l.sources["store.dsn"], "env ") {
			l.warnings = append(l.warnings, "store.dsn holds a password in clear outside the environment ("+l.sources["store.dsn"]+"); give it through OUTBOX_STORE_DSN instead")
		}
	},
}

// settings is every setting the environment can set. Keep configs/README.md
// in step with it (TestREADMENamesEverySetting checks).
//
// Environment variables:
//
//	OUTBOX_CONFIG                the YAML file (as -config)
//	OUTBOX_DATA_DIR              data_dir
//	OUTBOX_STORE_DRIVER          store.driver
//	OUTBOX_STORE_DSN             store.dsn
//	OUTBOX_STORE_MAX_OPEN_CONNS  store.max_open_conns
//	OUTBOX_NODE_ID               outbox.node_id
//	OUTBOX_DISPATCH_INTERVAL     outbox.dispatch_interval
//	OUTBOX_DISPATCH_BATCH_SIZE   outbox.dispatch_batch_size
//	OUTBOX_DISPATCH_CONCURRENCY  outbox.dispatch_concurrency
//	OUTBOX_DELIVERY_TIMEOUT      outbox.delivery_timeout
//	OUTBOX_CLAIM_LEASE           outbox.claim_lease
//	OUTBOX_STUCK_AGE_THRESHOLD   outbox.stuck_age_threshold
//	OUTBOX_TERMINAL_RETENTION    outbox.terminal_retention
//	OUTBOX_PURGE_INTERVAL        outbox.purge_interval
//	OUTBOX_DELIVERED_KPI_WINDOW  outbox.delivered_kpi_window
//	OUTBOX_MAX_BATCH             outbox.max_batch
//	OUTBOX_MAX_SUBJECT_BYTES     outbox.max_subject_bytes
//	OUTBOX_MAX_BODY_BYTES        outbox.max_body_bytes
//	OUTBOX_LOG_LEVEL             log.level
//	OUTBOX_LOG_FORMAT            log.format
//	OUTBOX_PLUGINS_DIR           plugins.dir
//	OUTBOX_HTTP_LISTEN           http.listen
//	OUTBOX_HTTP_SESSION_TTL      http.session_ttl
//	OUTBOX_HTTP_LOGIN_TOKEN_MAX_TTL http.login_token_max_ttl
//	OUTBOX_HTTP_ADMIN_NAME       http.admin.name
//	OUTBOX_HTTP_ADMIN_PASSWORD   http.admin.password
//	OUTBOX_DELIVERY_NETWORK_ALLOW  delivery.network.allow (comma-separated)
//	OUTBOX_DELIVERY_NETWORK_DENY   delivery.network.deny (comma-separated)
//	OUTBOX_METRICS_LISTEN          metrics.listen
//	OUTBOX_SECRETS_ENV_PREFIX    secrets.env_prefix
var settings = []setting[Config]{
	{"data_dir", "OUTBOX_DATA_DIR", "data-dir", "`directory` of the embedded SQLite database outbox.db", func(c *Config) any { return &c.DataDir }},
	{"store.driver", "OUTBOX_STORE_DRIVER", "store-driver", "database `driver`: sqlite, postgres or mssql", func(c *Config) any { return &c.Store.Driver }},
	{"store.dsn", "OUTBOX_STORE_DSN", "store-dsn", "database connection string `DSN` (prefer OUTBOX_STORE_DSN: flags show in the process list)", func(c *Config) any { return &c.Store.DSN }},
	{"store.max_open_conns", "OUTBOX_STORE_MAX_OPEN_CONNS", "", "", func(c *Config) any { return &c.Store.MaxOpenConns }},
	{"outbox.node_id", "OUTBOX_NODE_ID", "node-id", "`name` of this central node in leases and logs: unique per running central, the same across its restarts (default: random)", func(c *Config) any { return &c.Outbox.NodeID }},
	{"outbox.dispatch_interval", "OUTBOX_DISPATCH_INTERVAL", "dispatch-interval", "fallback poll `interval` of the dispatcher, e.g. 10s", func(c *Config) any { return &c.Outbox.DispatchInterval }},
	{"outbox.dispatch_batch_size", "OUTBOX_DISPATCH_BATCH_SIZE", "", "", func(c *Config) any { return &c.Outbox.DispatchBatchSize }},
	{"outbox.dispatch_concurrency", "OUTBOX_DISPATCH_CONCURRENCY", "", "", func(c *Config) any { return &c.Outbox.DispatchConcurrency }},
	{"outbox.delivery_timeout", "OUTBOX_DELIVERY_TIMEOUT", "", "", func(c *Config) any { return &c.Outbox.DeliveryTimeout }},
	{"outbox.claim_lease", "OUTBOX_CLAIM_LEASE", "", "", func(c *Config) any { return &c.Outbox.ClaimLease }},
	{"outbox.stuck_age_threshold", "OUTBOX_STUCK_AGE_THRESHOLD", "", "", func(c *Config) any { return &c.Outbox.StuckAgeThreshold }},
	{"outbox.terminal_retention", "OUTBOX_TERMINAL_RETENTION", "", "", func(c *Config) any { return &c.Outbox.TerminalRetention }},
	{"outbox.purge_interval", "OUTBOX_PURGE_INTERVAL", "", "", func(c *Config) any { return &c.Outbox.PurgeInterval }},
	{"outbox.delivered_kpi_window", "OUTBOX_DELIVERED_KPI_WINDOW", "", "", func(c *Config) any { return &c.Outbox.DeliveredKpiWindow }},
	{"outbox.max_batch", "OUTBOX_MAX_BATCH", "", "", func(c *Config) any { return &c.Outbox.MaxBatch }},
	{"outbox.max_subject_bytes", "OUTBOX_MAX_SUBJECT_BYTES", "", "", func(c *Config) any { return &c.Outbox.MaxSubjectBytes }},
	{"outbox.max_body_bytes", "OUTBOX_MAX_BODY_BYTES", "", "", func(c *Config) any { return &c.Outbox.MaxBodyBytes }},
	{"log.level", "OUTBOX_LOG_LEVEL", "log-level", "log `level`: debug, info, warn or error", func(c *Config) any { return &c.Log.Level }},
	{"log.format", "OUTBOX_LOG_FORMAT", "log-format", "log `format`: auto (text on a terminal, JSON otherwise), text or json", func(c *Config) any { return &c.Log.Format }},
	{"plugins.dir", "OUTBOX_PLUGINS_DIR", "plugins-dir", "`directory` of third-party channel plugin binaries", func(c *Config) any { return &c.Plugins.Dir }},
	{"http.listen", "OUTBOX_HTTP_LISTEN", "http-listen", "`address` (host:port) of the operator page, API and (unless metrics.listen is set) /metrics; empty serves none", func(c *Config) any { return &c.HTTP.Listen }},
	{"http.session_ttl", "OUTBOX_HTTP_SESSION_TTL", "", "", func(c *Config) any { return &c.HTTP.SessionTTL }},
	{"http.login_token_max_ttl", "OUTBOX_HTTP_LOGIN_TOKEN_MAX_TTL", "", "", func(c *Config) any { return &c.HTTP.LoginTokenMaxTTL }},
	{"http.admin.name", "OUTBOX_HTTP_ADMIN_NAME", "", "", func(c *Config) any { return &c.HTTP.Admin.Name }},
	{"http.admin.password", "OUTBOX_HTTP_ADMIN_PASSWORD", "", "", func(c *Config) any { return &c.HTTP.Admin.Password }},
	{"delivery.network.allow", "OUTBOX_DELIVERY_NETWORK_ALLOW", "", "", func(c *Config) any { return &c.Delivery.Network.Allow }},
	{"delivery.network.deny", "OUTBOX_DELIVERY_NETWORK_DENY", "", "", func(c *Config) any { return &c.Delivery.Network.Deny }},
	{"metrics.listen", "OUTBOX_METRICS_LISTEN", "metrics", "`address` (host:port) of /metrics, /healthz and /readyz apart from the page; empty serves them with the page", func(c *Config) any { return &c.Metrics.Listen }},
	{"secrets.env_prefix", "OUTBOX_SECRETS_ENV_PREFIX", "", "", func(c *Config) any { return &c.Secrets.EnvPrefix }},
}

// envConfigFile names the configuration file when -config is not given.
const envConfigFile = "OUTBOX_CONFIG"

// envTestPrefix marks variables the test suite reads; the loader ignores them.
const envTestPrefix = "OUTBOX_TEST_"

// setValue parses raw into the field p points to.
func setValue(p any, raw string) error {
	switch p := p.(type) {
	case *string:
		*p = raw
	case *int:
		v, err := strconv.Atoi(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("%q is not a whole number", raw)
		}
		*p = v
	case *bool:
		v, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("%q is not true or false", raw)
		}
		*p = v
	case *Duration:
		d, err := parseDuration(raw)
		if err != nil {
			return err
		}
		*p = d
	case *[]string:
		// Comma-separated; blank items are dropped, so "" is the empty list.
		var items []string
		for _, item := range strings.Split(raw, ",") {
			if item = strings.TrimSpace(item); item != "" {
				items = append(items, item)
			}
		}
		*p = items
	default:
		return fmt.Errorf("internal error: no parser for %T", p)
	}
	return nil
}

// commandLine is what a subcommand's flags gave.
type commandLine struct {
	// file is -config (or OUTBOX_CONFIG when -config is absent).
	file string
	// flags maps a setting's key to the raw values of its flag, in order.
	flags map[string][]string
}

// newFlagSet is centralSchema.flagSet.
func newFlagSet(name string, cl *commandLine, stderr io.Writer) *flag.FlagSet {
	return centralSchema.flagSet(name, cl, stderr)
}

// flagSet defines -config and one flag per common setting on a FlagSet that
// records raw values into cl; they are parsed after the file and the
// environment so that flags win.
func (sc schema[C]) flagSet(name string, cl *commandLine, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cl.flags = map[string][]string{}
	fs.StringVar(&cl.file, "config", "", "YAML configuration `file` (env "+envConfigFile+")")
	for _, s := range sc.settings {
		if s.flag == "" {
			continue
		}
		fs.Func(s.flag, s.usage+" (env "+s.env+")", func(v string) error {
			cl.flags[s.key] = append(cl.flags[s.key], v)
			return nil
		})
	}
	return fs
}

// loaded is a configuration and where each of its settings came from.
type loaded[C any] struct {
	cfg C
	// file is the configuration file read, "" when none.
	file string
	// sources maps a setting's key (as in SettingError.Key) to where its
	// value was last set: "FILE:LINE", "env NAME" or "flag -name".
	sources map[string]string
	// warnings are worth logging but do not stop the start.
	warnings []string
}

// loadConfig is centralSchema.load.
func loadConfig(cl commandLine, environ []string) (*loaded[Config], error) {
	return centralSchema.load(cl, environ)
}

// load builds the configuration from the defaults, the file, the
// environment and the flags, then validates it. Every broken rule is
// reported, each as a *SettingError that names its source. With an invalid
// configuration it may still return l, for its warnings.
func (sc schema[C]) load(cl commandLine, environ []string) (*loaded[C], error) {
	l := &loaded[C]{cfg: sc.defaults(), sources: map[string]string{}}
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}

	l.file = cl.file
	if l.file == "" {
		l.file = env[envConfigFile]
	}
	if l.file != "" {
		if err := l.readFile(l.file); err != nil {
			return nil, err
		}
	}

	var errs rules
	known := map[string]bool{envConfigFile: true}
	for _, s := range sc.settings {
		known[s.env] = true
		raw, ok := env[s.env]
		if !ok {
			continue
		}
		src := "env " + s.env
		if err := setValue(s.field(&l.cfg), raw); err != nil {
			errs = append(errs, &SettingError{Key: s.key, Msg: err.Error(), Source: src})
		}
		l.sources[s.key] = src
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if strings.HasPrefix(k, "OUTBOX_") && !known[k] && !strings.HasPrefix(k, envTestPrefix) &&
			(sc.quietEnv == nil || !sc.quietEnv(l.cfg, k)) {
			l.warnings = append(l.warnings, fmt.Sprintf("unknown environment variable %s ignored", k))
		}
	}
	for _, s := range sc.settings {
		for _, raw := range cl.flags[s.key] {
			src := "flag -" + s.flag
			if err := setValue(s.field(&l.cfg), raw); err != nil {
				errs = append(errs, &SettingError{Key: s.key, Msg: err.Error(), Source: src})
			}
			l.sources[s.key] = src
		}
	}
	// Relative references start at the file's directory, wherever
	// outbox runs from.
	if l.file != "" {
		if dir, err := filepath.Abs(filepath.Dir(l.file)); err == nil {
			if sc.setDir != nil {
				sc.setDir(&l.cfg, dir)
			}
			if sc.ownRefs != nil {
				for _, p := range sc.ownRefs(&l.cfg) {
					*p = absRef(*p, dir)
				}
			}
		}
	}
	// Report the values that did not parse together with every other
	// broken rule, leaving out rules about a setting that did not parse.
	unparsed := map[string]bool{}
	for _, e := range errs {
		unparsed[e.(*SettingError).Key] = true
	}
	if err := sc.validate(l.cfg); err != nil {
		for _, e := range unjoin(err) {
			var se *SettingError
			if errors.As(e, &se) {
				if unparsed[se.Key] {
					continue
				}
				if se.Source == "" {
					se.Source = l.sourceOf(se.Key)
				}
				if se.Source == "" && se.related != "" {
					se.Source = l.sourceOf(se.related)
				}
			}
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return l, errors.Join(errs...)
	}
	if sc.warn != nil {
		sc.warn(l)
	}
	return l, nil
}

// sourceOf returns where key, or the nearest enclosing setting, was set.
func (l *loaded[C]) sourceOf(key string) string {
	for k := key; k != ""; {
		if s, ok := l.sources[k]; ok {
			return s
		}
		i := strings.LastIndexAny(k, ".[")
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return ""
}

// readFile decodes the YAML file at path into l.cfg over the defaults,
// recording the line of each setting. Unknown keys and values of the wrong
// kind are refused, all of them at once, each naming its key and line.
func (l *loaded[C]) readFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	return l.readYAML(data, path)
}

// readYAML is readFile for the file's content, data.
func (l *loaded[C]) readYAML(data []byte, path string) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil // empty file: the defaults
	}
	var errs rules
	walkYAML(doc.Content[0], reflect.TypeFor[C](), "", path, l.sources, &errs)
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&l.cfg); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	return nil
}

// walkYAML checks node against the Go type t: every mapping key must be a
// setting (a yaml tag of t), and every scalar must parse as its field's
// kind. It records each key's file:line in sources.
func walkYAML(n *yaml.Node, t reflect.Type, key, file string, sources map[string]string, errs *rules) {
	at := fmt.Sprintf("%s:%d", file, n.Line)
	bad := func(msg string, args ...any) {
		k := key
		if k == "" {
			k = "(top level)"
		}
		*errs = append(*errs, &SettingError{Key: k, Msg: fmt.Sprintf(msg, args...), Source: at})
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an empty value leaves the default
	}
	durationType := reflect.TypeFor[Duration]()
	switch {
	case t == durationType:
		if n.Kind != yaml.ScalarNode {
			bad("want a duration such as \"10s\", got a %s", kindName(n))
			return
		}
		if _, err := parseDuration(n.Value); err != nil {
			bad("%v", err)
		}
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			bad("want a mapping of settings, got a %s", kindName(n))
			return
		}
		fields := map[string]reflect.Type{}
		var names []string
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			fields[name] = f.Type
			names = append(names, name)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			child := k.Value
			if key != "" {
				child = key + "." + k.Value
			}
			ft, ok := fields[k.Value]
			if !ok {
				where := "at the top level"
				if key != "" {
					where = "in " + key
				}
				*errs = append(*errs, &SettingError{
					Key:    child,
					Msg:    fmt.Sprintf("unknown setting %q %s (known: %s)", k.Value, where, strings.Join(names, ", ")),
					Source: fmt.Sprintf("%s:%d", file, k.Line),
				})
				continue
			}
			sources[child] = fmt.Sprintf("%s:%d", file, k.Line)
			walkYAML(v, ft, child, file, sources, errs)
		}
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			bad("want a list, got a %s", kindName(n))
			return
		}
		for i, item := range n.Content {
			child := fmt.Sprintf("%s[%d]", key, i)
			sources[child] = fmt.Sprintf("%s:%d", file, item.Line)
			walkYAML(item, t.Elem(), child, file, sources, errs)
		}
	case t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			bad("want a mapping, got a %s", kindName(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			child := key + "." + k.Value
			sources[child] = fmt.Sprintf("%s:%d", file, k.Line)
			walkYAML(v, t.Elem(), child, file, sources, errs)
		}
	default:
		if n.Kind != yaml.ScalarNode {
			bad("want a single value, got a %s", kindName(n))
			return
		}
		switch t.Kind() {
		case reflect.Int:
			if _, err := strconv.Atoi(n.Value); err != nil {
				bad("%q is not a whole number", n.Value)
			}
		case reflect.Float64:
			if _, err := strconv.ParseFloat(n.Value, 64); err != nil {
				bad("%q is not a number", n.Value)
			}
		}
	}
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	default:
		return "value"
	}
}
