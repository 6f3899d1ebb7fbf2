package pluginhost

import (
	"errors"
	"fmt"

	"github.com/siteline/outbox/adapters/support/secretref"
)

// resolveSettings resolves, into a fresh copy and under policy, the
// references among the settings that secret names (those the plugin's
// schema marks secret). Every other setting is passed on as written, a
// reference included: a setting such as "from" or "token_url" never reads
// central's environment or files, and a plugin without a schema (secret
// nil) gets no setting resolved.
func resolveSettings(policy secretref.Policy, secret map[string]bool, settings map[string]string) (map[string]string, error) {
	s := make(map[string]string, len(settings))
	for k, v := range settings {
		if !secret[k] {
			s[k] = v
			continue
		}
		r, err := policy.Resolve(v)
		if err != nil {
			return nil, fmt.Errorf("setting %s: %w", k, err)
		}
		s[k] = r
	}
	return s, nil
}

// resolveTargets resolves, into a fresh copy and under policy, the targets
// given as references. A target that cannot be resolved is left out of
// resolved and has its error in failed, at its index among targets (failed
// is nil when every target resolved).
func resolveTargets(policy secretref.Policy, targets []string) (resolved []string, failed []error) {
	resolved = make([]string, 0, len(targets))
	for i, v := range targets {
		r, err := policy.Resolve(v)
		if err != nil {
			if failed == nil {
				failed = make([]error, len(targets))
			}
			failed[i] = fmt.Errorf("target reference: %w", err)
			continue
		}
		resolved = append(resolved, r)
	}
	return resolved, failed
}

// refused reports whether err is a reference the policy refuses or that
// cannot be resolved: retrying would not help.
func refused(err error) bool {
	return errors.Is(err, secretref.ErrUnresolvable) || errors.Is(err, secretref.ErrNotAllowed)
}
