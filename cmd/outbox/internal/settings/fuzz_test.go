package settings

import (
	"strings"
	"testing"
	"time"
)

// fuzzRecord is a record setting with every kind a record's fields take.
type fuzzRecord struct {
	Name     string            `yaml:"name"`
	Size     int               `yaml:"size"`
	Rate     float64           `yaml:"rate"`
	On       bool              `yaml:"on"`
	Every    time.Duration     `yaml:"every"`
	Labels   map[string]string `yaml:"labels"`
	Children []fuzzRecord      `yaml:"children"`
}

// fuzzConfig has a setting of every kind the loader reads.
type fuzzConfig struct {
	Text    string
	Count   int
	Ratio   float64
	Flag    bool
	Period  time.Duration
	Items   []string
	Records []fuzzRecord
	Named   map[string]fuzzRecord
}

var fuzzSchema = Schema[fuzzConfig]{
	Defaults: func() fuzzConfig { return fuzzConfig{Text: "x", Period: time.Second} },
	Settings: []Setting[fuzzConfig]{
		{Key: "text", Env: "FUZZ_TEXT", Flag: "text", Doc: "text", Bind: func(c *fuzzConfig) any { return &c.Text }},
		{Key: "a.count", Doc: "a count", Bind: func(c *fuzzConfig) any { return &c.Count }},
		{Key: "a.ratio", Doc: "a ratio", Bind: func(c *fuzzConfig) any { return &c.Ratio }},
		{Key: "a.b.flag", Doc: "a flag", Bind: func(c *fuzzConfig) any { return &c.Flag }},
		{Key: "a.b.period", Doc: "a period", Bind: func(c *fuzzConfig) any { return &c.Period }},
		{Key: "items", Doc: "strings", Bind: func(c *fuzzConfig) any { return &c.Items }},
		{Key: "records", Doc: "records", Bind: func(c *fuzzConfig) any { return &c.Records }},
		{Key: "named", Doc: "records by name", Bind: func(c *fuzzConfig) any { return &c.Named }},
	},
	Validate: func(c fuzzConfig) error {
		var r Rules
		if c.Count < 0 {
			r.Add("a.count", "negative")
		}
		return r.Err()
	},
}

// FuzzReadYAML feeds the loader's YAML reader arbitrary bytes against a
// schema with every kind of setting: nothing may panic, every error has a
// text, and a file it takes validates or says what is wrong. (cmd/outbox's
// FuzzLoadConfig runs the real schemas from their seeds; this package is
// small enough for the fuzzer's coverage to make progress.)
func FuzzReadYAML(f *testing.F) {
	for _, s := range []string{
		"", "text: a\n", "a: {count: 3, ratio: 1.5, b: {flag: true, period: 10s}}\n", "items: [a, b]\n",
		"records:\n  - {name: n, size: 1, rate: .5, on: yes, every: 1m, labels: {k: v}, children: [{name: c}]}\n",
		"named: {one: {name: x}, two: {children: [{children: []}]}}\n",
		"a: &a [*a]\n", "x: &x {y: *x}\na: *x\n", "text: !!binary aGVsbG8=\n", "a:\n  count: 99999999999999999999\n",
		"a: {b: {period: -1s}}\n", "text: a\ntext: b\n", "records: [[]]\n", "{{{{", "\x00", "named: {? [a] : b}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l := fuzzSchema.New()
		if err := fuzzSchema.ReadYAML(l, data, "fuzz.yaml"); err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a text")
			}
			return
		}
		for _, err := range fuzzSchema.Check(l.Cfg) {
			if err.Error() == "" {
				t.Fatal("a validation error without a text")
			}
		}
	})
}

// TestAliasesAreBounded: the reader follows aliases, so an alias inside
// what it names, or nested aliases that stand for billions of values, are
// refused before the walk instead of hanging it.
func TestAliasesAreBounded(t *testing.T) {
	laughs := "records:\n - &a {children: [{name: x}, {name: y}]}\n"
	for i, name := range []string{"b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		prev := string(rune('a' + i))
		laughs += " - &" + name + " {children: [*" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]}\n"
	}
	for doc, want := range map[string]string{
		"records: &a [{children: *a}]\n":                  `alias "a" refers to a value that contains it`,
		"named: &n {x: {children: [{name: y}]}, y: *n}\n": `alias "n" refers to a value that contains it`,
		laughs: "the file holds more than 100000 values",
	} {
		l := fuzzSchema.New()
		err := fuzzSchema.ReadYAML(l, []byte(doc), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadYAML(%.40q) = %v, want an error holding %q", doc, err, want)
		}
	}
	// An alias used as such is still read.
	l := fuzzSchema.New()
	if err := fuzzSchema.ReadYAML(l, []byte("records:\n - &r {name: a, size: 2}\n - *r\n"), "x.yaml"); err != nil {
		t.Fatal(err)
	}
	if len(l.Cfg.Records) != 2 || l.Cfg.Records[1].Size != 2 {
		t.Fatalf("records through an alias: %+v", l.Cfg.Records)
	}
}
