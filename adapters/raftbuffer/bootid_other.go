//go:build !linux

package raftbuffer

// kernelBootID is "" outside Linux: buffer.db is synced on every
// transaction there.
func kernelBootID() string { return "" }
