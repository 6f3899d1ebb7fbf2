//go:build !linux

package main

// undumpable does nothing outside Linux, which has no PR_SET_DUMPABLE.
func undumpable() error { return nil }
