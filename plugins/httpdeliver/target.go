// Package httpdeliver posts a notification's payload to HTTP targets and
// classifies every answer as a channel outcome. It is what the built-in HTTP
// channels (webhook, Slack, Teams) share: target parsing and redaction, one
// pooled HTTP client per channel, the classification of statuses and network
// errors, Retry-After, and error texts that never hold a target's URL.
//
// Classification: 2xx is Success; 408, 429, 5xx, network errors and timeouts
// are Transient (with the server's Retry-After); every other status,
// redirects included (they are never followed), is Permanent. Each target is
// answered on its own (Result.Targets), so that central retries only the
// targets that failed and never posts twice to one that answered 2xx.
package httpdeliver

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	channel "github.com/siteline/outbox/plugins/channel/v1"
)

// ErrInvalidTarget is wrapped by ParseTarget's errors.
var ErrInvalidTarget = errors.New("not an absolute http or https URL")

// ParseTarget parses one target (leading and trailing blanks ignored) as an
// absolute http or https URL with a host. Its error never repeats the target,
// which may hold a token.
func ParseTarget(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		// url.Parse's error quotes the whole URL: drop it.
		return nil, fmt.Errorf("parse target: %w", ErrInvalidTarget)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" || u.Opaque != "" {
		return nil, fmt.Errorf("check target: %w", ErrInvalidTarget)
	}
	return u, nil
}

// RedactQuery returns a target as scheme://host/path, without its user
// information, query and fragment: the resolved form of a generic webhook.
func RedactQuery(u *url.URL) string {
	return u.Scheme + "://" + u.Host + u.EscapedPath()
}

// RedactPath returns a target as scheme://host/…, hiding everything after the
// host: the resolved form of a webhook whose path is its token (Slack, Teams).
func RedactPath(u *url.URL) string {
	return u.Scheme + "://" + u.Host + "/…"
}

// TimeoutSettingName is the name of the optional per-request timeout setting
// every HTTP channel accepts.
const TimeoutSettingName = "timeout"

// DefaultTimeout bounds one POST (connection, request, answer) when the
// timeout setting is absent. The attempt's context may end it sooner.
const DefaultTimeout = 30 * time.Second

// TimeoutSetting returns the schema of the timeout setting.
func TimeoutSetting() channel.Setting {
	return channel.Setting{
		Name: TimeoutSettingName,
		Kind: channel.KindDuration,
		Description: "Longest wait for one target's answer, as a Go duration (\"10s\", \"1m30s\"). " +
			"The attempt's own deadline still applies.",
		Default: DefaultTimeout.String(),
	}
}

// Timeout reads the timeout setting: DefaultTimeout when absent or blank,
// otherwise a positive Go duration.
func Timeout(settings map[string]string) (time.Duration, error) {
	v := strings.TrimSpace(settings[TimeoutSettingName])
	if v == "" {
		return DefaultTimeout, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("setting %q: %w", TimeoutSettingName, err)
	}
	if d <= 0 {
		return 0, fmt.Errorf("setting %q: must be positive", TimeoutSettingName)
	}
	return d, nil
}
