package main

// outbox dev -config: an overlay of central's configuration over dev's
// embedded default, so that an integrator tries a plugin, its lists and
// its channel settings in dev as central would run them.

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// devOverlaySections are the sections of central's configuration an
// overlay may set; the others (the store, the page, the link, ...) are
// dev's own.
var devOverlaySections = []string{"lists", "channels", "plugins", "secrets"}

// devHooksPlaceholder, in an overlay, stands for the URL of dev's webhook
// capture (http://127.0.0.1:8090, or the free port dev took instead).
const devHooksPlaceholder = "{{hooks}}"

// readDevOverlay reads the overlay file at path over central's defaults,
// devHooksPlaceholder replaced by hooksURL. A setting outside
// devOverlaySections is refused, with every other broken rule of the file
// at once. Relative references and secrets.dirs of the overlay start at
// its directory, as those of central's file do at central's.
func readDevOverlay(path, hooksURL string) (*loaded[Config], error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-config: %w", err)
	}
	data = bytes.ReplaceAll(data, []byte(devHooksPlaceholder), []byte(hooksURL))
	l := centralSchema.New()
	if err := centralSchema.ReadYAML(l, data, path); err != nil {
		return nil, err
	}
	var r rules
	for _, key := range slices.Sorted(maps.Keys(l.Sources)) {
		// One error per section: the file's top-level keys.
		if !strings.ContainsAny(key, ".[") && !slices.Contains(devOverlaySections, key) {
			r = append(r, &SettingError{Key: key, Source: l.Sources[key],
				Msg: "outbox dev keeps its own; an overlay sets " + strings.Join(devOverlaySections, ", ")})
		}
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("-config: %w", err)
	}
	l.Cfg.ConfigDir = dir
	return l, nil
}

// applyDevOverlay merges the overlay ov into dev's configuration cfg: a
// list or channel of the overlay replaces dev's of the same name or type
// and is added otherwise; the plugins and secrets sections, when the
// overlay sets any of their settings, are the overlay's. It returns the
// names of the overlay's lists.
func applyDevOverlay(cfg *Config, ov *loaded[Config]) []string {
	sets := func(section string) bool {
		for key := range ov.Sources {
			if key == section || strings.HasPrefix(key, section+".") || strings.HasPrefix(key, section+"[") {
				return true
			}
		}
		return false
	}
	var names []string
	for _, l := range ov.Cfg.Lists {
		names = append(names, l.Name)
		if i := slices.IndexFunc(cfg.Lists, func(d ListConfig) bool { return d.Name == l.Name }); i >= 0 {
			cfg.Lists[i] = l
		} else {
			cfg.Lists = append(cfg.Lists, l)
		}
	}
	for _, ch := range ov.Cfg.Channels {
		if i := slices.IndexFunc(cfg.Channels, func(d ChannelConfig) bool { return d.Type == ch.Type }); i >= 0 {
			cfg.Channels[i] = ch
		} else {
			cfg.Channels = append(cfg.Channels, ch)
		}
	}
	if sets("plugins") {
		cfg.Plugins = ov.Cfg.Plugins
	}
	if sets("secrets") {
		cfg.Secrets = ov.Cfg.Secrets
	}
	cfg.ConfigDir = ov.Cfg.ConfigDir
	return names
}
