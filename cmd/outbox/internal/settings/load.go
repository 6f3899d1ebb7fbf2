package settings

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// EnvConfigFile names the configuration file when -config is not given.
const EnvConfigFile = "OUTBOX_CONFIG"

// envPrefix starts every variable of outbox; an unknown one is warned about.
const envPrefix = "OUTBOX_"

// envTestPrefix marks variables the test suite reads; the loader ignores them.
const envTestPrefix = "OUTBOX_TEST_"

// Schema is what the loader needs to know of one command's configuration
// type C: its defaults, its settings and its validation.
type Schema[C any] struct {
	Defaults func() C
	Settings []Setting[C]
	// Validate returns every broken rule, joined: *SettingError, or a
	// component's errors placed by Fields.
	Validate func(C) error
	// Warn, when set, adds warnings about a valid configuration.
	Warn func(*Loaded[C])
	// Resolve, when set, tells the configuration the directory of its
	// file (absolute), against which relative references resolve.
	Resolve func(c *C, dir string)
	// QuietEnv, when set, says which OUTBOX_* variables that are no
	// setting are still expected (secrets references read).
	QuietEnv func(c C, name string) bool
}

// Loaded is a configuration and where each of its settings came from.
type Loaded[C any] struct {
	Cfg C
	// File is the configuration file read, "" when none.
	File string
	// Sources maps a setting's key (as in SettingError.Key) to where its
	// value was last set: "FILE:LINE", "env NAME" or "flag -name".
	Sources map[string]string
	// Warnings are worth logging but do not stop the start.
	Warnings []string
}

// CommandLine is what a subcommand's flags gave.
type CommandLine struct {
	// File is -config (OUTBOX_CONFIG when -config is absent).
	File string
	// flags maps a setting's key to the raw values of its flag, in order.
	flags map[string][]string
}

// FlagSet defines -config and one flag per setting that has one on a
// FlagSet that records raw values into cl; Load parses them after the file
// and the environment, so that flags win.
func (sc Schema[C]) FlagSet(name string, cl *CommandLine, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cl.flags = map[string][]string{}
	fs.StringVar(&cl.File, "config", "", "YAML configuration `file` (env "+EnvConfigFile+")")
	for _, s := range sc.Settings {
		if s.Flag == "" {
			continue
		}
		usage := s.Doc
		if s.Env != "" {
			usage += " (env " + s.Env + ")"
		}
		fs.Func(s.Flag, usage, func(v string) error {
			cl.flags[s.Key] = append(cl.flags[s.Key], v)
			return nil
		})
	}
	return fs
}

// Load builds the configuration from the defaults, the file, the
// environment and the flags, then validates it. Every broken rule is
// reported, each as a *SettingError that names its source. With an invalid
// configuration it may still return l, for its warnings.
func (sc Schema[C]) Load(cl CommandLine, environ []string) (*Loaded[C], error) {
	l := sc.New()
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}

	l.File = cl.File
	if l.File == "" {
		l.File = env[EnvConfigFile]
	}
	if l.File != "" {
		data, err := os.ReadFile(l.File)
		if err != nil {
			return nil, fmt.Errorf("config file: %w", err)
		}
		if err := sc.ReadYAML(l, data, l.File); err != nil {
			return nil, err
		}
	}

	var errs Rules
	known := map[string]bool{EnvConfigFile: true}
	for _, s := range sc.Settings {
		if s.Env == "" {
			continue
		}
		known[s.Env] = true
		raw, ok := env[s.Env]
		if !ok {
			continue
		}
		src := "env " + s.Env
		if err := setValue(s.Bind(&l.Cfg), raw); err != nil {
			errs = append(errs, &SettingError{Key: s.Key, Msg: err.Error(), Source: src})
		}
		l.Sources[s.Key] = src
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if strings.HasPrefix(k, envPrefix) && !known[k] && !strings.HasPrefix(k, envTestPrefix) &&
			(sc.QuietEnv == nil || !sc.QuietEnv(l.Cfg, k)) {
			l.Warnings = append(l.Warnings, fmt.Sprintf("unknown environment variable %s ignored", k))
		}
	}
	for _, s := range sc.Settings {
		for _, raw := range cl.flags[s.Key] {
			src := "flag -" + s.Flag
			if err := setValue(s.Bind(&l.Cfg), raw); err != nil {
				errs = append(errs, &SettingError{Key: s.Key, Msg: err.Error(), Source: src})
			}
			l.Sources[s.Key] = src
		}
	}
	// Relative references start at the file's directory, wherever
	// outbox runs from.
	if l.File != "" && sc.Resolve != nil {
		if dir, err := filepath.Abs(filepath.Dir(l.File)); err == nil {
			sc.Resolve(&l.Cfg, dir)
		}
	}
	// Report the values that did not parse together with every other
	// broken rule, leaving out rules about a setting that did not parse.
	unparsed := map[string]bool{}
	for _, e := range errs {
		unparsed[e.(*SettingError).Key] = true
	}
	for _, e := range sc.Check(l.Cfg) {
		var se *SettingError
		if errors.As(e, &se) {
			if unparsed[se.Key] {
				continue
			}
			if se.Source == "" {
				se.Source = l.SourceOf(se.Key)
			}
			if se.Source == "" && se.Related != "" {
				se.Source = l.SourceOf(se.Related)
			}
		}
		errs = append(errs, e)
	}
	if len(errs) > 0 {
		return l, errs.Err()
	}
	if sc.Warn != nil {
		sc.Warn(l)
	}
	return l, nil
}

