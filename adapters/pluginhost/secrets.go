package pluginhost

import (
	"fmt"

	"github.com/siteline/outbox/adapters/support/secretref"
)

// resolveDelivery resolves, into fresh copies and under policy, the
// references among the targets and among the settings that secret names
// (those the plugin's schema marks secret). Every other setting is passed
// on as written, a reference included: a setting such as "from" or
// "token_url" never reads central's environment or files, and a plugin
// without a schema (secret nil) gets no setting resolved.
func resolveDelivery(policy secretref.Policy, secret map[string]bool, settings map[string]string, targets []string) (map[string]string, []string, error) {
	s := make(map[string]string, len(settings))
	for k, v := range settings {
		if !secret[k] {
			s[k] = v
			continue
		}
		r, err := policy.Resolve(v)
		if err != nil {
			return nil, nil, fmt.Errorf("setting %s: %w", k, err)
		}
		s[k] = r
	}
	t := make([]string, len(targets))
	for i, v := range targets {
		r, err := policy.Resolve(v)
		if err != nil {
			return nil, nil, fmt.Errorf("target %d: %w", i+1, err)
		}
		t[i] = r
	}
	return s, t, nil
}
