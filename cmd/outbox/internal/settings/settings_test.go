package settings

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// engine is a component's configuration with its own Validate, as
// core.Config is: Go field names in its errors, zeros refused.
type engine struct {
	Interval time.Duration
	Timeout  time.Duration
	Workers  int
	Streams  uint32
	Conns    conns
}

// conns is a struct nested in a component, as guard.ConnLimits is in
// siteapi.Limits.
type conns struct{ PerAddress, Total int }

func (e engine) Validate() error {
	var errs []error
	if e.Workers <= 0 {
		errs = append(errs, &ports.FieldError{Field: "Workers", Msg: fmt.Sprintf("must be positive, got %d", e.Workers)})
	}
	if e.Conns.Total < e.Conns.PerAddress {
		errs = append(errs, &ports.FieldError{Field: "Conns.Total",
			Msg: fmt.Sprintf("%d is below PerAddress (%d)", e.Conns.Total, e.Conns.PerAddress)})
	}
	if e.Timeout >= e.Interval {
		errs = append(errs, &ports.FieldError{Field: "Timeout",
			Msg: fmt.Sprintf("%s must stay below Interval (%s)", e.Timeout, e.Interval)})
	}
	return errors.Join(errs...)
}

type entry struct {
	Name string `yaml:"name"`
	Size int    `yaml:"size"`
}

type testConfig struct {
	Dir     string
	Engine  engine
	Entries []entry
	Tags    []string
	Nets    []netip.Prefix
}

var testSchema = Schema[testConfig]{
	Defaults: func() testConfig {
		return testConfig{Dir: ".", Engine: engine{Interval: time.Minute, Timeout: 10 * time.Second, Workers: 4}}
	},
	Settings: []Setting[testConfig]{
		{Key: "dir", Env: "OUTBOX_DIR", Flag: "dir", Doc: "a directory", Bind: func(c *testConfig) any { return &c.Dir }},
		{Key: "engine.interval", Env: "OUTBOX_INTERVAL", Doc: "how often", Bind: func(c *testConfig) any { return &c.Engine.Interval }},
		{Key: "engine.timeout", Doc: "bound of one run", Bind: func(c *testConfig) any { return &c.Engine.Timeout }},
		{Key: "engine.workers", Flag: "workers", Doc: "runs at once", Bind: func(c *testConfig) any { return &c.Engine.Workers }},
		{Key: "entries", Doc: "a record", Bind: func(c *testConfig) any { return &c.Entries }},
		{Key: "tags", Env: "OUTBOX_TAGS", Doc: "strings", Bind: func(c *testConfig) any { return &c.Tags }},
		{Key: "engine.streams", Env: "OUTBOX_STREAMS", Doc: "an unsigned count", Bind: func(c *testConfig) any { return &c.Engine.Streams }},
		{Key: "engine.conns.per_address", Doc: "a nested field", Bind: func(c *testConfig) any { return &c.Engine.Conns.PerAddress }},
		{Key: "engine.conns.total", Doc: "a nested field", Bind: func(c *testConfig) any { return &c.Engine.Conns.Total }},
		{Key: "nets", Env: "OUTBOX_NETS", Doc: "addresses and ranges", Bind: func(c *testConfig) any { return &c.Nets }},
	},
	Validate: func(c testConfig) error {
		var r Rules
		if c.Dir == "" {
			r.Add("dir", "empty")
		}
		if err := Fields("Engine", c.Engine.Validate()); err != nil {
			r = append(r, err)
		}
		return r.Err()
	},
}

func loadTest(t *testing.T, file string, env []string, args ...string) (*Loaded[testConfig], error) {
	t.Helper()
	var cl CommandLine
	fs := testSchema.FlagSet("test", &cl, os.Stderr)
	if file != "" {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"-config", path}, args...)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return testSchema.Load(cl, env)
}

func messages(err error) []string {
	var out []string
	for _, e := range Unjoin(err) {
		s := e.Error()
		if i := strings.LastIndex(s, " ["); i >= 0 {
			if j := strings.LastIndex(s, "c.yaml"); j > i {
				s = s[:i+2] + s[j:]
			}
		}
		out = append(out, s)
	}
	return out
}

