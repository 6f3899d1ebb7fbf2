package main

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/siteline/outbox/adapters/pluginhost"
	"github.com/siteline/outbox/cmd/outbox/internal/fsperm"
	"github.com/siteline/outbox/cmd/outbox/internal/settings"
	"github.com/siteline/outbox/plugins/builtin"
)

// PluginsConfig says which channel plugins central runs: the built-in
// channels (all by default), the third-party binaries of a directory, and
// third-party binaries listed one by one.
type PluginsConfig struct {
	// Builtin lists the built-in channels to run; empty means all of them
	// (email, slack, teams, webhook). "none" runs none.
	Builtin []string
	// Dir, when set, holds third-party plugin binaries: every executable
	// file in it is run as the plugin of the channel type named like the
	// file (a file jsonpost delivers lists of type jsonpost).
	Dir string
	// External lists third-party plugins. An entry without a command names
	// a plugin of Dir, to pin its checksum or bound its concurrency.
	External []ExternalPlugin
	// MaxConcurrency bounds the deliveries in flight through each plugin
	// unless its entry says otherwise. Default 64.
	MaxConcurrency int
	// Host is the plugin host's own configuration: the group of the Unix
	// sockets (SocketGroup, for a plugin run as another user through a
	// wrapper such as sudo or setpriv), and the pings that find a hung
	// plugin process (PingInterval, PingTimeout, PingFailures). The
	// plugins, the logger, the network policy and the secrets are set when
	// central starts.
	Host pluginhost.Config
}

// defaultPluginsConfig is the plugins' defaults: every built-in, the
// host's own.
func defaultPluginsConfig() PluginsConfig {
	return PluginsConfig{Host: pluginhost.Config{}.WithDefaults()}
}

// ExternalPlugin is one third-party channel plugin: an entry of the record
// setting plugins.external, whose keys are its yaml tags.
type ExternalPlugin struct {
	// Type is the channel type it delivers.
	Type string `yaml:"type"`
	// Command is the binary's path; empty means the file Type in Dir.
	Command string   `yaml:"command"`
	Args    []string `yaml:"args"`
	// SHA256 pins the binary: a binary with another checksum is refused.
	SHA256         string `yaml:"sha256"`
	MaxConcurrency int    `yaml:"max_concurrency"`
}

func (p PluginsConfig) validate() rules {
	var r rules
	for i, b := range p.Builtin {
		if _, ok := builtin.Channels[b]; !ok && !(b == "none" && len(p.Builtin) == 1) {
			r.Add(fmt.Sprintf("plugins.builtin[%d]", i), "%q is not a built-in channel (want %s, or none alone)", b, orList(builtin.Types()))
		}
	}
	if p.MaxConcurrency < 0 {
		r.Add("plugins.max_concurrency", "must not be negative, got %d", p.MaxConcurrency)
	}
	if err := settings.Fields("Plugins.Host", p.Host.Validate()); err != nil {
		r = append(r, err)
	}
	seen := map[string]int{}
	for i, e := range p.External {
		at := fmt.Sprintf("plugins.external[%d]", i)
		switch {
		case strings.TrimSpace(e.Type) == "":
			r.Add(at+".type", "empty (every plugin delivers a channel type)")
		case p.builtinEnabled(e.Type):
			r.Add(at+".type", "%q is a built-in channel; give the plugin another type, or leave %q out of plugins.builtin", e.Type, e.Type)
		default:
			if j, dup := seen[e.Type]; dup {
				r.Add(at+".type", "a second plugin for type %q (also plugins.external[%d])", e.Type, j)
			}
			seen[e.Type] = i
		}
		if strings.TrimSpace(e.Command) == "" && strings.TrimSpace(p.Dir) == "" {
			r.Add(at+".command", "empty, and no plugins.dir to find %q in", e.Type)
		}
		if e.SHA256 != "" && !isSHA256(e.SHA256) {
			r.Add(at+".sha256", "must be 64 hexadecimal digits")
		}
		if e.MaxConcurrency < 0 {
			r.Add(at+".max_concurrency", "must not be negative, got %d", e.MaxConcurrency)
		}
	}
	return r
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range strings.ToLower(s) {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

func (p PluginsConfig) builtinEnabled(typ string) bool {
	if _, ok := builtin.Channels[typ]; !ok {
		return false
	}
	return len(p.Builtin) == 0 || slices.Contains(p.Builtin, typ)
}

// hostPlugins lists the plugin processes to run: each enabled built-in as
// exe plugin serve <type>, each executable of Dir, each external entry.
func (p PluginsConfig) hostPlugins(exe string) ([]pluginhost.Plugin, error) {
	var out []pluginhost.Plugin
	for _, typ := range builtin.Types() {
		if p.builtinEnabled(typ) {
			out = append(out, pluginhost.Plugin{Type: typ, Command: exe, Args: []string{"plugin", "serve", typ},
				MaxConcurrency: p.MaxConcurrency})
		}
	}
	byType := map[string]int{}
	for i, pl := range out {
		byType[pl.Type] = i
	}
	if p.Dir != "" {
		found, err := pluginDir("plugins.dir", p.Dir)
		if err != nil {
			return nil, err
		}
		for _, f := range found {
			typ := filepath.Base(f)
			if _, taken := byType[typ]; taken {
				return nil, fmt.Errorf("plugins.dir: %s takes the type of the built-in channel %q; rename it or leave %q out of plugins.builtin", f, typ, typ)
			}
			byType[typ] = len(out)
			out = append(out, pluginhost.Plugin{Type: typ, Command: f, MaxConcurrency: p.MaxConcurrency})
		}
	}
	if p.Dir != "" {
		if err := notWritableByOthers("plugins.dir", p.Dir); err != nil {
			return nil, err
		}
	}
	for i, e := range p.External {
		if e.Command != "" {
			if err := notWritableByOthers(fmt.Sprintf("plugins.external[%d].command", i), e.Command); err != nil {
				return nil, err
			}
		}
		pl := pluginhost.Plugin{Type: e.Type, Command: e.Command, Args: e.Args, SHA256: strings.ToLower(e.SHA256),
			MaxConcurrency: cmp.Or(e.MaxConcurrency, p.MaxConcurrency)}
		j, inDir := byType[e.Type]
		switch {
		case e.Command == "" && !inDir:
			return nil, fmt.Errorf("plugins.external[%d]: no executable %q in plugins.dir %s", i, e.Type, p.Dir)
		case e.Command == "":
			pl.Command = out[j].Command
			out[j] = pl
		case inDir:
			return nil, fmt.Errorf("plugins.external[%d]: type %q is also the file %s", i, e.Type, out[j].Command)
		default:
			byType[e.Type] = len(out)
			out = append(out, pl)
		}
	}
	return out, nil
}

// pluginDir returns the executable regular files of dir (or symbolic links
// to one), sorted; files whose names start with a dot or hold one
// (README.md, jsonpost.sha256) are not plugins. key names dir in errors.
func pluginDir(key, dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	var out []string
	for _, e := range entries {
		if strings.Contains(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		info, err := os.Stat(path) // follows a symbolic link to the binary
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // a dangling link
			}
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		if info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0 {
			if err := notWritableByOthers(key, path); err != nil {
				return nil, err
			}
			out = append(out, path)
		}
	}
	return out, nil
}

// notWritableByOthers is fsperm.NotWritableByOthers with the setting key
// that names path in its error.
func notWritableByOthers(key, path string) error {
	if err := fsperm.NotWritableByOthers(path); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}
