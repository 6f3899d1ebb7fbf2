//go:build !linux

package raftbuffer

import "go.etcd.io/bbolt"

// dropMapping does nothing outside Linux.
func dropMapping(*bbolt.Tx) {}

// dropFileMapping does nothing outside Linux.
func dropFileMapping(string) {}
