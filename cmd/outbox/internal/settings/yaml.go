package settings

import (
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// maxExpanded bounds the values a file may stand for once its aliases are
// followed, as the reader follows them: a few nested aliases can stand for
// billions of values, and one inside what it names for an endless tree.
const maxExpanded = 100_000

// checkAliases refuses a document whose aliases refer to what contains
// them, or expand it past left values.
func checkAliases(n *yaml.Node, open map[*yaml.Node]bool, left *int) error {
	if *left--; *left < 0 {
		return fmt.Errorf("line %d: with its aliases followed, the file holds more than %d values", n.Line, maxExpanded)
	}
	if n.Kind == yaml.AliasNode {
		if open[n.Alias] {
			return fmt.Errorf("line %d: alias %q refers to a value that contains it", n.Line, n.Value)
		}
		open[n.Alias] = true
		defer delete(open, n.Alias)
		return checkAliases(n.Alias, open, left)
	}
	for _, c := range n.Content {
		if err := checkAliases(c, open, left); err != nil {
			return err
		}
	}
	return nil
}

// reader walks a YAML document along the declared settings.
type reader[C any] struct {
	file     string
	sources  map[string]string
	byKey    map[string]Setting[C]
	children map[string][]string // a section's key ("" the top level) → its children's names, in declaration order
	errs     Rules
}

func (r *reader[C]) at(n *yaml.Node) string { return fmt.Sprintf("%s:%d", r.file, n.Line) }

func (r *reader[C]) bad(key string, n *yaml.Node, format string, args ...any) {
	if key == "" {
		key = "(top level)"
	}
	r.errs = append(r.errs, &SettingError{Key: key, Msg: fmt.Sprintf(format, args...), Source: r.at(n)})
}

// walk reads node n, the value of key (a section or a setting), into c.
func (r *reader[C]) walk(n *yaml.Node, key string, c *C) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an empty value leaves the default
	}
	if s, ok := r.byKey[key]; ok {
		r.setting(n, key, s.Bind(c))
		return
	}
	if n.Kind != yaml.MappingNode {
		r.bad(key, n, "want a mapping of settings, got a %s", kindName(n))
		return
	}
	r.mapping(n, key, r.children[key], func(child string, v *yaml.Node) { r.walk(v, child, c) })
}

// mapping visits the keys of the mapping n, the value of key, refusing a
// key not among known and a key given twice, and recording each key's
// line.
func (r *reader[C]) mapping(n *yaml.Node, key string, known []string, visit func(child string, v *yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		child := k.Value
		if key != "" {
			child = key + "." + k.Value
		}
		if !slices.Contains(known, k.Value) {
			where := "at the top level"
			if key != "" {
				where = "in " + key
			}
			r.errs = append(r.errs, &SettingError{Key: child,
				Msg:    fmt.Sprintf("unknown setting %q %s (known: %s)", k.Value, where, strings.Join(known, ", ")),
				Source: r.at(k)})
			continue
		}
		if line, dup := seen[k.Value]; dup {
			r.bad(child, k, "set twice (also on line %d)", line)
			continue
		}
		seen[k.Value] = k.Line
		r.sources[child] = r.at(k)
		visit(child, v)
	}
}

// setting reads n into the field p of the setting key.
func (r *reader[C]) setting(n *yaml.Node, key string, p any) {
	switch p := p.(type) {
	case *time.Duration:
		if n.Kind != yaml.ScalarNode {
			r.bad(key, n, "want a duration such as \"10s\", got a %s", kindName(n))
			return
		}
		d, err := ParseDuration(n.Value)
		if err != nil {
			r.bad(key, n, "%v", err)
			return
		}
		*p = d
	case *[]netip.Prefix:
		if n.Kind != yaml.SequenceNode {
			r.bad(key, n, "want a list of IP addresses and CIDR ranges, got a %s", kindName(n))
			return
		}
		var list []netip.Prefix
		for i, item := range n.Content {
			child := fmt.Sprintf("%s[%d]", key, i)
			r.sources[child] = r.at(item)
			if item.Kind == yaml.AliasNode {
				item = item.Alias
			}
			if item.Kind != yaml.ScalarNode {
				r.bad(child, item, "want an IP address or a CIDR range, got a %s", kindName(item))
				continue
			}
			pr, err := ParsePrefix(item.Value)
			if err != nil {
				r.bad(child, item, "%v", err)
				continue
			}
			list = append(list, pr)
		}
		*p = list
	case *int, *uint32, *float64, *bool, *string:
		if n.Kind != yaml.ScalarNode {
			r.bad(key, n, "want a single value, got a %s", kindName(n))
			return
		}
		if msg := checkScalar(n, reflect.TypeOf(p).Elem()); msg != "" {
			r.bad(key, n, "%s", msg)
			return
		}
		if err := n.Decode(p); err != nil {
			r.bad(key, n, "%q: %v", n.Value, err)
		}
	default:
		// A list of strings or a record: checked against its Go type,
		// then decoded by its yaml tags.
		before := len(r.errs)
		r.record(n, reflect.TypeOf(p).Elem(), key)
		if len(r.errs) > before {
			return
		}
		if err := n.Decode(p); err != nil {
			r.bad(key, n, "%v", err)
		}
	}
}

// checkScalar returns what is wrong with the scalar n as a value of kind t,
// "" when nothing is.
func checkScalar(n *yaml.Node, t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int:
		if _, err := strconv.Atoi(n.Value); err != nil {
			return fmt.Sprintf("%q is not a whole number", n.Value)
		}
	case reflect.Uint32:
		if _, err := strconv.ParseUint(n.Value, 10, 32); err != nil {
			return fmt.Sprintf("%q is not a whole number from 0 to %d", n.Value, uint32(math.MaxUint32))
		}
	case reflect.Float64:
		if _, err := strconv.ParseFloat(n.Value, 64); err != nil {
			return fmt.Sprintf("%q is not a number", n.Value)
		}
	case reflect.Bool:
		var b bool
		if n.Decode(&b) != nil {
			return fmt.Sprintf("%q is not true or false", n.Value)
		}
	}
	return ""
}

// record checks n against the Go type t of a record setting: every mapping
// key must be a yaml tag of t's structs, and every scalar must parse as its
// field's kind. It records each key's file:line.
func (r *reader[C]) record(n *yaml.Node, t reflect.Type, key string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	switch {
	case t == reflect.TypeFor[time.Duration]():
		if n.Kind != yaml.ScalarNode {
			r.bad(key, n, "want a duration such as \"10s\", got a %s", kindName(n))
			return
		}
		if _, err := ParseDuration(n.Value); err != nil {
			r.bad(key, n, "%v", err)
		}
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			r.bad(key, n, "want a mapping of settings, got a %s", kindName(n))
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
		r.mapping(n, key, names, func(child string, v *yaml.Node) {
			r.record(v, fields[child[len(key)+1:]], child)
		})
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			r.bad(key, n, "want a list, got a %s", kindName(n))
			return
		}
		for i, item := range n.Content {
			child := fmt.Sprintf("%s[%d]", key, i)
			r.sources[child] = r.at(item)
			r.record(item, t.Elem(), child)
		}
	case t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			r.bad(key, n, "want a mapping, got a %s", kindName(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			child := key + "." + k.Value
			r.sources[child] = r.at(k)
			r.record(v, t.Elem(), child)
		}
	default:
		if n.Kind != yaml.ScalarNode {
			r.bad(key, n, "want a single value, got a %s", kindName(n))
			return
		}
		if msg := checkScalar(n, t); msg != "" {
			r.bad(key, n, "%s", msg)
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
