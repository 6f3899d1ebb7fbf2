// Package opscli is the operator's side of the outbox binary: the commands
// that are clients of a running outbox. notifications, kpi, site-calls,
// sites, lists, channels, users, tokens, audit, login and logout talk to
// central's HTTP API through adapters/httpapi/client; notify talks to a
// site's API as a script does, through adapters/siteapi/notify. Each
// command is a function of its arguments and an Env, so that cmd/outbox
// only routes to it and tests run it in-process against a real server.
package opscli

import (
	"crypto/tls"
	"io"
	"strings"
)

// Exit codes, as the binary documents them.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	// exitPreview ends a bulk retry or discard given without -yes: it
	// printed how many rows match and did nothing. Neither a success (a
	// script that forgot -yes must notice) nor bad usage.
	exitPreview = 3
)

// Env is what a command takes from its process.
type Env struct {
	// Environ is the environment, as os.Environ returns it. The commands
	// read OUTBOX_SERVER, OUTBOX_TOKEN, OUTBOX_SITE_*, TZ and the user's
	// configuration directory (HOME, XDG_CONFIG_HOME) from it.
	Environ []string
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	// Version is the binary's version, sent in the User-Agent.
	Version string
	// TLS builds a client's TLS configuration from PEM files: ca verifies
	// the server; cert and key, when given, are the client's certificate.
	TLS func(ca, cert, key string) (*tls.Config, error)
	// SiteAddrs is the default of notify -site when OUTBOX_SITE_ADDR is
	// unset: outbox dev's site.
	SiteAddrs string
}

// getenv returns the value of name in the environment, "" when unset.
func (env Env) getenv(name string) string {
	for _, kv := range env.Environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// userAgent is the User-Agent of the operator commands.
func (env Env) userAgent() string {
	return "outbox-cli/" + env.Version
}
