// Package pb holds the protobuf messages of the site buffer's Raft commands,
// of the notifications it stores and of the cached operations it tracks.
// Only package raftbuffer imports it.
package pb

// Regenerate after editing buffer.proto (needs protoc and protoc-gen-go on
// PATH):
//go:generate protoc --go_out=. --go_opt=paths=source_relative buffer.proto
