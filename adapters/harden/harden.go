// Package harden holds the process hardening that central and every channel
// plugin apply to themselves at start: central (cmd/outbox) calls it
// directly, and plugins get it through the SDK's channel.Serve, third-party
// plugins included. It is a leaf: the standard library and golang.org/x/sys
// only, so that the SDK can import it.
package harden
