// Package fsperm answers what the file checks of cmd/outbox ask of a file
// beyond its mode bits: which user owns it, where files have owners. The
// login file of the operator CLI and the plugin directories are refused
// when another user owns them.
package fsperm
