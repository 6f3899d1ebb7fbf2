// Package harden holds the process hardening that central and every channel
// plugin apply to themselves at start. It is internal to the module: central
// (cmd/outbox) calls it directly, and plugins get it through the SDK's
// channel.Serve, third-party plugins included.
package harden
