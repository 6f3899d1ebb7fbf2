// Package fsperm holds the file checks of cmd/outbox: which user owns a
// file (the operator CLI refuses a login file another user owns), and
// whether a user other than a path's owner could change what the path
// resolves to (central refuses to run such a plugin binary or directory).
package fsperm