// TestFieldsPlaceComponentErrors: a component's errors, on its Go field
// names, come back on the settings' keys with their sources (a setting the
// file did not set has its section's), the other field a message names
// written as its key.
func TestFieldsPlaceComponentErrors(t *testing.T) {
	_, err := loadTest(t, "engine:\n  interval: 5s\n", []string{"OUTBOX_DIR="}, "-workers", "0")
	want := []string{
		`dir: empty [env OUTBOX_DIR]`,
		`engine.workers: must be positive, got 0 [flag -workers]`,
		`engine.timeout: 10s must stay below engine.interval (5s) [c.yaml:1]`,
	}
	if got := messages(err); !slices.Equal(got, want) {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, e := range Unjoin(err) {
		var se *SettingError
		if !errors.As(e, &se) {
			t.Errorf("%v is no *SettingError", e)
		}
	}
	// Unset itself, the rule shows where the setting it names was set.
	_, err = loadTest(t, "", []string{"OUTBOX_INTERVAL=5s"})
	if got := messages(err); !slices.Equal(got, []string{`engine.timeout: 10s must stay below engine.interval (5s) [env OUTBOX_INTERVAL]`}) {
		t.Fatalf("errors: %q", got)
	}
}

func TestLoadOrderAndRecords(t *testing.T) {
	l, err := loadTest(t, "dir: /file\nengine: {workers: 2}\nentries:\n  - {name: a, size: 3}\ntags: [x, y]\n",
		[]string{"OUTBOX_DIR=/env", "OUTBOX_TAGS=p, q", "OUTBOX_TEST_ANYTHING=1", "OUTBOX_DRI=typo"}, "-workers", "7")
	if err != nil {
		t.Fatal(err)
	}
	c := l.Cfg
	if c.Dir != "/env" || c.Engine.Workers != 7 || c.Engine.Interval != time.Minute || !slices.Equal(c.Tags, []string{"p", "q"}) ||
		len(c.Entries) != 1 || c.Entries[0] != (entry{"a", 3}) {
		t.Fatalf("loaded %+v", c)
	}
	if l.Sources["entries[0].size"] == "" || l.Sources["engine.workers"] != "flag -workers" {
		t.Errorf("sources %v", l.Sources)
	}
	if !slices.Equal(l.Warnings, []string{"unknown environment variable OUTBOX_DRI ignored"}) {
		t.Errorf("warnings %v", l.Warnings)
	}
}

func TestReadYAMLRefusesWhatNoSettingDeclares(t *testing.T) {
	_, err := loadTest(t, "engin: {}\nengine: {workers: many, interval: [1s]}\nentries: [{name: a, sise: 1}]\ndir: a\ndir: b\n", nil)
	want := []string{
		`engin: unknown setting "engin" at the top level (known: dir, engine, entries, tags, nets) [c.yaml:1]`,
		`engine.workers: "many" is not a whole number [c.yaml:2]`,
		`engine.interval: want a duration such as "10s", got a list [c.yaml:2]`,
		`entries[0].sise: unknown setting "sise" in entries[0] (known: name, size) [c.yaml:3]`,
		`dir: set twice (also on line 4) [c.yaml:5]`,
	}
	if got := messages(err); !slices.Equal(got, want) {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestDefaultAndFormatDuration(t *testing.T) {
	d := testSchema.Defaults()
	for key, want := range map[string]string{"dir": ".", "engine.interval": "1m", "engine.timeout": "10s", "engine.workers": "4", "entries": "", "tags": ""} {
		for _, s := range testSchema.Settings {
			if s.Key == key && s.Default(d) != want {
				t.Errorf("%s default %q, want %q", key, s.Default(d), want)
			}
		}
	}
	for d, want := range map[time.Duration]string{8760 * time.Hour: "8760h", 90 * time.Minute: "1h30m", 1500 * time.Millisecond: "1.5s", 0: "0s"} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestPrefixesAndUnsigned: a list of addresses and CIDR ranges is read from
// the file and the environment (an address as its full-length prefix, a
// range with its host bits cleared), each bad item named; a uint32 refuses
// what does not fit.
func TestPrefixesAndUnsigned(t *testing.T) {
	l, err := loadTest(t, "nets: [192.0.2.7, 10.1.2.3/16, \"::ffff:192.0.2.9\"]\nengine: {streams: 300}\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("192.0.2.9/32")}
	if !slices.Equal(l.Cfg.Nets, want) || l.Cfg.Engine.Streams != 300 {
		t.Fatalf("nets %v, streams %d", l.Cfg.Nets, l.Cfg.Engine.Streams)
	}
	if l.Sources["nets[1]"] == "" {
		t.Errorf("no source for nets[1]: %v", l.Sources)
	}
	l, err = loadTest(t, "", []string{"OUTBOX_NETS=2001:db8::1/64, ,198.51.100.0/24", "OUTBOX_STREAMS=7"})
	if err != nil {
		t.Fatal(err)
	}
	want = []netip.Prefix{netip.MustParsePrefix("2001:db8::/64"), netip.MustParsePrefix("198.51.100.0/24")}
	if !slices.Equal(l.Cfg.Nets, want) || l.Cfg.Engine.Streams != 7 {
		t.Fatalf("from the environment: nets %v, streams %d", l.Cfg.Nets, l.Cfg.Engine.Streams)
	}
	if d := testSchema.Settings[len(testSchema.Settings)-1].Default(testConfig{Nets: want}); d != "2001:db8::/64, 198.51.100.0/24" {
		t.Errorf("default written %q", d)
	}

	_, err = loadTest(t, "nets: [192.0.2.300, {a: 1}]\nengine: {streams: -1}\n", nil)
	wantErrs := []string{
		`nets[0]: "192.0.2.300" is not an IP address or a CIDR range (192.0.2.10, 10.1.0.0/16, 2001:db8::/64) [c.yaml:1]`,
		`nets[1]: want an IP address or a CIDR range, got a mapping [c.yaml:1]`,
		`engine.streams: "-1" is not a whole number from 0 to 4294967295 [c.yaml:2]`,
	}
	if got := messages(err); !slices.Equal(got, wantErrs) {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantErrs, "\n"))
	}
	_, err = loadTest(t, "", []string{"OUTBOX_NETS=10.0.0.0/8,intranet", "OUTBOX_STREAMS=4294967296"})
	wantErrs = []string{
		`engine.streams: "4294967296" is not a whole number from 0 to 4294967295 [env OUTBOX_STREAMS]`,
		`nets: "intranet" is not an IP address or a CIDR range (192.0.2.10, 10.1.0.0/16, 2001:db8::/64) [env OUTBOX_NETS]`,
	}
	if got := messages(err); !slices.Equal(got, wantErrs) {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantErrs, "\n"))
	}
}

// TestFieldsNestedSibling: a nested field's rule that names a sibling by its
// Go name reads with the sibling's key.
func TestFieldsNestedSibling(t *testing.T) {
	_, err := loadTest(t, "engine:\n  conns: {per_address: 8, total: 2}\n", nil)
	want := []string{`engine.conns.total: 2 is below engine.conns.per_address (8) [c.yaml:2]`}
	if got := messages(err); !slices.Equal(got, want) {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRecordFieldsWritesYAMLKeys: a component's errors on the Go paths of
// its record entries come back on the file's keys.
func TestRecordFieldsWritesYAMLKeys(t *testing.T) {
	type method struct {
		Name string `yaml:"name"`
		Path string `yaml:"path"`
	}
	type system struct {
		Name    string   `yaml:"name"`
		Methods []method `yaml:"methods"`
	}
	type targets struct {
		Systems []system `yaml:"systems"`
	}
	err := errors.Join(
		&ports.FieldError{Field: "Systems[1].Methods[0].Path", Msg: "must start with / (see Systems[0].Methods[0].Path; Name says which)"},
		&ports.FieldError{Field: "Systems[0].Name", Msg: "required"},
		&ports.FieldError{Field: "Systems[0].Unknown", Msg: "kept"},
		errors.New("other"))
	got := messages(RecordFields(map[string]string{"Systems": "external_systems"}, reflect.TypeFor[targets](), err))
	want := []string{
		"external_systems[1].methods[0].path: must start with / (see external_systems[0].methods[0].path; external_systems[1].methods[0].name says which)",
		"external_systems[0].name: required",
		"external_systems[0].Unknown: kept",
		"other",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
