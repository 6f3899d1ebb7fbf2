package pluginhost

import (
	"fmt"

	"github.com/siteline/outbox/adapters/secretref"
)

// resolveDelivery resolves, into fresh copies, the references among the
// targets and among the settings secret names (every setting when secret is
// nil: the plugin has no schema). A reference in a setting that is not
// secret is passed on as written: a channel setting such as "from" never
// reads central's environment or files.
func resolveDelivery(secret map[string]bool, settings map[string]string, targets []string) (map[string]string, []string, error) {
	s := make(map[string]string, len(settings))
	for k, v := range settings {
		if secret != nil && !secret[k] {
			s[k] = v
			continue
		}
		r, err := secretref.Resolve(v)
		if err != nil {
			return nil, nil, fmt.Errorf("setting %s: %w", k, err)
		}
		s[k] = r
	}
	t := make([]string, len(targets))
	for i, v := range targets {
		r, err := secretref.Resolve(v)
		if err != nil {
			return nil, nil, fmt.Errorf("target %d: %w", i+1, err)
		}
		t[i] = r
	}
	return s, t, nil
}