// New returns the defaults, with no source yet.
func (sc Schema[C]) New() *Loaded[C] {
	return &Loaded[C]{Cfg: sc.Defaults(), Sources: map[string]string{}}
}

// Check validates c and returns its broken rules, the components' errors
// placed by Fields given the keys of the settings they name.
func (sc Schema[C]) Check(c C) []error {
	err := sc.Validate(c)
	if err == nil {
		return nil
	}
	var paths map[string]string
	var out []error
	for _, e := range Unjoin(err) {
		var fe *fieldError
		if errors.As(e, &fe) {
			if paths == nil {
				paths = goPaths(sc.Settings)
			}
			e = fe.place(paths)
		}
		out = append(out, e)
	}
	return out
}

// SourceOf returns where key, or the nearest enclosing setting, was set.
func (l *Loaded[C]) SourceOf(key string) string {
	for k := key; k != ""; {
		if s, ok := l.Sources[k]; ok {
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

// setValue parses raw, from the environment or a flag, into the field p
// points to.
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
	case *uint32:
		v, err := strconv.ParseUint(strings.TrimSpace(raw), 10, 32)
		if err != nil {
			return fmt.Errorf("%q is not a whole number from 0 to %d", raw, uint32(math.MaxUint32))
		}
		*p = uint32(v)
	case *float64:
		v, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", raw)
		}
		*p = v
	case *time.Duration:
		d, err := ParseDuration(raw)
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
	case *[]netip.Prefix:
		// Comma-separated, as a list of strings.
		var list []netip.Prefix
		for _, item := range strings.Split(raw, ",") {
			if item = strings.TrimSpace(item); item == "" {
				continue
			}
			pr, err := ParsePrefix(item)
			if err != nil {
				return err
			}
			list = append(list, pr)
		}
		*p = list
	default:
		return fmt.Errorf("set in the file only, not from %T", p)
	}
	return nil
}

// ParsePrefix parses an IP address (a prefix of its full length) or a
// CIDR range (its address bits past the mask cleared), with an error that
// shows the expected forms.
func ParsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		a = a.Unmap().WithZone("")
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	return netip.Prefix{}, fmt.Errorf("%q is not an IP address or a CIDR range (192.0.2.10, 10.1.0.0/16, 2001:db8::/64)", s)
}

// ParseDuration parses a Go duration string, with an error that shows the
// expected form.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (want a number with a unit, e.g. \"10s\", \"5m\", \"8760h\")", s)
	}
	return d, nil
}

// ReadYAML decodes the YAML file content data, read from path, into l.Cfg
// over what it holds, recording the line of each setting. Unknown keys and
// values of the wrong kind are refused, all of them at once, each naming
// its key and line.
func (sc Schema[C]) ReadYAML(l *Loaded[C], data []byte, path string) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil // empty file: the defaults
	}
	left := maxExpanded
	if err := checkAliases(doc.Content[0], map[*yaml.Node]bool{}, &left); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	r := &reader[C]{file: path, sources: l.Sources, byKey: map[string]Setting[C]{}, children: map[string][]string{}}
	for _, s := range sc.Settings {
		r.byKey[s.Key] = s
		parts := strings.Split(s.Key, ".")
		for i, name := range parts {
			parent := strings.Join(parts[:i], ".")
			if !slices.Contains(r.children[parent], name) {
				r.children[parent] = append(r.children[parent], name)
			}
		}
	}
	cfg := l.Cfg
	r.walk(doc.Content[0], "", &cfg)
	if len(r.errs) > 0 {
		return r.errs.Err()
	}
	l.Cfg = cfg
	return nil
}
