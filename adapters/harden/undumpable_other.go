//go:build !linux

package harden

// Undumpable does nothing outside Linux, which alone has PR_SET_DUMPABLE.
func Undumpable() error { return nil }
