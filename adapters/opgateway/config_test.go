package opgateway_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/siteline/outbox/adapters/opgateway"
	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/ports"
)

const siteYAML = `
systems:
  - name: erp
    base_url: https://erp.plant.example/api/v2
    timeout: 10s
    max_retries: 5
    retry_interval: 30s
    headers: {X-Plant: north}
    auth: {kind: bearer, token: env:OUTBOX_SECRET_ERP_TOKEN}
    methods:
      - {name: getOrder, verb: GET, path: "/orders/{id}"}
      - {name: addLine, verb: POST, path: "/orders/{id}/lines"}
  - name: historian
    base_url: http://10.0.0.7:8080
    allow_insecure: true
    auth: {kind: basic, user: site7, password: file:/run/secrets/historian}
    methods: [{name: put, verb: PUT, path: /points}]
connections:
  - name: plantdb
    driver: postgres
    dsn: file:/run/secrets/plantdb-dsn
    exactly_once: true
  - {name: local, driver: sqlite, dsn: env:OUTBOX_SECRET_LOCAL_DSN, max_conns: 1}
`

func TestConfigFromYAML(t *testing.T) {
	dir := t.TempDir()
	var cfg opgateway.Config
	if err := yaml.Unmarshal([]byte(strings.ReplaceAll(siteYAML, "/run/secrets", dir)), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	erp, hist, db := cfg.Systems[0], cfg.Systems[1], cfg.Connections[0]
	if erp.Timeout != 10*time.Second || erp.MaxRetries != 5 || erp.RetryInterval != 30*time.Second ||
		erp.Auth.Token != "env:OUTBOX_SECRET_ERP_TOKEN" || erp.Methods[1].Path != "/orders/{id}/lines" || erp.Headers["X-Plant"] != "north" {
		t.Errorf("erp: %+v", erp)
	}
	if hist.Timeout != opgateway.DefaultTimeout || hist.MaxRetries != opgateway.DefaultMaxRetries || !hist.AllowInsecure {
		t.Errorf("historian defaults: %+v", hist)
	}
	if !db.ExactlyOnce || db.RetryInterval != opgateway.DefaultRetryInterval || db.MaxConns != opgateway.DefaultMaxConns {
		t.Errorf("plantdb: %+v", db)
	}
	if err := cfg.CheckRefs(secretref.Policy{EnvPrefix: "OUTBOX_SECRET_", Dirs: []string{dir}}); err != nil {
		t.Errorf("CheckRefs: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	good := func() opgateway.Config {
		return opgateway.Config{
			Systems: []opgateway.System{{Name: "erp", BaseURL: "https://erp.example/api",
				Methods: []opgateway.Method{{Name: "get", Verb: "GET", Path: "/orders/{id}"}}}},
			Connections: []opgateway.Connection{{Name: "db", Driver: "postgres", DSN: "env:DB"}},
		}
	}
	if err := good().WithDefaults().Validate(); err != nil {
		t.Fatalf("a good config: %v", err)
	}
	for _, c := range []struct {
		what   string
		change func(*opgateway.Config)
		fields []string
	}{
		{"no name", func(c *opgateway.Config) { c.Systems[0].Name = " " }, []string{"Systems[0].Name"}},
		{"two systems named alike", func(c *opgateway.Config) { c.Systems = append(c.Systems, c.Systems[0]) }, []string{"Systems[1].Name"}},
		{"two connections named alike", func(c *opgateway.Config) { c.Connections = append(c.Connections, c.Connections[0]) }, []string{"Connections[1].Name"}},
		{"a system and a connection named alike", func(c *opgateway.Config) { c.Connections[0].Name = "erp" }, []string{"Connections[0].Name"}},
		{"a ftp URL", func(c *opgateway.Config) { c.Systems[0].BaseURL = "ftp://erp.example" }, []string{"Systems[0].BaseURL"}},
		{"a relative URL", func(c *opgateway.Config) { c.Systems[0].BaseURL = "/api" }, []string{"Systems[0].BaseURL"}},
		{"user information", func(c *opgateway.Config) { c.Systems[0].BaseURL = "https://u:p@erp.example" }, []string{"Systems[0].BaseURL"}},
		{"a query", func(c *opgateway.Config) { c.Systems[0].BaseURL = "https://erp.example/?key=1" }, []string{"Systems[0].BaseURL"}},
		{"http off loopback", func(c *opgateway.Config) { c.Systems[0].BaseURL = "http://erp.example" }, []string{"Systems[0].BaseURL"}},
		{"a CA file for http", func(c *opgateway.Config) { c.Systems[0].BaseURL, c.Systems[0].CAFile = "http://127.0.0.1", "ca.pem" },
			[]string{"Systems[0].CAFile"}},
		{"no method", func(c *opgateway.Config) { c.Systems[0].Methods = nil }, []string{"Systems[0].Methods"}},
		{"two methods named alike", func(c *opgateway.Config) {
			c.Systems[0].Methods = append(c.Systems[0].Methods, c.Systems[0].Methods[0])
		}, []string{"Systems[0].Methods[1].Name"}},
		{"a bad verb and path", func(c *opgateway.Config) { c.Systems[0].Methods[0].Verb, c.Systems[0].Methods[0].Path = "get", "/x/{" },
			[]string{"Systems[0].Methods[0].Verb", "Systems[0].Methods[0].Path"}},
		{"a reserved header", func(c *opgateway.Config) { c.Systems[0].Headers = map[string]string{"authorization": "x"} }, []string{"Systems[0].Headers[authorization]"}},
		{"a header with a reference", func(c *opgateway.Config) { c.Systems[0].Headers = map[string]string{"X-Key": "env:KEY"} }, []string{"Systems[0].Headers[X-Key]"}},
		{"a bad header name", func(c *opgateway.Config) { c.Systems[0].Headers = map[string]string{"X Key": "v"} }, []string{"Systems[0].Headers"}},
		{"a token in clear", func(c *opgateway.Config) { c.Systems[0].Auth = opgateway.Auth{Kind: "bearer", Token: "abc123"} }, []string{"Systems[0].Auth.Token"}},
		{"basic without user and password", func(c *opgateway.Config) { c.Systems[0].Auth = opgateway.Auth{Kind: "basic"} },
			[]string{"Systems[0].Auth.User", "Systems[0].Auth.Password"}},
		{"header without a name", func(c *opgateway.Config) { c.Systems[0].Auth = opgateway.Auth{Kind: "header", Value: "env:K"} }, []string{"Systems[0].Auth.Header"}},
		{"an unknown kind", func(c *opgateway.Config) { c.Systems[0].Auth = opgateway.Auth{Kind: "oauth"} }, []string{"Systems[0].Auth.Kind"}},
		{"a field the kind ignores", func(c *opgateway.Config) {
			c.Systems[0].Auth = opgateway.Auth{Kind: "bearer", Token: "env:T", Password: "env:P"}
		}, []string{"Systems[0].Auth.Password"}},
		{"negative durations and retries", func(c *opgateway.Config) {
			c.Systems[0].Timeout, c.Systems[0].MaxRetries, c.Systems[0].RetryInterval = -1, -1, -time.Second
		}, []string{"Systems[0].Timeout", "Systems[0].MaxRetries", "Systems[0].RetryInterval"}},
		{"a bad driver", func(c *opgateway.Config) { c.Connections[0].Driver = "mysql" }, []string{"Connections[0].Driver"}},
		{"a DSN in clear", func(c *opgateway.Config) { c.Connections[0].DSN = "postgres://u:p@h/db" }, []string{"Connections[0].DSN"}},
		{"no DSN", func(c *opgateway.Config) { c.Connections[0].DSN = "" }, []string{"Connections[0].DSN"}},
		{"a timeout past its bound", func(c *opgateway.Config) { c.Connections[0].Timeout = time.Hour }, []string{"Connections[0].Timeout"}},
		{"negative connections", func(c *opgateway.Config) { c.Connections[0].MaxConns = -1 }, []string{"Connections[0].MaxConns"}},
	} {
		cfg := good()
		c.change(&cfg)
		err := cfg.WithDefaults().Validate()
		var got []string
		for _, e := range flatten(err) {
			var fe *ports.FieldError
			if !errors.As(e, &fe) || !errors.Is(e, ports.ErrInvalid) {
				t.Errorf("%s: %v is not a *ports.FieldError", c.what, e)
				continue
			}
			got = append(got, fe.Field)
		}
		if !slices.Equal(got, c.fields) {
			t.Errorf("%s: fields %q, want %q (%v)", c.what, got, c.fields, err)
		}
		for _, secret := range []string{"abc123", "u:p@"} {
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("%s: the error repeats a secret: %v", c.what, err)
			}
		}
	}
	// http to loopback, or with AllowInsecure, is allowed.
	for _, u := range []string{"http://127.0.0.1:8080", "http://localhost", "http://[::1]:9"} {
		cfg := good()
		cfg.Systems[0].BaseURL = u
		if err := cfg.WithDefaults().Validate(); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	cfg := good()
	cfg.Systems[0].BaseURL, cfg.Systems[0].AllowInsecure = "http://10.0.0.7", true
	if err := cfg.WithDefaults().Validate(); err != nil {
		t.Errorf("AllowInsecure: %v", err)
	}
	// New refuses an invalid configuration with the same errors.
	cfg.Connections[0].Driver = "oracle"
	if _, err := opgateway.New(cfg, secretref.Own(""), opgateway.Options{}); !errors.Is(err, ports.ErrInvalid) ||
		!strings.Contains(err.Error(), "Connections[0].Driver") {
		t.Errorf("New with a bad driver: %v", err)
	}
}

func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}
