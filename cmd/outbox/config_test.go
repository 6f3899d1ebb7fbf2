package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/plugins/builtin"
	channel "github.com/siteline/outbox/plugins/channel/v1"

	"github.com/siteline/outbox/adapters/httpapi"
	"github.com/siteline/outbox/adapters/pluginhost"
	"github.com/siteline/outbox/cmd/outbox/internal/settings"
	"github.com/siteline/outbox/core"
)

// load runs the loader as a subcommand would: yamlText (when not empty) is
// written to a file given with -config, env is the whole environment, and
// args are the flags.
func load(t *testing.T, yamlText string, env map[string]string, args ...string) (*loaded[Config], error) {
	t.Helper()
	if yamlText != "" {
		file := filepath.Join(t.TempDir(), "central.yaml")
		if err := os.WriteFile(file, []byte(yamlText), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"-config", file}, args...)
	}
	var cl commandLine
	fs := newFlagSet("outbox test", &cl, io.Discard)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("flags %v: %v", args, err)
	}
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	return loadConfig(cl, environ)
}

// problems returns the lines of a configuration error, with the temporary
// file's directory replaced by DIR.
func problems(t *testing.T, err error) []string {
	t.Helper()
	var out []string
	for _, e := range unjoin(err) {
		s := e.Error()
		if i := strings.LastIndex(s, " ["); i >= 0 {
			i++
			if j := strings.Index(s[i:], "central.yaml"); j >= 0 {
				s = s[:i+1] + "FILE" + s[i+j+len("central.yaml"):]
			}
		}
		out = append(out, s)
	}
	return out
}

func TestDefaults(t *testing.T) {
	l, err := load(t, "", nil)
	if err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	c := l.Cfg
	if c.Store.Driver != "sqlite" || c.DataDir != "." || c.Log.Level != "info" || c.Log.Format != "auto" {
		t.Fatalf("defaults = %+v", c)
	}
	if got := c.StoreSettings(); got.DSN != "outbox.db" {
		t.Fatalf("default SQLite DSN = %q, want outbox.db (./outbox.db)", got.DSN)
	}
	// The outbox defaults are core's.
	if want := (core.Config{}).WithDefaults(); c.Outbox != want {
		t.Fatalf("outbox = %+v, want core's defaults %+v", c.Outbox, want)
	}
	if l.File != "" || len(l.Warnings) != 0 {
		t.Fatalf("file %q, warnings %v", l.File, l.Warnings)
	}
	// The plugin host's pings.
	if p := c.Plugins.Host; time.Duration(p.PingInterval) != pluginhost.DefaultPingInterval ||
		time.Duration(p.PingTimeout) != pluginhost.DefaultPingTimeout || p.PingFailures != pluginhost.DefaultPingFailures {
		t.Fatalf("plugin pings %s/%s/%d, want the host's defaults", p.PingInterval, p.PingTimeout, p.PingFailures)
	}
}

func TestPrecedence(t *testing.T) {
	file := `
data_dir: /from/file
store:
  driver: sqlite
outbox:
  node_id: from-file
  dispatch_interval: 1s
  dispatch_batch_size: 7
log:
  level: debug
  format: text
`
	env := map[string]string{
		"OUTBOX_NODE_ID":           "from-env",
		"OUTBOX_DISPATCH_INTERVAL": "2s",
		"OUTBOX_LOG_FORMAT":        "json",
		"OUTBOX_DATA_DIR":          "/from/env",
	}
	l, err := load(t, file, env, "-node-id", "from-flag", "-data-dir", "/from/flag")
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	c := l.Cfg
	checks := []struct {
		key, got, want, source string
	}{
		{"outbox.node_id", c.Outbox.NodeID, "from-flag", "flag -node-id"},                                      // flag > env > file
		{"data_dir", c.DataDir, "/from/flag", "flag -data-dir"},                                                // flag > env > file
		{"outbox.dispatch_interval", c.Outbox.DispatchInterval.String(), "2s", "env OUTBOX_DISPATCH_INTERVAL"}, // env > file
		{"log.format", c.Log.Format, "json", "env OUTBOX_LOG_FORMAT"},                                          // env > file
		{"log.level", c.Log.Level, "debug", "central.yaml:10"},                                                 // file > default
		{"outbox.dispatch_concurrency", "", "", ""},                                                            // default
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %q, want %q", ch.key, ch.got, ch.want)
		}
		if src := l.Sources[ch.key]; !strings.HasSuffix(src, ch.source) || (ch.source == "" && src != "") {
			t.Errorf("source of %s = %q, want %q", ch.key, src, ch.source)
		}
	}
	if c.Outbox.DispatchBatchSize != 7 {
		t.Errorf("dispatch_batch_size = %d, want 7 from the file", c.Outbox.DispatchBatchSize)
	}
	if c.Outbox.DispatchConcurrency != core.DefaultDispatchConcurrency {
		t.Errorf("dispatch_concurrency = %d, want the default %d", c.Outbox.DispatchConcurrency, core.DefaultDispatchConcurrency)
	}
	if got := c.StoreSettings().DSN; got != filepath.Join("/from/flag", "outbox.db") {
		t.Errorf("SQLite DSN = %q, want it in the data dir", got)
	}
}

func TestConfigFileFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	envFile := filepath.Join(dir, "env.yaml")
	flagFile := filepath.Join(dir, "flag.yaml")
	if err := os.WriteFile(envFile, []byte("outbox: {node_id: env-file}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(flagFile, []byte("outbox: {node_id: flag-file}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"OUTBOX_CONFIG": envFile}
	l, err := load(t, "", env)
	if err != nil || l.Cfg.Outbox.NodeID != "env-file" || l.File != envFile {
		t.Fatalf("OUTBOX_CONFIG: %v, %+v", err, l)
	}
	l, err = load(t, "", env, "-config", flagFile)
	if err != nil || l.Cfg.Outbox.NodeID != "flag-file" || l.File != flagFile {
		t.Fatalf("-config over OUTBOX_CONFIG: %v, %+v", err, l)
	}
	if _, err := load(t, "", nil, "-config", filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestEveryEnvironmentVariable(t *testing.T) {
	t.Setenv("ADMIN_PW", "the admin's password") // the reference below resolves at load
	env := map[string]string{}
	want := map[string]string{}
	for i, s := range centralSettings {
		if s.Env == "" {
			continue
		}
		var v string
		switch s.Bind(&Config{}).(type) {
		case *string:
			v = map[string]string{
				"data_dir": "/data", "store.driver": "postgres", "store.dsn": "postgres://u@h/db",
				"outbox.node_id": "n1", "log.level": "warn", "log.format": "json", "plugins.dir": "/plugins",
				"http.listen": "127.0.0.1:8081", "http.admin.name": "root", "http.admin.password": "env:ADMIN_PW",
				"metrics.listen":     "127.0.0.1:9091",
				"secrets.env_prefix": "PLANT_SECRET_",
			}[s.Key]
		case *int:
			v = "3" + strings.Repeat("0", i%2)
		case *time.Duration:
			v = "1h2m" + string(rune('1'+i%8)) + "s"
		case *[]string:
			v = map[string]string{"delivery.network.allow": "127.0.0.1, 10.0.0.0/8", "delivery.network.deny": "10.9.0.0/16"}[s.Key]
		}
		if v == "" {
			t.Fatalf("no test value for %s", s.Key)
		}
		env[s.Env] = v
		want[s.Key] = v
	}
	l, err := load(t, "", env)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	for _, s := range centralSettings {
		if s.Env == "" {
			continue
		}
		var got string
		switch p := s.Bind(&l.Cfg).(type) {
		case *string:
			got = *p
		case *int:
			got = strconv.Itoa(*p)
		case *time.Duration:
			d, _ := time.ParseDuration(want[s.Key])
			if *p == d {
				got = want[s.Key]
			}
		case *[]string:
			got = strings.Join(*p, ", ")
		}
		if got != want[s.Key] {
			t.Errorf("%s from %s = %q, want %q", s.Key, s.Env, got, want[s.Key])
		}
		if l.Sources[s.Key] != "env "+s.Env {
			t.Errorf("source of %s = %q", s.Key, l.Sources[s.Key])
		}
	}
}

func TestUnknownKeysRefused(t *testing.T) {
	file := `
store:
  driver: sqlite
  drvier: postgres
outbox:
  dispatch_intervall: 5s
loglevel: debug
lists:
  - name: ops
    type: email
    target: [a@example.com]
channels:
  - type: email
    retry:
      backof: fixed
`
	_, err := load(t, file, nil)
	if err == nil {
		t.Fatal("unknown keys accepted")
	}
	want := []string{
		`store.drvier: unknown setting "drvier" in store (known: driver, dsn, max_open_conns) [FILE:4]`,
		`outbox.dispatch_intervall: unknown setting "dispatch_intervall" in outbox (known: node_id, dispatch_interval, dispatch_batch_size, dispatch_concurrency, delivery_timeout, claim_lease, stuck_age_threshold, terminal_retention, purge_interval, delivered_kpi_window, max_batch, max_subject_bytes, max_body_bytes, reconcile_interval, site_stale_after, site_disconnected_after) [FILE:6]`,
		`loglevel: unknown setting "loglevel" at the top level (known: data_dir, store, outbox, log, lists, channels, plugins, smtp_capture, delivery, link, http, metrics, secrets) [FILE:7]`,
		`lists[0].target: unknown setting "target" in lists[0] (known: name, type, targets) [FILE:11]`,
		`channels[0].retry.backof: unknown setting "backof" in channels[0].retry (known: backoff, max_retries, interval, max_interval) [FILE:15]`,
	}
	if got := problems(t, err); !slices.Equal(got, want) {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestDuplicateKeysRefused(t *testing.T) {
	_, err := load(t, "outbox:\n  max_batch: 5\n  max_batch: 6\nlink:\n  tls: {cert: a, cert: b}\n", nil)
	want := []string{
		`outbox.max_batch: set twice (also on line 2) [FILE:3]`,
		`link.tls.cert: set twice (also on line 5) [FILE:5]`,
	}
	if got := problems(t, err); !slices.Equal(got, want) {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestWrongKindsRefused(t *testing.T) {
	file := `
store: sqlite
outbox:
  dispatch_interval: 10
  delivery_timeout: [1s]
  dispatch_batch_size: many
log:
  - level: info
lists:
  name: ops
channels:
  - type: email
    rate_limit: fast
    settings: [host]
`
	_, err := load(t, file, nil)
	want := []string{
		`store: want a mapping of settings, got a value [FILE:2]`,
		`outbox.dispatch_interval: "10" is not a duration (want a number with a unit, e.g. "10s", "5m", "8760h") [FILE:4]`,
		`outbox.delivery_timeout: want a duration such as "10s", got a list [FILE:5]`,
		`outbox.dispatch_batch_size: "many" is not a whole number [FILE:6]`,
		`log: want a mapping of settings, got a list [FILE:8]`,
		`lists: want a list, got a mapping [FILE:10]`,
		`channels[0].rate_limit: "fast" is not a number [FILE:13]`,
		`channels[0].settings: want a mapping, got a list [FILE:14]`,
	}
	if got := problems(t, err); !slices.Equal(got, want) {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestEmptySectionsKeepDefaults(t *testing.T) {
	for _, file := range []string{"# nothing but a comment\n", "store:\noutbox:\nlog:\ndata_dir:\nlists:\n", "outbox: {}\n"} {
		l, err := load(t, file, nil)
		if err != nil {
			t.Fatalf("%q refused: %v", file, err)
		}
		if want := defaultConfig(); l.Cfg.Outbox != want.Outbox || l.Cfg.Store != want.Store || l.Cfg.Log != want.Log || l.Cfg.DataDir != want.DataDir {
			t.Fatalf("%q: cfg = %+v, want the defaults", file, l.Cfg)
		}
	}
	if _, err := load(t, "hello\n", nil); err == nil || !strings.Contains(err.Error(), "(top level): want a mapping of settings, got a value") {
		t.Fatalf("a file that is not a mapping: %v", err)
	}
}

func TestYAMLSyntaxError(t *testing.T) {
	_, err := load(t, "store:\n  driver: [sqlite\n", nil)
	if err == nil || !strings.Contains(err.Error(), "central.yaml") || !strings.Contains(err.Error(), "line") {
		t.Fatalf("syntax error: %v", err)
	}
}

func TestScalarsIntoStrings(t *testing.T) {
	// Unquoted numbers and booleans are fine where a string is wanted.
	l, err := load(t, `
outbox: {node_id: 42}
channels:
  - type: email
    settings: {port: 587, starttls: true}
lists:
  - {name: 7, type: email, targets: [a@example.com]}
`, nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if l.Cfg.Outbox.NodeID != "42" || l.Cfg.Channels[0].Settings["port"] != "587" || l.Cfg.Channels[0].Settings["starttls"] != "true" || l.Cfg.Lists[0].Name != "7" {
		t.Fatalf("cfg = %+v", l.Cfg)
	}
}

func TestValidationRules(t *testing.T) {
	// The cases' references resolve at load: only the rules each case
	// breaks are reported.
	t.Setenv("T", "a site's token")
	t.Setenv("PW", "the admin's password")
	tests := []struct {
		name  string
		file  string
		env   map[string]string
		flags []string
		want  []string
	}{
		{
			name: "smtp capture off loopback",
			file: "smtp_capture:\n  addr: 0.0.0.0:2525\n",
			want: []string{`smtp_capture.addr: "0.0.0.0" is not a loopback address: the capture server has no TLS nor authentication [FILE:2]`},
		},
		{
			name: "http off loopback without tls",
			file: "http:\n  listen: 0.0.0.0:8080\n",
			want: []string{`http.tls: required: 0.0.0.0:8080 is not a loopback address, and passwords and session cookies must not travel in clear [FILE:1]`},
		},
		{
			name: "http admin password in clear",
			file: "http:\n  listen: 127.0.0.1:8080\n  admin: {name: root, password: hunter2hunter2}\n",
			want: []string{`http.admin.password: must be a reference, env:NAME or file:/path, never the password itself [FILE:3]`},
		},
		{
			name: "http admin without a name, short session",
			file: "http:\n  listen: 127.0.0.1:8080\n  session_ttl: 10s\n  admin: {password: env:PW}\n",
			want: []string{
				`http.session_ttl: must be at least 1m, got 10s [FILE:3]`,
				`http.admin.name: required: http.admin.password is set [FILE:4]`,
			},
		},
		{
			// Addresses are read with the file: a bad one is reported
			// with the file's other values that do not parse.
			name: "proxies and trusted networks that are no addresses",
			file: "http:\n  listen: 127.0.0.1:8080\n  trusted_proxies: [10.0.0.1, 10.0.0.0/33, proxy.example]\n" +
				"  login: {trusted_networks: [192.0.2.0/24, \"192.0.2.300\", [10.0.0.1]]}\n",
			want: []string{
				`http.trusted_proxies[1]: "10.0.0.0/33" is not an IP address or a CIDR range (192.0.2.10, 10.1.0.0/16, 2001:db8::/64) [FILE:3]`,
				`http.trusted_proxies[2]: "proxy.example" is not an IP address or a CIDR range (192.0.2.10, 10.1.0.0/16, 2001:db8::/64) [FILE:3]`,
				`http.login.trusted_networks[1]: "192.0.2.300" is not an IP address or a CIDR range (192.0.2.10, 10.1.0.0/16, 2001:db8::/64) [FILE:4]`,
				`http.login.trusted_networks[2]: want an IP address or a CIDR range, got a list [FILE:4]`,
			},
		},
		{
			name: "login throttle",
			file: "http:\n  listen: 127.0.0.1:8080\n" +
				"  login: {address_max_delay: 0s, account_max_delay: 2h, trusted_networks: [192.0.2.0/24]}\n" +
				"metrics:\n  listen: 127.0.0.1:8080\n",
			want: []string{
				`http.login.address_max_delay: must be from 1s to 24h, got 0s [FILE:3]`,
				`http.login.account_max_delay: must be from 1s to 1h, got 2h0m0s (it is also what the owner's own typo costs during a guessing attack) [FILE:3]`,
				`metrics.listen: "127.0.0.1:8080" is http.listen too; give the metrics an address of their own, or leave metrics.listen out to serve them with the page [FILE:5]`,
			},
		},
		{
			name: "link bounds",
			file: "link:\n  listen: 127.0.0.1:7443\n  sites: [{id: plant-1, token: env:T}]\n  max_message_bytes: 1024\n" +
				"  handshake_timeout: 0s\n  connections: {per_address: 64, total: 8}\n  quota: {rows_per_second: 0, bytes_per_second: -1}\n",
			want: []string{
				`link.handshake_timeout: must be positive, got 0s (leave it out for the default) [FILE:5]`,
				`link.connections.total: 8 is below link.connections.per_address (64) [FILE:6]`,
				`link.quota.rows_per_second: must be a positive number, got 0 (leave it out for the default) [FILE:7]`,
				`link.quota.bytes_per_second: must be a positive number, got -1 (leave it out for the default) [FILE:7]`,
				`link.max_message_bytes: 1024 cannot hold one notification of outbox.max_body_bytes (65536): want at least 139519 [FILE:4]`,
			},
		},
		{
			name: "link long polls and site thresholds",
			file: "link:\n  listen: 127.0.0.1:7443\n  sites: [{id: plant-1, token: env:T}]\n  max_syncs_per_site: 16\n  call_timeout: 1s\n" +
				"outbox:\n  site_stale_after: 1s\n  site_disconnected_after: 1s\n",
			want: []string{
				`outbox.site_stale_after: must be at least 2s (and above the sites' report interval), got 1s [FILE:7]`,
				`outbox.site_disconnected_after: 1s must exceed outbox.site_stale_after (1s): a site turns stale before it is disconnected [FILE:8]`,
				`link.max_syncs_per_site: must be below MaxCallsPerSite (16), so that a site's long polls leave it a slot for its other calls, got 16 [FILE:4]`,
				`link.call_timeout: must be at least 5s, got 1s (leave it out for the default) [FILE:5]`,
			},
		},
		{
			name: "link message too large",
			file: "link:\n  listen: 127.0.0.1:7443\n  sites: [{id: plant-1, token: env:T}]\n  max_message_bytes: 1073741824\n",
			want: []string{
				`link.max_message_bytes: must be at most 268435456 (256 MiB), got 1073741824 [FILE:4]`,
			},
		},
		{
			name: "plugin pings",
			file: "plugins:\n  ping_interval: 0s\n  ping_timeout: -1s\n  ping_failures: 0\n",
			want: []string{
				`plugins.ping_interval: must be positive, got 0s (leave it out for the default) [FILE:2]`,
				`plugins.ping_timeout: must be positive, got -1s (leave it out for the default) [FILE:3]`,
				`plugins.ping_failures: must be positive, got 0 (leave it out for the default) [FILE:4]`,
			},
		},
		{
			name: "link message smaller than a notification",
			file: "outbox: {max_body_bytes: 4194304}\nlink:\n  listen: 127.0.0.1:7443\n  sites: [{id: plant-1, token: env:T}]\n  max_message_bytes: 2097152\n",
			want: []string{
				`link.max_message_bytes: 2097152 cannot hold one notification of outbox.max_body_bytes (4194304): want at least 4268287 [FILE:5]`,
			},
		},
		{
			name: "list refresh out of bounds",
			file: "http:\n  listen: 127.0.0.1:8080\n  list_refresh: 500ms\n",
			want: []string{`http.list_refresh: must be 0 (off) or between 1s and 1h, got 500ms [FILE:3]`},
		},
		{
			name: "list refresh negative",
			file: "http:\n  listen: 127.0.0.1:8080\n  list_refresh: -15s\n",
			want: []string{`http.list_refresh: must be 0 (off) or between 1s and 1h, got -15s [FILE:3]`},
		},
		{
			name: "login token lifetime out of bounds",
			file: "http:\n  listen: 127.0.0.1:8080\n  login_token_max_ttl: 9000h\n",
			want: []string{`http.login_token_max_ttl: must be between 1m and 8760h, got 9000h0m0s [FILE:3]`},
		},
		{
			name: "smtp capture dir without addr",
			file: "smtp_capture: {dir: ./mail}\n",
			want: []string{`smtp_capture.addr: empty, but smtp_capture.dir or reject are set: no capture server runs [FILE:1]`},
		},
		{
			name: "plugins",
			file: "plugins:\n  builtin: [email, fax]\n  external:\n    - {type: email, command: /x}\n    - {type: jp, sha256: abc}\n",
			want: []string{
				`plugins.builtin[1]: "fax" is not a built-in channel (want email, slack, teams or webhook, or none alone) [FILE:2]`,
				`plugins.external[0].type: "email" is a built-in channel; give the plugin another type, or leave "email" out of plugins.builtin [FILE:4]`,
				`plugins.external[1].command: empty, and no plugins.dir to find "jp" in [FILE:5]`,
				`plugins.external[1].sha256: must be 64 hexadecimal digits [FILE:5]`,
			},
		},
		{
			name: "unknown driver from env",
			env:  map[string]string{"OUTBOX_STORE_DRIVER": "orcale"},
			want: []string{`store.driver: unknown driver "orcale" (want sqlite, postgres or mssql) [env OUTBOX_STORE_DRIVER]`},
		},
		{
			name: "empty driver in file",
			file: "store:\n  driver: \"\"\n",
			want: []string{`store.driver: empty (want sqlite, postgres or mssql) [FILE:2]`},
		},
		{
			name:  "postgres without dsn",
			flags: []string{"-store-driver", "postgres"},
			want:  []string{`store.dsn: required when store.driver is postgres (it may hold a password: set it in the environment (OUTBOX_STORE_DSN), not in a file) [flag -store-driver]`},
		},
		{
			name: "mssql without dsn",
			file: "store: {driver: mssql}\n",
			want: []string{`store.dsn: required when store.driver is mssql (it may hold a password: set it in the environment (OUTBOX_STORE_DSN), not in a file) [FILE:1]`},
		},
		{
			name: "postgres with a mysql url",
			env:  map[string]string{"OUTBOX_STORE_DRIVER": "postgres", "OUTBOX_STORE_DSN": "mysql://root:hunter2@h/db"},
			want: []string{`store.dsn: driver postgres wants a postgres:// URL, got a mysql URL [env OUTBOX_STORE_DSN]`},
		},
		{
			name: "mssql without sqlserver url",
			env:  map[string]string{"OUTBOX_STORE_DRIVER": "mssql", "OUTBOX_STORE_DSN": "server=h;password=hunter2"},
			want: []string{`store.dsn: driver mssql wants a sqlserver:// URL [env OUTBOX_STORE_DSN]`},
		},
		{
			name: "negative pool",
			env:  map[string]string{"OUTBOX_STORE_MAX_OPEN_CONNS": "-1"},
			want: []string{`store.max_open_conns: must not be negative, got -1 (0 lets the store pick) [env OUTBOX_STORE_MAX_OPEN_CONNS]`},
		},
		{
			name: "empty data dir",
			file: "data_dir: \"\"\n",
			want: []string{`data_dir: empty (it holds outbox.db when store.dsn is not set) [FILE:1]`},
		},
		{
			name:  "node id with a space",
			flags: []string{"-node-id", "a b"},
			want:  []string{`outbox.node_id: "a b" holds " " (use letters, digits, '.', '_', '-' and ':') [flag -node-id]`},
		},
		{
			name: "node id too long",
			env:  map[string]string{"OUTBOX_NODE_ID": strings.Repeat("n", 65)},
			want: []string{`outbox.node_id: longer than 64 characters (65) [env OUTBOX_NODE_ID]`},
		},
		{
			name: "zero and negative outbox settings",
			file: `
outbox:
  dispatch_interval: 0s
  dispatch_batch_size: 0
  dispatch_concurrency: -1
  delivery_timeout: -1s
  claim_lease: 0s
  stuck_age_threshold: 0s
  terminal_retention: -1h
  purge_interval: 0s
  delivered_kpi_window: 0s
  max_batch: 0
  max_subject_bytes: -5
  max_body_bytes: 0
`,
			want: []string{
				`outbox.dispatch_interval: must be positive, got 0s (leave it out for the default) [FILE:3]`,
				`outbox.dispatch_batch_size: must be positive, got 0 (leave it out for the default) [FILE:4]`,
				`outbox.dispatch_concurrency: must be positive, got -1 (leave it out for the default) [FILE:5]`,
				`outbox.delivery_timeout: must be positive, got -1s (leave it out for the default) [FILE:6]`,
				`outbox.claim_lease: must be positive, got 0s (leave it out for the default) [FILE:7]`,
				`outbox.stuck_age_threshold: must be positive, got 0s (leave it out for the default) [FILE:8]`,
				`outbox.terminal_retention: must be positive, got -1h0m0s (leave it out for the default) [FILE:9]`,
				`outbox.purge_interval: must be positive, got 0s (leave it out for the default) [FILE:10]`,
				`outbox.delivered_kpi_window: must be positive, got 0s (leave it out for the default) [FILE:11]`,
				`outbox.max_batch: must be positive, got 0 (leave it out for the default) [FILE:12]`,
				`outbox.max_subject_bytes: must be positive, got -5 (leave it out for the default) [FILE:13]`,
				`outbox.max_body_bytes: must be positive, got 0 (leave it out for the default) [FILE:14]`,
			},
		},
		{
			name: "batch too large",
			env:  map[string]string{"OUTBOX_DISPATCH_BATCH_SIZE": "10001"},
			want: []string{`outbox.dispatch_batch_size: must be at most 10000, got 10001 [env OUTBOX_DISPATCH_BATCH_SIZE]`},
		},
		{
			name: "lease not above timeout",
			file: "outbox:\n  claim_lease: 30s\n",
			want: []string{`outbox.claim_lease: 30s must exceed outbox.delivery_timeout (30s), or a slow delivery could be claimed twice [FILE:2]`},
		},
		{
			name:  "log level and format",
			env:   map[string]string{"OUTBOX_LOG_FORMAT": "xml"},
			flags: []string{"-log-level", "loud"},
			want: []string{
				`log.level: unknown level "loud" (want debug, info, warn or error) [flag -log-level]`,
				`log.format: unknown format "xml" (want auto, text or json) [env OUTBOX_LOG_FORMAT]`,
			},
		},
		{
			name: "lists and channels",
			file: `
lists:
  - name: ops
    type: email
  - name: ops
  - type: webhook
channels:
  - type: email
    settings: {password: hunter2}
    retry: {backoff: linear, max_retries: -1}
    rate_limit: -3
`,
			want: []string{
				`lists[1].name: duplicate list name "ops" (also lists[0]) [FILE:5]`,
				`lists[1].type: empty (list "ops" needs a channel type such as email) [FILE:5]`,
				`lists[2].name: empty (every list needs a name) [FILE:6]`,
				`channels[0].retry.backoff: unknown backoff "linear" (want fixed or exponential) [FILE:10]`,
				`channels[0].retry.max_retries: must not be negative, got -1 [FILE:10]`,
				`channels[0].rate_limit: must be a finite number of deliveries per second, 0 or more (0 means unlimited), got -3 [FILE:11]`,
				`channels[0].settings.password: secret values must be references (env:NAME or file:/path), not clear text [FILE:9]`,
			},
		},
		{
			name:  "values that do not parse, with every other rule",
			env:   map[string]string{"OUTBOX_DISPATCH_INTERVAL": "10", "OUTBOX_STORE_DRIVER": "orcale"},
			flags: []string{"-dispatch-interval", "soon"},
			file:  "outbox:\n  max_batch: 0\n",
			want: []string{
				`outbox.dispatch_interval: "10" is not a duration (want a number with a unit, e.g. "10s", "5m", "8760h") [env OUTBOX_DISPATCH_INTERVAL]`,
				`outbox.dispatch_interval: "soon" is not a duration (want a number with a unit, e.g. "10s", "5m", "8760h") [flag -dispatch-interval]`,
				`store.driver: unknown driver "orcale" (want sqlite, postgres or mssql) [env OUTBOX_STORE_DRIVER]`,
				`outbox.max_batch: must be positive, got 0 (leave it out for the default) [FILE:2]`,
			},
		},
		{
			name: "delivery network policy with malformed entries",
			file: "delivery:\n  network:\n    allow: [127.0.0.1, 10.0.0.0/33, localhost]\n    deny:\n      - 10.1.2.3/8\n      - fe80::1%eth0\n",
			want: []string{
				`delivery.network.allow[1]: "10.0.0.0/33": the prefix length 33 is out of range for IPv4 (0 to 32) [FILE:3]`,
				`delivery.network.allow[2]: "localhost" is not an IP address or a CIDR prefix (want e.g. 10.0.0.0/8, 192.168.1.20 or fd00::/8; host names are not accepted) [FILE:3]`,
				`delivery.network.deny[0]: "10.1.2.3/8" has bits set after the prefix length: write 10.0.0.0/8 (the network) or 10.1.2.3 (the one address) [FILE:5]`,
				`delivery.network.deny[1]: "fe80::1%eth0" has a zone (%...): zones cannot be matched, leave it out [FILE:6]`,
			},
		},
		{
			name: "delivery network policy from the environment",
			env:  map[string]string{"OUTBOX_DELIVERY_NETWORK_ALLOW": "127.0.0.1,,::ffff:10.0.0.1"},
			want: []string{
				`delivery.network.allow[1]: "::ffff:10.0.0.1" is an IPv4-mapped IPv6 address: write it as IPv4 (10.0.0.1) [env OUTBOX_DELIVERY_NETWORK_ALLOW]`,
			},
		},
		{
			name: "number that does not parse",
			env:  map[string]string{"OUTBOX_DISPATCH_CONCURRENCY": "lots"},
			want: []string{`outbox.dispatch_concurrency: "lots" is not a whole number [env OUTBOX_DISPATCH_CONCURRENCY]`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.file, tt.env, tt.flags...)
			if err == nil {
				t.Fatal("configuration accepted")
			}
			if got := problems(t, err); !slices.Equal(got, tt.want) {
				t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("an error repeats a secret: %v", err)
			}
			for _, e := range unjoin(err) {
				var se *SettingError
				if !errors.As(e, &se) || se.Source == "" {
					t.Errorf("%v: no *SettingError with a source", e)
				}
			}
		})
	}
}

func TestWarnings(t *testing.T) {
	l, err := load(t, "store:\n  driver: postgres\n  dsn: postgres://outbox:hunter2@db/outbox\n",
		map[string]string{"OUTBOX_STORE_DRVIER": "x", "OUTBOX_TEST_POSTGRES_DSN": "ignored"})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	got := strings.Join(l.Warnings, "\n")
	if !strings.Contains(got, "unknown environment variable OUTBOX_STORE_DRVIER ignored") {
		t.Errorf("no warning for a misspelled variable: %q", got)
	}
	if strings.Contains(got, "OUTBOX_TEST_") {
		t.Errorf("warned about a test variable: %q", got)
	}
	if !strings.Contains(got, "store.dsn holds a password in clear outside the environment") || strings.Contains(got, "hunter2") {
		t.Errorf("password warning: %q", got)
	}
	// The same DSN from the environment is the recommended way: no warning.
	l, err = load(t, "", map[string]string{"OUTBOX_STORE_DRIVER": "postgres", "OUTBOX_STORE_DSN": "postgres://outbox:hunter2@db/outbox"})
	if err != nil || len(l.Warnings) != 0 {
		t.Fatalf("DSN from env: %v, warnings %v", err, l.Warnings)
	}
}

func TestDSNHasPassword(t *testing.T) {
	for dsn, want := range map[string]bool{
		"postgres://u:p@h/db":                     true,
		"postgres://u@h/db":                       false,
		"postgres://u@h/db?password=p":            true,
		"host=h user=u password=p":                true,
		"sqlserver://u:p@h:1433?database=outbox":  true,
		"sqlserver://h:1433?database=x&user id=u": false,
		"./data/outbox.db":                        false,
	} {
		if got := dsnHasPassword(dsn); got != want {
			t.Errorf("dsnHasPassword(%q) = %v, want %v", dsn, got, want)
		}
	}
}

// TestExampleConfigs loads and validates every configs/central* file. A file
// for a server database holds no DSN; it gets a placeholder through
// OUTBOX_STORE_DSN, as its comments tell operators to do.
func TestExampleConfigs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "configs", "central*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("found %d example configs (%v), want at least central.yaml, central-postgres.yaml and central-mssql.yaml", len(files), files)
	}
	// The examples' channels read the SMTP password from this variable:
	// unset, central would warn that it does not resolve.
	t.Setenv("OUTBOX_SECRET_SMTP_PASSWORD", "the SMTP password")
	placeholder := map[string]string{
		"postgres": "postgres://outbox@db.example.com:5432/outbox?sslmode=verify-full",
		"mssql":    "sqlserver://outbox@db.example.com:1433?database=outbox",
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			cl := commandLine{File: f}
			l, err := loadConfig(cl, nil)
			if err != nil {
				// Only a missing DSN is allowed, and it must say so.
				for _, line := range problems(t, err) {
					if !strings.HasPrefix(line, "store.dsn: required when store.driver is") {
						t.Fatalf("%s refused: %v", f, err)
					}
				}
				l, err = loadConfig(cl, []string{"OUTBOX_STORE_DSN=" + placeholder[l.Cfg.Store.Driver]})
				if err != nil {
					t.Fatalf("%s with OUTBOX_STORE_DSN refused: %v", f, err)
				}
			}
			if l.Cfg.Store.DSN != "" && dsnHasPassword(l.Cfg.Store.DSN) {
				t.Errorf("%s: a DSN with a password", f)
			}
			if len(l.Warnings) != 0 {
				t.Errorf("%s: warnings %v", f, l.Warnings)
			}
			if len(l.Cfg.Lists) == 0 || len(l.Cfg.Channels) == 0 {
				t.Errorf("%s: want a sample list and channel", f)
			}
			if _, err := l.Cfg.Directory(); err != nil {
				t.Errorf("%s: directory: %v", f, err)
			}
			// The settings pass the schema of the built-in channel they
			// configure, as central checks at start.
			for _, c := range l.Cfg.Channels {
				newChannel, ok := builtin.Channels[c.Type]
				if !ok {
					t.Errorf("%s: channel type %q is not built in", f, c.Type)
					continue
				}
				desc, err := newChannel(nil).(channel.Describer).Describe(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if err := desc.Validate(c.Settings); err != nil {
					t.Errorf("%s: channel %s: %v", f, c.Type, err)
				}
			}
		})
	}
}

// TestREADMEDescribesEverySetting holds configs/README.md to the settings'
// declarations: each setting of central and of a site node has a row (a
// record, each of its keys) with its environment variable, its flag and its
// default, every setting row names a declared setting, and the table of
// environment variables lists each of central's. A setting added without
// its doc line, or renamed in one place only, fails here.
func TestREADMEDescribesEverySetting(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "configs", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	central, rest, ok := strings.Cut(readme, "\n## `outbox site`")
	if !ok {
		t.Fatal("configs/README.md has no section ## `outbox site`")
	}
	site, _, _ := strings.Cut(rest, "\n## Commands")
	_, central, _ = strings.Cut(central, "\n## Settings")
	central, envTable, ok := strings.Cut(central, "\n## Environment variables")
	if !ok {
		t.Fatal("configs/README.md has no section ## Environment variables")
	}
	checkSettingRows(t, "central", centralSettings, defaultConfig(), central)
	checkSettingRows(t, "site", siteSettings, defaultSiteConfig(), site)
	for _, s := range centralSettings {
		if s.Env != "" && !strings.Contains(envTable, "| `"+s.Env+"` | `"+s.Key+"`") {
			t.Errorf("configs/README.md's environment variables lack | `%s` | `%s` |", s.Env, s.Key)
		}
	}
	for _, row := range readmeRows(envTable) {
		if v := row.keys[0]; v != envConfigFile && !slices.ContainsFunc(centralSettings, func(s settings.Setting[Config]) bool { return s.Env == v }) {
			t.Errorf("configs/README.md lists %s, which no setting reads", v)
		}
	}
}

// readmeRow is one row of a Markdown table: the backquoted names of its
// first cell, and its cells.
type readmeRow struct {
	keys  []string
	cells []string
}

// readmeRows returns the rows of the Markdown tables in text whose first
// cell names something in backquotes.
func readmeRows(text string) []readmeRow {
	var rows []readmeRow
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		var keys []string
		for _, part := range strings.Split(cells[0], ",") {
			keys = append(keys, strings.Trim(strings.TrimSpace(part), "`"))
		}
		rows = append(rows, readmeRow{keys: keys, cells: cells})
	}
	return rows
}

// checkSettingRows checks the settings tables of one command's section of
// configs/README.md against its declared settings.
func checkSettingRows[C any](t *testing.T, name string, list []settings.Setting[C], defaults C, section string) {
	t.Helper()
	rows := map[string]readmeRow{}
	for _, row := range readmeRows(section) {
		for _, k := range row.keys {
			rows[k] = row
		}
	}
	declared := map[string]bool{}
	for _, s := range list {
		if s.Doc == "" {
			t.Errorf("%s setting %s has no doc", name, s.Key)
		}
		if !s.Scalar() {
			// A record: a row for it, or one for each of its keys.
			var c C
			keys := recordKeys(reflect.TypeOf(s.Bind(&c)).Elem(), s.Key)
			if _, ok := rows[s.Key]; ok {
				keys = []string{s.Key}
			}
			for _, k := range keys {
				declared[k] = true
				if _, ok := rows[k]; !ok {
					t.Errorf("configs/README.md (%s) has no row for %s", name, k)
				}
			}
			for k := range rows {
				if strings.HasPrefix(k, s.Key+".") || strings.HasPrefix(k, s.Key+"[].") {
					declared[k] = true
				}
			}
			continue
		}
		declared[s.Key] = true
		row, ok := rows[s.Key]
		if !ok {
			t.Errorf("configs/README.md (%s) has no row for %s", name, s.Key)
			continue
		}
		env, flag := "", ""
		if len(row.cells) == 5 {
			env, flag = row.cells[2], row.cells[3]
		}
		if s.Env != "" && !strings.Contains(env, "`"+s.Env+"`") || s.Env == "" && strings.Contains(env, "OUTBOX_") {
			t.Errorf("configs/README.md (%s): %s's environment is %q, want %s", name, s.Key, env, s.Env)
		}
		if s.Flag != "" && !strings.Contains(flag, "`-"+s.Flag+"`") || s.Flag == "" && flag != "" {
			t.Errorf("configs/README.md (%s): %s's flag is %q, want -%s", name, s.Key, flag, s.Flag)
		}
		if d := s.Default(defaults); d != "" && d != "0" && !strings.Contains(row.cells[1], "`"+d+"`") {
			t.Errorf("configs/README.md (%s): %s's default is %q, want it to say `%s`", name, s.Key, row.cells[1], d)
		}
	}
	for k := range rows {
		if !declared[k] {
			t.Errorf("configs/README.md (%s) describes %s, which is no setting", name, k)
		}
	}
}

// recordKeys returns the keys of a record setting: key[].name for each
// yaml tag of a list's entries (and of the structs within them), key
// itself otherwise.
func recordKeys(t reflect.Type, key string) []string {
	if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct {
		return structKeys(t.Elem(), key+"[]")
	}
	return []string{key}
}

func structKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		if ft := t.Field(i).Type; ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Duration]() {
			out = append(out, structKeys(ft, prefix+"."+name)...)
			continue
		}
		out = append(out, prefix+"."+name)
	}
	return out
}

// TestSettingsDeclarations: keys, variables and flags are each declared
// once per command, and only single values (or lists of strings) come from
// the environment and flags.
func TestSettingsDeclarations(t *testing.T) {
	check := func(name string, keys, envs, flags []string, scalar []bool) {
		for _, list := range [][]string{keys, envs, flags} {
			seen := map[string]bool{}
			for _, v := range list {
				if v != "" && seen[v] {
					t.Errorf("%s: %s declared twice", name, v)
				}
				seen[v] = true
			}
		}
		for i := range keys {
			if (envs[i] != "" || flags[i] != "") && !scalar[i] {
				t.Errorf("%s: %s is a record, set in the file only, yet has a variable or a flag", name, keys[i])
			}
		}
	}
	var keys, envs, flags []string
	var scalar []bool
	for _, s := range centralSettings {
		keys, envs, flags, scalar = append(keys, s.Key), append(envs, s.Env), append(flags, s.Flag), append(scalar, s.Scalar())
	}
	check("central", keys, envs, flags, scalar)
	keys, envs, flags, scalar = nil, nil, nil, nil
	for _, s := range siteSettings {
		keys, envs, flags, scalar = append(keys, s.Key), append(envs, s.Env), append(flags, s.Flag), append(scalar, s.Scalar())
	}
	check("site", keys, envs, flags, scalar)
}

// TestListRefreshSetting: http.list_refresh defaults to the page's 15 s,
// takes another interval, and 0 turns the lists' refresh off.
func TestListRefreshSetting(t *testing.T) {
	for file, want := range map[string]time.Duration{
		"":                            httpapi.DefaultListRefresh,
		"http:\n  list_refresh: 1m\n": time.Minute,
		"http:\n  list_refresh: 0s\n": 0,
		"http:\n  list_refresh: 0\n":  0,
		"http:\n  list_refresh: 1s\n": time.Second,
	} {
		l, err := load(t, file, nil)
		if err != nil {
			t.Errorf("%q refused: %v", file, err)
			continue
		}
		if got := l.Cfg.HTTP.ListRefresh; got != want {
			t.Errorf("%q: list refresh %s, want %s", file, got, want)
		}
	}
}
